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
from gpuplan.estimate.activations import ActivationBreakdown, activation_breakdown
from gpuplan.estimate.params import count_params
from gpuplan.estimate.stage_params import _adafactor_bytes, _stage_tensors, stage_params
from gpuplan.specs import schedules
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import layers_per_stage, stage_layers  # noqa: F401 (layers_per_stage: re-export)
from gpuplan.specs.training import TrainingConfig

ADAM8BIT_BLOCK = 256  # bitsandbytes blockwise quantisation: one fp32 absmax per 256 values


def optimizer_bytes_per_param(cfg: TrainingConfig) -> float:
    """Optimizer state bytes per parameter (Adafactor is shape-dependent: see ``_adafactor_bytes``)."""
    return {
        "adamw": 8.0,  # exp_avg and exp_avg_sq in fp32 (torch.optim.AdamW, Megatron, DeepSpeed)
        "adamw8bit": 2.0 + 2 * 4 / ADAM8BIT_BLOCK,  # two uint8 states + block scales (Dettmers et al. 2022)
        "sgd": 4.0,  # one fp32 momentum buffer
        "adafactor": 0.0,
    }[cfg.optimizer]


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
    out, first, prev = [], 0, None
    for s, n in enumerate(stage_layers(m, plan)):
        kind = (n, sum(1 for i in range(first, first + n) if m.is_moe_layer(i)))
        if s in (0, plan.pp - 1) or kind != prev:
            out.append((s, first, n))
        first, prev = first + n, kind
    return out


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
    capacity: float,
    microbatches: int = 1,
    all_stages: bool = True,
) -> MemoryReport:
    """Memory of every pipeline stage. ``all_stages=False`` (the search) computes only the stages
    that can be the most loaded (``candidate_stages``)."""
    act = _activations(m, cfg, plan.tp, plan.cp, plan.ep, plan.sp, plan.expert_tp)
    opt_per_param = optimizer_bytes_per_param(cfg)
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
        sp_ = stage_params(
            m, plan.pp, stage, layer_ids.start, n_layers, plan.tp, plan.ep, plan.head_stage, plan.expert_tp
        )
        dense, expert = sp_.dense, sp_.expert

        def sharded(min_stage: int) -> float:
            # ZeRO shards a state over the ranks holding replicas of it: DP x CP for dense weights,
            # the expert data-parallel ranks tp x cp x dp / (ep x etp) for experts.
            if z >= min_stage:
                return dense / plan.zero_group + expert / plan.expert_zero_group
            return dense + expert

        copies = schedules.get(plan.schedule).param_copies  # DualPipe: two stages per rank, one per direction
        dense, expert = copies * dense, copies * expert
        # FSDP2's sharded parameters are the fp32 masters: no sharded BF16 copy besides them
        weights = 0.0 if z == 3 and cfg.sharded_params_are_masters else cfg.weight_bytes * sharded(3)
        if cfg.fp8_params:
            if z == 3:
                raise GpuplanError(
                    "fp8_params",
                    "FP8 parameters under ZeRO-3 / FSDP are not modelled",
                    "drop fp8_params or use zero < 3",
                )
            # the block GEMM weights exist only as their low-precision copies (fp8_weight_copies)
            weights -= cfg.weight_bytes * copies * sp_.gemm
        grads = cfg.grad_bytes * sharded(2)
        master = cfg.master_bytes * sharded(1)
        if cfg.optimizer == "adafactor":
            opt_dense, opt_expert = copies * sp_.adafactor_dense, copies * sp_.adafactor_expert
            optimizer = (
                (opt_dense / plan.zero_group + opt_expert / plan.expert_zero_group)
                if z >= 1
                else opt_dense + opt_expert
            )
        else:
            optimizer = opt_per_param * sharded(1)

        # Activations: micro-batches in flight times what one micro-batch keeps on this stage.
        in_flight = microbatches_in_flight(stage, plan.pp, plan.vp, microbatches, plan.schedule)
        full_layers = sp_.n_dense * act.layer(False) + sp_.n_moe * act.layer(True)
        if cfg.recompute == "full":
            kept = act.layer_checkpoint * n_layers
            # one block re-run in backward
            working = max(act.layer(False) if sp_.n_dense else 0.0, act.layer(True) if sp_.n_moe else 0.0)
        else:
            kept, working = full_layers, 0.0
        host = 0.0
        if cfg.offload_activation_layers:
            # the offloaded layers' activations live in host memory; one layer's stays on the GPU
            # as the copy in flight (TransformerEngine's offload handler double-buffers)
            n_off = offloaded_layers(cfg, n_layers, plan.vp)
            biggest = act.layer(True) if sp_.n_moe else act.layer(False)
            host = n_off * biggest
            kept -= host
            working = biggest
        per_mb = kept + (act.embedding if stage == 0 else 0.0) + (act.head if stage == plan.head_stage else 0.0)
        activations = in_flight * per_mb + working

        other: dict[str, float] = {}
        if stage == plan.head_stage:
            other["logits"] = act.loss_saved + act.loss_transient
        if z == 3 and n_layers:
            # FSDP/ZeRO-3 gathers a whole block's weights (current and prefetched next) and holds
            # its unsharded gradient until the reduce-scatter.
            other["zero3_gather"] = sp_.biggest_layer * (2 * cfg.weight_bytes + cfg.grad_bytes)
        if cfg.fp8_copy_bytes:
            # FP8 copies of the GEMM weights (TrainingConfig.fp8_copy_bytes): of every block held,
            # or under ZeRO-3 of the two gathered blocks only (a shard has nothing to quantize)
            copies = schedules.get(plan.schedule).param_copies  # DualPipe: two stages per rank
            held_gemm = 2 * sp_.biggest_gemm if z == 3 else copies * sp_.gemm
            held_matrices = 2 * sp_.biggest_gemm_matrices if z == 3 else copies * sp_.gemm_matrices
            other["fp8_weight_copies"] = cfg.fp8_copy_bytes * held_gemm + cfg.fp8_copy_matrix_bytes * held_matrices
        if plan.zero_group > 1:
            other["comm_buckets"] = cfg.comm_bucket_bytes
        allocated = weights + grads + master + optimizer + activations + sum(other.values())
        other["allocator_reserve"] = cfg.allocator_fraction * allocated
        other["cuda_context"] = cfg.cuda_context_bytes
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
                params=dense + expert,
                microbatches_in_flight=in_flight,
                host_activations=in_flight * host,
            )
        )

    params = count_params(m).total
    if cfg.optimizer == "adafactor":
        opt_total = sum(_adafactor_bytes(t, 1) * c for t, c in _stage_tensors(m, 1, 0, range(m.num_layers)))
    else:
        opt_total = opt_per_param * params
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
