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
from gpuplan.estimate.params import (
    Tensor,
    count_params,
    embedding_tensors,
    head_tensors,
    layer_tensors,
    vision_tensors,
)
from gpuplan.pipeline.split import layers_per_stage, stage_layers  # noqa: F401 (layers_per_stage: re-export)
from gpuplan.specs import schedules
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
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


def _local_shape(t: Tensor, tp: int) -> tuple[int, ...]:
    shape = list(t.shape)
    if t.split in ("col", "vocab"):
        out_dim = -2 if len(shape) >= 2 else -1  # weights are (out, in); a bias is (out,)
        shape[out_dim] = -(-shape[out_dim] // tp)
    elif t.split == "row":
        shape[-1] = -(-shape[-1] // tp)
    return tuple(shape)


def _adafactor_bytes(t: Tensor, tp: int) -> float:
    """Adafactor (Shazeer & Stern 2018) without momentum: fp32 row and column second moments for
    each matrix (factored over the last two dims, as torch.optim.Adafactor), full for vectors."""
    shape = _local_shape(t, tp)
    if len(shape) < 2:
        return 4.0 * shape[0]
    lead = 1
    for d in shape[:-2]:
        lead *= d
    return 4.0 * lead * (shape[-2] + shape[-1])


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


def _stage_tensors(
    m: ModelSpec, pp: int, stage: int, layer_ids: range, head: int | None = None
) -> list[tuple[Tensor, int]]:
    """(tensor, count) pairs held by one stage, before parallel splitting; ``head``: the stage
    holding the output head (default the last; ZB-V's is the first)."""
    head = pp - 1 if head is None else head
    out: list[tuple[Tensor, int]] = []
    n_moe = sum(m.is_moe_layer(i) for i in layer_ids)
    n_dense = len(layer_ids) - n_moe
    out += [(t, n_dense) for t in layer_tensors(m, False)] if n_dense else []
    out += [(t, n_moe) for t in layer_tensors(m, True)] if n_moe else []
    if stage == 0:
        out += [(t, 1) for t in embedding_tensors(m)]
        # a multimodal model's vision tower feeds the embeddings: the first stage holds it
        out += [(t, 1) for t in vision_tensors(m)]
    if stage == head:
        out += [(t, 1) for t in head_tensors(m)]
        if m.tied_embeddings and head != 0:  # Megatron keeps a copy of the shared embedding on the last stage
            out += [(t, 1) for t in embedding_tensors(m) if t.name == "embed.tokens"]
    return out


@functools.lru_cache(maxsize=4096)
def _activations(
    m: ModelSpec, cfg: TrainingConfig, tp: int, cp: int, ep: int, sp: bool, etp: int | None = None
) -> ActivationBreakdown:
    """Activation sizes depend on the plan only through tp, cp, ep, sp and etp: cached on those."""
    dp = ep * (etp or 1)  # any dp the expert grid fits in: activations do not read it
    return activation_breakdown(m, cfg, ParallelPlan(dp=dp, tp=tp, cp=cp, ep=ep, sp=sp, etp=etp))


@dataclass(frozen=True)
class StageParams:
    """Parameters one GPU of a stage holds after TP and EP (before ZeRO), and what depends on them."""

    dense: float
    expert: float
    adafactor_dense: float  # Adafactor state bytes (shape-dependent)
    adafactor_expert: float
    biggest_layer: float  # the largest block's parameters on this GPU (ZeRO-3 gathers one at a time)
    n_dense: int
    n_moe: int
    gemm: float = 0.0  # GEMM weights of the transformer blocks (what FP8 training quantizes)
    biggest_gemm: float = 0.0  # the same in the largest block
    gemm_matrices: float = 0.0  # their weight matrices (an expert's each), for per-tensor scales
    biggest_gemm_matrices: float = 0.0


@functools.lru_cache(maxsize=4096)
def stage_params(
    m: ModelSpec,
    pp: int,
    stage: int,
    first: int,
    n_layers: int,
    tp: int,
    ep: int,
    head: int | None = None,
    etp: int | None = None,
) -> StageParams:
    """Parameters one GPU of a stage holds: dense tensors split by ``tp``, routed experts by ``ep``
    (experts / ep of them) and each by ``etp`` (None: tp), the expert tensor parallelism of
    Megatron's MoE parallel folding (parallel_state.py, expert_tensor_parallel_size; experts.py,
    TEGroupedMLP builds its linears on the expert TP group)."""
    layer_ids = range(first, first + n_layers)
    held = _stage_tensors(m, pp, stage, layer_ids, head)
    etp = tp if etp is None else etp

    def per_gpu(t: Tensor) -> float:
        return _per_gpu_numel(t, tp, ep, etp)

    n_moe = sum(1 for i in layer_ids if m.is_moe_layer(i))
    kinds = {m.is_moe_layer(i) for i in layer_ids}
    return StageParams(
        dense=sum(per_gpu(t) * c for t, c in held if not t.expert),
        expert=sum(per_gpu(t) * c for t, c in held if t.expert),
        adafactor_dense=sum(_adafactor_bytes(t, tp) * c for t, c in held if not t.expert),
        adafactor_expert=sum(_adafactor_bytes(t, etp) / ep * c for t, c in held if t.expert),
        biggest_layer=max((sum(per_gpu(t) for t in layer_tensors(m, f)) for f in kinds), default=0.0),
        n_dense=n_layers - n_moe,
        n_moe=n_moe,
        gemm=sum(
            per_gpu(t) * n
            for moe, n in ((False, n_layers - n_moe), (True, n_moe))
            if n
            for t in layer_tensors(m, moe)
            if fp8_gemm(t)
        ),
        biggest_gemm=max((sum(per_gpu(t) for t in layer_tensors(m, f) if fp8_gemm(t)) for f in kinds), default=0.0),
        gemm_matrices=sum(
            _matrices(t, ep) * n
            for moe, n in ((False, n_layers - n_moe), (True, n_moe))
            if n
            for t in layer_tensors(m, moe)
            if fp8_gemm(t)
        ),
        biggest_gemm_matrices=max(
            (sum(_matrices(t, ep) for t in layer_tensors(m, f) if fp8_gemm(t)) for f in kinds), default=0.0
        ),
    )


def _matrices(t: Tensor, ep: int) -> float:
    """Weight matrices a GPU holds of a tensor: one, or its experts' share (TransformerEngine's
    GroupedLinear keeps one weight, and one set of scales, per expert)."""
    experts = t.shape[0] if len(t.shape) == 3 else 1
    return experts / ep if t.expert else float(experts)


def fp8_gemm(t: Tensor) -> bool:
    """Weights FP8 training runs through FP8 GEMMs: the transformer blocks' linear layers.
    Embedding and output layer stay in BF16 (Megatron builds the output layer as a plain
    ColumnParallelLinear, not a TransformerEngine module), and so does the MoE router
    (Megatron's TopKRouter keeps its own high-precision GEMM)."""
    return t.matmul and t.name != "moe.router"


def _per_gpu_numel(t: Tensor, tp: int, ep: int, etp: int) -> float:
    """Elements of a tensor one GPU holds: split by tp (a routed expert's by etp), an expert
    tensor's experts by ep."""
    n = float(t.numel)
    if t.split != "none":
        n /= etp if t.expert else tp
    return n / ep if t.expert else n


def _per_gpu(t: Tensor, plan: ParallelPlan) -> float:
    return _per_gpu_numel(t, plan.tp, plan.ep, plan.expert_tp)


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
