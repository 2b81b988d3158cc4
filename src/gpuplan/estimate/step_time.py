"""Step time from first principles: kernel times, communication, overlap and the pipeline bubble.

For each pipeline stage and one micro-batch: forward F, backward-for-inputs B and
backward-for-weights W (compute.py), plus the communication each dimension puts on that path
(layer_comm.py, over comm.py's collectives) minus what overlap hides. The pipeline then runs m micro-batches:

m x t_max plus the bubble of the schedule, simulated on the stages' F, B and W times
(pipeline/bubble.py): for equal stages this is 1F1B's and interleaved 1F1B's (p-1)/v x t
(Narayanan et al. 2021), ZB-H1's (p-1)(F + B - 2W) (Qi et al. 2023) and DualPipe's
(p/2 - 1)(F&B + B - 3W) (DeepSeek-V3 report, Table 2; B the whole backward there), with the
expert all-to-all hidden under DualPipe's paired forward/backward chunks. Data-parallel gradient reduction overlaps the
last micro-batch's backward in buckets (PyTorch DDP, Li et al. 2020; Megatron-LM's
overlap_grad_reduce); what does not fit is exposed, as is at least the last bucket. The optimizer
step is memory-bound on each GPU's shard.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from gpuplan.estimate.comm import collective_time, efficiency, folded, place
from gpuplan.estimate.compute import LayerShape, OpTimes, layer_times
from gpuplan.estimate.flops import training_flops
from gpuplan.estimate.kernels import memory_time
from gpuplan.estimate.layer_comm import CommLine, layer_comm, overlap_contention
from gpuplan.estimate.memory import _activations, offloaded_layers, optimizer_bytes_per_param
from gpuplan.estimate.model_ends import embedding_times, head_times, mtp_times
from gpuplan.estimate.stage_params import stage_kinds, stage_params
from gpuplan.pipeline.bubble import pipeline_bubble
from gpuplan.specs import schedules, validity
from gpuplan.specs.hardware import GPUSpec, for_job
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import stage_layers
from gpuplan.specs.training import TrainingConfig

DIMS = ("tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class StageTime:
    """One micro-batch on one pipeline stage: kernel seconds and exposed communication."""

    stage: int
    layers: int
    fwd: float
    bwd_input: float
    bwd_weight: float
    recompute: float
    comm: dict[str, float]  # exposed seconds per micro-batch by dimension (tp, cp, ep, dp for ZeRO-3)

    @property
    def compute(self) -> float:
        return self.fwd + self.bwd_input + self.bwd_weight

    @property
    def total(self) -> float:
        return self.compute + self.recompute + sum(self.comm.values())


@dataclass(frozen=True)
class StepTime:
    step_s: float
    breakdown: dict[str, float]  # seconds on the critical path; sums to step_s
    comm: dict[str, CommLine]
    stages: tuple[StageTime, ...]
    critical_stage: int
    microbatches: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    gpus: int
    peak_flops: float
    ops: dict[str, float]  # kernel seconds per step on the critical stage by kind (gemm, attention, ...)

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / (self.step_s * self.gpus * self.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_step / (self.step_s * self.gpus * self.peak_flops)


def _shape(m: ModelSpec, cfg: TrainingConfig, plan: ParallelPlan) -> LayerShape:
    return LayerShape(
        tokens=cfg.micro_batch * cfg.seq_len // plan.cp,
        seq=cfg.seq_len,
        micro_batch=cfg.micro_batch,
        tp=plan.tp,
        cp=plan.cp,
        ep=plan.ep,
        sp=plan.sp and plan.tp > 1,
        dtype=cfg.compute_dtype,
        act_bytes=cfg.activation_bytes,
        attention=cfg.attention,
        attention_kernel=cfg.attention_kernel,
        eager=cfg.profile == "eager",
        compiled=cfg.compile,
        compiled_loss=cfg.compiled_loss,
        autocast=cfg.autocast,
        expert_imbalance=cfg.expert_imbalance if plan.ep > 1 else 1.0,
        fused_ce=cfg.fused_cross_entropy,
        etp=plan.expert_tp,
        fp8_current=cfg.precision == "fp8" and cfg.fp8_scaling == "current",
        moe_dispatcher=cfg.moe_dispatcher if m.is_moe and plan.ep > 1 else "",
        te_op_fuser=cfg.te_op_fuser,
        full_cuda_graph=cfg.full_cuda_graph,
        cp_comm=cfg.cp_exchange,
        cp_balanced=cfg.cp_load_balance,
        document=cfg.document_len,
    )


def optimizer_bytes_moved(cfg: TrainingConfig) -> float:
    """HBM bytes per parameter of one optimizer step, as Megatron-LM's mixed-precision optimizer
    runs it (megatron/optimizer: MixedPrecisionOptimizer.step): unscale the gradients and check for
    inf/nan (fp16 loss scaling only: read and write), the global norm for clipping (read), the
    fused Adam update (read weights, gradient and states; write weights and states), copy the
    master weights back to the model precision, and zero the gradient buffer."""
    states = optimizer_bytes_per_param(cfg) if cfg.optimizer != "adafactor" else 0.5
    g = cfg.grad_bytes
    master = cfg.master_bytes
    weights = cfg.weight_bytes
    unscale = 2 * g if cfg.precision == "fp16" else 0.0
    update = (2 * master if master else 2 * weights) + g + 2 * states
    copy_back = (master + weights) if master else 0.0
    return unscale + g + update + copy_back + g


def step_time(m: ModelSpec, cfg: TrainingConfig, plan: ParallelPlan, gpu: GPUSpec, microbatches: int) -> StepTime:
    """Predicted seconds per optimizer step, with its breakdown (see the module docstring)."""
    gpu = for_job(gpu, plan.world_size)  # one GPU waits for no other: its own clock
    groups = place(plan, gpu, tuple(plan.order.split("-")))
    # the expert groups (etp, ep, edp) regroup each stage's tp x cp x dp ranks (MoE parallel
    # folding; with etp unset, etp = tp as in Megatron, which gives the unfolded groups)
    groups.update(folded(plan, gpu, tuple(plan.order.split("-"))))
    shape = _shape(m, cfg, plan)
    mb = microbatches
    sched = schedules.get(plan.schedule)
    validity.require_microbatches(plan, mb)  # what the schedule needs of the micro-batch count
    dualpipe = sched.hides_expert_all_to_all  # DualPipe's paired chunks hide the expert all-to-all
    stages: list[StageTime] = []
    stage_comm: list[dict[str, CommLine]] = []
    stage_ops: list[dict[str, float]] = []
    seen: dict[tuple, tuple[StageTime, dict, dict]] = {}
    first = 0
    for stage, n_layers in enumerate(stage_layers(m, plan)):
        ids = range(first, first + n_layers)
        first += n_layers
        # stages with the same layers and ends take the same time: compute each kind once
        off = offloaded_layers(cfg, n_layers, plan.vp)
        is_last = stage == plan.head_stage
        # the head's stage also runs the multi-token-prediction depths: one more block each
        mtp = cfg.mtp_layers if is_last else 0
        key = (n_layers, stage_kinds(m, ids.start, n_layers, mtp), stage == 0, is_last, off, mtp)
        if key not in seen:
            # what a stage's time depends on, so plans that differ elsewhere share the work
            z3 = groups["dp_cp"] if plan.zero == 3 and plan.zero_group > 1 else None
            gl = (groups["tp"], groups["cp"], groups["ep"], z3, groups.get("etp"))
            seen[key] = _stage(m, cfg, _stage_plan(plan), gpu, gl, shape, mb, dualpipe, key)
        st, c, kinds = seen[key]
        stages.append(dataclasses.replace(st, stage=stage, comm=dict(st.comm)))  # copies: ``seen`` is cached
        stage_comm.append(c)
        stage_ops.append(kinds)

    p, v = plan.pp, plan.chunks
    totals = [s.total for s in stages]
    crit = max(range(len(stages)), key=lambda i: totals[i])
    sc, t_max = stages[crit], totals[crit]
    # per rank: forward (with half the exposed per-layer communication), input-gradient backward
    # (recompute and the other half included) and weight-gradient backward, for the simulation
    fwd = [st.fwd + sum(st.comm.values()) / 2 for st in stages]
    wgt = [st.bwd_weight for st in stages]
    inp = [tot - f_ - w_ for tot, f_, w_ in zip(totals, fwd, wgt)]
    bubble = pipeline_bubble(plan.schedule, plan.vp, mb, fwd, inp, wgt)
    # a private copy: stage results are cached and shared between plans
    crit_comm = {d: dataclasses.replace(c, collectives=dict(c.collectives)) for d, c in stage_comm[crit].items()}

    # pipeline point-to-point: one activation (or gradient) per micro-batch and chunk boundary
    p2p = 0.0
    if p > 1:
        g = groups["pp"]
        # each TP rank sends its 1/tp slice and the receivers all-gather it over NVLink
        # (Narayanan et al. 2021, section 4.1, scatter/gather); with SP the slice is the activation
        size = shape.tokens * m.hidden_size * cfg.activation_bytes / plan.tp
        transfers = 2 * (mb * v + p - 1)
        t = collective_time("p2p", size, g, gpu)
        if v > 1 and sched.interleaved and cfg.overlap_p2p:
            # interleaved 1F1B posts each chunk's receive ahead and waits for it only before the
            # chunk that needs it, sending while the next chunk computes (Megatron-Core
            # schedules.py, overlap_p2p_comm, which Megatron-LM and Megatron-Bridge turn on for
            # every interleaved run; torch.distributed.pipelining's _PipelineScheduleRuntime posts
            # RECV_F/RECV_B actions ahead too): a transfer hides behind one chunk's forward, the
            # shortest compute beside it; the 2(p-1) hops of the fill and the drain still wait
            p2p = 2 * (p - 1) * t + 2 * mb * v * max(0.0, t - fwd[crit] / v)
        else:
            # 1F1B's blocking batched send/recv (Megatron's batch_p2p_comm) puts each on the path
            p2p = transfers * t
        crit_comm["pp"].add("p2p", size, g, gpu, transfers, exposed=p2p)

    # data parallelism: gradients reduced over dp x cp (experts over the expert data-parallel ranks),
    # overlapped with the last micro-batch's backward; the sharded optimizer's updated weights
    # gathered back behind the next forward
    start = sum(s.layers for s in stages[:crit])
    held = stage_params(  # as memory; the MTP depths count on the head's stage only
        m, p, crit, start, sc.layers, plan.tp, plan.ep, plan.head_stage, plan.expert_tp, cfg.mtp_layers
    )
    copies = sched.param_copies  # DualPipe keeps two stages' weights per rank
    dense, expert = copies * held.dense, copies * held.expert
    dp_exposed = 0.0
    if plan.zero < 3:
        kind = "reduce-scatter" if plan.zero >= 1 else "all-reduce"
        window = t_max - fwd[crit]  # the last micro-batch's whole backward
        for size_params, group in ((dense, groups["dp_cp"]), (expert, groups["edp"])):
            if not size_params or group.size <= 1:
                continue
            grad = size_params * cfg.grad_bytes
            t_grad = collective_time(kind, grad, group, gpu)
            last_bucket = t_grad * min(1.0, cfg.comm_bucket_bytes / 2 / grad)
            e = t_grad if not cfg.overlap_grad_reduce else max(last_bucket, t_grad - window)
            window = max(0.0, window - t_grad)
            crit_comm["dp"].add(kind, grad, group, gpu, 1, exposed=e)
            dp_exposed += e
            if plan.zero >= 1:
                wb = size_params * cfg.gathered_weight_bytes
                t_ag = collective_time("all-gather", wb, group, gpu)
                e = t_ag if not cfg.overlap_param_gather else max(0.0, t_ag - fwd[crit])
                crit_comm["dp"].add("all-gather", wb, group, gpu, 1, exposed=e)
                dp_exposed += e
    sharded = plan.zero >= 1
    shard = dense / (plan.zero_group if sharded else 1) + expert / (plan.expert_zero_group if sharded else 1)
    optimizer = memory_time(gpu, shard * optimizer_bytes_moved(cfg), kernels=4)

    breakdown = {"compute": mb * sc.compute, "recompute": mb * sc.recompute}
    for d in ("tp", "cp", "ep"):
        breakdown[f"{d}_comm"] = mb * sc.comm.get(d, 0.0)
    breakdown["pp_comm"] = p2p
    breakdown["dp_comm"] = mb * sc.comm.get("dp", 0.0) + dp_exposed
    breakdown["activation_offload"] = mb * sc.comm.get("host", 0.0)
    if cfg.moe_dispatcher:
        breakdown["moe_host_sync"] = mb * sc.comm.get("moe_host", 0.0)
    breakdown["bubble"] = bubble
    breakdown["optimizer"] = optimizer
    breakdown["overlap_contention"] = overlap_contention(crit_comm, gpu)
    overhead = efficiency(gpu).step_overhead_s  # only a calibration profile sets it
    if overhead:
        breakdown["step_overhead"] = overhead
    step = sum(breakdown.values())

    flops = training_flops(
        m, cfg.seq_len, cfg.recompute, modules=cfg.recomputed, document=cfg.document_len, mtp=cfg.mtp_layers
    )
    tokens = cfg.seq_len * cfg.micro_batch * mb * plan.dp
    return StepTime(
        step_s=step,
        breakdown=breakdown,
        comm=crit_comm,
        stages=tuple(stages),
        critical_stage=crit,
        microbatches=mb,
        model_flops_per_step=flops.model_per_token * tokens,
        hardware_flops_per_step=flops.hardware_per_token * tokens,
        gpus=plan.world_size,
        peak_flops=gpu.peak(cfg.compute_dtype),
        ops=dict(stage_ops[crit]),
    )


@functools.lru_cache(maxsize=4096)
def _moe_layers(m: ModelSpec, first: int, n: int) -> int:
    return sum(1 for i in range(first, first + n) if m.is_moe_layer(i))


def _stage_plan(plan: ParallelPlan) -> ParallelPlan:
    """The plan as a stage's time sees it (pipeline and DP layout do not change it)."""
    return ParallelPlan(
        dp=plan.ep * (plan.etp or 1),  # any dp the expert grid fits in: a stage's time does not read it
        tp=plan.tp,
        cp=plan.cp,
        ep=plan.ep,
        etp=plan.etp,
        zero=3 if plan.zero == 3 else 0,
        sp=plan.sp,
    )


