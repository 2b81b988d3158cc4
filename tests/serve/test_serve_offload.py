"""Serving offload against hand-computed bytes and times (FlexGen's cost model, section 4.3).

OPT-125m: 12 layers, hidden 768, 12 heads; one layer holds 12h^2 + 13h = 7,087,872 parameters
(q, k, v, out: 4h^2 + 4h; fc1, fc2: 8h^2 + 5h; two LayerNorms: 4h), 14,175,744 bytes in fp16; its
KV cache is 2 x 12 heads x 64 x 2 bytes = 3,072 bytes per token and layer.
"""

import time

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.formats import KV_FORMATS, WEIGHT_FORMATS
from gpuplan.serve.offload import OffloadRequest, Placement, _evaluate, _shape, plan_offload
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec

LAYER_BYTES = 2 * (12 * 768**2 + 13 * 768)
KV_LAYER = 2 * 12 * 64 * 2
FAST = 1e18  # rates so high that their terms vanish, leaving the one under test


def gpu(memory=80e9, flops=FAST, hbm=FAST):
    return GPUSpec(
        id="t",
        name="test",
        memory_bytes=memory,
        hbm_bytes_per_s=hbm,
        peak_flops={"fp16": flops},
        interconnect="pcie",
        interconnect_bytes_per_s=1e9,
        pcie_bytes_per_s=1e9,
        gpus_per_node=1,
        tdp_w=1,
    )


def host(pcie=1e9, cpu_bw=1e9, cpu_flops=FAST, memory=1e12, disk=0.0, disk_bw=0.0):
    return HostSpec(
        name="h",
        cpu_memory_bytes=memory,
        cpu_memory_bytes_per_s=cpu_bw,
        pcie_bytes_per_s=pcie,
        disk_bytes=disk,
        disk_read_bytes_per_s=disk_bw,
        disk_write_bytes_per_s=disk_bw / 2,
        cpu_flops=cpu_flops,
    )


def request(model="opt-125m", **kw):
    g, h = kw.pop("gpu", gpu()), kw.pop("host", host())
    return OffloadRequest(
        model=catalog.model(model), gpu=g, host=h, weights=WEIGHT_FORMATS["fp16"], kv=KV_FORMATS["fp16"], **kw
    )


def test_shape_matches_the_hand_count():
    s = _shape(catalog.model("opt-125m"), WEIGHT_FORMATS["fp16"], KV_FORMATS["fp16"])
    assert s.layer_bytes == LAYER_BYTES
    assert s.kv_layer == KV_LAYER


def test_weights_on_cpu_decode_at_the_pcie_rate():
    req = request(input_len=512, output_len=32)
    s = _shape(req.model, req.weights, req.kv)
    p = Placement(weights_gpu=0.0, weights_cpu=1.0, weights_disk=0.0, kv_gpu=1.0, kv_cpu=0.0)
    plan = _evaluate(req, s, p, batch=1)
    assert plan.step_s == pytest.approx(12 * LAYER_BYTES / 1e9, rel=1e-6)
    assert plan.pcie_s == pytest.approx(12 * LAYER_BYTES / 1e9, rel=1e-6)
    # transfer-bound: a block of 8 loads each layer once, so 8x the tokens per step
    assert _evaluate(req, s, p, batch=8).decode_throughput == pytest.approx(8 * plan.decode_throughput, rel=1e-6)


def test_disk_share_is_read_over_the_disk_link_and_overlaps_pcie():
    req = request(host=host(pcie=FAST, disk=1e12, disk_bw=2e9))
    s = _shape(req.model, req.weights, req.kv)
    p = Placement(weights_gpu=0.0, weights_cpu=0.5, weights_disk=0.5, kv_gpu=1.0, kv_cpu=0.0)
    assert _evaluate(req, s, p, 1).step_s == pytest.approx(12 * 0.5 * LAYER_BYTES / 2e9, rel=1e-6)


def test_cpu_layers_run_at_the_cpu_memory_bandwidth():
    # llama.cpp with --gpu-layers 0: each layer reads its weights and its KV from CPU memory
    req = request(input_len=512, output_len=32, gpu_layers=0)
    plan = plan_offload(req)
    ctx = 512 + 32 / 2
    assert plan.step_s == pytest.approx(12 * (LAYER_BYTES + ctx * KV_LAYER) / 1e9, rel=1e-6)
    assert plan.placement.weights_cpu == 1.0


def test_a_model_that_fits_stays_on_the_gpu():
    plan = plan_offload(request(host=host(pcie=25e9, cpu_bw=60e9, cpu_flops=1e12), gpu=gpu(80e9, 1e14, 2e12)))
    assert plan.placement.weights_gpu == 1.0
    assert plan.pcie_s == 0.0


def test_search_of_a_70b_placement_takes_under_a_second():
    g = catalog.gpu("rtx-4090")
    h = host(pcie=25e9, cpu_bw=65e9, cpu_flops=1e12, memory=256e9, disk=2e12, disk_bw=7e9)
    start = time.perf_counter()
    plan = plan_offload(
        OffloadRequest(
            model=catalog.model("llama-3.1-70b"), gpu=g, host=h, weights=WEIGHT_FORMATS["bf16"], kv=KV_FORMATS["bf16"]
        )
    )
    assert time.perf_counter() - start < 1.0
    assert plan.placement.weights_gpu < 1
    assert plan.gpu_bytes <= g.memory_bytes * 0.9 and plan.cpu_bytes <= 256e9 and plan.disk_bytes <= 2e12


def test_too_little_cpu_memory_and_disk_is_one_line_naming_cpu_memory():
    g = catalog.gpu("rtx-4090")
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-405b"),
                gpu=g,
                host=host(memory=64e9),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
            )
        )
    assert e.value.field == "cpu_memory" and "\n" not in str(e.value)


def test_a_disk_too_small_for_what_the_cpu_cannot_hold_names_disk():
    g = catalog.gpu("rtx-4090")
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-405b"),
                gpu=g,
                host=host(memory=64e9, disk=100e9, disk_bw=7e9),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
            )
        )
    assert e.value.field == "disk" and "--disk" in str(e.value)


def test_offload_none_for_a_model_larger_than_the_gpu_names_offload():
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-70b"),
                gpu=catalog.gpu("rtx-4090"),
                host=host(),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
                offload="none",
            )
        )
    assert e.value.field == "offload"


def test_too_many_gpu_layers_names_the_flag_and_a_count_that_fits():
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-70b"),
                gpu=catalog.gpu("rtx-4090"),
                host=host(),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
                gpu_layers=60,
            )
        )
    assert e.value.field == "gpu_layers" and "--gpu-layers" in str(e.value)
    with pytest.raises(GpuplanError) as e:
        request(gpu_layers=13)
    assert e.value.field == "gpu_layers"
