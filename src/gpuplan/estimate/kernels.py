"""Kernel times on one GPU from shapes and rates: the primitives ``compute.py`` builds a layer from.

* GEMMs: a roofline (Williams, Waterman & Patterson 2009) with the compute roof lowered to the
  GPU's measured maximum achievable matmul rate (MAMF) and split into thread-block tiles over
  the SMs: a GEMM costs ``waves`` x one tile's time, so partial tiles (tile quantization) and a
  part-filled last wave (wave quantization) are paid for in full (NVIDIA Deep Learning
  Performance guide, "Matrix Multiplication Background"). cuBLAS picks the fastest of a few tile
  shapes; so does this model.
* Attention: FlashAttention kernels run at a measured fraction of peak that falls for short
  sequences (Dao 2023, FlashAttention-2, Figs. 4-6; Shah et al. 2024, FlashAttention-3); the
  backward does 2.5x the forward FLOPs (it recomputes QK^T).
* Memory-bound kernels: bytes read and written over the achievable HBM bandwidth.
* FP8 casts: TransformerEngine's cast-transpose of each GEMM operand.
Every kernel also pays a fixed launch/tail gap (``kernel_overhead_s``).
"""

from __future__ import annotations

import math

from gpuplan.estimate.comm import efficiency
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.training import BLOCK_SCALED, LOW_PRECISION


def dtype_bytes(dtype: str) -> float:
    """Bytes per element; MXFP8 and NVFP4 with their block scales (specs/training.py BLOCK_SCALED)."""
    return {"fp8": 1.0, "int8": 1.0, "bf16": 2.0, "fp16": 2.0, "tf32": 4.0, "fp32": 4.0}.get(dtype) or (
        BLOCK_SCALED[dtype][0] + BLOCK_SCALED[dtype][1]
    )


def row_tiles(m: float, tm: int, ragged: bool) -> float:
    """Tiles along M of one GEMM of ``m`` rows. ``ragged``: ``m`` is the mean of row counts that
    differ GEMM to GEMM (a dropless MoE layer's tokens per expert), each GEMM's last tile part
    filled wherever its count falls, so a GEMM pays m / tm + 1/2 tiles on average (the expectation
    of ceil(c / tm) when c's place within a tile is equally likely anywhere), at least one once it
    has a row; below one row on average, at most ``m`` (the share of GEMMs with a row). Measured on one H100 (measurements/h100-sxm-2026-11-27/kernels/moe.json): grouped
    GEMMs over routed counts take 13% longer than ceil(mean / tm) tiles predict, 2% less than
    this expectation (tests/estimate/test_measured_moe_h100.py)."""
    if not ragged:
        return math.ceil(m / tm)
    return m if m < 1 else max(1.0, m / tm + 0.5)


def gemm_compute_time(
    gpu: GPUSpec, dtype: str, m: float, n: float, k: float, batch: float = 1, ragged: bool = False
) -> float:
    """Tensor-core seconds for ``batch`` GEMMs of (m x k) @ (k x n): tiles in waves over the SMs;
    ``ragged``: ``m`` is the mean row count of GEMMs whose counts differ (``row_tiles``). A GPU
    whose GEMMs are persistent (``persistent_tiles``: stream-K, Osama et al. 2023, which splits
    the tiles' MAC iterations evenly over the SMs) runs fractional waves, fewer than one too: no SM
    idles while another finishes its tile."""
    e = efficiency(gpu)
    rate = gpu.peak(dtype) * e.gemm_fraction(dtype) * e.sustained
    sms = gpu.sm_count or 100
    compute = math.inf
    for tm, tn, rel in e.tiles:
        tiles = row_tiles(m, tm, ragged) * math.ceil(n / tn) * batch
        waves = tiles / sms if e.persistent_tiles else math.ceil(tiles / sms)
        compute = min(compute, waves * sms * 2.0 * tm * tn * (k + e.tile_k_fill) / (rate * rel))
    return compute


