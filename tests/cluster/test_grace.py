"""The grace period between SIGTERM and SIGKILL: what a preempted job finishes, saves or loses in it,
checked against timelines worked by hand (one 8-GPU node, a low-tier job preempted by a high one)."""

import pytest

from gpuplan.cluster.des import EventPriority
from gpuplan.cluster.sim import ClusterConfig, ClusterSim, Job

HOUR = 3600.0


def _run(victim: Job, grace_s: float, fail_at: float | None = None) -> ClusterSim:
    # a failure injected at ``fail_at``; the MTBF only lets the node's next failure be drawn (never, here)
    mtbf = None if fail_at is None else 1e12
    cfg = ClusterConfig(nodes=1, gpus_per_node=8, policy="priority", preempt=True, grace_s=grace_s, node_mtbf_s=mtbf)
    sim = ClusterSim(cfg, [victim, Job(1, 900.0 if fail_at is None else 500.0, 8, 100.0, tier=1)])
    if fail_at is not None:
        sim.sim.schedule(fail_at, EventPriority.CAPACITY, sim._fail, 0)
    return sim.run()


def test_a_job_whose_work_ends_inside_its_grace_period_finishes_and_loses_nothing():
    # SIGTERM at 900 to a job with 100 s left and 300 s of grace: it ends at 1000, the high job
    # starts then (it was killed at 1200 and rerun from scratch, 1200 GPU-s x 8 thrown away)
    sim = _run(Job(0, 0.0, 8, 1000.0), grace_s=300.0)
    assert sim.runs[0].finish_s == 1000.0 and sim.runs[1].finish_s == 1100.0
    r = sim.report().gpu_hours
    assert r["lost_preemption"] == r["grace"] == 0.0
    assert r["useful"] == pytest.approx(8 * 1100 / HOUR)


def test_the_gpus_a_job_holds_through_a_grace_period_that_saves_nothing_count_as_grace():
    # SIGTERM at 900 to a job with 1100 s left, no checkpoint: killed at 1020 (120 s of grace);
    # its 900 s before SIGTERM are lost to the preemption, the 120 s after it to the grace period
    sim = _run(Job(0, 0.0, 8, 2000.0), grace_s=120.0)
    r = sim.report().gpu_hours
    assert r["lost_preemption"] == pytest.approx(8 * 900 / HOUR)
    assert r["grace"] == pytest.approx(8 * 120 / HOUR)
    assert sum(r.values()) == pytest.approx(8 * sim.runs[0].finish_s / HOUR)  # one job at a time


def test_a_failure_while_the_sigterm_checkpoint_is_written_loses_the_unsaved_work():
    # SIGTERM at 500 to a job that checkpoints on it (60 s write); the node fails at 530, before
    # the write completes: the 500 s of work were never saved, and the job reruns all 1000 s
    repair = ClusterConfig(nodes=1).repair_s
    sim = _run(Job(0, 0.0, 8, 1000.0, checkpoint="sigterm", cost_s=60.0), grace_s=120.0, fail_at=530.0)
    assert sim.runs[0].finish_s == pytest.approx(530.0 + repair + 100.0 + 1000.0)
    r = sim.report().gpu_hours
    assert r["lost_failure"] == pytest.approx(8 * 500 / HOUR) and r["checkpoint"] == 0.0
    # without the failure the write completes at 560 and keeps all 500 s
    saved = _run(Job(0, 0.0, 8, 1000.0, checkpoint="sigterm", cost_s=60.0), grace_s=120.0, fail_at=None)
    assert saved.report().gpu_hours["checkpoint"] == pytest.approx(8 * 60 / HOUR)


def test_the_progress_check_judges_each_checkpoint_policy_by_what_it_saves():
    # interrupted every ~30 min (2 reclaims an hour): Daly's checkpoints keep a job going; a 12 h
    # job that never checkpoints restarts from scratch each time and never finishes (it stalled
    # for 520 simulated days before this check knew the policy); a SIGTERM checkpoint that fits
    # the grace period saves a reclaimed job's work, but not a node failure's
    from gpuplan.cluster.setup import check_progress
    from gpuplan.errors import GpuplanError

    args = (10 * 86400, 2 / 3600, 60.0, 300.0)
    check_progress(*args, checkpoint="daly")
    with pytest.raises(GpuplanError, match="no checkpoint, 12.0 h of work") as e:
        check_progress(*args, checkpoint="none", longest_s=12 * HOUR)
    assert "`checkpoint=daly`" in e.value.fix
    check_progress(*args, checkpoint="none", longest_s=60.0)  # a one-minute job gets through
    check_progress(*args, checkpoint="sigterm", longest_s=12 * HOUR, grace_s=600.0, longest_spot_s=12 * HOUR)
    with pytest.raises(GpuplanError, match="node_mtbf"):
        check_progress(3600.0, 0.0, 60.0, 300.0, checkpoint="sigterm", longest_s=48 * HOUR)


def test_a_checkpoint_interval_longer_than_every_job_is_judged_as_no_checkpoint():
    # an interval no job reaches never checkpoints: it passes or fails as `none` does (1000 h was
    # refused where `none` and 100 h ran)
    from gpuplan.cluster.setup import check_progress
    from gpuplan.errors import GpuplanError

    args = (10 * 86400, 2 / 3600, 60.0, 300.0)
    check_progress(*args, checkpoint="none", longest_s=60.0)
    check_progress(*args, checkpoint=str(1000 * HOUR), longest_s=60.0)
    with pytest.raises(GpuplanError, match="no checkpoint, 12.0 h of work"):
        check_progress(*args, checkpoint=str(1000 * HOUR), longest_s=12 * HOUR)
