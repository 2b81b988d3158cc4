"""A GPU cluster running a mix of jobs: gang scheduling, priority tiers, preemption with grace
periods, spot reclaims, hardware failures and checkpoint policies.

Capacity is counted in milli-GPUs (job.py) so sharing tasks and gangs of whole GPUs live on the
same nodes. Nodes may differ in size and GPU
model; a job may name the models it can use (openb's ``gpu_spec``) and then runs only on those
nodes. A job needing more than the biggest such node takes whole free nodes (a gang); smaller ones
go on one node, chosen by the placement (policies.py: pack, spread, topology).

A running job alternates work segments of ``interval_s`` and checkpoints of ``cost_s`` (none:
one endless segment). When it is interrupted (failure, preemption, spot reclaim) it keeps the
work of its last complete checkpoint, loses the rest, and pays ``restart_s`` when it starts
again. A preempted job gets the partition's ``grace_s``: a job that checkpoints on SIGTERM
saves everything in the grace window (if the window fits one checkpoint) and releases its
GPUs when done; the others run until the grace ends.

Scheduling policies (policies.py: fifo, priority, backfill, or your own) run with preemption of
lower tiers (the victims losing the least work since their last checkpoint go first) unless
``preempt=False`` (fifo, which ignores tiers, never preempts). Failures: each node fails at a rate (exponential, or Weibull per node) and is
repaired after ``repair_s``. Spot jobs are reclaimed at a rate per running job, or by a trace of
reclaim events (time, GPUs taken back): each event sends SIGTERM to running spot jobs, picked at
random, until they hold that many GPUs. A reclaimed job goes back to the queue (its restart cost
stands for getting new capacity).

Every time is in seconds; GPU-seconds are reported by cause (report.py). A job as submitted
(``Job``) is never changed by a run: the simulator keeps each job's run state in ``runs``
(``JobRun``). Events at the same time run in the order of :class:`EventPriority`.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from gpuplan.cluster.config import (
    LLAMA3_NODE_MTBF_S,
    NODE_MTBF_PRESETS,
    RSC1_NODE_MTBF_S,
    RSC2_NODE_MTBF_S,
    ClusterConfig,
)
from gpuplan.cluster.des import EventPriority, Simulator
from gpuplan.cluster.interrupts import Interruptions
from gpuplan.cluster.job import DONE, GRACE, MILLI, QUEUED, RUNNING, Job, JobRun, JobState
from gpuplan.cluster.policies import PLACEMENTS, POLICIES
from gpuplan.cluster.report import ClusterReport, Metrics, Segment, build_report, utilisation_series
from gpuplan.errors import GpuplanError, field_ref, require
from gpuplan.estimate.checkpoint_interval import daly_interval

__all__ = [
    "LLAMA3_NODE_MTBF_S",
    "MILLI",
    "NODE_MTBF_PRESETS",
    "RSC1_NODE_MTBF_S",
    "RSC2_NODE_MTBF_S",
    "ClusterConfig",
    "ClusterReport",
    "ClusterSim",
    "EventPriority",
    "Job",
    "JobRun",
    "JobState",
]


class ClusterSim(Interruptions):
    def __init__(self, cfg: ClusterConfig, jobs: list[Job]):
        self.cfg = cfg
        gpus = np.array(cfg.node_gpus if cfg.node_gpus is not None else [cfg.gpus_per_node] * cfg.nodes)
        self._capacity = gpus.astype(np.int64) * MILLI
        self.cap = int(self._capacity.max())  # the biggest node: jobs up to it run on one node, larger ones as gangs
        self.models = np.array(cfg.node_models) if cfg.node_models is not None else None
        self._masks: dict[frozenset, tuple[np.ndarray | None, int]] = {}
        self.runs: dict[int, JobRun] = {}  # by job id, in the order of ``jobs``
        for j in jobs:
            require(
                j.gpus > 0 and j.work_s >= 0 and j.arrival_s >= 0,
                "jobs",
                f"job {j.id}: GPUs must be positive and times non-negative",
            )
            require(j.gpus <= 1 or j.gpus == int(j.gpus), "jobs", f"job {j.id}: more than one GPU must be whole GPUs")
            why = self.never_fits(j)
            require(why is None, "jobs", f"job {j.id} {why[1] if why else ''}", "drop it or use a bigger cluster")
            interval = j.interval_s
            if j.checkpoint == "daly":
                mtbf = self._job_mtbf(j)
                interval = daly_interval(j.cost_s, mtbf) if mtbf else math.inf
            elif j.checkpoint not in ("none", "sigterm"):
                interval = float(j.checkpoint)
            self.runs[j.id] = JobRun(j, interval_s=interval, remaining_s=j.work_s)
        self.jobs = jobs
        self.policy = POLICIES[cfg.policy] if isinstance(cfg.policy, str) else cfg.policy
        self.placement = PLACEMENTS[cfg.placement] if isinstance(cfg.placement, str) else cfg.placement
        self._free = self._capacity.copy()
        self.up = np.ones(cfg.nodes, dtype=bool)
        self._rack = np.arange(cfg.nodes) // cfg.nodes_per_rack
        self.on_node: list[set[int]] = [set() for _ in range(cfg.nodes)]
        # What preemption asks of every node, kept up to date as jobs start, get SIGTERM and
        # release (scheduling.Scheduling._preempt_for): by tier (lowest first) and node, the
        # milli-GPUs and number of running jobs; by node, the milli-GPUs of jobs in their grace period
        tiers = sorted({j.tier for j in jobs})
        self._tier_index = {t: i for i, t in enumerate(tiers)}
        self._run_milli = np.zeros((len(tiers), cfg.nodes), dtype=np.int64)
        self._run_jobs = np.zeros((len(tiers), cfg.nodes), dtype=np.int64)
        self._grace_milli = np.zeros(cfg.nodes, dtype=np.int64)
        self._grace_jobs = 0
        self._holding: dict[int, bool] = {}  # jobs holding GPUs: id -> in their grace period
        self.running: dict[int, JobRun] = {}  # running or in their grace period
        self.segments: list[Segment] = []  # every run of a job on its nodes: for traces and plots
        self._run_start: dict[int, float] = {}
        self.queues: dict[int, deque[JobRun]] = {}
        self.rng = np.random.default_rng(cfg.seed)
        self.m = Metrics()
        self.sim = Simulator()
        self.busy_gpu_s = 0.0
        self.end_s = 0.0
        self.left = len(jobs)

    def never_fits(self, j: Job) -> tuple[str, str] | None:
        """Why a job can never run on this cluster, as (reason, detail): the reason to count skipped
        jobs by, the detail for an error about this job. None: it can run."""
        mask, _ = self._allowed(j)
        named = sorted(j.gpu_models or ())  # a mask exists only for a job that names GPU models
        if mask is not None and not mask.any():
            why = f"needs GPU model {' or '.join(named)}, which no node has"
            return why, why
        have = self._capacity.sum() if mask is None else self._capacity[mask].sum()
        if j.milli > have:
            models = "" if mask is None else f" of {'/'.join(named)}"
            return (
                "needs more GPUs than the cluster has",
                f"needs {j.gpus:g} GPUs, the cluster has {have // MILLI}{models}",
            )
        return None

    def _job_mtbf(self, j: Job) -> float | None:
        """Mean time between interruptions of one job: its nodes' failures and spot reclaims."""
        rate = 0.0
        if self.cfg.node_mtbf_s:
            rate += max(1, math.ceil(j.gpus / self.cfg.gpus_per_node)) / self.cfg.node_mtbf_s
        if j.spot and self.cfg.spot_reclaim_per_hour:
            rate += self.cfg.spot_reclaim_per_hour / 3600
        return 1 / rate if rate else None

    # -- running ---------------------------------------------------------------------------------------
    # Guards: a run whose jobs stop finishing (failures, reclaims or restarts that outpace the work)
    # would go on forever; it ends with an error naming the knobs instead.
    MAX_EVENTS = 20_000_000
    STALL_EVENTS = 300_000  # events in a row without a job finishing
    MAX_HORIZON_S = 1000 * 365 * 86400.0  # simulated time: a millennium is no cluster's schedule

    def run(self, progress=None) -> ClusterSim:
        """Run every job to completion. ``progress(finished_jobs)`` is called now and then."""
        state = {"left": self.left, "at": 0, "t": 0.0}
        # Simulated time without a job finishing that means none ever will: many times the longest
        # job with its restart and checkpoints (at least a year, for queues of long jobs)
        longest = max((j.work_s + j.restart_s + j.cost_s for j in self.jobs), default=0.0)
        stall_s = max(365 * 86400.0, 20 * (longest + self.cfg.repair_s + self.cfg.grace_s))

        def check(sim: Simulator) -> None:
            if progress:
                progress(len(self.jobs) - self.left)
            if self.left < state["left"]:
                state["left"], state["at"], state["t"] = self.left, sim.events, sim.now
            stalled = sim.events - state["at"] > self.STALL_EVENTS or sim.now - state["t"] > stall_s
            if stalled or sim.events > self.MAX_EVENTS or sim.now > self.MAX_HORIZON_S:
                raise GpuplanError(
                    "jobs",
                    f"{self.left:,} of {len(self.jobs):,} jobs unfinished after {sim.events:,} events "
                    f"({sim.now / 86400:,.1f} simulated days"
                    + (
                        f"; none finished in the last {sim.events - state['at']:,} events, "
                        f"{(sim.now - state['t']) / 86400:,.0f} days)"
                        if stalled
                        else ")"
                    ),
                    (
                        f"a failure every {self.cfg.node_mtbf_s / 86400:,.3g} days per node, "
                        if self.cfg.node_mtbf_s
                        else ""
                    )
                    + f"{self.cfg.spot_reclaim_per_hour:g} spot reclaims per hour per job and the jobs' "
                    f"restarts leave no time for work: use a longer {field_ref('node_mtbf')}, a shorter "
                    f"{field_ref('restart')} or fewer reclaims (or fewer {field_ref('jobs')})",
                )

        for j in self.jobs:
            self.sim.schedule(j.arrival_s, EventPriority.ARRIVAL, self._arrive, self.runs[j.id])
        if self.cfg.node_mtbf_s:
            for n in range(self.cfg.nodes):
                self.sim.schedule(self._next_failure(in_service=True), EventPriority.CAPACITY, self._fail, n)
        for t, g in self.cfg.reclaims:
            self.sim.schedule(t, EventPriority.CAPACITY, self._reclaim_event, g)
        self.sim.run(check=check)
        return self

    def _next_failure(self, in_service: bool = False) -> float:
        """When a node next fails: after a repair, a fresh Weibull (or exponential) lifetime of mean
        ``node_mtbf_s``. At the start (``in_service``) a node has been running for a while, so its
        first failure is the residual life of a renewal process in equilibrium (Cox 1962, Renewal
        Theory, ch. 5): its age is drawn from the density S(a) / MTBF, which for a Weibull of shape
        k and scale s is a = s Y^(1/k) with Y ~ Gamma(1/k), and the failure comes when the
        cumulative hazard (t/s)^k grows by an Exp(1) draw past the age's. Without it every node
        started new and a shape other than 1 failed at another rate than 1 / MTBF over a run
        (shape 0.5: 2.5x over 2.7 days). The exponential is memoryless: its draw is the same."""
        m, k = self.cfg.node_mtbf_s, self.cfg.weibull_shape
        assert m is not None  # failures are scheduled only when the config names a node MTBF
        if not k:
            return self.sim.now + self.rng.exponential(m)
        scale = m / math.gamma(1 + 1 / k)
        if not in_service:
            return self.sim.now + scale * self.rng.weibull(k)
        age = scale * self.rng.gamma(1 / k) ** (1 / k)
        return self.sim.now + scale * ((age / scale) ** k + self.rng.exponential()) ** (1 / k) - age

    def _queue(self, j: JobRun) -> deque[JobRun]:
        return self.queues.setdefault(j.tier if self.policy.tiered else 0, deque())

    def _arrive(self, sim, j: JobRun):
        j.state = QUEUED
        self._queue(j).append(j)
        self._schedule_pass()

    def _finish_time(self, j: JobRun, start: float) -> float:
        w = j.remaining_s
        n_ckpt = max(0, math.ceil(w / j.interval_s) - 1) if math.isfinite(j.interval_s) and w > 0 else 0
        return start + (j.restart_s if j.restarting else 0.0) + w + n_ckpt * j.cost_s

    def _start(self, j: JobRun, placed: list) -> None:
        now = self.sim.now
        t = self._tier_index[j.tier]
        for n, milli in placed:
            self._free[n] -= milli
            self.on_node[n].add(j.id)
            self._run_milli[t, n] += milli
            self._run_jobs[t, n] += 1
        self._holding[j.id] = False
        j.placed, j.state, j.start_s = placed, RUNNING, now
        self.running[j.id] = j
        self._run_start[j.id] = now
        if math.isnan(j.first_start_s):
            j.first_start_s = now
        j.epoch += 1
        self.sim.schedule(self._finish_time(j, now), EventPriority.FINISH, self._finish, j, j.epoch)
        if j.spot and self.cfg.spot_reclaim_per_hour:
            self.sim.schedule(
                now + self.rng.exponential(3600 / self.cfg.spot_reclaim_per_hour),
                EventPriority.CAPACITY,
                self._reclaim,
                j,
                j.epoch,
            )

    def _release(self, j: JobRun, outcome: str) -> None:
        self.segments.append(
            Segment(
                j.id,
                j.tier,
                tuple(n for n, _ in j.placed),
                self._run_start.pop(j.id, self.sim.now),
                self.sim.now,
                outcome,
                j.gpus,
            )
        )
        grace = self._holding.pop(j.id, None)
        t = self._tier_index[j.tier]
        for n, milli in j.placed:
            if self.up[n]:
                self._free[n] += milli
            self.on_node[n].discard(j.id)
            if grace:
                self._grace_milli[n] -= milli
            elif grace is not None:
                self._run_milli[t, n] -= milli
                self._run_jobs[t, n] -= 1
        self._grace_jobs -= bool(grace)
        j.placed = []
        self.running.pop(j.id, None)

    def _account(self, j: JobRun, until: float, cause: str | None) -> None:
        """Split the GPU time since the job started into restart, useful work, checkpoints and (for
        an interruption) lost work; keep the checkpointed progress."""
        g = j.gpus
        elapsed = until - j.start_s
        restart = min(elapsed, j.restart_s) if j.restarting else 0.0
        run = max(0.0, elapsed - restart)
        seg = j.interval_s + j.cost_s
        if cause is None:  # finished: everything left was done
            done, ckpt = j.remaining_s, run - j.remaining_s
        elif math.isfinite(j.interval_s):
            k = min(math.floor(run / seg), max(0, math.ceil(j.remaining_s / j.interval_s) - 1))
            done, ckpt = k * j.interval_s, k * j.cost_s
        else:
            done, ckpt = 0.0, 0.0
        lost = max(0.0, run - done - ckpt)
        self.m.gpu_s["restart"] += g * restart
        self.m.gpu_s["useful"] += g * done
        self.m.gpu_s["checkpoint"] += g * max(0.0, ckpt)
        if cause:
            # the GPUs held after SIGTERM by a job that saved nothing in its grace period: "grace"
            held = min(lost, until - j.sigterm_s) if j.state == GRACE else 0.0
            self.m.gpu_s["grace"] += g * held
            self.m.gpu_s[f"lost_{cause}"] += g * (lost - held)
        self.busy_gpu_s += g * elapsed
        j.remaining_s = max(0.0, j.remaining_s - done)

    def _finish(self, sim, j: JobRun, epoch: int):
        if epoch != j.epoch or j.state not in (RUNNING, GRACE):
            return
        self._account(j, sim.now, None)
        self._done(j)
        self._release(j, "done")
        self._schedule_pass()

    def _done(self, j: JobRun) -> None:
        j.state, j.finish_s = DONE, self.sim.now
        self.end_s = max(self.end_s, self.sim.now)
        self.left -= 1
        if not self.left:
            self.sim.stop()

    def _interrupt(self, j: JobRun, cause: str) -> None:
        """Kill now: keep the last checkpoint, requeue."""
        self._account(j, self.sim.now, cause)
        j.interruptions += 1
        j.restarting = True
        j.epoch += 1
        self._release(j, cause)
        j.state = QUEUED
        self._queue(j).appendleft(j)

    def _fail(self, sim, n: int):
        self.m.failures += 1
        for jid in list(self.on_node[n]):
            self._interrupt(self.runs[jid], "failure")
        self.up[n] = False
        self._free[n] = 0
        sim.schedule(sim.now + self.cfg.repair_s, EventPriority.CAPACITY, self._repair, n)
        self._schedule_pass()

    def _repair(self, sim, n: int):
        self.up[n] = True
        self._free[n] = self._capacity[n] - sum(self.runs[jid].milli_on(n) for jid in self.on_node[n])
        sim.schedule(self._next_failure(), EventPriority.CAPACITY, self._fail, n)
        self._schedule_pass()

    @property
    def jobs_by_id(self) -> dict[int, JobRun]:
        """Each job's run, by job id (the same as ``runs``)."""
        return self.runs

    # -- results ---------------------------------------------------------------------------------------
    def utilisation_series(self, bins: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """(bin start times, share of GPUs busy in each bin) from the job runs (report.py)."""
        return utilisation_series(self.segments, self._capacity.sum() / MILLI, bins)

    def report(self) -> ClusterReport:
        """What the run did: GPU time by cause, utilisation, goodput, waits by tier (report.py)."""
        return build_report(self)
