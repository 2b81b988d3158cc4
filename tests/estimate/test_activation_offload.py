"""Activation offload (Megatron-Core --cpu-offloading-num-layers): the offloaded layers'
activations live in host memory, and each copy is hidden behind the next layer's compute unless
the host link is too slow. Checked against hand arithmetic on the activation sizes and the GPU's
datasheet host link (PCIe Gen5 x16 = 128 GB/s both directions; GB200's NVLink-C2C 900 GB/s)."""

import dataclasses

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.activations import activation_breakdown
from gpuplan.estimate.compute import layer_times
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.step_time import _shape, step_time
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

H100 = catalog.gpu("h100-sxm")


@pytest.fixture(scope="module")
def llama8b():
    return catalog.model("llama-3.1-8b")


def _cfg(n, **kw):
    return TrainingConfig(seq_len=8192, offload_activation_layers=n, **kw)


def test_offloaded_layers_leave_the_gpu_but_one_stays_as_the_copy_in_flight(llama8b):
    plan = ParallelPlan(dp=8)
    layer = activation_breakdown(llama8b, _cfg(0), plan).dense_layer
    kept = estimate_memory(llama8b, _cfg(0), plan, H100).per_gpu
    off = estimate_memory(llama8b, _cfg(12), plan, H100).per_gpu
    assert off.host_activations == pytest.approx(12 * layer)
    assert kept.activations - off.activations == pytest.approx(12 * layer - layer)


def test_interleaved_chunks_each_offload_their_layers(llama8b):
    # pp 2 x vp 2: 8 layers per chunk, two chunks per rank, 2 offloaded per chunk = 4 per rank
    plan = ParallelPlan(dp=2, pp=2, vp=2)
    layer = activation_breakdown(llama8b, _cfg(0), plan).dense_layer
    s = estimate_memory(llama8b, _cfg(2), plan, H100, microbatches=8).stages[0]
    assert s.host_activations == pytest.approx(4 * layer * s.microbatches_in_flight)


def test_a_copy_slower_than_the_layer_is_exposed_on_pcie_and_hidden_on_c2c(llama8b):
    plan = ParallelPlan(dp=8)
    layer = activation_breakdown(llama8b, _cfg(0), plan).dense_layer
    h100 = catalog.gpu("h100-sxm")
    off = step_time(llama8b, _cfg(8), plan, h100, 1)
    copy = layer / (128e9 / 2)  # one direction of PCIe Gen5 x16
    ops = layer_times(llama8b, h100, _shape(llama8b, _cfg(0), plan), False)  # one layer's kernels
    f, b = ops.fwd, ops.bwd_input + ops.bwd_weight
    assert copy > f  # an 8B layer's activations take longer over PCIe than its forward
    assert off.breakdown["activation_offload"] == pytest.approx(8 * (max(0, copy - f) + max(0, copy - b)), rel=0.02)
    gb200 = catalog.gpu("gb200")
    assert (
        step_time(llama8b, _cfg(8), plan, gb200, 1).breakdown["activation_offload"]
        < 0.25 * (off.breakdown["activation_offload"])
    )


def test_offload_cannot_take_every_layer_of_a_chunk_nor_pair_with_full_recompute(llama8b):
    plan = ParallelPlan(dp=8)
    with pytest.raises(GpuplanError, match="offload at most 31"):
        estimate_memory(llama8b, _cfg(32), plan, H100)
    with pytest.raises(GpuplanError, match="recompute"):
        dataclasses.replace(_cfg(4), recompute="full")
