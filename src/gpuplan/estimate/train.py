"""One training estimate: validate the plan, then memory, FLOPs, time and cost, and fixes.

``estimate_training`` is what the CLI's ``train`` command calls, once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError, field_ref, require
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.flops import Flops, six_nd, training_flops
from gpuplan.estimate.memory import MemoryReport, estimate_memory, offloaded_layers
from gpuplan.estimate.params import ParamCounts, count_params, mtp_params
from gpuplan.estimate.step_time import StepTime, step_time
from gpuplan.estimate.time import TrainingTime, training_time
from gpuplan.specs import layout, validity
from gpuplan.specs.framework import check_plan, get as get_framework
from gpuplan.specs.hardware import GPUSpec, for_job
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import accounted_plan, stage_layers
from gpuplan.specs.training import TrainingConfig


@dataclass(frozen=True)
class TrainRequest:
    model: ModelSpec
    gpu: GPUSpec
    plan: ParallelPlan
    config: TrainingConfig
    tokens: float | None = None  # training tokens; None: per-step figures only
    mfu: float | None = None
    price_per_gpu_hour: float | None = None
    price_source: str = ""

    @property
    def global_batch(self) -> int:
        return self.config.global_batch or self.config.micro_batch * self.plan.dp

    @property
    def microbatches(self) -> int:
        return self.global_batch // (self.config.micro_batch * self.plan.dp)


@dataclass(frozen=True)
class Suggestion:
    """One change to the request: ``changes`` are the fields changed and their new values (``note``
    says what follows, e.g. ``dp 4``); ``change`` writes them as field references (gpuplan/errors.py),
    which the CLI shows as its flags (``--recompute full``)."""

    changes: tuple[tuple[str, object], ...]
    total_bytes: float
    fits: bool
    note: str = ""

    @property
    def change(self) -> str:
        text = " ".join(field_ref(k, v) for k, v in self.changes)
        return f"{text} ({self.note})" if self.note else text

    def to_dict(self) -> dict:
        return {
            "change": self.change,
            "changes": dict(self.changes),
            "total_bytes": self.total_bytes,
            "fits": self.fits,
        }


# The search for the fewest GPUs with a plan that fits (gpuplan.search.plans.smallest_fitting_plan),
# passed in by the layer above (estimate/ imports nothing from search/)
FindPlan = Callable[[ModelSpec, GPUSpec, int, TrainingConfig], "tuple[ParallelPlan, TrainingConfig] | None"]


@dataclass(frozen=True)
class TrainEstimate:
    request: TrainRequest
    params: ParamCounts
    memory: MemoryReport
    flops: Flops
    time: TrainingTime | None
    suggestions: tuple[Suggestion, ...]
    step: StepTime | None = None  # the performance model's prediction
    # validation's error for published runs of this kind and the step-time range it implies
    # (estimate/validate.py, error_band); None when the step time was given (--mfu)
    band: dict | None = None
    # an even pipeline split that Megatron's accounted split beats (faster_split)
    faster_split: dict | None = None


def validate(req: TrainRequest) -> None:
    """Reject plans that cannot run, naming the field and the fix (the rules: gpuplan.specs.validity)."""
    c = req.config
    m, p = req.model, req.plan
    check_plan(get_framework(c.framework), p, c.mtp_layers)  # first what the framework cannot run at all
    validity.require_valid(m, p, c.seq_len, c.micro_batch, req.global_batch, c.cp_exchange)
    if p.layout is not None:
        layout.check_mtp(p.layout, c.mtp_layers)
    # MoE-only settings on a dense model would be silently meaningless
    require(
        m.is_moe or not c.moe_dispatcher,
        "moe_dispatcher",
        f"{m.name} has no experts to dispatch tokens to",
        "drop `moe_dispatcher` for a dense model",
    )
    for n in stage_layers(m, p):  # raises for a split that cannot run (vp chunks, first/last stage layers)
        offloaded_layers(c, n, p.vp)  # and for more offloaded layers than a chunk holds
    if req.mfu is not None:
        require(0 < req.mfu <= 1, "mfu", f"must be in (0, 1], got {req.mfu}", f"e.g. {field_ref('mfu', 0.4)}")
    if req.price_per_gpu_hour is not None:
        require(req.price_per_gpu_hour >= 0, "price", "must not be negative")
    req.gpu.peak(c.compute_dtype)  # raises if the GPU cannot run this precision


def _memory(req: TrainRequest) -> MemoryReport:
    return estimate_memory(req.model, req.config, req.plan, req.gpu, req.microbatches)


def suggest_fixes(req: TrainRequest, limit: int = 5, find_plan: FindPlan | None = None) -> tuple[Suggestion, ...]:
    """Single changes that bring an over-capacity plan under the GPU's memory, the cheapest first.

    Each candidate keeps the GPU count and global batch; ones that are invalid are skipped. When no
    single change fits, ``find_plan`` (the search's smallest fitting plan) proposes a whole plan.
    """
    p, c = req.plan, req.config
    candidates: list[tuple[tuple[tuple[str, object], ...], str, TrainRequest]] = []
    order = ["none", "selective", "full"]
    for r in order[order.index(c.recompute) + 1 :]:
        try:  # the framework may not have this recompute
            candidates.append(
                ((("recompute", r),), "", replace(req, config=replace(c, recompute=r, recompute_modules=())))
            )
        except GpuplanError:
            continue
    for z in range(p.zero + 1, 4):
        candidates.append(((("zero", z),), "", replace(req, plan=replace(p, zero=z))))
    if c.micro_batch > 1:
        candidates.append(
            (
                (("micro_batch", 1),),
                "",
                replace(req, config=replace(c, micro_batch=1, global_batch=req.global_batch)),
            )
        )
    if c.optimizer == "adamw":
        candidates.append(((("optimizer", "adamw8bit"),), "", replace(req, config=replace(c, optimizer="adamw8bit"))))
    if p.dp % 2 == 0:
        for dim in ("tp", "pp", "cp"):
            new = getattr(p, dim) * 2
            try:
                plan = replace(p, dp=p.dp // 2, **{dim: new})
                cand = replace(req, plan=plan, config=replace(c, global_batch=req.global_batch))
            except GpuplanError:
                continue
            candidates.append((((dim, new),), f"dp {p.dp // 2}", cand))
    out = []
    now = _memory(req).per_gpu.total
    for changes, note, cand in candidates:
        try:
            validate(cand)
        except GpuplanError:
            continue
        mem = _memory(cand)
        if mem.per_gpu.total < now:  # a change that saves nothing (ZeRO with dp=1) is no suggestion
            out.append(Suggestion(changes, mem.per_gpu.total, mem.fits, note))
    fitting = [s for s in out if s.fits]
    if fitting or c.offload_activation_layers or find_plan is None:  # the search plans without activation offload
        return tuple((fitting or out)[:limit])
    # No single change fits: the fewest GPUs with a plan that does, checked with the full estimate
    found = find_plan(req.model, req.gpu, p.world_size, replace(c, global_batch=req.global_batch))
    pool = sorted(out, key=lambda s: s.total_bytes)[: limit - 1]
    if found is not None:
        plan, config = found
        mem = estimate_memory(
            req.model,
            config,
            plan,
            req.gpu,
            req.global_batch // (config.micro_batch * plan.dp),
        )
        pool = [Suggestion(plan_changes(plan, config, p, c), mem.per_gpu.total, mem.fits)] + pool
    return tuple(pool[:limit])


def plan_changes(
    plan: ParallelPlan, config: TrainingConfig, was: ParallelPlan, was_config: TrainingConfig
) -> tuple[tuple[str, object], ...]:
    """The fields of a whole suggested plan: the GPU count and tp/pp always, the rest where they are
    not the default or changed (a field back at its default is named too: left out, the user's
    own value would stay and the command would not be the plan that was checked)."""
    out: list[tuple[str, object]] = [("gpus", plan.world_size), ("tp", plan.tp), ("pp", plan.pp)]
    for field, default in (("cp", 1), ("vp", 1), ("ep", 1), ("etp", None), ("zero", 0)):
        value = getattr(plan, field)
        if value != default or value != getattr(was, field):
            # an unset etp is the attention's tp: said so, as no flag unsets it
            out.append((field, plan.tp if field == "etp" and value is None else value))
    if config.recompute != was_config.recompute:
        out.append(("recompute", config.recompute))
    if config.micro_batch != was_config.micro_batch:
        out.append(("micro_batch", config.micro_batch))
    if plan.schedule != was.schedule:
        out.append(("schedule", plan.schedule))
    return tuple(out)


def estimate_training(req: TrainRequest, find_plan: FindPlan | None = None) -> TrainEstimate:
    """The estimate of ``req``; over capacity, with fixes (``find_plan``: see :func:`suggest_fixes`)."""
    from gpuplan.estimate.validate import error_band  # reads the validation set once, when asked

    validate(req)
    m, c = req.model, req.config
    memory = _memory(req)
    flops = training_flops(m, c.seq_len, c.recompute, modules=c.recomputed, document=c.document_len, mtp=c.mtp_layers)
    step = step_time(m, c, req.plan, req.gpu, req.microbatches)
    tokens_per_step = req.global_batch * c.seq_len
    time = training_time(
        model_flops_per_token=flops.model_per_token,
        hardware_flops_per_token=flops.hardware_per_token,
        tokens=req.tokens if req.tokens else tokens_per_step,
        tokens_per_step=tokens_per_step,
        gpus=req.plan.world_size,
        peak_flops=req.gpu.peak(c.compute_dtype),
        mfu=req.mfu,
        step_s=None if req.mfu is not None else step.step_s,
        price_per_gpu_hour=req.price_per_gpu_hour,
    )
    suggestions = () if memory.fits else suggest_fixes(req, find_plan=find_plan)
    band = None if req.mfu is not None else error_band(req.gpu, c, req.plan, step.step_s, m)
    split = faster_split(req, step.step_s, memory) if req.mfu is None else None
    return TrainEstimate(
        request=req,
        params=count_params(m),
        memory=memory,
        flops=flops,
        time=time,
        suggestions=suggestions,
        step=step,
        band=band,
        faster_split=split,
    )


def faster_split(req: TrainRequest, step_s: float, memory: MemoryReport) -> dict | None:
    """For an even split over a linear pipeline, Megatron's accounted split (specs/split.py
    ``accounted_split``: the embedding, the loss and any MTP depth each take a layer's place) when
    it is predicted faster and fits as well as the even one: the split real recipes run (Llama 3
    405B's 7 / 8 / 7; NeMo's DeepSeek-V3 with MTP), which the even split leaves on the table where
    the ends' work makes the first or last stage the slowest."""
    plan = accounted_plan(req.model.num_layers, req.plan, req.config.mtp_layers)
    if plan is None:
        return None
    alt = replace(req, plan=plan)
    mem = _memory(alt)
    if memory.fits and not mem.fits:
        return None
    t = step_time(req.model, req.config, plan, req.gpu, req.microbatches).step_s
    if t >= 0.99 * step_s:  # a gain under 1% is not worth a line of output
        return None
    return {
        "first_stage_layers": plan.first_stage_layers,
        "last_stage_layers": plan.last_stage_layers,
        "stage_layers": stage_layers(req.model, alt.plan),
        "step_s": t,
        "speedup": step_s / t,
        "fits": mem.fits,
    }


def to_dict(est: TrainEstimate) -> dict:
    """The JSON document of ``gpuplan train --json`` (bytes, FLOPs, seconds, dollars)."""
    req, mem, f, t = est.request, est.memory, est.flops, est.time
    tokens_per_step = req.global_batch * req.config.seq_len
    tokens = req.tokens if req.tokens else tokens_per_step

    def stage_dict(s):
        return {
            "stage": s.stage,
            "layers": s.layers,
            "weights": s.weights,
            "gradients": s.gradients,
            "optimizer": s.optimizer,
            "master_weights": s.master_weights,
            "activations": s.activations,
            "other": s.other_total,
            "other_breakdown": dict(s.other),
            "total": s.total,
            "microbatches_in_flight": s.microbatches_in_flight,
            "params": s.params,
        }

    fw = get_framework(req.config.framework)
    return {
        "fits": mem.fits,  # memory.fits, at the top as serve's and search's refusals put it under --json
        "framework": fw.name,
        "framework_profile": {
            "source": fw.source,
            "kernels": req.config.profile,
            "attention": req.config.attention,
            "selective_recompute": fw.selective_semantics,
            "fp8_recipe": fw.fp8_recipe,
        },
        "model": {
            "name": req.model.name,
            "model_type": req.model.model_type,
            "params_total": est.params.total,
            "params_active": est.params.active,
            "params_embedding": est.params.embedding,
            "params_lm_head": est.params.lm_head,
            "params_per_layer": list(est.params.per_layer),
            "params_vision": est.params.vision,
            # the multi-token-prediction modules trained (TrainingConfig.mtp_layers), not in params_total
            "params_mtp": mtp_params(req.model, req.config.mtp_layers),
            "mtp_layers": req.model.mtp_layers,
            "vision": vision_dict(req.model),
            "notes": list(req.model.notes),
        },
        "gpu": {
            "id": req.gpu.id,
            "name": req.gpu.name,
            "count": req.plan.world_size,
            "peak_flops": req.gpu.peak(req.config.compute_dtype),
            "compute_dtype": req.config.compute_dtype,
            "network": network_dict(req.gpu),
        },
        "plan": {
            **dataclasses.asdict(req.plan),
            "world_size": req.plan.world_size,
            "stage_layers": stage_layers(req.model, req.plan),
            "global_batch": req.global_batch,
            "microbatches": req.microbatches,
        },
        # compile_loss None means "with compile", global_batch 0 one micro-batch per rank: the JSON states what ran
        "training": {
            **dataclasses.asdict(req.config),
            "compile_loss": req.config.compiled_loss,
            "cp_comm": req.config.cp_exchange,
            "global_batch": req.global_batch,  # as run: 0 in the config means one micro-batch per DP rank
            "tokens": tokens,
        },
        "memory": {
            "per_gpu": stage_dict(mem.per_gpu),
            "most_loaded_stage": mem.per_gpu.stage,
            "stages": [stage_dict(s) for s in mem.stages],
            "model_states_total": mem.model_states_total["total"],
            "model_states_total_breakdown": mem.model_states_total,
            "gpu_capacity": mem.capacity,
            "fits": mem.fits,
            # over only by the allocator's reserve: the allocated peak fits (MemoryReport.tight)
            "tight": mem.tight,
            "headroom": mem.headroom,
        },
        "flops": {
            "per_token": f.model_per_token,
            "per_token_forward": f.forward_per_token,
            "per_token_hardware": f.hardware_per_token,
            "per_step": f.model_per_token * tokens_per_step,
            "total": f.model_per_token * tokens,
            "hardware_total": f.hardware_per_token * tokens,
            "six_nd_total": six_nd(req.model, tokens),
            "attention": "causal",
        },
        "time": None
        if t is None
        else {
            "step_s": t.step_s,
            "total_s": t.total_s,
            "days": t.days,
            "steps": t.steps,
            "step_s_range": None if est.band is None else est.band["step_s_range"],
        },
        "calibration": est.band,
        "gpu_hours": None if t is None else t.gpu_hours,
        "cost_usd": None if t is None else t.cost_usd,
        "price": {"usd_per_gpu_hour": req.price_per_gpu_hour, "source": req.price_source},
        "mfu": None if t is None else t.mfu,
        "hfu": None if t is None else t.hfu,
        "tokens_per_s_per_gpu": None if t is None else t.tokens_per_s_per_gpu,
        "suggestions": [s.to_dict() for s in est.suggestions],
        # Megatron's accounted split where it beats the even one (faster_split); null otherwise
        "faster_split": est.faster_split,
        "mfu_source": "mfu" if req.mfu is not None else "predicted",
        "performance": None if est.step is None else performance_dict(est.step, req.gpu),
    }


def network_dict(gpu: GPUSpec) -> dict:
    """The node and network facts the plan used (the catalog entry's, or a --cluster file's)."""
    e = gpu.efficiency
    return {
        "gpus_per_node": gpu.gpus_per_node,
        "scale_up_domain": gpu.fast_domain,
        "interconnect": gpu.interconnect,
        "intra_bytes_per_s": gpu.intra_bytes_per_s,
        "inter_bytes_per_s": gpu.inter_bytes_per_s,
        "nics_per_node": gpu.nics_per_node,
        "intra_latency_s": None if e is None else e.intra_latency_s,
        "inter_latency_s": None if e is None else e.inter_latency_s,
    }


def vision_dict(m: ModelSpec) -> dict | None:
    """A multimodal model's vision tower: what the plan counts and what it leaves out."""
    v = m.vision
    if v is None:
        return None
    from gpuplan.specs.vision import COUNTED

    return {
        "model_type": v.model_type,
        "params": v.params,
        "projector_params": v.projector_params,
        "layers": v.layers,
        "hidden_size": v.hidden_size,
        "stage": 0,
        "tensor_parallel": "replicated",
        "counted": list(COUNTED),
        "ignored": list(v.ignored),
    }


def performance_dict(st: StepTime, gpu) -> dict:
    """The performance model's prediction: step time, its breakdown and every dimension's traffic."""
    timed = efficiency(for_job(gpu, st.gpus))  # one GPU: its own measured clock
    return {
        "step_s": st.step_s,
        "mfu": st.mfu,
        "hfu": st.hfu,
        "microbatches": st.microbatches,
        "breakdown_s": dict(st.breakdown),
        "critical_stage": st.critical_stage,
        "kernels_s": dict(st.ops),
        "comm": {
            d: {
                "bytes_per_gpu": c.bytes_per_gpu,
                "time_s": c.time,
                "exposed_s": c.exposed,
                "hidden_s": c.hidden,
                "collectives_bytes": dict(c.collectives),
            }
            for d, c in st.comm.items()
            if c.bytes_per_gpu
        },
        "stages": [
            {
                "stage": s.stage,
                "layers": s.layers,
                "fwd_s": s.fwd,
                "bwd_input_s": s.bwd_input,
                "bwd_weight_s": s.bwd_weight,
                "recompute_s": s.recompute,
                "comm_exposed_s": dict(s.comm),
                "microbatch_s": s.total,
            }
            for s in st.stages
        ],
        "efficiency": {
            "name": gpu.efficiency.name,
            "assumed": gpu.efficiency.assumed,
            # the tensor-core rate over the MAMF this plan was timed at: one GPU its own measured
            # clock (specs/hardware.py for_job), several the multi-GPU fit
            "sustained": timed.sustained,
        },
    }
