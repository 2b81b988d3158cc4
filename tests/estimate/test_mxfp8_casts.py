"""MXFP8 vs per-tensor FP8 quantization work as TransformerEngine v2.9 launches it (issue 14):
oracles are hand counts of bytes and kernels read off the TE source (kernels.py docstrings)."""

import dataclasses

import pytest

from gpuplan.catalog import gpu as load_gpu
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.kernels import fp8_cast_times, memory_time, scale_swizzle_times

# Llama 3 8B fused QKV Linear, one micro-batch of 2 x 4096 tokens: X is 8192 x 4096, W 6144 x 4096
ROWS, N_IN, N_OUT = 8192, 4096, 6144


def test_scale_swizzle_counts_two_kernels_forward_and_four_backward_over_the_scale_bytes():
    b200 = load_gpu("b200")
    fwd, bwd = scale_swizzle_times(b200, "mxfp8", ROWS, N_IN, N_OUT)
    # hand count: each swizzle reads and writes one E8M0 byte per 32 elements of its operand
    fwd_bytes = 2 * (8192 * 4096 + 6144 * 4096) / 32  # X rowwise, W rowwise
    bwd_bytes = 2 * (8192 * 6144 + 6144 * 4096 + 8192 * 4096 + 8192 * 6144) / 32  # dY, W; X, dY
    assert fwd_bytes == 3_670_016 and bwd_bytes == 9_961_472
    assert fwd == pytest.approx(memory_time(b200, fwd_bytes, 2))
    assert bwd == pytest.approx(memory_time(b200, bwd_bytes, 4))


def test_per_tensor_fp8_has_no_scale_swizzle():
    assert scale_swizzle_times(load_gpu("b200"), "fp8", ROWS, N_IN, N_OUT) == (0.0, 0.0)


def test_grouped_swizzle_launches_one_kernel_per_side_whatever_the_expert_count():
    b200 = load_gpu("b200")
    e = efficiency(b200)
    fwd8, _ = scale_swizzle_times(b200, "mxfp8", ROWS, N_IN, N_OUT, experts=8)
    bytes8 = 8 * 2 * (8192 * 4096 + 6144 * 4096) / 32
    assert fwd8 - bytes8 / (b200.hbm_bytes_per_s * e.hbm) == pytest.approx(2 * e.kernel_overhead_s)


def test_current_scaling_fp8_on_blackwell_writes_one_copy_and_mxfp8_two():
    b200 = load_gpu("b200")
    n = ROWS * N_IN
    # FP8-CS, no transpose on Blackwell: amax read (2 B) + cast read (2 B) + one FP8 write (1 B), 3 kernels
    fp8_cs, _ = fp8_cast_times(b200, n, 0, 2, 1.0, amax_pass=True, copies=1)
    assert fp8_cs == pytest.approx(memory_time(b200, 5 * n, 3))
    # MXFP8: one read (2 B) + rowwise and columnwise copies, each 1 B + 1/32 B of scale, 1 kernel
    mx, _ = fp8_cast_times(b200, n, 0, 2, 1 + 1 / 32, copies=2)
    assert mx == pytest.approx(memory_time(b200, (2 + 2 * 33 / 32) * n, 1))


def test_fp8_on_hopper_still_writes_a_transpose_in_the_layer_model():
    from gpuplan.catalog import model as load_model  # noqa: PLC0415
    from gpuplan.estimate.compute import LayerShape, layer_times  # noqa: PLC0415

    # the same B200 hardware under Hopper's TN-only FP8 GEMMs (compute capability 9.0): only the
    # transposed copy differs, 1 B per element of every GEMM's input X and output gradient dY
    m = load_model("llama-3.1-8b")
    b200 = load_gpu("b200")
    tn_only = dataclasses.replace(b200, compute_capability=9.0)
    assert b200.fp8_any_layout and not tn_only.fp8_any_layout
    shape = LayerShape(
        tokens=8192, seq=4096, micro_batch=2, tp=1, cp=1, ep=1, sp=False, dtype="fp8", act_bytes=2, attention="flash"
    )
    extra = (
        layer_times(m, tn_only, shape, False).parts["fp8_cast"] - layer_times(m, b200, shape, False).parts["fp8_cast"]
    )
    # hand count over Llama 3.1 8B's four GEMMs: inputs of QKV, output projection, fused gate/up
    # and down (4096, 4096, 4096, 14336 wide), output gradients (6144, 4096, 28672, 4096 wide)
    elements = 8192 * (4096 + 4096 + 4096 + 14336) + 8192 * (6144 + 4096 + 28672 + 4096)
    assert extra == pytest.approx(elements / (b200.hbm_bytes_per_s * efficiency(b200).hbm))


def test_mxfp8_param_gather_moves_bf16_while_fp8_gathers_one_byte():
    from gpuplan.specs.training import TrainingConfig  # noqa: PLC0415

    # Megatron-Core gathers MXFP8 params through the BF16 view of the grad buffer: 2 bytes each;
    # per-tensor FP8 params are gathered as FP8: 1 byte
    assert TrainingConfig(precision="mxfp8", fp8_params=True).gathered_weight_bytes == 2
    assert TrainingConfig(precision="fp8", fp8_params=True).gathered_weight_bytes == 1
    assert TrainingConfig(precision="mxfp8").gathered_weight_bytes == 2
