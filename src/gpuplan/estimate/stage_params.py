"""Parameters one GPU of a pipeline stage holds, after tensor and expert parallelism and before
ZeRO: the tensors a stage holds (its layers, the embedding on the first stage, the head on the
last), each split as Megatron-Core splits it (column/row/vocab-parallel by tp, routed experts by
ep and each by etp), and the shape-dependent Adafactor states."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gpuplan.estimate.params import (
    Tensor,
    embedding_tensors,
    head_tensors,
    layer_tensors,
    mtp_tensors,
    vision_tensors,
)
from gpuplan.specs.model import LayerKind, ModelSpec
from gpuplan.specs.parallel import ParallelPlan


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


def _stage_tensors(
    m: ModelSpec, pp: int, stage: int, layer_ids: range, head: int | None = None, mtp: int = 0
) -> list[tuple[Tensor, int]]:
    """(tensor, count) pairs held by one stage, before parallel splitting; ``head``: the stage
    holding the output head (default the last; ZB-V's is the first), with the ``mtp``
    multi-token-prediction modules trained beside it."""
    head = pp - 1 if head is None else head
    out: list[tuple[Tensor, int]] = []
    for kind, n in stage_kinds(m, layer_ids.start, len(layer_ids), mtp if stage == head else 0):
        out += [(t, n) for t in layer_tensors(m, *kind)]
    if stage == 0:
        out += [(t, 1) for t in embedding_tensors(m)]
        # a multimodal model's vision tower feeds the embeddings: the first stage holds it
        out += [(t, 1) for t in vision_tensors(m)]
    if stage == head:
        out += [(t, 1) for t in head_tensors(m)]
        out += [(t, mtp) for t in mtp_tensors(m)] if mtp else []
        # Megatron keeps a copy of the shared embedding on the last stage, and of the input
        # embedding wherever MTP runs (GPTModel builds ``embedding`` when mtp_process: each depth
        # embeds the shifted tokens), its gradient summed with the first stage's
        if head != 0 and (m.tied_embeddings or mtp):
            out += [(t, 1) for t in embedding_tensors(m) if t.name == "embed.tokens"]
    return out


def stage_kinds(m: ModelSpec, first: int, n: int, mtp: int = 0) -> tuple[tuple[LayerKind, int], ...]:
    """(kind, count) of the blocks a stage runs: its layers ``first .. first + n - 1`` and, on the
    stage holding the head, the ``mtp`` multi-token-prediction blocks (ModelSpec.mtp_kind)."""
    kinds = m.layer_kinds(first, n)
    if not mtp:
        return kinds
    counts = dict(kinds)
    counts[m.mtp_kind] = counts.get(m.mtp_kind, 0) + mtp
    return tuple(sorted(counts.items()))


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
    n_linear: int = 0  # linear-attention (Gated DeltaNet) layers among them
    # the largest block's dense and expert parameters apart (each the largest over the block kinds):
    # what ZeRO-3 gathers when only the dense or only the expert weights are sharded
    biggest_dense: float = 0.0
    biggest_expert: float = 0.0


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
    mtp: int = 0,
) -> StageParams:
    """Parameters one GPU of a stage holds: dense tensors split by ``tp``, routed experts by ``ep``
    (experts / ep of them) and each by ``etp`` (None: tp), the expert tensor parallelism of
    Megatron's MoE parallel folding (parallel_state.py, expert_tensor_parallel_size; experts.py,
    TEGroupedMLP builds its linears on the expert TP group). ``mtp``: multi-token-prediction
    depths trained (TrainingConfig.mtp_layers), held with the head; their blocks count in
    ``n_dense`` / ``n_moe`` like the stage's own."""
    head = pp - 1 if head is None else head
    mtp = mtp if stage == head else 0
    layer_ids = range(first, first + n_layers)
    held = _stage_tensors(m, pp, stage, layer_ids, head, mtp)
    etp = tp if etp is None else etp

    def per_gpu(t: Tensor) -> float:
        return _per_gpu_numel(t, tp, ep, etp)

    counted = stage_kinds(m, first, n_layers, mtp)
    kinds = [kind for kind, _ in counted]
    n_moe = sum(n for kind, n in counted if kind.moe)
    return StageParams(
        dense=sum(per_gpu(t) * c for t, c in held if not t.expert),
        expert=sum(per_gpu(t) * c for t, c in held if t.expert),
        adafactor_dense=sum(_adafactor_bytes(t, tp) * c for t, c in held if not t.expert),
        adafactor_expert=sum(_adafactor_bytes(t, etp) / ep * c for t, c in held if t.expert),
        biggest_layer=max((sum(per_gpu(t) for t in layer_tensors(m, *f)) for f in kinds), default=0.0),
        biggest_dense=max((sum(per_gpu(t) for t in layer_tensors(m, *f) if not t.expert) for f in kinds), default=0.0),
        biggest_expert=max((sum(per_gpu(t) for t in layer_tensors(m, *f) if t.expert) for f in kinds), default=0.0),
        n_dense=n_layers + mtp - n_moe,
        n_moe=n_moe,
        gemm=sum(per_gpu(t) * n for kind, n in counted for t in layer_tensors(m, *kind) if fp8_gemm(t)),
        biggest_gemm=max((sum(per_gpu(t) for t in layer_tensors(m, *f) if fp8_gemm(t)) for f in kinds), default=0.0),
        gemm_matrices=sum(_matrices(t, ep) * n for kind, n in counted for t in layer_tensors(m, *kind) if fp8_gemm(t)),
        biggest_gemm_matrices=max(
            (sum(_matrices(t, ep) for t in layer_tensors(m, *f) if fp8_gemm(t)) for f in kinds), default=0.0
        ),
        n_linear=sum(n for kind, n in counted if kind.linear),
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
