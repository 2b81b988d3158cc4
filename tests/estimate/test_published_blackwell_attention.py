"""Blackwell attention against NVIDIA's published cuDNN-frontend SDPA benchmark
(measurements/published/cudnn-frontend-sdpa): the catalog holds the fit of scripts/fit_blackwell_attention.py,
and ``flash_time`` reproduces the published rates it was fitted on and a kernel it was not."""

import csv
import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.fit_catalog import fit_attention_plateau, fit_attention_ramp
from gpuplan.estimate.kernels import flash_time

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "measurements" / "published" / "cudnn-frontend-sdpa" / "sdpa_training_blackwell.csv"


def _script():
    spec = importlib.util.spec_from_file_location(
        "fit_blackwell_attention", ROOT / "scripts" / "fit_blackwell_attention.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(gpu: str, backend: str) -> list[dict[str, str]]:
    with open(PUBLISHED, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["gpu"] == gpu and r["backend"] == backend]


def _burst(gpu_id: str):
    """The GPU at its boost clock: the benchmark's short runs, not a long training run's."""
    gpu = catalog.gpu(gpu_id)
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, sustained=1.0))


def _rate(gpu, kernel: str, seq: float) -> tuple[float, float]:
    """(forward, backward) FLOP/s flash_time gives at ``seq`` tokens (kernel launch gap removed)."""
    flops = 1e13
    gap = gpu.efficiency.kernel_overhead_s
    fwd, bwd = flash_time(gpu, "bf16", flops, seq, kernel)
    return flops / (fwd - gap), 2.5 * flops / (bwd - gap)


def test_the_catalog_holds_the_fit_of_the_published_cudnn_rates():
    fitted = _script().fit()
    e = catalog.efficiency("b200")
    assert (e.flash_fwd, e.flash_bwd, e.seq_half) == (fitted["flash_fwd"], fitted["flash_bwd"], fitted["seq_half"])
    assert (e.fa2_fwd, e.fa2_bwd) == (fitted["fa2_fwd"], fitted["fa2_bwd"])
    # SDPA's cuDNN backend runs the same cuDNN kernels, for every head dim (one published)
    assert e.attention_fractions("sdpa", 64) == e.attention_fractions("fa3", 64)
    assert e.attention_fractions("sdpa", 128) == e.attention_fractions("fa3", 128)


@pytest.mark.parametrize("backend,kernel", [("cudnn", "fa3"), ("cudnn", "sdpa")])
def test_flash_time_reproduces_cudnn_on_gb200_from_4k_tokens(backend, kernel):
    gpu = _burst("gb200")
    for r in _rows("gb200", backend):
        if int(r["seq"]) < 4096:
            continue
        fwd, bwd = _rate(gpu, kernel, float(r["seq"]))
        # two cuDNN releases and batch sizes differ by up to 19% among themselves at 32K
        assert fwd == pytest.approx(float(r["fwd_tflops"]) * 1e12, rel=0.12)
        assert bwd == pytest.approx(float(r["bwd_tflops"]) * 1e12, rel=0.12)


def test_sdpa_flash_backend_on_b200_is_flashattention_2_at_a_fifth_of_peak():
    gpu = _burst("b200")
    for r in _rows("b200", "pyt_flash_attention"):
        if int(r["seq"]) < 4096:
            continue
        fwd, bwd = _rate(gpu, "fa2", float(r["seq"]))
        assert fwd == pytest.approx(float(r["fwd_tflops"]) * 1e12, rel=0.10)
        assert bwd == pytest.approx(float(r["bwd_tflops"]) * 1e12, rel=0.10)


def test_b200_cudnn_9_13_through_pytorch_sdpa_ran_below_the_fitted_curve():
    # cuDNN 9.13 on B200 through PyTorch's SDPA (not in the fit) ran below the fitted 9.19 / 9.27
    # curve at every length: 7-23% from 8K tokens up, 40% at 4K, 2x at 2K. Most of the short-sequence
    # gap is PyTorch's per-call overhead, some of the rest the older release (the data's README)
    gpu = _burst("b200")
    for r in _rows("b200", "pyt_cudnn"):
        seq = float(r["seq"])
        fwd, bwd = _rate(gpu, "fa3", seq)
        for model, published in ((fwd, float(r["fwd_tflops"])), (bwd, float(r["bwd_tflops"]))):
            assert 1.0 < model / (published * 1e12) < (1.25 if seq >= 8192 else 2.2)


def test_the_ramp_fit_recovers_a_known_curve():
    # independent oracle: rates drawn from a * s / (s + h) with known a and h come back
    seq = [1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0]
    peak = 2.0e15
    fwd = [peak * 0.7 * s / (s + 1200) for s in seq]
    bwd = [peak * 0.55 * s / (s + 1200) for s in seq]
    assert fit_attention_ramp(seq, fwd, bwd, peak) == (0.7, 0.55, 1200)
    assert fit_attention_plateau(seq, fwd, bwd, peak, 1200) == (0.7, 0.55)
    # relative least squares: a curve scaled by 1.1 gives a plateau 1.1x as large
    assert fit_attention_plateau(seq, list(np.multiply(fwd, 1.1)), bwd, peak, 1200)[0] == pytest.approx(0.77)


def test_the_ramp_fit_refuses_too_few_or_nonpositive_rates():
    with pytest.raises(GpuplanError, match="attention"):
        fit_attention_ramp([4096.0, 8192.0], [1e15, 1e15], [1e15, 1e15], 2e15)
    with pytest.raises(GpuplanError, match="attention"):
        fit_attention_ramp([4096.0, 8192.0, 16384.0], [1e15, 0.0, 1e15], [1e15, 1e15, 1e15], 2e15)
