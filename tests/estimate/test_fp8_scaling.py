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


def test_fp8_params_hold_the_block_gemm_weights_only_as_their_fp8_copies():
    # Megatron --fp8-param-gather: no BF16 copy of the block GEMM weights (2 bytes each, by hand
    # from the layer tensors), the FP8 copies and everything else unchanged; the DP parameter
    # all-gather moves 1 byte per parameter instead of 2
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.estimate.params import layer_tensors

    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=8, zero=1)
    base = TrainingConfig(seq_len=4096, precision="fp8", global_batch=8)
    fp8p = dataclasses.replace(base, fp8_params=True)
    a, b = estimate_memory(m, base, plan, gpu, 1), estimate_memory(m, fp8p, plan, gpu, 1)
    gemm = m.num_layers * sum(t.numel for t in layer_tensors(m, False) if t.matmul)
    assert a.stages[0].weights - b.stages[0].weights == pytest.approx(2 * gemm)
    assert a.stages[0].other["fp8_weight_copies"] == b.stages[0].other["fp8_weight_copies"]
    ta, tb = step_time(m, base, plan, gpu, 1), step_time(m, fp8p, plan, gpu, 1)
    assert tb.comm["dp"].collectives["all-gather"] == pytest.approx(ta.comm["dp"].collectives["all-gather"] / 2)


def test_fp8_params_need_a_transformer_engine_low_precision_recipe_and_no_zero3():
    with pytest.raises(GpuplanError) as e:
        TrainingConfig(precision="bf16", fp8_params=True)
    assert e.value.field == "fp8_params"
    from gpuplan.estimate.memory import estimate_memory

    cfg = TrainingConfig(precision="fp8", fp8_params=True, global_batch=8)
    with pytest.raises(GpuplanError, match="not modelled"):
        estimate_memory(catalog.model("llama-3.1-8b"), cfg, ParallelPlan(dp=8, zero=3), catalog.gpu("h100-sxm"), 1)
