"""Tensor-parallel all-reduce at decode sizes: which algorithm runs, and what it costs."""

import pytest

from gpuplan import catalog
from gpuplan.estimate.comm import collective_time, place
from gpuplan.serve.allreduce import CUSTOM_MAX_BYTES, custom_s, tp_allreduce
from gpuplan.serve.engines import engine
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.timing import Deployment, step_model
from gpuplan.specs.parallel import ParallelPlan

H100, A100 = catalog.gpu("h100-sxm"), catalog.gpu("a100-sxm-80gb")


def _tp(n, gpu=H100):
    return place(ParallelPlan(tp=n), gpu)["tp"]


def test_the_custom_kernel_runs_only_where_vllm_runs_it():
    assert tp_allreduce(64 * 1024, _tp(8), H100, custom=True)[1] == "custom one-shot"
    assert tp_allreduce(1 << 20, _tp(8), H100, custom=True)[1] == "custom two-shot"
    assert tp_allreduce(1 << 20, _tp(4), H100, custom=True)[1] == "custom two-shot"
    assert tp_allreduce(400 * 1024, _tp(4), H100, custom=True)[1] == "custom one-shot"  # below 512 KiB on 4
    # beyond its 8 MiB buffer, across nodes, or without the engine's kernel: NCCL
    for size, group, custom in (
        (CUSTOM_MAX_BYTES * 2, _tp(8), True),
        (1 << 16, _tp(16), True),
        (1 << 16, _tp(8), False),
    ):
        t, algo = tp_allreduce(size, group, H100, custom)
        assert algo == "nccl" and t == pytest.approx(collective_time("all-reduce", size, group, H100))


def test_custom_all_reduce_reproduces_its_h100_measurements_and_scales_with_nvlink():
    # SGLang PR #2904: vLLM's kernel on H100, 8 GPUs: 11.8 us at 32 KiB, 45.0 us at 1 MiB
    assert custom_s(32768, 8, H100.intra_bytes_per_s)[0] == pytest.approx(11.8e-6)
    assert custom_s(1 << 20, 8, H100.intra_bytes_per_s)[0] == pytest.approx(45.0e-6)
    # the latency floor is the same on A100; the bytes go at its slower NVLink3
    assert custom_s(512, 8, A100.intra_bytes_per_s)[0] == pytest.approx(10.1e-6)
    assert custom_s(1 << 20, 8, A100.intra_bytes_per_s)[0] > 45.0e-6
    # 6 GPUs lie between 4 and 8
    t4, t6, t8 = (custom_s(1 << 20, n, H100.intra_bytes_per_s)[0] for n in (4, 6, 8))
    assert t4 < t6 < t8


def test_at_batch_64_the_measured_kernel_costs_more_than_the_bandwidth_model_says():
    # the alpha-beta model runs a 1 MiB all-reduce at the bus bandwidth; the kernels reach far less
    d = Deployment(catalog.model("llama-3.1-70b"), H100, weight_format("bf16", H100), kv_format("bf16"), tp=8)
    gen = step_model(d).decode_step(64, 2048).parts["communication"]
    eng = step_model(d, engine("sglang")).decode_step(64, 2048).parts["communication"]
    assert eng > 1.5 * gen
