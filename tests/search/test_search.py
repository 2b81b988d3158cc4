"""Plan search: the best plan is the fastest that fits, every plan is accounted for."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.step_time import step_time
from gpuplan.search.plans import search
from gpuplan.specs.training import TrainingConfig


def test_ranked_plans_fit_are_sorted_and_match_a_direct_estimate():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    r = search(m, gpu, 16, TrainingConfig(seq_len=4096, global_batch=64), top=5)
    steps = [c.step.step_s for c in r.ranked]
    assert steps == sorted(steps)
    for c in r.ranked:
        assert c.plan.world_size == 16
        assert c.memory.fits
        full = estimate_memory(m, c.config, c.plan, gpu, c.microbatches)
        assert full.per_gpu.total == pytest.approx(c.memory.per_gpu.total)  # the pruned stages were not the peak
        assert step_time(m, c.config, c.plan, gpu, c.microbatches).step_s == pytest.approx(c.step.step_s)
    assert r.feasible + sum(r.rejected.values()) == r.considered


def test_no_plan_that_fits_says_how_many_gpus_would():
    m, gpu = catalog.model("llama-3.1-405b"), catalog.gpu("h100-sxm")
    with pytest.raises(GpuplanError) as e:
        search(m, gpu, 8, TrainingConfig(seq_len=8192, global_batch=64))
    assert e.value.field == "gpus" and "`gpus=" in str(e.value)  # the field; the CLI shows --gpus


def test_no_plan_under_the_zero_and_recompute_asked_for_names_them_before_more_gpus():
    # it said "even with ZeRO-3 and full recompute" when neither had been tried
    from gpuplan.search.constraints import Constraints

    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    base, only_dp = TrainingConfig(seq_len=4096, global_batch=256), Constraints(tp=1, pp=1, cp=1)
    with pytest.raises(GpuplanError) as e:
        search(m, gpu, 8, base, zero_stages=(1,), recompute=("none",), micro_batches=(1,), constraints=only_dp)
    assert "with the ZeRO stages and recompute asked for" in str(e.value) and "even with" not in str(e.value)
    assert e.value.fix.startswith("try `zero=3` with `recompute=full`")
    savers = {"zero_stages": (3,), "recompute": ("full",), "micro_batches": (1,)}
    assert search(m, gpu, 8, base, constraints=only_dp, **savers).ranked


def test_cost_objective_may_use_fewer_gpus():
    m, gpu = catalog.model("llama-3.2-1b"), catalog.gpu("h100-sxm")
    r = search(m, gpu, 16, TrainingConfig(seq_len=2048, global_batch=64), objective="cost", top=3)
    sizes = {c.plan.world_size for c in r.ranked}
    assert sizes and min(sizes) <= 16


def test_fp8_parameter_search_leaves_out_zero3_and_its_plans_get_the_scalar_memory():
    # the search's memory is estimate/memory_terms.py's, so FP8 parameters (no BF16 copy of the
    # GEMM weights) need no twin of their own; ZeRO-3 with them is refused as estimate_memory does
    from gpuplan.specs.validity import Reason

    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    base = TrainingConfig(seq_len=4096, global_batch=64, precision="fp8", fp8_params=True)
    r = search(m, gpu, 16, base, top=20)
    assert r.ranked and all(c.plan.zero < 3 for c in r.ranked)
    assert r.rejected[Reason.FP8_PARAMS_ZERO3] > 0
    assert r.feasible + sum(r.rejected.values()) == r.considered
    for c in r.ranked:
        assert c.config.fp8_params
        full = estimate_memory(m, c.config, c.plan, gpu, c.microbatches)
        assert full.per_gpu.total == pytest.approx(c.memory.per_gpu.total, rel=1e-9)
    bf16_weights = search(m, gpu, 16, base.__class__(seq_len=4096, global_batch=64, precision="fp8"), top=20)
    same = {(c.plan, c.config.micro_batch, c.config.recompute): c for c in bf16_weights.ranked}
    both = [(c, same[k]) for c in r.ranked if (k := (c.plan, c.config.micro_batch, c.config.recompute)) in same]
    assert both and all(a.memory.per_gpu.total < b.memory.per_gpu.total for a, b in both)


def test_search_refuses_activation_offload_by_name():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    base = TrainingConfig(seq_len=4096, global_batch=64, recompute="selective", offload_activation_layers=1)
    with pytest.raises(GpuplanError) as e:
        search(m, gpu, 16, base)
    assert e.value.field == "offload_activation_layers"


def test_ranked_plans_take_megatrons_accounted_split_where_it_is_faster():
    from dataclasses import replace

    from gpuplan.search.constraints import Constraints

    # 16 layers on pp 3: the even split is 5, 5, 6 (the last stage also holds the head); Megatron's
    # accounted split (18 places: the embedding and the loss each one) is 5, 6, 5
    m, gpu = catalog.model("llama-3.2-1b"), catalog.gpu("h100-sxm")
    only = Constraints(pp=3, schedules=("1f1b",))  # a linear pipeline: ZB-V puts both ends on rank 0
    r = search(m, gpu, 3, TrainingConfig(seq_len=4096, global_batch=48), constraints=only, top=3)
    best = r.ranked[0]
    assert (best.plan.first_stage_layers, best.plan.last_stage_layers) == (5, 5)
    assert best.step.step_s == step_time(m, best.config, best.plan, gpu, best.microbatches).step_s
    even = replace(best.plan, first_stage_layers=None, last_stage_layers=None)
    assert best.step.step_s < step_time(m, best.config, even, gpu, best.microbatches).step_s
    assert [c.step.step_s for c in r.ranked] == sorted(c.step.step_s for c in r.ranked)
