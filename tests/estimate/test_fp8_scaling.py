"""FP8 current scaling: an amax pass over each quantized tensor before its cast (TE
Float8CurrentScalingQuantizer::quantize_impl), counted by hand for Llama 3.1 8B."""

import dataclasses

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.compute import layer_times
from gpuplan.estimate.step_time import _shape, step_time
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


def test_current_scaling_reads_each_gemm_input_and_output_gradient_once_more_than_delayed():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    plan = ParallelPlan()
    delayed = TrainingConfig(seq_len=4096, precision="fp8")
    current = dataclasses.replace(delayed, fp8_scaling="current")
    d = layer_times(m, gpu, _shape(m, delayed, plan), False)
    c = layer_times(m, gpu, _shape(m, current, plan), False)
    e = gpu.efficiency
    T = 4096
    # the four block GEMMs (fused QKV, output projection, fused gate/up, down): their inputs
    # 4096, 4096, 4096 and 14336 wide forward, their output gradients 6144, 4096, 28672 and 4096
    # wide backward, each read once more in BF16, plus the amax and scale kernels of each
    fwd_extra = T * (4096 + 4096 + 4096 + 14336) * 2 / (gpu.hbm_bytes_per_s * e.hbm) + 4 * 2 * e.kernel_overhead_s
    bwd_extra = T * (6144 + 4096 + 28672 + 4096) * 2 / (gpu.hbm_bytes_per_s * e.hbm) + 4 * 2 * e.kernel_overhead_s
    assert c.parts["fp8_cast"] - d.parts["fp8_cast"] == pytest.approx(fwd_extra + bwd_extra)
    assert c.fwd - d.fwd == pytest.approx(fwd_extra)


def test_current_scaling_leaves_block_scaled_and_16_bit_runs_alone():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("b200")
    for precision in ("bf16", "mxfp8"):
        base = TrainingConfig(seq_len=4096, precision=precision)
        a = step_time(m, base, ParallelPlan(dp=8), gpu, 1)
        b = step_time(m, dataclasses.replace(base, fp8_scaling="current"), ParallelPlan(dp=8), gpu, 1)
        assert a.step_s == b.step_s, precision


def test_an_unknown_fp8_scaling_is_refused_naming_the_field():
    with pytest.raises(GpuplanError) as e:
        TrainingConfig(precision="fp8", fp8_scaling="blockwise")
    assert e.value.field == "fp8_scaling"
