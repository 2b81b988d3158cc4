"""The memory traffic of PyTorch's ring attention around its attention kernels.

PyTorch's context parallel (torch/distributed/tensor/experimental/_context_parallel/_attention.py,
what torchtitan and accelerate run) calls one SDPA kernel per ring step and does the rest in eager
ops with ``_cp_options.convert_to_f32`` (on by default): each step's output is cast to fp32 and
merged into an fp32 accumulator by its log-sum-exp (``_SDPAMerger``: ``out - sigmoid(lse_b - lse) *
(out - out_b)``), and the backward accumulates dQ, dK and dV in fp32, rotating the dK,dV
accumulator through the ring as one concatenated fp32 buffer (``_templated_ring_attention_backward``).
The K,V chunk is concatenated into one send buffer every step but the last, forward and backward.
TransformerEngine's ring (Megatron) merges each step in one jit-fused kernel
(``flash_attn_fwd_out_correction`` in its context_parallel.py, a read of the step's output and an
add into the accumulator): a few bytes per output element a step, not priced here.
"""

from __future__ import annotations

FP32 = 4


def torch_ring_bytes(q: float, kv: float, out: float, a: float, cp: int) -> tuple[float, int, float, int]:
    """(forward bytes, kernels, backward bytes, kernels) one rank's ring attention moves outside its
    SDPA kernels for one layer: ``q``, ``kv`` (K and V together) and ``out`` elements on the rank,
    ``a`` bytes each. The busiest rank: each of its steps merges the whole local output (the last
    rank's are never half-chunk updates). Per op, from the code:

    forward, every step: the output cast to fp32 (``out`` x (a + 4)); every step after the first:
    the merge's two subtractions and the product on fp32 (3 x 12 - 4 bytes per output element; the
    log-sum-exp's ops are 1/head_dim of that and left out); every step but the last: the K,V send
    buffer (``torch.cat``, kv x 2a); at the end the cast back (``out`` x (4 + a)).

    backward: fp32 zeros for dQ, dK, dV (4 x (q + kv)); every step but the last the K,V buffer
    (kv x 2a); dQ += (q x (4 + a + 4)); dK, dV += on the first step (kv x 10 at a = 2), later ones
    add into the first half chunk and concatenate (``_partial_update``: kv / 2 x (4 + a + 4) +
    kv x 8); the dK,dV send buffer (``torch.cat`` of fp32, kv x 8); at the end the casts of dQ and
    dK, dV back (q + kv) x (4 + a)."""
    if cp <= 1:
        return 0.0, 0, 0.0, 0
    add = FP32 + a + FP32  # x += y, x in fp32, y in the kernel's dtype
    fwd = cp * out * (a + FP32) + (cp - 1) * (out * 8 * FP32 + kv * 2 * a) + out * (FP32 + a)
    # the first step's cast and send buffer, nine ops per merge (the cast among them), the later
    # send buffers and the final cast
    fwd_kernels = 2 + 9 * (cp - 1) + (cp - 2) + 1
    bwd = (
        FP32 * (q + kv)
        + (cp - 1) * kv * 2 * a
        + cp * q * add
        + kv * add
        + (cp - 1) * (kv / 2 * add + kv * 2 * FP32)
        + cp * kv * 2 * FP32
        + (q + kv) * (FP32 + a)
    )
    # three zeros; per step the K,V send buffer (not the last), dK and dV adds (and their two
    # concatenations after the first step), the dK,dV send buffer and dQ's add; two casts
    bwd_kernels = 3 + (cp - 1) + cp * 4 + (cp - 1) * 2 + 2
    return fwd, fwd_kernels, bwd, bwd_kernels
