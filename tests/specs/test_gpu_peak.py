"""GPUSpec.peak: the GEMM rate of a compute dtype, and what a GPU without that dtype runs instead."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError


def test_fp32_training_on_a_gpu_without_tf32_runs_its_gemms_at_the_fp32_rate():
    # PyTorch's float32 matmul precision falls back to full FP32 where TF32 is not available
    mi355x = catalog.gpu("mi355x")
    assert "tf32" not in mi355x.peak_flops
    assert mi355x.peak("tf32") == mi355x.peak_flops["fp32"]
    h100 = catalog.gpu("h100-sxm")
    assert h100.peak("tf32") == h100.peak_flops["tf32"] > h100.peak_flops["fp32"]


def test_a_dtype_the_gpu_lacks_is_still_refused_naming_precision():
    with pytest.raises(GpuplanError, match="^precision: NVIDIA A100 SXM4 80GB has no fp8 tensor cores"):
        catalog.gpu("a100-sxm-80gb").peak("fp8")
