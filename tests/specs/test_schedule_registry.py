"""Pipeline schedules live in one registry that the plan, the simulator, the memory model and the
bubble all read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.estimate.memory import microbatches_in_flight
from gpuplan.pipeline import schedules as builders
from gpuplan.pipeline.bubble import pipeline_bubble
from gpuplan.pipeline.schedules import build
from gpuplan.pipeline.simulate import Costs, simulate
from gpuplan.specs import schedules
from gpuplan.specs.parallel import SCHEDULES, ParallelPlan

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuplan"


def test_every_registered_schedule_builds_and_simulates():
    for spec in schedules.REGISTRY:
        p = 4
        m = max(spec.min_microbatches(p), 2 * p)
        s = build(spec.name, p, m, vp=2 if spec.needs_vp else 1)
        assert s.name == spec.name and s.param_copies == spec.param_copies
        assert simulate(s, Costs(1, 1, 1)).makespan_s > 0
        assert callable(getattr(builders, spec.builder))


def test_an_alias_names_the_same_schedule_in_training_and_in_the_simulator():
    assert schedules.get("zb") is schedules.get("zb-h1")
    assert build("zb", 4, 8).name == "zb-h1"
    f = [1.0] * 4
    assert pipeline_bubble("zb", 1, 8, f, f, f) == pipeline_bubble("zb-h1", 1, 8, f, f, f)
    assert ParallelPlan(pp=4, schedule="zb-h1").head_stage == ParallelPlan(pp=4, schedule="zb").head_stage


def test_training_plans_accept_exactly_the_registered_training_schedules():
    assert set(SCHEDULES) == {n for s in schedules.REGISTRY if s.training for n in s.names}
    with pytest.raises(GpuplanError):
        ParallelPlan(pp=4, schedule="gpipe")  # simulated, but not modelled for training
    with pytest.raises(GpuplanError) as e:
        schedules.get("zb-x")
    assert e.value.field == "schedule"


def test_a_v_schedule_puts_the_head_on_the_first_rank_and_two_chunks_on_each():
    v = ParallelPlan(pp=4, schedule="zb-v")
    assert (v.head_stage, v.chunks) == (0, 2)
    assert (ParallelPlan(pp=4, vp=2).head_stage, ParallelPlan(pp=4, vp=2).chunks) == (3, 2)


def test_the_memory_profile_follows_the_registry():
    assert microbatches_in_flight(0, 4, 1, 32, "1f1b") == 4
    assert microbatches_in_flight(0, 4, 2, 32, "1f1b") == (3 * 2 + 4 + 1) / 2
    assert microbatches_in_flight(3, 4, 1, 32, "zb-v") == 4
    assert microbatches_in_flight(0, 4, 1, 32, "dualpipe") == 5


def test_no_module_compares_schedule_names_outside_the_registry():
    names = "|".join(re.escape(n) for n in schedules.names())
    compare = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    found = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if p.name != "schedules.py" or p.parent.name != "specs"
             for i, line in enumerate(p.read_text().splitlines(), 1) if compare.search(line)]  # fmt: skip
    assert found == []
