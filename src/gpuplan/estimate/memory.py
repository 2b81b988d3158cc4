"""Training memory per GPU, by component, on every pipeline stage; the most loaded one decides.

Model states follow ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", section 5 and Figure 1): with mixed-precision Adam a parameter costs
2 (weights) + 2 (gradients) + 12 (fp32 master + two moments) bytes; stage 1 shards the 12 over
the data-parallel group, stage 2 also the gradients, stage 3 also the weights. Megatron-LM keeps
gradients in an fp32 ``main_grad`` buffer (4 bytes), which the ``fused`` profile uses. FP8
training keeps BF16 weights and FP32 masters like BF16 training, plus TransformerEngine's cached
FP8 copies of the GEMM weights (``TrainingConfig.fp8_copy_bytes``, ``other["fp8_weight_copies"]``).

Activations held on a stage follow the pipeline schedule (Narayanan et al. 2021, section 2.2;
Korthikanti et al. 2022, section 4.2.3): under 1F1B stage i holds min(p - i, m) micro-batches in
flight; interleaved 1F1B with v chunks holds (p - i - 1) * 2 + (v - 1) * p + 1 chunks of L/(pv)
layers, which on the first stage is L (1 + (p - 1)/(p v)) layers' worth.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError
from gpuplan.estimate import memory_terms as terms
from gpuplan.estimate.activations import ActivationBreakdown, activation_breakdown
from gpuplan.estimate.memory_terms import optimizer_bytes_per_param  # noqa: F401 (re-export)
from gpuplan.estimate.params import count_params, mtp_params
from gpuplan.estimate.stage_params import _adafactor_bytes, _stage_tensors, stage_params
from gpuplan.specs import schedules
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import layers_per_stage, shape_layers, stage_layers  # noqa: F401 (layers_per_stage: re-export)
from gpuplan.specs.training import TrainingConfig
from gpuplan.specs.validity import Reason


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layers: int
    weights: float
    gradients: float
    optimizer: float
    master_weights: float
    activations: float
    other: dict[str, float] = field(default_factory=dict)
    params: float = 0.0  # parameters held on this GPU (after TP/EP, before ZeRO)
    microbatches_in_flight: float = 1.0
    host_activations: float = 0.0  # offloaded activations held in host memory (not GPU memory)

    @property
    def other_total(self) -> float:
        return sum(self.other.values())

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.master_weights

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.other_total


@dataclass(frozen=True)
class MemoryReport:
    per_gpu: StageMemory  # the most loaded GPU
    stages: tuple[StageMemory, ...]
    model_states_total: dict[str, float]  # whole job, unsharded: weights, gradients, optimizer, master_weights
    activation: ActivationBreakdown
    capacity: float

    @property
    def fits(self) -> bool:
        return self.per_gpu.total <= self.capacity

    @property
    def headroom(self) -> float:
        return self.capacity - self.per_gpu.total

    @property
    def reserve(self) -> float:
        """The caching allocator's reserve in the most loaded GPU's total (``memory_terms.reserved``)."""
        return self.per_gpu.other.get("allocator_reserve", 0.0)

    @property
    def tight(self) -> bool:
        """Over the capacity by no more than the allocator's reserve: the allocated peak and the CUDA
        context fit, the usual fragmentation headroom does not. The reserve is the unconstrained
        reserved-over-allocated overhead (TrainingConfig.allocator_fraction), an upper bound near
        capacity, where the caching allocator frees its unused cached segments and retries before
        it fails (CUDACachingAllocator.cpp release_cached_blocks); published runs this close ran
        (the held-out runs `gpuplan validate training-held-out` marks tight, 0.6-3.9 GiB into it). Such
        a plan may still fail on fragmentation inside partly used segments; expandable segments
        remove that (``TrainingConfig.expandable_segments``)."""
        return not self.fits and self.per_gpu.total - self.reserve <= self.capacity


def offloaded_layers(cfg: TrainingConfig, stage_layers: int, vp: int = 1) -> int:
    """Layers of a pipeline rank (its ``vp`` chunks together) whose activations go to host
    memory: ``offload_activation_layers`` of each chunk. Megatron-Core needs at least one layer
    of a chunk left on the GPU (cpu_offloading_num_layers < the chunk's layers)."""
    n = cfg.offload_activation_layers
    chunk_layers = stage_layers // vp
    if n and n >= chunk_layers:
        raise GpuplanError(
            "offload_activation_layers",
            f"{n} offloaded layers but a pipeline chunk holds {chunk_layers}",
            f"offload at most {max(chunk_layers - 1, 0)} layers per chunk",
        )
    return n * vp


def candidate_stages(m: ModelSpec, plan: ParallelPlan) -> list[tuple[int, int, int]]:
    """(stage, first layer, layers) of the stages that can hold the most memory: the first, the
    last, and the first of each run of stages with the same layers (same count, same number of
    MoE layers): within a run, later stages hold fewer micro-batches in flight."""
    return list(
        pipeline_candidates(
            m, plan.pp, plan.vp, plan.schedule, plan.first_stage_layers, plan.last_stage_layers, plan.layout
        )
    )


# keyed on all the split reads: the whole model (its layers and which are MoE) and the pipeline
# shape (pp, vp, schedule, first/last stage layers); the result is a tuple of tuples
@functools.lru_cache(maxsize=4096)
def pipeline_candidates(
    m: ModelSpec,
    pp: int,
    vp: int,
    schedule: str,
    first_layers: int | None,
    last_layers: int | None,
    layout: str | None = None,
) -> tuple[tuple[int, int, int], ...]:
    """``candidate_stages`` of the pipeline shape (pp, vp, schedule, first/last stage layers or a
    Megatron layout), without a ParallelPlan: the search asks it once per distinct shape."""
    counts = shape_layers(m.num_layers, pp, vp, schedule, first_layers, last_layers, layout)
    # MoE and linear-attention layers before each layer index (prefix sums: one pass over the layers)
    moe_before, linear_before = [0], [0]
    for i in range(m.num_layers):
        moe_before.append(moe_before[-1] + m.is_moe_layer(i))
        linear_before.append(linear_before[-1] + m.is_linear_layer(i))
    out, first, prev = [], 0, None
    for s, n in enumerate(counts):
        kind = (n, moe_before[first + n] - moe_before[first], linear_before[first + n] - linear_before[first])
        if s in (0, pp - 1) or kind != prev:
            out.append((s, first, n))
        first, prev = first + n, kind
    return tuple(out)


def microbatches_in_flight(stage: int, pp: int, vp: int, microbatches: int, schedule: str = "1f1b") -> float:
    """Micro-batches whose activations a stage holds at its peak, in units of its full layer set.

    ZB-H1 keeps 1F1B's peak (Qi et al. 2023, section 3); ZB-V holds pp micro-batches on every
    rank (section 6; its simulation in pipeline/ agrees); DualPipe holds PP + 1 micro-batches of
    its two stages (DeepSeek-V3 report, Table 2).
    """
    if pp == 1:
        return 1.0
    return float(schedules.in_flight(schedules.get(schedule).in_flight, stage, pp, vp, microbatches))


@functools.lru_cache(maxsize=4096)
def _activations(
    m: ModelSpec, cfg: TrainingConfig, tp: int, cp: int, ep: int, sp: bool, etp: int | None = None
) -> ActivationBreakdown:
    """Activation sizes depend on the plan only through tp, cp, ep, sp and etp: cached on those."""
    dp = ep * (etp or 1)  # any dp the expert grid fits in: activations do not read it
    return activation_breakdown(m, cfg, ParallelPlan(dp=dp, tp=tp, cp=cp, ep=ep, sp=sp, etp=etp))


def estimate_memory(
    m: ModelSpec,
    cfg: TrainingConfig,
    plan: ParallelPlan,
    gpu: GPUSpec,
    microbatches: int = 1,
    *,
    all_stages: bool = True,
    capacity: float | None = None,
) -> MemoryReport:
    """Memory of every pipeline stage on ``gpu``. The GPU decides what depends on it (one FP8
    weight copy where its FP8 GEMMs take any layout: GPUSpec.fp8_any_layout, Blackwell; two on
    Hopper and older) and, unless ``capacity`` (bytes) overrides it, the capacity the report
    checks against: ``gpu.memory_bytes``. ``all_stages=False`` (the search) computes only the
    stages that can be the most loaded (``candidate_stages``)."""
    if not isinstance(gpu, GPUSpec):
        raise GpuplanError(
            "gpu",
            f"expected a GPUSpec, got {type(gpu).__name__} {gpu!r}",
            "pass the GPU (e.g. catalog.gpu('h100-sxm')); a different capacity goes in capacity=",
        )
    if capacity is None:
        capacity = gpu.memory_bytes
    elif isinstance(capacity, bool) or not isinstance(capacity, (int, float)) or not capacity > 0:
        raise GpuplanError("capacity", f"must be a positive number of bytes, got {capacity!r}", "or leave it out")
    fp8_one_layout = gpu.fp8_any_layout
    act = _activations(m, cfg, plan.tp, plan.cp, plan.ep, plan.sp, plan.expert_tp)
    z = plan.zero
    stages = []
    first = 0
    counts = stage_layers(m, plan)
    candidates = None if all_stages else {s for s, _, _ in candidate_stages(m, plan)}
    for stage, n_layers in enumerate(counts):
        layer_ids = range(first, first + n_layers)
        first += n_layers
        if candidates is not None and stage not in candidates:
            continue
        last = stage == plan.head_stage
        mtp = cfg.mtp_layers if last else 0  # multi-token-prediction blocks run beside the head
        sp_ = stage_params(
            m, plan.pp, stage, layer_ids.start, n_layers, plan.tp, plan.ep, plan.head_stage, plan.expert_tp, mtp
        )
        copies = schedules.get(plan.schedule).param_copies  # DualPipe: two stages per rank, one per direction
        if cfg.fp8_params and z == 3:
            raise GpuplanError(
                "fp8_params", f"{Reason.FP8_PARAMS_ZERO3} (ZeRO-3 / FSDP)", "drop fp8_params or use zero < 3"
            )
        weights, grads, optimizer, master = terms.model_states(
            cfg,
            z,
            plan.zero_group,
            plan.expert_zero_group,
            copies * sp_.dense,
            copies * sp_.expert,
            copies * sp_.adafactor_dense,
            copies * sp_.adafactor_expert,
            copies * sp_.gemm,
        )
        # Activations: micro-batches in flight times what one micro-batch keeps on this stage.
        in_flight = microbatches_in_flight(stage, plan.pp, plan.vp, microbatches, plan.schedule)
        activations, host = terms.activations(
            cfg,
            cfg.recompute == "full",
            in_flight,
            n_layers + mtp,
            sp_.n_dense,
            sp_.n_moe,
            act.dense_layer,
            act.moe_layer,
            act.layer_checkpoint,
            act.embedding,
            act.head,
            stage == 0,
            last,
            offloaded_layers(cfg, n_layers, plan.vp) if cfg.offload_activation_layers else 0,
            act.layer_rerun,
            sp_.n_linear,
            act.linear_delta,
        )
        other: dict[str, float] = {}
        if last:
            other["logits"] = act.loss_saved + act.loss_transient
        held = terms.buffers(
            cfg,
            z,
            plan.zero_group,
            n_layers,
            sp_.biggest_layer,
            copies * sp_.gemm,
            copies * sp_.gemm_matrices,
            sp_.biggest_gemm,
            sp_.biggest_gemm_matrices,
            fp8_one_layout,
            plan.pp,
            copies * (sp_.dense + sp_.expert),
            plan.expert_zero_group,
            sp_.biggest_dense,
            sp_.biggest_expert,
        )
        other.update((k, v) for k, v in held.items() if v is not None)
        allocated = weights + grads + master + optimizer + activations + sum(other.values())
        other["allocator_reserve"], other["cuda_context"] = terms.reserved(cfg, allocated)
        stages.append(
            StageMemory(
                stage=stage,
                layers=n_layers,
                weights=weights,
                gradients=grads,
                optimizer=optimizer,
                master_weights=master,
                activations=activations,
                other=other,
                params=copies * (sp_.dense + sp_.expert),
                microbatches_in_flight=in_flight,
                host_activations=host,
            )
        )

    params = count_params(m).total + mtp_params(m, cfg.mtp_layers)
    if cfg.optimizer == "adafactor":
        every = _stage_tensors(m, 1, 0, range(m.num_layers), mtp=cfg.mtp_layers)
        opt_total = sum(_adafactor_bytes(t, 1) * c for t, c in every)
    else:
        opt_total = optimizer_bytes_per_param(cfg) * params
    totals = {
        "weights": cfg.weight_bytes * params,
        "gradients": cfg.grad_bytes * params,
        "optimizer": opt_total,
        "master_weights": cfg.master_bytes * params,
    }
    totals["total"] = sum(totals.values())
    worst = max(stages, key=lambda s: s.total)
    return MemoryReport(
        per_gpu=worst, stages=tuple(stages), model_states_total=totals, activation=act, capacity=capacity
    )