@functools.lru_cache(maxsize=1 << 14)
def _stage(
    m: ModelSpec,
    cfg: TrainingConfig,
    plan: ParallelPlan,
    gpu: GPUSpec,
    group_list: tuple,
    shape: LayerShape,
    mb: int,
    dualpipe: bool,
    key: tuple,
) -> tuple[StageTime, dict, dict]:
    """One micro-batch on a stage of ``n_layers`` (``layer_kinds``: how many of each kind), first
    and/or last."""
    n_layers, layer_kinds, is_first, is_last, off, mtp = key
    tp_g, cp_g, ep_g, z3, etp_g = group_list
    groups = {"tp": tp_g, "cp": cp_g, "ep": ep_g, "dp_cp": z3, "etp": etp_g}
    c = {d: CommLine() for d in DIMS}
    f = b = w = rec = 0.0
    exposed: dict[str, float] = {}
    kinds: dict[str, float] = {}
    before = 0  # layers of the kinds before this one: the offloaded layers are the chunk's first
    for (moe, linear), n in layer_kinds:
        ops = layer_times(m, gpu, shape, moe, linear)
        for d, e in layer_comm(m, cfg, plan, gpu, groups, shape, ops, moe, c, n * mb, dualpipe, linear).items():
            exposed[d] = exposed.get(d, 0.0) + n * e
        f += n * ops.fwd
        b += n * ops.bwd_input
        w += n * ops.bwd_weight
        rec += n * ops.recompute(cfg.recompute, cfg.recomputed)
        for k, v in ops.parts.items():
            kinds[k] = kinds.get(k, 0.0) + n * mb * v
        if moe and cfg.moe_dispatcher:
            host = _moe_host(m, cfg, plan, gpu, ops)
            if host:
                exposed["moe_host"] = exposed.get("moe_host", 0.0) + n * host
        if off:  # the offloaded layers are the chunk's first ones, taken kind by kind
            n_off = min(n, max(0, off - before))
            exposed["host"] = exposed.get("host", 0.0) + _offload_exposed(m, cfg, plan, gpu, ops, moe, n_off, linear)
        before += n
    extras = ([(embedding_times(m, gpu, shape), 1)] if is_first else []) + (
        [(head_times(m, gpu, shape), 1)] if is_last else []
    )
    # each multi-token-prediction depth: its block is among layer_kinds; its embedding lookup,
    # norms and projection, and one more pass through the LM head and the loss
    if mtp:
        extras += [(mtp_times(m, gpu, shape), mtp), (head_times(m, gpu, shape), mtp)]
    for ops, times in extras:
        f += times * ops.fwd
        b += times * ops.bwd_input
        w += times * ops.bwd_weight
        for k, v in ops.parts.items():
            kinds[k] = kinds.get(k, 0.0) + times * mb * v
    return StageTime(-1, n_layers, f, b, w, rec, exposed), c, kinds


