"""Compute and memory time of the two ends of the model on one GPU: the embedding lookup and the
head (final norm, LM head GEMM, the vocab-parallel cross-entropy), per micro-batch, timed by the
primitives in ``kernels.py`` like the blocks in ``compute.py``."""

from __future__ import annotations

import functools

from gpuplan.estimate.compute import LayerShape, OpTimes
from gpuplan.estimate.kernels import gemm_time, high_precision, memory_time
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec


@functools.lru_cache(maxsize=4096)  # keyed on every argument (GPUSpec hashes its efficiency)
def head_times(m: ModelSpec, gpu: GPUSpec, shape: LayerShape) -> OpTimes:
    """Final norm, LM head and the vocab-parallel cross-entropy of one micro-batch."""
    s = shape
    T, a = s.tokens, s.act_bytes
    h = m.embed_proj_dim or m.hidden_size
    v = -(-m.vocab_size // s.tp)
    out = OpTimes()
    t_res = T / s.tp if s.sp else T
    out.add(
        "norm", fwd=memory_time(gpu, 2 * a * t_res * m.hidden_size), b=memory_time(gpu, 3 * a * t_res * m.hidden_size)
    )
    # the output layer stays in BF16 under FP8 recipes: Megatron's output_layer is not a TE module
    # and torchtitan's float8 conversion skips "output"
    d = high_precision(s.dtype)
    out.add("gemm", fwd=gemm_time(gpu, d, T, v, h), b=gemm_time(gpu, d, T, h, v), w=gemm_time(gpu, d, v, h, T))
    logits = T * v
    f_bytes: float
    b_bytes: float
    if s.compiled_loss:
        # Inductor's cross-entropy: one kernel each way, two loops over each row forward (its max,
        # then the sum of exponentials) and one backward that reads the logits and writes their
        # gradient in their own dtype, from the row's saved max and log-sum-exp (what it keeps is
        # checked in tests/estimate/test_compile.py; the passes are the fewest those need, not measured)
        f_bytes, f_kernels, b_bytes, b_kernels = 2 * a, 1, 2 * a, 1
    else:
        f_bytes, f_kernels, b_bytes, b_kernels = cross_entropy_bytes(a, s.fused_ce or s.eager)
    out.add("loss", fwd=memory_time(gpu, logits * f_bytes, f_kernels), b=memory_time(gpu, logits * b_bytes, b_kernels))
    return out


def cross_entropy_bytes(a: int, fused: bool) -> tuple[float, int, float, int]:
    """(forward bytes per logit, kernels, backward bytes per logit, kernels) of Megatron-Core's
    vocab-parallel cross-entropy in fp32 over logits of ``a`` bytes
    (megatron/core/tensor_parallel/cross_entropy.py). Unfused, one kernel per op: .float(), max,
    sub_, exp_, sum, div_ forward (a + 9 x 4 bytes); mul_ and the cast back to the logits' dtype
    backward (3 x 4 + a). Fused (fusions/fused_cross_entropy.py, jit): upcast with max, sub with exp
    and sum, div (a + 5 x 4); mul with the cast (2 x 4 + a)."""
    if fused:
        return a + 4 * 5, 4, 4 * 2 + a, 2
    return a + 4 * 9, 6, 4 * 3 + a, 2


@functools.lru_cache(maxsize=4096)  # keyed on every argument (GPUSpec hashes its efficiency)
def embedding_times(m: ModelSpec, gpu: GPUSpec, shape: LayerShape) -> OpTimes:
    """Token (and position) lookup forward; scatter-add into the table's gradient backward."""
    s = shape
    T, a = s.tokens, s.act_bytes
    out = OpTimes()
    rows = 2 if m.position_embeddings else 1
    out.add(
        "embedding",
        fwd=memory_time(gpu, 2 * a * T * m.hidden_size * rows, rows),
        w=memory_time(gpu, 3 * 4 * T * m.hidden_size * rows, rows),
    )
    return out


@functools.lru_cache(maxsize=4096)  # keyed on every argument (GPUSpec hashes its efficiency)
def mtp_times(m: ModelSpec, gpu: GPUSpec, shape: LayerShape) -> OpTimes:
    """One multi-token-prediction depth's own kernels beside its block and its LM head and loss
    (``head_times``, run once more per depth): the shifted tokens' embedding lookup, the norms of
    that embedding and of the previous hidden state, their concatenation and the 2h -> h
    projection (Megatron-Core MultiTokenPredictionLayer: enorm, hnorm, torch.cat, eh_proj, a
    column-parallel linear, so its GEMM runs in the blocks' precision, FP8 included)."""
    s = shape
    T, a, h = s.tokens, s.act_bytes, m.hidden_size
    t_res = T / s.tp if s.sp else T
    lookup = embedding_times(m, gpu, shape)  # cached: read, never added to
    out = OpTimes()
    out.add("embedding", fwd=lookup.fwd, b=lookup.bwd_input, w=lookup.bwd_weight)
    out.add("norm", fwd=memory_time(gpu, 2 * a * t_res * h, 2), b=memory_time(gpu, 3 * a * t_res * h, 2))
    cat = memory_time(gpu, 2 * a * t_res * 2 * h)  # read both halves, write the 2h concatenation
    out.add("residual", fwd=cat, b=cat)
    n = -(-h // s.tp)  # eh_proj's output columns on this rank
    d = s.dtype
    out.add(
        "gemm", fwd=gemm_time(gpu, d, T, n, 2 * h), b=gemm_time(gpu, d, T, 2 * h, n), w=gemm_time(gpu, d, n, 2 * h, T)
    )
    return out
