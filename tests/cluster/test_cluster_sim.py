"""The cluster simulator against queueing theory and Daly, and its bookkeeping."""

import heapq
import math

import numpy as np
import pytest

from gpuplan.cluster.sim import ClusterConfig, ClusterSim, Job
from gpuplan.errors import GpuplanError
from gpuplan.estimate.checkpoint_interval import daly_interval, expected_waste_fraction


def erlang_c_wait(c: int, lam: float, mu: float) -> float:
    """Mean wait in queue of M/M/c (Erlang C)."""
    a = lam / mu
    rho = a / c
    tail = a**c / math.factorial(c) / (1 - rho)
    p_wait = tail / (sum(a**k / math.factorial(k) for k in range(c)) + tail)
    return p_wait / (c * mu - lam)


def _poisson_jobs(n, lam, mean_s, seed, **kw):
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1 / lam, n))
    dur = rng.exponential(mean_s, n)
    return [Job(i, float(arr[i]), 1.0, float(dur[i]), **kw) for i in range(n)]


def _fcfs_waits(jobs: list[Job], c: int) -> np.ndarray:
    """Each job's wait in a first-come-first-served queue before ``c`` identical servers (Kiefer &
    Wolfowitz 1955: a job starts when it has arrived and the earliest-free server is free)."""
    free, waits = [0.0] * c, []
    for j in jobs:
        start = max(j.arrival_s, heapq.heappop(free))
        waits.append(start - j.arrival_s)
        heapq.heappush(free, start + j.work_s)
    return np.array(waits)


def test_single_gpu_jobs_under_fifo_wait_as_long_as_erlang_c_says():
    c, mean, rho = 16, 600.0, 0.8
    lam = rho * c / mean
    # the simulator, job by job, against the M/M/c FCFS queue run directly on the same jobs
    jobs = _poisson_jobs(20_000, lam, mean, seed=0)
    sim = ClusterSim(ClusterConfig(nodes=2, gpus_per_node=8, policy="fifo"), jobs).run()
    waits = np.array([sim.runs[j.id].wait_s for j in jobs])
    np.testing.assert_allclose(waits, _fcfs_waits(jobs, c), rtol=1e-9, atol=1e-6)
    # and that queue's mean wait against Erlang C: noisy, so 16 x 48,000 jobs (standard error ~2.5%)
    mean_waits = [_fcfs_waits(_poisson_jobs(50_000, lam, mean, seed), c)[2000:].mean() for seed in range(16)]
    assert np.mean(mean_waits) == pytest.approx(erlang_c_wait(c, lam, 1 / mean), rel=0.05)


def test_a_job_under_exponential_failures_wastes_what_daly_predicts():
    cost, mtbf, restart = 60.0, 4 * 3600.0, 300.0
    tau = daly_interval(cost, mtbf)
    waste = []
    for seed in range(60):
        # one 8-GPU job on one of many nodes: a failed node is never the only place to restart
        # one node's worth of GPUs on a cluster of many: after a failure the job restarts elsewhere
        # at once, and its node's failures (MTBF each) are the job's failures
        job = Job(0, 0.0, 8.0, 200 * 3600.0, checkpoint=str(tau), cost_s=cost, restart_s=restart)
        cfg = ClusterConfig(nodes=64, gpus_per_node=8, node_mtbf_s=mtbf, repair_s=1.0, seed=seed)
        sim = ClusterSim(cfg, [job]).run()
        waste.append(1 - job.work_s / sim.runs[0].jct_s)
    assert np.mean(waste) == pytest.approx(expected_waste_fraction(tau, cost, mtbf, restart), rel=0.05)


def test_gpu_hours_add_up_and_the_same_seed_repeats_the_run():
    def run(seed):
        rng = np.random.default_rng(3)
        jobs = [
            Job(
                i,
                float(i * 50),
                float(rng.choice([0.5, 1, 2, 8, 16])),
                float(rng.exponential(3600)),
                tier=int(rng.integers(0, 3)),
                spot=bool(rng.random() < 0.3),
                checkpoint="daly",
                cost_s=30,
                restart_s=120,
            )
            for i in range(400)
        ]
        cfg = ClusterConfig(
            nodes=4, gpus_per_node=8, policy="backfill", node_mtbf_s=30 * 86400, spot_reclaim_per_hour=0.2, seed=seed
        )
        return jobs, ClusterSim(cfg, jobs).run().report()

    jobs, a = run(0)
    _, b = run(0)
    assert a == b
    assert a.finished == 400
    work_h = sum(j.gpus * j.work_s for j in jobs) / 3600
    assert a.gpu_hours["useful"] == pytest.approx(work_h, rel=1e-9)
    assert a.preemptions > 0 and a.reclaims > 0


