"""Offload as one more dimension of the plan search (search/offload.py), against hand counts.

Llama-3.1-8B has 8,030,261,248 parameters (its config: 32 layers, hidden 4096, FFN 14336,
8 KV heads, vocabulary 128,256, untied head). The catalog host of an RTX 4090 is the PCIe Gen4
workstation: 128 GB of CPU memory at 65 GB/s, PCIe at 25 GB/s, 1 TFLOP/s of CPU.
"""

import pytest

from gpuplan import catalog
from gpuplan.catalog.hosts import host
from gpuplan.errors import DoesNotFit, GpuplanError
from gpuplan.search.plans import search
from gpuplan.specs.host import HostSpec
from gpuplan.specs.training import TrainingConfig

N_8B = 8_030_261_248
BASE = TrainingConfig(seq_len=2048, global_batch=16)


def _8b_on_a_4090(**kw):
    return search(catalog.model("llama-3.1-8b"), catalog.gpu("rtx-4090"), 1, BASE, **kw)


def test_a_model_that_fits_only_with_offload_is_refused_without_it_naming_offload():
    # 16 bytes per parameter of mixed-precision Adam: 128 GB on a 24 GB card, however it is split
    with pytest.raises(DoesNotFit) as e:
        _8b_on_a_4090()
    assert "`offload=auto`" in e.value.fix  # the field; the CLI shows --offload auto


def test_with_offload_the_plan_appears_with_its_offload_and_host_memory():
    r = _8b_on_a_4090(offload="auto")
    best = r.ranked[0]
    assert best.offload is not None and best.plan.pp == 1
    assert best.gpu_bytes <= catalog.gpu("rtx-4090").memory_bytes
    # ZeRO-Offload keeps 14 bytes per parameter on the host (fp16 gradients + fp32 params, momentum,
    # variance); ZeRO-Infinity adds the 2-byte fp16 parameters; one rank holds the whole model.
    # The workstation holds 0.9 x 128 GB = 115.2 GB: 14 N = 112.4 GB fits, 16 N = 128.5 GB does not
    assert best.offload.request.offload == "optimizer"
    assert best.offload.cpu_bytes == pytest.approx(14 * N_8B)
    assert any("CPU memory per node too small for offload optimizer+params" in k for k in r.rejected)
    assert r.host == host("pcie4-workstation").name


def test_an_offload_plan_pays_the_cpu_adam_step_and_the_parameter_upload_instead_of_the_gpu_optimizer():
    # ZeRO-Offload without the delayed update: the CPU Adam step moves 28 bytes per parameter
    # through 65 GB/s of CPU memory, then 2 bytes per parameter go up over 25 GB/s of PCIe; the
    # gradients going down (2 N / 25 GB/s = 0.64 s) are hidden by the backward of 16 x 2,048 tokens
    r = _8b_on_a_4090(offload="optimizer")
    step = r.ranked[0].step
    assert step.breakdown["optimizer"] == 0.0
    assert step.breakdown["offload"] == pytest.approx(28 * N_8B / 65e9 + 2 * N_8B / 25e9, rel=1e-6)
    assert step.step_s == pytest.approx(sum(step.breakdown.values()), rel=1e-9)


def test_offload_none_is_the_default_and_leaves_the_search_as_it_was():
    m, g = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    base = TrainingConfig(seq_len=4096, global_batch=64)
    plain, none = search(m, g, 8, base), search(m, g, 8, base, offload="none")
    assert [c.plan for c in plain.ranked] == [c.plan for c in none.ranked]
    assert plain.considered == none.considered and none.host is None
    assert all(c.offload is None for c in none.ranked)


def test_plans_that_fit_without_offload_rank_above_their_offload_variants():
    # 8B on 8 H100s fits without offload; offloading only adds the CPU step and PCIe traffic
    m, g = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    r = search(m, g, 8, TrainingConfig(seq_len=4096, global_batch=64), offload="auto", top=3)
    assert r.ranked[0].offload is None
    assert r.considered > search(m, g, 8, TrainingConfig(seq_len=4096, global_batch=64)).considered


def test_a_host_too_small_for_the_offloaded_states_leaves_no_plan():
    tiny = HostSpec(
        name="tiny",
        cpu_memory_bytes=32e9,
        cpu_memory_bytes_per_s=50e9,
        pcie_bytes_per_s=25e9,
        cpu_flops=1e12,
    )
    with pytest.raises(DoesNotFit):
        _8b_on_a_4090(offload="auto", host=tiny)


def test_an_unknown_offload_choice_is_one_line_naming_offload():
    with pytest.raises(GpuplanError) as e:
        _8b_on_a_4090(offload="disk")
    assert e.value.field == "offload" and "\n" not in str(e.value)


def test_a_ranked_offload_plan_says_it_fits_in_the_json_and_keeps_the_verdict_without_offload():
    from gpuplan.search.report import to_dict

    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("rtx-4090")
    r = _8b_on_a_4090(offload="auto")
    memory = to_dict(r, m, gpu)["plans"][0]["memory"]
    assert memory["fits"] and memory["headroom"] == gpu.memory_bytes - r.ranked[0].offload.gpu_total >= 0
    assert memory["without_offload"]["fits"] is False and memory["without_offload"]["headroom"] < 0


def test_train_and_search_time_an_offload_plan_on_one_clock_whatever_the_tensor_parallelism():
    # the offload model's GPU side is the plan's step as every plan is timed, less its GPU optimizer
    # step; it once divided the GPU's rate by tp (8B on 8 H100s: 3.0 s at tp 1, 158 s at tp 8)
    from gpuplan.estimate.offload import OffloadTrainRequest, estimate_offload_training
    from gpuplan.estimate.step_time import step_time
    from gpuplan.specs.parallel import ParallelPlan

    m, gpu, h = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm"), host("pcie5-server")
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    for tp in (1, 2, 4, 8):
        plan = ParallelPlan(tp=tp, dp=8 // tp, zero=2)
        micro = 64 // (8 // tp)
        est = estimate_offload_training(OffloadTrainRequest(m, gpu, h, plan, cfg, microbatches=micro))
        st = step_time(m, cfg, plan, gpu, micro)
        assert est.step_s == pytest.approx(st.step_s - st.breakdown["optimizer"] + est.exposed_s)
        assert est.step_s < 1.5 * st.step_s
    # and search ranks an offload plan at the step train gives the same plan
    c = _8b_on_a_4090(offload="auto").ranked[0]
    req = OffloadTrainRequest(
        m, catalog.gpu("rtx-4090"), host("pcie4-workstation"), c.plan, c.config, c.offload.request.offload,
        microbatches=c.offload.request.microbatches,
    )  # fmt: skip
    assert c.step.step_s == pytest.approx(estimate_offload_training(req).step_s)


def test_an_offload_plans_json_reads_as_the_offloaded_plan_runs():
    from gpuplan.search.report import to_dict

    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("rtx-4090")
    r = _8b_on_a_4090(offload="auto")
    doc = to_dict(r, m, gpu)["plans"][0]
    c = r.ranked[0]
    assert doc["fits"] and doc["memory"]["per_gpu"]["total"] == c.offload.gpu_total <= gpu.memory_bytes
    assert doc["step_s"] == doc["time"]["step_s"] == doc["performance"]["step_s"] == c.step.step_s
    assert sum(doc["performance"]["breakdown_s"].values()) == pytest.approx(doc["step_s"])
    assert doc["memory"]["without_offload"]["per_gpu"]["total"] > gpu.memory_bytes
