"""One verdict per plan: the scalar rules (train, step time, pipeline builders, ParallelPlan) and the
vectorised twin the search runs agree on every plan, and name the same reason."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.step_time import step_time
from gpuplan.estimate.train import TrainRequest, estimate_training
from gpuplan.pipeline.schedules import build
from gpuplan.search.plans import enumerate_layouts, layout_view, search
from gpuplan.search.space import valid_layouts as _layouts
from gpuplan.specs import schedules, validity
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig
from gpuplan.specs.validity import Reason

MODELS = ("llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "llama-3.1-8b")


def _scalar_codes(rules, m, cols: dict, n: int, **fixed) -> np.ndarray:
    out = np.full(n, -1)
    for i in range(n):
        x = validity.View(
            **{k: (v[i].item() if isinstance(v[i], np.generic) else v[i]) for k, v in cols.items()}, **fixed
        )
        rule = validity.first_violation(rules, x, m)
        out[i] = -1 if rule is None else rules.index(rule)
    return out


@pytest.mark.parametrize("model", MODELS)
def test_scalar_and_grid_agree_on_every_combination_of_degrees_including_invalid_ones(model):
    m = catalog.model(model)
    names = schedules.names(training=True)
    combos = list(itertools.product((1, 2, 3, 8, 16), (1, 2, 3), (1, 2, 3, 4, 64, 128), (1, 2, 6), (1, 2, 4, 5),
                                    (1, 2, 3), names, (True, False), (4096, 4095)))  # fmt: skip
    cols = {
        k: np.array([c[i] for c in combos])
        for i, k in enumerate(("tp", "cp", "pp", "dp", "ep", "vp", "schedule", "sp", "seq_len"))
    }
    rules = validity.STRUCTURE + validity.MODEL
    vector = validity.reasons(rules, validity.View(**cols), m)
    scalar = _scalar_codes(rules, m, cols, len(combos))
    assert (vector == scalar).all()
    assert len(set(vector.tolist())) > 8  # the draw exercises most rules, and valid plans
    assert (vector == -1).any()


@pytest.mark.parametrize("schedule", schedules.names(training=True))
def test_scalar_and_grid_agree_on_the_batch_rules(schedule):
    pp, vp, dp, mbs, gb = (a.ravel() for a in np.meshgrid([1, 2, 3, 4, 8], [1, 2], [1, 2, 3], [1, 2, 4], range(1, 50)))
    cols = {"pp": pp, "vp": vp, "dp": dp, "micro_batch": mbs, "global_batch": gb}
    x = validity.View(**cols, schedule=np.full(pp.shape, schedule))
    vector = validity.reasons(validity.BATCH, x, None)
    scalar = _scalar_codes(validity.BATCH, None, cols, len(pp), schedule=schedule)
    assert (vector == scalar).all()


@pytest.mark.parametrize(
    "model,gpus,seq", [("llama-3.1-70b", 64, 8192), ("mixtral-8x7b", 96, 4096), ("deepseek-v3", 512, 4096)]
)
@pytest.mark.parametrize("cp_comm", ["p2p", "a2a"])
def test_every_layout_the_search_enumerates_gets_the_same_verdict_as_one_plan(model, gpus, seq, cp_comm):
    m, gpu = catalog.model(model), catalog.gpu("h100-sxm")
    layouts = enumerate_layouts(m, gpu, gpus, max_vp=4)
    rules = validity.STRUCTURE + validity.MODEL
    vector = validity.reasons(rules, layout_view(layouts, seq, cp_comm), m)
    for lo, code in zip(layouts, vector.tolist()):
        plan = ParallelPlan(
            dp=lo.dp, tp=lo.tp, pp=lo.pp, cp=lo.cp, ep=lo.ep, etp=lo.etp, vp=lo.vp, schedule=lo.schedule
        )
        rule = validity.check(m, plan, seq, cp_comm=cp_comm)
        assert (rule.reason if rule else None) == (rules[code].reason if code >= 0 else None), lo
    # and the search counts exactly those rejections
    rejected: Counter = Counter()
    kept, considered = _layouts(m, gpu, gpus, TrainingConfig(seq_len=seq, cp_comm=cp_comm), 4, 1, rejected)
    assert considered == len(layouts) and len(kept) == int((vector < 0).sum())
    assert sum(rejected.values()) == int((vector >= 0).sum())


def test_one_interleaved_plan_with_too_few_micro_batches_gets_one_verdict_everywhere():
    # 8 GPUs, pp 4, vp 2, global batch 6: dp 2, so 3 micro-batches, not a multiple of 4
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=2, pp=4, vp=2)
    cfg = TrainingConfig(seq_len=4096, global_batch=6)
    with pytest.raises(GpuplanError) as train_err:
        estimate_training(TrainRequest(m, gpu, plan, cfg))
    assert train_err.value.field == "global_batch"
    with pytest.raises(GpuplanError):
        step_time(m, cfg, plan, gpu, 3)
    with pytest.raises(GpuplanError) as pipe_err:
        build("interleaved", 4, 3, 2)
    assert pipe_err.value.field == "microbatches"
    assert validity.check(m, plan, 4096, 1, 6).reason is Reason.MICROBATCH_GROUPS
    r = search(m, gpu, 8, cfg, micro_batches=(1,), zero_stages=(0,), recompute=("none",), max_vp=2)
    assert r.rejected[Reason.MICROBATCH_GROUPS] > 0
    assert all(c.plan.vp == 1 or c.microbatches % c.plan.pp == 0 for c in r.ranked)


def test_dualpipe_needs_an_even_number_of_micro_batches_in_train_and_in_the_simulator():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=1, pp=4, schedule="dualpipe")
    with pytest.raises(GpuplanError) as e:
        estimate_training(TrainRequest(m, gpu, plan, TrainingConfig(seq_len=4096, global_batch=6)))
    assert e.value.field == "global_batch"
    with pytest.raises(GpuplanError):
        build("dualpipe", 4, 6)
    assert validity.check(m, plan, 4096, 1, 8) is None
    build("dualpipe", 4, 8)


def test_a_plan_breaking_a_rule_names_the_field_to_change():
    m = catalog.model("llama-3.1-70b")
    cases = [(ParallelPlan(tp=16), "tp"), (ParallelPlan(pp=81), "pp"), (ParallelPlan(cp=3), "cp"),
             (ParallelPlan(dp=2, ep=2), "ep"), (ParallelPlan(tp=8, pp=2, vp=3), "vp")]  # fmt: skip
    for plan, field in cases:
        with pytest.raises(GpuplanError) as e:
            validity.require_valid(m, plan, 8192)
        assert e.value.field == field


@pytest.mark.parametrize("model", ("mixtral-8x7b", "llama-3.1-8b"))
def test_scalar_and_grid_agree_on_the_folding_rules(model):
    m = catalog.model(model)
    combos = list(itertools.product((1, 2, 4), (1, 2), (1, 2, 3, 4), (1, 2, 4, 8, 16), (1, 2, 4), (True, False),
                                    (True, False)))  # fmt: skip
    cols = {k: np.array([c[i] for c in combos]) for i, k in enumerate(("tp", "cp", "dp", "ep", "etp", "folded", "sp"))}
    cols["etp"] = np.where(cols["folded"], cols["etp"], cols["tp"])  # unfolded: the experts split by tp
    rules = validity.STRUCTURE + validity.MODEL
    vector = validity.reasons(rules, validity.View(**cols, seq_len=4096), m)
    scalar = _scalar_codes(rules, m, cols, len(combos), seq_len=4096)
    assert (vector == scalar).all()
    seen = {rules[c].reason for c in set(vector.tolist()) if c >= 0}
    assert Reason.EP_DATA_PARALLEL in seen and (vector == -1).any()
    assert (Reason.MOE_SEQUENCE if m.is_moe else Reason.ETP_DENSE) in seen


def test_folding_lets_ep_span_the_tensor_parallel_ranks():
    m = catalog.model("qwen3-30b-a3b")
    # TP 2 x DP 4: EP 8 does not divide dp x cp = 4 unfolded, but 8 x ETP 1 divides tp x cp x dp
    with pytest.raises(GpuplanError) as e:
        ParallelPlan(dp=4, tp=2, ep=8)
    assert e.value.field == "ep" and "`etp=1`" in str(e.value)
    validity.require_valid(m, ParallelPlan(dp=4, tp=2, ep=8, etp=1), 4096)
    with pytest.raises(GpuplanError) as e:
        ParallelPlan(dp=4, tp=2, ep=8, etp=2)
    assert e.value.field == "ep"
    assert "ep 8 x etp 2 must divide tp x cp x dp = 8" in str(e.value) and "`etp=1` `ep=8`" in str(e.value)
    # DeepSeek-V3 on 1024 H100s, PP 8: EP 64 x ETP 1 in tp x cp x dp = 128 (EDP 2); EP 256 is too many
    assert ParallelPlan(dp=64, tp=2, pp=8, ep=64, etp=1).expert_zero_group == 2
    with pytest.raises(GpuplanError, match="ep 256 x etp 1 must divide tp x cp x dp = 128"):
        ParallelPlan(dp=64, tp=2, pp=8, ep=256, etp=1)
    # ep must still divide the experts: 128 of them over 256 ranks at most EP 128
    plan = ParallelPlan(dp=128, tp=2, ep=256, etp=1)
    assert validity.check(catalog.model("qwen3-30b-a3b"), plan, 4096).reason is Reason.EP_EXPERTS


def test_moe_with_tp_needs_sequence_parallelism_and_etp_needs_experts_to_split():
    moe, dense = catalog.model("qwen3-30b-a3b"), catalog.model("llama-3.1-8b")
    rule = validity.check(moe, ParallelPlan(dp=4, tp=2, ep=8, etp=1, sp=False), 4096)
    assert rule is not None and rule.reason is Reason.MOE_SEQUENCE and rule.field == "sp"
    # etp unset is etp = tp: Megatron's MoE layer refuses tp > 1 without sequence parallelism too
    rule = validity.check(moe, ParallelPlan(dp=4, tp=2, ep=4, sp=False), 4096)
    assert rule is not None and rule.reason is Reason.MOE_SEQUENCE
    assert validity.check(moe, ParallelPlan(dp=4, tp=2, ep=4), 4096) is None
    with pytest.raises(GpuplanError, match="has no experts to split with etp") as e:
        validity.require_valid(dense, ParallelPlan(dp=4, tp=2, etp=1), 4096)
    assert e.value.field == "etp"
    with pytest.raises(GpuplanError) as e:
        ParallelPlan(dp=4, tp=2, etp=0)
    assert e.value.field == "etp"


def test_serving_replicates_kv_heads_over_tp_where_training_refuses_and_both_name_the_same_field():
    # Llama-3.1-8B: 32 query heads, 8 KV heads. TP 16 splits the query heads; serving engines
    # replicate each KV head on 2 ranks (vLLM QKVParallelLinear), Megatron's training refuses it
    m = catalog.model("llama-3.1-8b")
    validity.require_serving(m, 16)
    with pytest.raises(GpuplanError) as e:
        validity.require_valid(m, ParallelPlan(dp=1, tp=16), 4096)
    assert e.value.field == "tp" and "num_key_value_heads=8" in str(e.value)
    # Qwen2.5-7B: 28 query heads, 4 KV heads; TP 14 splits the query heads, not the KV heads
    qwen = catalog.model("qwen2.5-7b")
    rule = validity.first_violation(validity.SERVING, validity.View(tp=14), qwen)
    assert rule is not None and rule.reason is Reason.TP_KV_REPLICAS
    with pytest.raises(GpuplanError, match="tp=3 does not divide num_attention_heads=32"):
        validity.require_serving(m, 3)
    with pytest.raises(GpuplanError) as e:
        validity.require_serving(m, 1, pp=64)
    assert e.value.field == "pp"


def test_serving_a_model_whose_layers_are_all_linear_is_refused_naming_layer_types():
    # Qwen3-Next with every layer a Gated DeltaNet: no softmax layer's KV block to size the pool by
    # (was a ZeroDivisionError in the pool's state pages)
    import dataclasses

    m = catalog.model("qwen3-next-80b-a3b")
    validity.require_serving(m, 1)
    all_linear = dataclasses.replace(m, linear_layers=tuple(range(m.num_layers)))
    with pytest.raises(GpuplanError) as e:
        validity.require_serving(all_linear, 1)
    assert e.value.field == "layer_types" and "full_attention" in str(e.value)
