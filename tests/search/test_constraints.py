"""Search constraints: fixed and bounded degrees, schedules, ZeRO stages and recompute modes.

Oracle: the unconstrained search ranks every plan that fits (a top larger than the feasible set);
the constrained search must return exactly those of its plans that meet the constraints, and
count every other plan under a reason."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.search.plans import Constraints, parse_choices, search
from gpuplan.specs.training import TrainingConfig

M, GPU = catalog.model("llama-3.2-1b"), catalog.gpu("h100-sxm")
BASE = TrainingConfig(seq_len=2048, global_batch=32)


@pytest.fixture(scope="module")
def everything():
    r = search(M, GPU, 16, BASE, top=100_000)
    assert len(r.ranked) == r.feasible  # every plan that fits is ranked
    return r


def _key(c):
    p = c.plan
    return (p.tp, p.pp, p.cp, p.dp, p.ep, p.vp, p.schedule, p.zero, c.config.micro_batch, c.config.recompute)


def _kind(p):
    return "interleaved" if p.schedule == "1f1b" and p.vp > 1 else p.schedule


@pytest.mark.parametrize(
    "kw, keep",
    [
        (dict(constraints=Constraints(tp=8)), lambda c: c.plan.tp == 8),
        (dict(constraints=Constraints(max_tp=2, max_pp=2)), lambda c: c.plan.tp <= 2 and c.plan.pp <= 2),
        (
            dict(constraints=Constraints(pp=4, schedules=("interleaved", "zb"))),
            lambda c: c.plan.pp == 4 and _kind(c.plan) in ("interleaved", "zb"),
        ),
        (dict(constraints=Constraints(dp=4, cp=1)), lambda c: c.plan.dp == 4 and c.plan.cp == 1),
        (dict(zero_stages=(1, 3)), lambda c: c.plan.zero in (1, 3)),
    ],
)
def test_constrained_search_returns_the_unconstrained_plans_that_meet_the_constraints(everything, kw, keep):
    r = search(M, GPU, 16, BASE, top=100_000, **kw)
    got = {_key(c): c.step.step_s for c in r.ranked}
    want = {_key(c): c.step.step_s for c in everything.ranked if keep(c)}
    assert got == pytest.approx(want) and got
    assert r.considered == everything.considered  # the same space, narrowed, not shrunk
    assert r.feasible + sum(r.rejected.values()) == r.considered


def test_recompute_restriction_is_counted_and_may_cost_fits(everything):
    r = search(M, GPU, 16, BASE, top=100_000, recompute=("none",))
    assert all(c.config.recompute == "none" for c in r.ranked)
    assert r.rejected["ZeRO stage or recompute not asked for (`zero`, `recompute`)"] > 0
    assert r.feasible + sum(r.rejected.values()) == r.considered == everything.considered


def test_rejections_name_the_flag():
    r = search(M, GPU, 16, BASE, constraints=Constraints(tp=8, max_pp=1))
    assert r.rejected["tp is not 8 (`tp`)"] > 0 and r.rejected["pp above 1 (`max_pp`)"] > 0


def test_unmeetable_constraints_say_so():
    with pytest.raises(GpuplanError, match="meets the constraints") as err:
        search(M, GPU, 16, BASE, constraints=Constraints(tp=16))  # tp stays within the 8-GPU NVLink domain
    assert "`tp`" in str(err.value) and "\n" not in str(err.value)  # the field; the CLI shows --tp


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(tp=4, max_tp=2), "tp"),
        (dict(max_pp=0), "max_pp"),
        (dict(schedules=("gpipe",)), "schedule"),
    ],
)
def test_bad_constraints_are_one_line(kw, field):
    with pytest.raises(GpuplanError) as err:
        Constraints(**kw)
    assert err.value.field == field


def test_bad_lists():
    assert parse_choices("1, 3", "zero", int) == (1, 3)
    with pytest.raises(GpuplanError, match="zero"):
        parse_choices("one", "zero", int)
    with pytest.raises(GpuplanError, match="zero"):
        search(M, GPU, 16, BASE, zero_stages=(4,))


def test_cli_search_with_constraints(capsys):
    import json

    from gpuplan.cli.app import main

    try:
        main(
            [
                "search",
                "llama-3.2-1b",
                "--gpus",
                "16",
                "--global-batch",
                "32",
                "--seq-len",
                "2048",
                "--tp",
                "2",
                "--max-pp",
                "2",
                "--zero",
                "1",
                "--recompute",
                "none,full",
                "--schedule",
                "1f1b",
                "--json",
            ]
        )
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["plans"] and all(p["plan"]["tp"] == 2 and p["plan"]["pp"] <= 2 for p in doc["plans"])
    assert "tp is not 2 (`tp`)" in doc["rejected"]


def test_moe_search_tries_etp_1_beside_tp_and_a_fixed_etp_keeps_exactly_those_plans():
    # Qwen3-30B-A3B on 8 GPUs: with tp > 1 the search tries the experts split like the dense
    # layers (etp = tp) and MoE parallel folding at etp 1; --etp 1 keeps exactly the plans whose
    # experts run at etp 1 (tp 1, or folded) and counts the rest under the flag
    m = catalog.model("qwen3-30b-a3b")
    base = TrainingConfig(seq_len=2048, global_batch=64)
    every = search(m, GPU, 8, base, top=100_000)
    assert {(c.plan.tp > 1, c.plan.etp) for c in every.ranked} == {(False, None), (True, None), (True, 1)}
    assert any(c.plan.etp == 1 and c.plan.ep > c.plan.dp for c in every.ranked)  # EP folded over TP
    r = search(m, GPU, 8, base, top=100_000, constraints=Constraints(etp=1))
    key = lambda c: (*_key(c), c.plan.etp)  # noqa: E731
    want = {key(c): c.step.step_s for c in every.ranked if c.plan.expert_tp == 1}
    assert {key(c): c.step.step_s for c in r.ranked} == pytest.approx(want) and want
    assert r.rejected["etp is not 1 (`etp`)"] > 0
    assert r.considered == every.considered and r.feasible + sum(r.rejected.values()) == r.considered