def gemm_time(gpu: GPUSpec, dtype: str, m: float, n: float, k: float, batch: float = 1, ragged: bool = False) -> float:
    """Seconds for ``batch`` GEMMs of (m x k) @ (k x n) on one GPU (``ragged``: see ``row_tiles``)."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    e = efficiency(gpu)
    io = dtype_bytes(dtype) * (m * k + k * n) + 2.0 * m * n  # inputs in dtype, output in 16 bits
    memory = batch * io / (gpu.hbm_bytes_per_s * e.hbm)
    return max(gemm_compute_time(gpu, dtype, m, n, k, batch, ragged), memory) + e.kernel_overhead_s


def memory_time(gpu: GPUSpec, nbytes: float, kernels: int = 1) -> float:
    """Seconds for memory-bound kernels moving ``nbytes`` in total."""
    if nbytes <= 0:
        return 0.0
    e = efficiency(gpu)
    return nbytes / (gpu.hbm_bytes_per_s * e.hbm) + kernels * e.kernel_overhead_s


def eager_memory_time(gpu: GPUSpec, nbytes: float, kernels: int = 1) -> float:
    """Seconds for PyTorch's eager elementwise kernels moving ``nbytes``: at the measured eager
    rate (``Efficiency.eager_hbm``) where the GPU has one, else as streaming kernels."""
    if nbytes <= 0:
        return 0.0
    e = efficiency(gpu)
    return nbytes / (gpu.hbm_bytes_per_s * (e.eager_hbm or e.hbm)) + kernels * e.kernel_overhead_s


def flash_time(
    gpu: GPUSpec, dtype: str, flops_fwd: float, seq: float, kernel: str = "fa3", head_dim: int = 128
) -> tuple[float, float]:
    """(forward, backward) seconds of a FlashAttention kernel doing ``flops_fwd`` forward FLOPs;
    ``kernel`` fa3 (the GPU's best fused kernel), fa2 (FlashAttention-2) or sdpa (what PyTorch's
    SDPA picks on this GPU: cuDNN by head dim where measured, else FlashAttention-2)."""
    if flops_fwd <= 0:
        return 0.0, 0.0
    e = efficiency(gpu)
    ramp = seq / (seq + e.seq_half)
    peak = gpu.peak(dtype) * e.sustained
    f_fwd, f_bwd = e.attention_fractions(kernel, head_dim)
    fwd = flops_fwd / (peak * f_fwd * ramp) + e.kernel_overhead_s
    bwd = 2.5 * flops_fwd / (peak * f_bwd * ramp) + e.kernel_overhead_s
    return fwd, bwd


def high_precision(dtype: str) -> str:
    """The dtype of what an FP8 (or MXFP8/NVFP4) recipe leaves in high precision (attention core,
    output layer, router)."""
    return "bf16" if dtype in LOW_PRECISION else dtype


def fp8_cast_times(
    gpu: GPUSpec,
    inputs: float,
    grads: float,
    act_bytes: float,
    quant_bytes: float = 1.0,
    amax_pass: bool = False,
    copies: int = 2,
) -> tuple[float, float]:
    """(forward, backward) seconds of quantizing one FP8 GEMM's operands: the forward casts its
    input X (``inputs`` elements) and the backward the output gradient dY (``grads``), each read in
    BF16 and written as FP8 plus its FP8 transpose, which the other backward GEMM consumes
    (TransformerEngine's cast_transpose kernels; Micikevicius et al. 2022, "FP8 Formats for Deep
    Learning", section 4: per-tensor scaled casts around every GEMM). Weights are cast once per
    step and cached over the micro-batches (TE ``is_first_microbatch``), so are not counted here;
    the per-step amax/scale update is one small kernel per tensor, inside the launch overhead.
    MXFP8/NVFP4 casts write ``quant_bytes`` per element per copy, their block scales included.

    ``amax_pass``: per-tensor current scaling (TE Float8CurrentScalingQuantizer::quantize_impl,
    transformer_engine/pytorch/csrc/quantizer.cpp) first reduces the tensor's amax
    (nvte_compute_amax_with_config: one more read of it), turns it into a scale
    (nvte_compute_scale_from_amax), then casts: two more kernels. Delayed scaling knows its scale
    from the amax history, and the block-scaled formats find each block's amax inside the cast.

    ``copies``: the quantized copies each cast writes (TransformerEngine v2.9). A per-tensor FP8
    tensor on a GPU whose FP8 GEMMs take any layout (GPUSpec.fp8_any_layout: Blackwell) is written
    once, with no transpose: Float8CurrentScalingQuantizer::create_tensor allocates the transpose
    only when ``columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``
    (transformer_engine/pytorch/csrc/quantizer.cpp:331-340), so ``copies=1``. An MXFP8 (or NVFP4)
    tensor always needs both: its rowwise copy is scaled along rows for fprop/dgrad, its columnwise
    copy along columns for wgrad, and MXFP8Quantizer::quantize (quantizer.cpp:1091-1101) writes both
    from one read in one nvte_quantize_v2 kernel, so ``copies=2``, one kernel."""
    per = act_bytes + copies * quant_bytes  # read the high-precision tensor; write each quantized copy
    kernels = 1
    if amax_pass:
        per += act_bytes
        kernels = 3
    return memory_time(gpu, inputs * per, kernels), memory_time(gpu, grads * per, kernels)


def scale_swizzle_times(
    gpu: GPUSpec, dtype: str, rows: float, n_in: float, n_out: float, experts: float = 1
) -> tuple[float, float]:
    """(forward, backward) seconds of rearranging a block-scaled Linear's scale factors into the
    tiled layout cuBLASLt's block-scaled GEMM reads, a step per-tensor FP8 does not have.
    TransformerEngine v2.9 calls swizzle_scaling_factors on both operands of every GEMM
    (transformer_engine/pytorch/csrc/extensions/gemm.cpp:238-240; pytorch/csrc/util.cpp:12-85: it
    returns at once for per-tensor scaling, else allocates a swizzled copy and launches
    nvte_swizzle_scaling_factors, common/swizzle/swizzle.cu:334), the cached weight included: one
    kernel per operand, each reading and writing that operand's scales (``BLOCK_SCALED`` scale bytes
    per element). Forward (fprop, Y = X W^T): X's and W's rowwise scales, 2 kernels. Backward: dgrad
    (dY rowwise, W columnwise) and wgrad (X and dY columnwise), 4 kernels. The grouped GEMM of
    ``experts`` local experts swizzles each side in one multi-tensor kernel (gemm.cpp:487-491,
    multi_tensor_swizzle_scaling_factors), so the kernel count does not grow with ``experts``.
    Zero for per-tensor dtypes."""
    if dtype not in BLOCK_SCALED or rows <= 0:
        return 0.0, 0.0
    s = BLOCK_SCALED[dtype][1]  # scale bytes per element
    x, w, dy = rows * n_in * experts, n_out * n_in * experts, rows * n_out * experts
    fwd = memory_time(gpu, 2.0 * s * (x + w), 2)
    bwd = memory_time(gpu, 2.0 * s * (dy + w + x + dy), 4)
    return fwd, bwd
