"""Caches cannot go stale: each is bounded, keyed on every input that changes its result, and hands
out results a caller cannot change for the next caller."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import numpy as np
import pytest

import gpuplan
from gpuplan import catalog
from gpuplan.estimate.memory import candidate_stages, estimate_memory, pipeline_candidates
from gpuplan.estimate.params import count_params
from gpuplan.estimate.step_time import step_time
from gpuplan.pipeline.bubble import pipeline_bubble
from gpuplan.pipeline.schedules import build
from gpuplan.pipeline.simulate import compile_schedule
from gpuplan.search.advice import smallest_fitting_plan
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.timing import Deployment, step_model
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

# Caches whose key space is the catalog's own files (one entry per file at most): bounded by the data.
KEYED_ON_CATALOG_FILES = {
    "gpuplan.catalog._read",
    "gpuplan.catalog.gpu",
    "gpuplan.catalog.efficiency",
    "gpuplan.catalog._catalog_model",
    "gpuplan.estimate.validation_rows.load_rows",
    "gpuplan.estimate.validate._bands",  # the validation set and the catalog: one entry per process
}


def _package_caches():
    for info in pkgutil.walk_packages(gpuplan.__path__, "gpuplan."):
        if info.name.startswith(("gpuplan.train", "gpuplan.cli")):
            continue  # the torch runtime and the CLI hold no caches (and import torch / typer)
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if callable(obj) and hasattr(obj, "cache_info") and getattr(obj, "__module__", None) == mod.__name__:
                yield f"{mod.__name__}.{name}", obj


def test_every_cache_in_the_package_is_bounded():
    found = dict(_package_caches())
    assert len(found) >= 10  # the walk finds them
    unbounded = [k for k, f in found.items() if f.cache_parameters()["maxsize"] is None]
    assert sorted(set(unbounded) - KEYED_ON_CATALOG_FILES) == []


@pytest.fixture(scope="module")
def llama():
    return catalog.model("llama-3.1-8b")


@pytest.fixture(scope="module")
def h100():
    return catalog.gpu("h100-sxm")


def _gpu_hash_covers_efficiency(gpu) -> bool:
    other = dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, hbm=gpu.efficiency.hbm / 2))
    return hash(other) != hash(gpu)


def test_a_calibrated_efficiency_changes_the_cached_step_time(llama, h100):
    assert _gpu_hash_covers_efficiency(h100)  # GPUSpec hashes its efficiency (specs/hardware.py)
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    plan = ParallelPlan(dp=8, tp=1)
    before = step_time(llama, cfg, plan, h100, 8).step_s
    e = h100.efficiency
    slower = dataclasses.replace(h100, efficiency=dataclasses.replace(e, gemm={k: v / 2 for k, v in e.gemm.items()}))
    after = step_time(llama, cfg, plan, slower, 8).step_s
    assert after > 1.3 * before
    assert step_time(llama, cfg, plan, h100, 8).step_s == before


@pytest.mark.parametrize(
    "change",
    [{"tp_overlap": True}, {"overlap_grad_reduce": False}, {"recompute": "full"}, {"precision": "fp8"}],
)
def test_a_training_setting_reaches_the_cached_stage_times(llama, h100, change):
    base = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    plan = ParallelPlan(dp=4, tp=2)
    a = step_time(llama, base, plan, h100, 16).step_s
    b = step_time(llama, dataclasses.replace(base, **change), plan, h100, 16).step_s
    assert a != b


def test_expert_imbalance_reaches_the_cached_stage_times(h100):
    m = catalog.model("mixtral-8x7b")
    base = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    plan = ParallelPlan(dp=8, tp=1, ep=8, zero=3)
    a = step_time(m, base, plan, h100, 8).step_s
    b = step_time(m, dataclasses.replace(base, expert_imbalance=1.5), plan, h100, 8).step_s
    assert b > a


def test_sequence_parallelism_reaches_the_cached_activation_sizes(llama, h100):
    cfg = TrainingConfig(seq_len=4096, micro_batch=1)
    on = estimate_memory(llama, cfg, ParallelPlan(tp=4, sp=True), h100).per_gpu.activations
    off = estimate_memory(llama, cfg, ParallelPlan(tp=4, sp=False), h100).per_gpu.activations
    assert off > on


def test_a_model_field_reaches_the_cached_parameter_counts(llama):
    wider = dataclasses.replace(llama, ffn_size=llama.ffn_size + 128)
    assert count_params(wider).total > count_params(llama).total


def test_the_serving_step_model_is_keyed_on_the_formats(llama, h100):
    bf16 = Deployment(llama, h100, weight_format("bf16", h100), kv_format("bf16"))
    fp8 = dataclasses.replace(bf16, weights=weight_format("fp8", h100))
    assert step_model(bf16) is not step_model(fp8)
    assert step_model(fp8).d == fp8


def test_the_bubble_cache_is_keyed_on_the_schedule():
    f, b, w = [1.0] * 4, [1.0] * 4, [1.0] * 4
    one_f = pipeline_bubble("1f1b", 1, 8, f, b, w)
    zb = pipeline_bubble("zb", 1, 8, f, b, w)
    assert zb < one_f


def test_changing_a_returned_step_time_does_not_change_the_next_one(llama, h100):
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    plan = ParallelPlan(dp=2, tp=2, pp=2)
    first = step_time(llama, cfg, plan, h100, 32)
    ops, comm = dict(first.ops), dict(first.stages[0].comm)
    first.ops.clear()
    first.stages[0].comm.clear()
    again = step_time(llama, cfg, plan, h100, 32)
    assert again.ops == ops and again.stages[0].comm == comm


def test_a_compiled_schedule_cannot_be_changed_by_its_caller():
    c = compile_schedule(build("1f1b", 4, 8))
    with pytest.raises(ValueError):
        c.deps[0, 0] = 0
    assert not np.shares_memory(c.rank, compile_schedule(build("zb-h1", 4, 8)).rank)


def test_a_catalog_entry_handed_out_is_a_copy():
    entry = catalog.model_entry("llama-3.1-8b")
    entry["config"]["hidden_size"] = 1
    assert catalog.model_entry("llama-3.1-8b")["config"]["hidden_size"] != 1


def test_the_smallest_fitting_plan_is_keyed_on_the_gpu_memory_and_the_training_config(h100):
    m = catalog.model("llama-3.1-70b")
    base = TrainingConfig(seq_len=8192, global_batch=64)
    plan, _ = smallest_fitting_plan(m, h100, 2, base)
    assert smallest_fitting_plan(m, h100, 2, base)[0] is plan  # a repeat is answered from the cache
    assert plan.world_size == 32
    bigger = dataclasses.replace(h100, memory_bytes=2 * h100.memory_bytes)
    assert smallest_fitting_plan(m, bigger, 2, base)[0].world_size == 8
    assert smallest_fitting_plan(m, h100, 2, dataclasses.replace(base, optimizer="adamw8bit"))[0].world_size == 16


def test_the_pipeline_candidates_are_keyed_on_the_model_layers_and_the_split():
    m = catalog.model("deepseek-v3")  # 61 layers, the first 3 dense
    plan = ParallelPlan(dp=8, pp=8)
    assert candidate_stages(m, plan) == [(0, 0, 7), (1, 7, 7), (3, 21, 8), (7, 53, 8)]
    # all layers MoE: stage 1 holds stage 2's layers, so it is no longer a candidate of its own
    all_moe = dataclasses.replace(m, first_dense_layers=0)
    assert candidate_stages(all_moe, plan) == [(0, 0, 7), (3, 21, 8), (7, 53, 8)]
    uneven = dataclasses.replace(plan, first_stage_layers=5, last_stage_layers=8)
    assert candidate_stages(m, uneven) == [(0, 0, 5), (1, 5, 8), (7, 53, 8)]
    assert pipeline_candidates(m, 8, 1, "1f1b", None, None) is pipeline_candidates(m, 8, 1, "1f1b", None, None)