def test_a_higher_tier_preempts_the_job_with_the_least_unsaved_work():
    low_old = Job(0, 0.0, 8.0, 10_000.0, tier=0, checkpoint="600", cost_s=10)
    low_new = Job(1, 550.0, 8.0, 10_000.0, tier=0, checkpoint="600", cost_s=10)
    high = Job(2, 650.0, 8.0, 100.0, tier=1)
    cfg = ClusterConfig(nodes=2, gpus_per_node=8, policy="priority", grace_s=30)
    runs = ClusterSim(cfg, [low_old, low_new, high]).run().runs
    # at 650 s the old job saved 600 s of work at 610 s (40 s unsaved), the new one has 100 s unsaved
    assert runs[0].preemptions == 1 and runs[1].preemptions == 0
    assert runs[2].first_start_s == pytest.approx(650 + 30)


def test_jobs_larger_than_the_cluster_are_refused():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError) as e:
        ClusterSim(ClusterConfig(nodes=2, gpus_per_node=8), [Job(0, 0.0, 32.0, 10.0)])
    assert e.value.field == "jobs"


def test_the_utilisation_curve_integrates_to_the_busy_gpu_time_and_the_trace_has_every_run(tmp_path):
    from gpuplan.cluster.render import chrome_trace, utilisation_over_time, write_plot

    rng = np.random.default_rng(5)
    jobs = [
        Job(
            i,
            float(i * 30),
            float(rng.choice([0.5, 1, 4, 16])),
            float(rng.exponential(1800)),
            tier=int(rng.integers(0, 2)),
        )
        for i in range(300)
    ]
    sim = ClusterSim(ClusterConfig(nodes=4, gpus_per_node=8, policy="backfill"), jobs).run()
    t, u = utilisation_over_time(sim, bins=100)
    width = t[1] - t[0]
    assert (u * width * 32).sum() == pytest.approx(sim.busy_gpu_s, rel=1e-9)
    runs = [e for e in chrome_trace(sim)["traceEvents"] if e["ph"] == "X"]
    assert len(runs) == sum(len(s[2]) for s in sim.segments)
    write_plot(sim, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_a_gang_preempts_whole_nodes_not_gpus_scattered_over_the_cluster():
    # four nodes of 8, each holding two 4-GPU low jobs; a 16-GPU high job needs two whole nodes
    lows = [Job(i, 0.0, 4.0, 10_000.0, tier=0, checkpoint="1000", cost_s=10) for i in range(8)]
    high = Job(8, 100.0, 16.0, 500.0, tier=1)
    runs = ClusterSim(ClusterConfig(nodes=4, gpus_per_node=8, policy="priority", grace_s=60), lows + [high]).run().runs
    assert sum(runs[v.id].preemptions for v in lows) == 4  # two nodes' worth, not any four jobs
    assert runs[8].first_start_s == pytest.approx(160.0)


def test_nodes_of_different_sizes_place_jobs_where_they_fit():
    jobs = [Job(0, 0.0, 4.0, 100.0), Job(1, 1.0, 2.0, 100.0), Job(2, 200.0, 10.0, 100.0)]
    sim = ClusterSim(ClusterConfig(nodes=0, node_gpus=(2, 8)), jobs).run()
    runs = {s[0]: s[2] for s in sim.segments}
    assert runs[0] == (1,) and runs[1] == (0,)  # 4 GPUs only fit the big node; 2 GPUs best-fit the small one
    assert sorted(runs[2]) == [0, 1]  # a 10-GPU gang takes both whole nodes
    assert sim.report().gpus == 10


@pytest.mark.parametrize("shape", [None, 0.7, 2.0])
def test_node_failures_come_at_the_configured_mean_rate_for_exponential_and_weibull(shape):
    # one long job keeps the run going; count failures over its span across 200 idle-ish nodes
    mtbf, span = 10 * 86400.0, 200 * 86400.0
    job = Job(0, 0.0, 1.0, span, checkpoint="3600", cost_s=1.0)
    cfg = ClusterConfig(nodes=200, gpus_per_node=1, node_mtbf_s=mtbf, weibull_shape=shape, repair_s=1.0, seed=2)
    sim = ClusterSim(cfg, [job]).run()
    elapsed = sim.runs[0].finish_s
    expected = 200 * elapsed / mtbf  # renewal process: failures per node ~ time / mean
    assert sim.m.failures == pytest.approx(expected, rel=0.1)


def test_jobs_naming_gpu_models_run_only_on_nodes_of_those_models():
    cfg = ClusterConfig(nodes=0, node_gpus=(8, 8, 2, 2), node_models=("A100", "A100", "T4", "T4"))
    jobs = [
        Job(0, 0.0, 1.0, 100.0, gpu_models=frozenset({"T4"})),  # pack would pick a T4 node anyway...
        Job(1, 0.0, 8.0, 100.0),
        Job(2, 1.0, 4.0, 100.0, gpu_models=frozenset({"T4"})),  # ...more than one T4 node holds: a gang of both
        Job(3, 1.0, 0.5, 100.0, gpu_models=frozenset({"A100"})),
    ]  # the A100 node with room, not the emptier T4
    sim = ClusterSim(cfg, jobs).run()
    runs = {s[0]: s[2] for s in sim.segments}
    assert runs[0] in ((2,), (3,)) and runs[1] in ((0,), (1,))
    assert sorted(runs[2]) == [2, 3] and sim.jobs_by_id[2].first_start_s == 100.0  # waited for job 0's node
    assert runs[3][0] in (0, 1)


def test_a_job_for_a_gpu_model_the_cluster_lacks_is_refused_with_the_reason():
    cfg = ClusterConfig(nodes=0, node_gpus=(8, 2), node_models=("A100", "T4"))
    with pytest.raises(GpuplanError, match="H100, which no node has"):
        ClusterSim(cfg, [Job(0, 0.0, 1.0, 10.0, gpu_models=frozenset({"H100"}))])
    with pytest.raises(GpuplanError, match="needs 4 GPUs, the cluster has 2 of T4"):
        ClusterSim(cfg, [Job(0, 0.0, 4.0, 10.0, gpu_models=frozenset({"T4"}))])


def test_a_reclaim_event_takes_back_spot_jobs_until_it_has_its_gpus():
    def run(seed):
        jobs = [Job(i, 0.0, 2.0, 1000.0, spot=i < 6) for i in range(8)]
        cfg = ClusterConfig(
            nodes=2, gpus_per_node=8, reclaims=((100.0, 5.0), (5000.0, 100.0)), grace_s=0.0, preempt=False, seed=seed
        )
        return ClusterSim(cfg, jobs).run()

    sim = run(0)
    first = sorted(s[0] for s in sim.segments if s[5] == "reclaim")
    assert len(first) == 3 and all(j < 6 for j in first)  # 3 spot jobs of 2 GPUs cover 5; on-demand untouched
    assert sim.m.reclaims == 3  # the second event comes after every job has finished: nothing to take
    assert first == sorted(s[0] for s in run(0).segments if s[5] == "reclaim")  # the seed decides which
    assert any(first != sorted(s[0] for s in run(k).segments if s[5] == "reclaim") for k in range(1, 6))


def test_a_scheduling_policy_and_a_placement_plug_in():
    from gpuplan.cluster.policies import STARTED, Placement, Policy

    class ShortestFirst(Policy):  # shortest job first, no tiers
        name, tiered = "sjf", False

        def schedule(self, sim):
            for q in sim.queues_by_tier():
                ordered = sorted(q, key=lambda j: j.work_s)
                q.clear()
                q.extend(ordered)
                while q and sim.try_start(q, 0) == STARTED:
                    pass

    class LastNode(Placement):
        name = "last"

        def node(self, sim, job, candidates):
            return int(candidates[-1])

    jobs = [Job(0, 0.0, 8.0, 50.0), Job(1, 1.0, 8.0, 300.0), Job(2, 2.0, 8.0, 100.0)]
    sim = ClusterSim(ClusterConfig(nodes=1, gpus_per_node=8, policy=ShortestFirst()), jobs).run()
    assert [s[0] for s in sorted(sim.segments, key=lambda s: s[3])] == [0, 2, 1]  # FIFO would run 0, 1, 2
    sim = ClusterSim(ClusterConfig(nodes=2, gpus_per_node=8, placement=LastNode()), [Job(0, 0.0, 1.0, 10.0)]).run()
    assert sim.segments[0][2] == (1,)  # pack would take node 0


@pytest.mark.parametrize(
    "placement,gang_nodes,small_node", [("pack", [2, 3, 5], 0), ("spread", [2, 3, 5], 1), ("topology", [5, 6, 7], 0)]
)
def test_pack_fills_the_fullest_node_spread_the_emptiest_and_topology_keeps_a_gang_in_one_rack(
    placement, gang_nodes, small_node
):
    # two racks of four 8-GPU nodes; nodes 0, 1 and 4 stay busy, 2 and 3 free up at t=10
    jobs = [Job(i, 0.0, 8.0, 10.0 if i in (2, 3) else 1000.0) for i in range(5)]
    jobs.append(Job(5, 20.0, 24.0, 100.0))  # a gang of three nodes: rack 0 has two free, rack 1 three
    cfg = ClusterConfig(nodes=8, gpus_per_node=8, nodes_per_rack=4, placement=placement)
    runs = {s[0]: s[2] for s in ClusterSim(cfg, jobs).run().segments}
    assert sorted(runs[5]) == gang_nodes
    small = [Job(0, 0.0, 2.0, 100.0), Job(1, 1.0, 1.0, 100.0)]
    sim = ClusterSim(ClusterConfig(nodes=2, gpus_per_node=8, placement=placement), small).run()
    assert {s[0]: s[2] for s in sim.segments}[1] == (small_node,)


def test_room_freed_for_a_waiting_gang_is_not_backfilled_by_the_jobs_it_preempted():
    # the victims checkpoint on SIGTERM and leave one by one; backfill must not restart them on
    # the GPUs the gang waits for (they were preempted again and again, forever)
    jobs = [Job(i, 0.0, 1.0, 10_000.0, checkpoint="sigterm", cost_s=10.0 + i, restart_s=5.0) for i in range(16)]
    jobs.append(Job(16, 100.0, 16.0, 1000.0, tier=1))
    sim = ClusterSim(ClusterConfig(nodes=2, gpus_per_node=8, policy="backfill", grace_s=120.0), jobs).run()
    assert sim.runs[16].first_start_s == 100.0 + 25.0  # when the slowest checkpoint is written
    assert sim.m.preemptions == 16 and sim.report().finished == 17


@pytest.mark.parametrize("policy", ["fifo", "priority", "backfill"])
@pytest.mark.parametrize("placement", ["pack", "spread", "topology"])
def test_every_job_finishes_under_each_policy_with_failures_reclaims_and_preemption(policy, placement):
    # overloaded, half spot, failures every simulated day per node, reclaims by rate and by trace:
    # the mix that found two livelocks (a victim requeued ahead of its preemptor under fifo, and
    # backfill restarting victims on the room a gang waited for)
    import signal

    from gpuplan.cluster.workloads import synthetic

    def hung(*_):
        raise TimeoutError("the simulation did not finish in 20 s")

    signal.signal(signal.SIGALRM, hung)
    try:
        for ckpt, seed in (("none", 0), ("sigterm", 1), ("daly", 2)):
            signal.alarm(20)
            jobs = synthetic(150, 16, 1.1, seed, 0.5, checkpoint=ckpt, cost_s=60, restart_s=120)
            cfg = ClusterConfig(
                nodes=2,
                gpus_per_node=8,
                nodes_per_rack=1,
                policy=policy,
                placement=placement,
                node_mtbf_s=86400.0,
                repair_s=1800,
                spot_reclaim_per_hour=0.2,
                reclaims=((5000.0, 8.0), (20000.0, 4.0)),
                seed=seed,
            )
            r = ClusterSim(cfg, jobs).run().report()
            assert r.finished == 150
            if policy == "fifo":
                assert r.preemptions == 0
    finally:
        signal.alarm(0)


def test_a_run_leaves_the_submitted_jobs_as_they_were_and_keeps_its_state_per_job():
    import dataclasses

    jobs = [Job(i, float(i), 8.0, 3600.0, checkpoint="daly", cost_s=60.0, restart_s=30.0) for i in range(4)]
    before = [dataclasses.replace(j) for j in jobs]
    mtbf = 10 * 86400.0
    sim = ClusterSim(ClusterConfig(nodes=2, gpus_per_node=8, node_mtbf_s=mtbf, seed=1), jobs).run()
    assert jobs == before  # the spec is frozen: a second run starts from the same jobs
    with pytest.raises(dataclasses.FrozenInstanceError):
        jobs[0].work_s = 1.0  # type: ignore[misc]
    # one node's failures interrupt an 8-GPU job: Daly's interval for that MTBF (Daly 2006, eq. 20)
    assert all(r.interval_s == pytest.approx(daly_interval(60.0, mtbf)) for r in sim.runs.values())
    assert all(r.state == "done" and r.finish_s >= r.first_start_s >= r.job.arrival_s for r in sim.runs.values())


def test_policies_see_the_nodes_read_only():
    from gpuplan.cluster.policies import Placement

    class Meddler(Placement):
        name = "meddler"

        def node(self, sim, job, candidates):
            sim.free[int(candidates[0])] = 0  # a placement must not change what is free
            return int(candidates[0])

    with pytest.raises(ValueError, match="read-only"):
        ClusterSim(ClusterConfig(nodes=1, gpus_per_node=8, placement=Meddler()), [Job(0, 0.0, 1.0, 10.0)]).run()


def test_the_report_is_typed_and_its_json_document_carries_the_same_numbers():
    import json

    jobs = [Job(i, float(i * 10), 4.0, 600.0, tier=i % 2) for i in range(20)]
    cfg = ClusterConfig(nodes=1, gpus_per_node=8, preempt=False, price_per_gpu_hour=2.0)
    r = ClusterSim(cfg, jobs).run().report()
    doc = json.loads(json.dumps(r.to_dict()))
    assert doc["finished"] == r.finished == 20
    assert doc["tiers"]["1"]["p99_wait_s"] == r.tiers["1"].p99_wait_s
    # no failures, preemption or checkpoints: every busy GPU-hour is useful, nothing is lost
    assert r.gpu_hours["useful"] == pytest.approx(20 * 4 * 600 / 3600) and r.usd_lost == 0.0


def test_events_at_the_same_time_run_capacity_changes_then_arrivals_then_finishes():
    from gpuplan.cluster.sim import EventPriority

    assert EventPriority.CAPACITY < EventPriority.ARRIVAL < EventPriority.FINISH
    # a job finishing at t = 100 and one arriving then on a full node: the arrival is handled
    # first, so it waits for the finish's scheduling pass and starts at 100, not later
    jobs = [Job(0, 0.0, 8.0, 100.0), Job(1, 100.0, 8.0, 50.0)]
    sim = ClusterSim(ClusterConfig(nodes=1, gpus_per_node=8), jobs).run()
    assert sim.runs[1].first_start_s == 100.0 and sim.runs[1].finish_s == 150.0


def test_the_per_node_preemption_counts_match_the_jobs_holding_each_node():
    # _preempt_for reads per-tier running GPUs and grace GPUs by node that the simulator keeps up
    # to date; at every scheduling pass they must equal a recount from the jobs themselves
    from gpuplan.cluster.policies import Backfill

    checked = []

    class Checked(Backfill):
        def schedule(self, sim):
            run = np.zeros_like(sim._run_milli)
            jobs = np.zeros_like(sim._run_jobs)
            grace = np.zeros_like(sim._grace_milli)
            for v in sim.running.values():
                for n, milli in v.placed:
                    if v.state == "grace":
                        grace[n] += milli
                    else:
                        run[sim._tier_index[v.tier], n] += milli
                        jobs[sim._tier_index[v.tier], n] += 1
            assert np.array_equal(run, sim._run_milli) and np.array_equal(jobs, sim._run_jobs)
            assert np.array_equal(grace, sim._grace_milli)
            assert sim._grace_jobs == sum(v.state == "grace" for v in sim.running.values())
            checked.append(sim._grace_jobs)
            super().schedule(sim)

    rng = np.random.default_rng(5)
    jobs = [
        Job(
            i,
            float(i * 40),
            float(rng.choice([0.5, 1, 2, 8, 16])),
            float(rng.exponential(3600)),
            tier=int(rng.integers(0, 3)),
            spot=bool(rng.random() < 0.3),
            checkpoint=str(rng.choice(["daly", "sigterm", "none"])),
            cost_s=30,
            restart_s=120,
        )
        for i in range(400)
    ]
    cfg = ClusterConfig(
        nodes=4, gpus_per_node=8, policy=Checked(), node_mtbf_s=86400, spot_reclaim_per_hour=0.5, seed=1
    )
    report = ClusterSim(cfg, jobs).run().report()
    assert report.preemptions > 0 and report.failures > 0 and max(checked) > 0


@pytest.mark.parametrize("shape", [0.5, 2.0])
def test_weibull_nodes_in_service_fail_at_one_over_the_mtbf_from_the_first_day(shape):
    # oracle: a renewal process in equilibrium has E[failures in (0, h)] = h / MTBF for any
    # lifetime law (Cox 1962). With every node new at t = 0, shape 0.5 failed 2.5x as often over
    # the first 2.7 days and shape 2.0 a third as often
    mtbf, nodes = 5 * 86400.0, 1024
    job = Job(0, 0.0, 1.0, 2.7 * 86400, checkpoint="daly", cost_s=60.0)
    cfg = ClusterConfig(nodes=nodes, gpus_per_node=1, node_mtbf_s=mtbf, weibull_shape=shape, repair_s=60.0, seed=1)
    sim = ClusterSim(cfg, [job]).run()
    r = sim.report()
    expected = nodes * r.makespan_s / mtbf  # about 560 failures: a 4% standard deviation
    assert r.failures == pytest.approx(expected, rel=0.15)