def _moe_host(m: ModelSpec, cfg: TrainingConfig, plan: ParallelPlan, gpu: GPUSpec, ops: OpTimes) -> float:
    """Seconds per micro-batch that one MoE layer's expert-loop host launches add after the
    dispatcher's host synchronisation (estimate/moe_host.py)."""
    from gpuplan.estimate.moe_host import moe_host_exposed

    return moe_host_exposed(
        cfg.moe_dispatcher,
        cfg.full_cuda_graph,
        max(1, m.num_experts // plan.ep),
        cfg.precision,
        cfg.precision == "fp8" and cfg.fp8_scaling == "current",
        ops.modules.get("expert_loop", 0.0),
        ops.fwd,
        ops.bwd,
        efficiency(gpu).kernel_overhead_s,
    ).exposed


def _offload_exposed(
    m: ModelSpec,
    cfg: TrainingConfig,
    plan: ParallelPlan,
    gpu: GPUSpec,
    ops: OpTimes,
    moe: bool,
    off: int,
    linear: bool = False,
) -> float:
    """Seconds per micro-batch that activation offload adds to a stage: each offloaded layer's
    activations go to host memory over the GPU's host link (PCIe, or NVLink-C2C on Grace) in
    forward and come back in backward, each copy overlapped with the next layer's compute
    (TransformerEngine's offload handler prefetches one layer ahead); what a copy takes beyond
    that layer's compute is exposed."""
    acts = _activations(m, cfg, plan.tp, plan.cp, plan.ep, plan.sp, plan.expert_tp)
    copy = acts.layer(moe, linear) / gpu.host_bytes_per_s
    return off * (max(0.0, copy - ops.fwd) + max(0.0, copy - ops.bwd_input - ops.bwd_weight))
