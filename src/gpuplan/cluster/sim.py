"""A GPU cluster running a mix of jobs: gang scheduling, priority tiers, preemption with grace
periods, spot reclaims, hardware failures and checkpoint policies.

Capacity is counted in milli-GPUs so sharing tasks (a fraction of one GPU, as in Alibaba's
openb trace) and gangs of whole GPUs live on the same nodes. Nodes may differ in size and GPU
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

Every time is in seconds; GPU-seconds are reported by cause.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gpuplan.cluster.des import Simulator
from gpuplan.cluster.policies import BLOCKED, PLACEMENTS, POLICIES, PREEMPTING, STARTED, Placement, Policy
from gpuplan.errors import GpuplanError, require
from gpuplan.estimate.checkpoint_interval import daly_interval

MILLI = 1000
# Llama 3 (Dubey et al. 2024, section 3.3.4): 419 unexpected interruptions in 54 days on 16,384
# H100s (2,048 nodes of 8): one per 264 node-days.
LLAMA3_NODE_MTBF_S = 54 * 86400 * 2048 / 419
# Meta's research clusters (Kokolis et al. 2024, "Revisiting Reliability in Large-Scale Machine
# Learning Research Clusters", arXiv 2410.21680): 6.50 (RSC-1) and 2.34 (RSC-2) failures per
# 1,000 node-days of A100 nodes.
RSC1_NODE_MTBF_S = 1000 / 6.50 * 86400
RSC2_NODE_MTBF_S = 1000 / 2.34 * 86400
NODE_MTBF_PRESETS = {"llama3": LLAMA3_NODE_MTBF_S, "rsc1": RSC1_NODE_MTBF_S, "rsc2": RSC2_NODE_MTBF_S}


@dataclass
class Job:
    id: int
    arrival_s: float
    gpus: float  # whole GPUs, or a fraction of one (sharing tasks)
    work_s: float  # GPU-busy time the job needs, checkpoints and restarts not included
    tier: int = 0
    spot: bool = False
    checkpoint: str = "none"  # none | <seconds> | daly | sigterm
    interval_s: float = math.inf
    cost_s: float = 0.0
    restart_s: float = 0.0
    gpu_models: frozenset[str] | None = None  # GPU models it can run on (None: any)
    # state
    remaining_s: float = 0.0
    state: str = "new"  # queued | running | grace | done
    start_s: float = 0.0
    restarting: bool = False
    epoch: int = 0
    placed: list = field(default_factory=list)  # (node, milli)
    first_start_s: float = math.nan
    finish_s: float = math.nan
    preemptions: int = 0
    interruptions: int = 0

    @property
    def milli(self) -> int:
        return int(round(self.gpus * MILLI))

    def milli_on(self, node: int) -> int:
        return sum(m for n, m in self.placed if n == node)

    @property
    def on_sigterm(self) -> bool:
        return self.checkpoint == "sigterm"


@dataclass
class ClusterConfig:
    nodes: int
    gpus_per_node: int = 8
    node_gpus: tuple[int, ...] | None = None  # GPUs of each node when they differ (overrides the two above)
    node_models: tuple[str, ...] | None = None  # GPU model of each node (None: all the same)
    nodes_per_rack: int = 32
    policy: str | Policy = "priority"
    preempt: bool = True
    placement: str | Placement = "pack"
    grace_s: float = 120.0  # SIGTERM to SIGKILL for preempted jobs and spot reclaims
    node_mtbf_s: float | None = None  # None: no failures; e.g. LLAMA3_NODE_MTBF_S
    weibull_shape: float | None = None  # per-node Weibull inter-failure times (None: exponential)
    repair_s: float = 3600.0
    spot_reclaim_per_hour: float = 0.0  # per running spot job
    reclaims: tuple[tuple[float, float], ...] = ()  # (time_s, GPUs) spot reclaim events, e.g. read_reclaims()
    price_per_gpu_hour: float = 0.0
    queue_depth: int = 100  # jobs the backfill pass looks at (Slurm's default_queue_depth)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.node_gpus is not None:
            require(len(self.node_gpus) >= 1 and min(self.node_gpus) >= 1, "nodes", "every node needs at least one GPU")
            self.nodes = len(self.node_gpus)
            self.gpus_per_node = max(self.node_gpus)
        require(self.nodes >= 1 and self.gpus_per_node >= 1, "nodes", "the cluster needs nodes with GPUs")
        require(
            self.node_models is None or len(self.node_models) == self.nodes,
            "node_models",
            f"needs one GPU model per node ({self.nodes}), got {len(self.node_models or ())}",
        )
        require(
            isinstance(self.policy, Policy) or self.policy in POLICIES,
            "policy",
            f"unknown policy {self.policy!r}",
            f"use one of {', '.join(POLICIES)}, or pass a Policy",
        )
        require(
            isinstance(self.placement, Placement) or self.placement in PLACEMENTS,
            "placement",
            f"unknown placement {self.placement!r}",
            f"use one of {', '.join(PLACEMENTS)}, or pass a Placement",
        )
        require(
            all(t >= 0 and g > 0 for t, g in self.reclaims),
            "reclaims",
            "reclaim events need a non-negative time and a positive GPU count",
        )
        for name in ("grace_s", "repair_s", "spot_reclaim_per_hour"):
            require(getattr(self, name) >= 0, name, "must not be negative")
        require(self.node_mtbf_s is None or self.node_mtbf_s > 0, "node_mtbf", "must be positive")


@dataclass
class Metrics:
    gpu_s: dict = field(
        default_factory=lambda: {
            "useful": 0.0,
            "checkpoint": 0.0,
            "restart": 0.0,
            "lost_failure": 0.0,
            "lost_preemption": 0.0,
            "lost_reclaim": 0.0,
            "grace": 0.0,
        }
    )
    preemptions: int = 0
    failures: int = 0
    reclaims: int = 0


class ClusterSim:
    def __init__(self, cfg: ClusterConfig, jobs: list[Job]):
        self.cfg = cfg
        gpus = np.array(cfg.node_gpus if cfg.node_gpus is not None else [cfg.gpus_per_node] * cfg.nodes)
        capacity = gpus.astype(np.int64) * MILLI
        self.capacity = capacity
        self.cap = int(capacity.max())  # the biggest node: jobs up to it run on one node, larger ones as gangs
        self.models = np.array(cfg.node_models) if cfg.node_models is not None else None
        self._masks: dict[frozenset, tuple[np.ndarray, int]] = {}
        for j in jobs:
            require(
                j.gpus > 0 and j.work_s >= 0 and j.arrival_s >= 0,
                "jobs",
                f"job {j.id}: GPUs must be positive and times non-negative",
            )
            require(j.gpus <= 1 or j.gpus == int(j.gpus), "jobs", f"job {j.id}: more than one GPU must be whole GPUs")
            why = self.never_fits(j)
            require(why is None, "jobs", f"job {j.id} {why[1] if why else ''}", "drop it or use a bigger cluster")
            j.remaining_s = j.work_s
            if j.checkpoint == "daly":
                mtbf = self._job_mtbf(j)
                j.interval_s = daly_interval(j.cost_s, mtbf) if mtbf else math.inf
            elif j.checkpoint not in ("none", "sigterm"):
                j.interval_s = float(j.checkpoint)
        self.jobs = jobs
        self.policy = POLICIES[cfg.policy] if isinstance(cfg.policy, str) else cfg.policy
        self.placement = PLACEMENTS[cfg.placement] if isinstance(cfg.placement, str) else cfg.placement
        self.free = capacity.copy()
        self.up = np.ones(cfg.nodes, dtype=bool)
        self.rack = np.arange(cfg.nodes) // cfg.nodes_per_rack
        self.on_node: list[set[int]] = [set() for _ in range(cfg.nodes)]
        self.running: dict[int, Job] = {}  # running or in their grace period
        self.segments: list[tuple] = []  # (job, tier, nodes, start, end, outcome): for traces and plots
        self._run_start: dict[int, float] = {}
        self.queues: dict[int, deque] = {}
        self.rng = np.random.default_rng(cfg.seed)
        self.m = Metrics()
        self.sim = Simulator()
        self.busy_gpu_s = 0.0
        self.end_s = 0.0
        self.left = len(jobs)

    def _allowed(self, j: Job) -> tuple[np.ndarray | None, int]:
        """The nodes a job may use (None: all) and the biggest of them, in milli-GPUs."""
        if j.gpu_models is None or self.models is None:
            return None, self.cap
        if j.gpu_models not in self._masks:
            mask = np.isin(self.models, list(j.gpu_models))
            self._masks[j.gpu_models] = mask, int(self.capacity[mask].max()) if mask.any() else 0
        return self._masks[j.gpu_models]

    def never_fits(self, j: Job) -> tuple[str, str] | None:
        """Why a job can never run on this cluster, as (reason, detail): the reason to count skipped
        jobs by, the detail for an error about this job. None: it can run."""
        mask, _ = self._allowed(j)
        named = sorted(j.gpu_models or ())  # a mask exists only for a job that names GPU models
        if mask is not None and not mask.any():
            why = f"needs GPU model {' or '.join(named)}, which no node has"
            return why, why
        have = self.capacity.sum() if mask is None else self.capacity[mask].sum()
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
                    "restarts leave no time for work: use a longer --node-mtbf, a shorter --restart or fewer "
                    "reclaims (or fewer --jobs)",
                )

        for j in self.jobs:
            self.sim.schedule(j.arrival_s, 1, self._arrive, j)
        if self.cfg.node_mtbf_s:
            for n in range(self.cfg.nodes):
                self.sim.schedule(self._next_failure(), 0, self._fail, n)
        for t, g in self.cfg.reclaims:
            self.sim.schedule(t, 0, self._reclaim_event, g)
        self.sim.run(check=check)
        return self

    def _next_failure(self) -> float:
        m, k = self.cfg.node_mtbf_s, self.cfg.weibull_shape
        assert m is not None  # failures are scheduled only when the config names a node MTBF
        if k:
            scale = m / math.gamma(1 + 1 / k)
            return self.sim.now + scale * self.rng.weibull(k)
        return self.sim.now + self.rng.exponential(m)

    def _queue(self, j: Job) -> deque:
        return self.queues.setdefault(j.tier if self.policy.tiered else 0, deque())

    def _arrive(self, sim, j: Job):
        j.state = "queued"
        self._queue(j).append(j)
        self._schedule_pass()

    def _finish_time(self, j: Job, start: float) -> float:
        w = j.remaining_s
        n_ckpt = max(0, math.ceil(w / j.interval_s) - 1) if math.isfinite(j.interval_s) and w > 0 else 0
        return start + (j.restart_s if j.restarting else 0.0) + w + n_ckpt * j.cost_s

    def _start(self, j: Job, placed: list) -> None:
        now = self.sim.now
        for n, milli in placed:
            self.free[n] -= milli
            self.on_node[n].add(j.id)
        j.placed, j.state, j.start_s = placed, "running", now
        self.running[j.id] = j
        self._run_start[j.id] = now
        if math.isnan(j.first_start_s):
            j.first_start_s = now
        j.epoch += 1
        self.sim.schedule(self._finish_time(j, now), 2, self._finish, j, j.epoch)
        if j.spot and self.cfg.spot_reclaim_per_hour:
            self.sim.schedule(
                now + self.rng.exponential(3600 / self.cfg.spot_reclaim_per_hour), 0, self._reclaim, j, j.epoch
            )

    def _release(self, j: Job, outcome: str) -> None:
        self.segments.append(
            (
                j.id,
                j.tier,
                tuple(n for n, _ in j.placed),
                self._run_start.pop(j.id, self.sim.now),
                self.sim.now,
                outcome,
                j.gpus,
            )
        )
        for n, milli in j.placed:
            if self.up[n]:
                self.free[n] += milli
            self.on_node[n].discard(j.id)
        j.placed = []
        self.running.pop(j.id, None)

    def _account(self, j: Job, until: float, cause: str | None) -> None:
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
            self.m.gpu_s[f"lost_{cause}"] += g * lost
        self.busy_gpu_s += g * elapsed
        j.remaining_s = max(0.0, j.remaining_s - done)

    def _finish(self, sim, j: Job, epoch: int):
        if epoch != j.epoch or j.state not in ("running", "grace"):
            return
        self._account(j, sim.now, None)
        self._done(j)
        self._release(j, "done")
        self._schedule_pass()

    def _done(self, j: Job) -> None:
        j.state, j.finish_s = "done", self.sim.now
        self.end_s = max(self.end_s, self.sim.now)
        self.left -= 1
        if not self.left:
            self.sim.stop()

    def _interrupt(self, j: Job, cause: str) -> None:
        """Kill now: keep the last checkpoint, requeue."""
        self._account(j, self.sim.now, cause)
        j.interruptions += 1
        j.restarting = True
        j.epoch += 1
        self._release(j, cause)
        j.state = "queued"
        self._queue(j).appendleft(j)

    def _fail(self, sim, n: int):
        self.m.failures += 1
        for jid in list(self.on_node[n]):
            self._interrupt(self.jobs_by_id[jid], "failure")
        self.up[n] = False
        self.free[n] = 0
        sim.schedule(sim.now + self.cfg.repair_s, 0, self._repair, n)
        self._schedule_pass()

    def _repair(self, sim, n: int):
        self.up[n] = True
        self.free[n] = self.capacity[n] - sum(self.jobs_by_id[jid].milli_on(n) for jid in self.on_node[n])
        sim.schedule(self._next_failure(), 0, self._fail, n)
        self._schedule_pass()

    def _reclaim(self, sim, j: Job, epoch: int):
        if epoch != j.epoch or j.state != "running":
            return
        self.m.reclaims += 1
        self._begin_grace(j, "reclaim")

    def _reclaim_event(self, sim, gpus: float):
        """The provider takes back ``gpus`` GPUs of spot capacity: SIGTERM to running spot jobs,
        in random order, until they hold that many."""
        spot = sorted((j for j in self.running.values() if j.spot and j.state == "running"), key=lambda j: j.id)
        taken = 0.0
        for k in self.rng.permutation(len(spot)):
            if taken >= gpus:
                break
            self.m.reclaims += 1
            self._begin_grace(spot[k], "reclaim")
            taken += spot[k].gpus

    def _begin_grace(self, j: Job, cause: str) -> None:
        """SIGTERM now, SIGKILL after the grace period (or once a SIGTERM checkpoint is written)."""
        now, g = self.sim.now, self.cfg.grace_s
        j.state = "grace"
        j.epoch += 1
        if j.on_sigterm and g >= j.cost_s:
            # everything done so far is saved by a checkpoint written in the grace window
            self._account_saved(j, now)
            self.sim.schedule(now + j.cost_s, 0, self._grace_saved, j, j.epoch)
        else:
            self.sim.schedule(now + g, 0, self._grace_end, j, j.epoch, cause)

    def _account_saved(self, j: Job, now: float) -> None:
        elapsed = now - j.start_s
        restart = min(elapsed, j.restart_s) if j.restarting else 0.0
        work = min(j.remaining_s, max(0.0, elapsed - restart))
        self.m.gpu_s["restart"] += j.gpus * restart
        self.m.gpu_s["useful"] += j.gpus * work
        self.busy_gpu_s += j.gpus * elapsed
        j.remaining_s -= work
        j.start_s = now

    def _grace_saved(self, sim, j: Job, epoch: int):
        if epoch != j.epoch:
            return
        self.m.gpu_s["checkpoint"] += j.gpus * (sim.now - j.start_s)
        self.busy_gpu_s += j.gpus * (sim.now - j.start_s)
        j.restarting = True
        j.epoch += 1
        self._release(j, "checkpointed on SIGTERM")
        if j.remaining_s <= 0:
            self._done(j)
        else:
            j.state = "queued"
            self._queue(j).appendleft(j)
        self._schedule_pass()

    def _grace_end(self, sim, j: Job, epoch: int, cause: str):
        if epoch != j.epoch:
            return
        self._interrupt(j, cause)
        self._schedule_pass()

    # -- scheduling ------------------------------------------------------------------------------------
    def _place(self, j: Job) -> list | None:
        """Where ``j`` can start now, as [(node, milli-GPUs)], or None."""
        need = j.milli
        mask, cap = self._allowed(j)
        if need <= cap:
            fits = self.free >= need
            if mask is not None:
                fits &= mask
            ok = np.nonzero(fits)[0]
            return [(self.placement.node(self, j, ok), need)] if len(ok) else None
        whole = (self.free == self.capacity) & self.up
        if mask is not None:
            whole &= mask
        whole = np.nonzero(whole)[0]
        if self.capacity[whole].sum() < need:
            return None
        out, left = [], need
        for n in self.placement.gang(self, j, whole):
            take = int(min(self.capacity[n], left))
            out.append((int(n), take))
            left -= take
            if left <= 0:
                return out
        return None

    def queues_by_tier(self) -> list[deque]:
        """The queues, highest tier first (for scheduling policies)."""
        return [self.queues[t] for t in sorted(self.queues, reverse=True)]

    def try_start(self, q: deque, i: int) -> str:
        """Start the ``i``-th job of queue ``q`` if it fits (STARTED; it leaves the queue), else make
        room by preemption (PREEMPTING: victims are in their grace period), else BLOCKED."""
        j = q[i]
        placed = self._place(j)
        if placed is not None:
            del q[i]
            self._start(j, placed)
            return STARTED
        if self.cfg.preempt and self.policy.preempts and self._preempt_for(j):
            return PREEMPTING
        return BLOCKED

    def _schedule_pass(self) -> None:
        self.policy.schedule(self)

    def _preempt_for(self, j: Job) -> bool:
        """Make room for ``j`` by sending SIGTERM to lower-tier jobs, node by node so the room is
        where ``j`` can use it: for a one-node job, the node whose victims lose the least unsaved
        work; for a gang, the cheapest nodes that can be emptied entirely. GPUs of jobs already in
        their grace period count as coming free, so a job whose room is on its way preempts no one
        more. True when room is on its way: the job waits for it, and the policy must not hand
        that room to jobs behind it (else they restart on it, are preempted again, and so on)."""
        if not any(v.state == "grace" or (v.state == "running" and v.tier < j.tier) for v in self.running.values()):
            return False
        mask, cap = self._allowed(j)
        plans: list[tuple[float, int, list[Job]]] = []  # (cost, node, victims)
        for n in map(int, np.flatnonzero(self.up if mask is None else self.up & mask)):
            on = [self.jobs_by_id[i] for i in self.on_node[n]]
            coming = int(self.free[n]) + sum(v.milli_on(n) for v in on if v.state == "grace")
            low = sorted(
                (v for v in on if v.state == "running" and v.tier < j.tier), key=lambda v: self._unsaved(v) * v.gpus
            )
            if j.milli <= cap:
                if self.capacity[n] < j.milli:
                    continue
                need, chosen = j.milli - coming, []
                for v in low:
                    if need <= 0:
                        break
                    chosen.append(v)
                    need -= v.milli_on(n)
                if need <= 0:
                    plans.append((sum(self._unsaved(v) * v.gpus for v in chosen), n, chosen))
            elif len(low) + sum(1 for v in on if v.state == "grace") == len(on):  # every job here can go
                plans.append((sum(self._unsaved(v) * v.gpus for v in low), n, low))
        if j.milli <= cap:
            if not plans:
                return False
            plans = [min(plans, key=lambda p: p[:2])]
        else:  # the cheapest nodes to empty until their GPUs hold the gang
            emptied: list[tuple[float, int, list[Job]]] = []
            room = 0
            for p in sorted(plans, key=lambda p: p[:2]):
                if room >= j.milli:
                    break
                emptied.append(p)
                room += int(self.capacity[p[1]])
            if room < j.milli:
                return False
            plans = emptied
        victims = {v.id: v for _, _, vs in plans for v in vs}
        for v in victims.values():
            v.preemptions += 1
            self.m.preemptions += 1
            self._begin_grace(v, "preemption")
        return True

    def _unsaved(self, v: Job) -> float:
        run = max(0.0, self.sim.now - v.start_s - (v.restart_s if v.restarting else 0.0))
        if not math.isfinite(v.interval_s):
            return run
        return run % (v.interval_s + v.cost_s)

    @property
    def jobs_by_id(self) -> dict[int, Job]:
        if not hasattr(self, "_by_id"):
            self._by_id = {j.id: j for j in self.jobs}
        return self._by_id

    # -- results ---------------------------------------------------------------------------------------
    def utilisation_series(self, bins: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """(bin start times, share of GPUs busy in each bin) from the job runs: each run's GPU-time
        inside a bin is the difference of its cumulative busy time at the bin's two edges."""
        if not self.segments:
            return np.zeros(0), np.zeros(0)
        seg = np.array([(s[3], s[4], s[6]) for s in self.segments], dtype=float)
        start, end, g = seg[:, 0], seg[:, 1], seg[:, 2]
        edges = np.linspace(start.min(), end.max(), bins + 1)
        width = edges[1] - edges[0]
        if width <= 0:
            return edges[:-1], np.zeros(bins)
        # GPU-seconds done by time x: sum of g * clip(x - start, 0, end - start), in chunks of runs
        done = np.zeros(bins + 1)
        for lo in range(0, len(seg), 4096):
            s_, e_, g_ = start[lo : lo + 4096], end[lo : lo + 4096], g[lo : lo + 4096]
            done += (np.clip(edges[:, None] - s_[None, :], 0.0, (e_ - s_)[None, :]) * g_[None, :]).sum(axis=1)
        return edges[:-1], np.diff(done) / (width * self.capacity.sum() / MILLI)

    def report(self) -> dict:
        cfg, jobs = self.cfg, self.jobs
        gpus = int(self.capacity.sum()) // MILLI
        span = max(self.end_s, max((j.arrival_s for j in jobs), default=0.0)) - min(
            (j.arrival_s for j in jobs), default=0.0
        )
        done = [j for j in jobs if j.state == "done"]
        by_tier: dict = {}
        for j in done:
            t = by_tier.setdefault(j.tier, {"jobs": 0, "wait": [], "jct": []})
            t["jobs"] += 1
            t["wait"].append(j.first_start_s - j.arrival_s)
            t["jct"].append(j.finish_s - j.arrival_s)
        hours = {k: v / 3600 for k, v in self.m.gpu_s.items()}
        t_s, busy = self.utilisation_series()
        lost = sum(v for k, v in hours.items() if k != "useful")
        return {
            "gpus": gpus,
            "jobs": len(jobs),
            "finished": len(done),
            "makespan_s": span,
            "utilisation": self.busy_gpu_s / (gpus * span) if span else 0.0,
            "goodput": self.m.gpu_s["useful"] / (gpus * span) if span else 0.0,
            "gpu_hours": hours,
            "gpu_hours_lost": lost,
            "usd_lost": lost * cfg.price_per_gpu_hour,
            "usd_lost_by_cause": {k: v * cfg.price_per_gpu_hour for k, v in hours.items() if k != "useful"},
            "preemptions": self.m.preemptions,
            "failures": self.m.failures,
            "reclaims": self.m.reclaims,
            "events": self.sim.events,
            "utilisation_over_time": {"t_s": t_s.tolist(), "busy_fraction": busy.tolist()},
            "tiers": {
                str(t): {
                    "jobs": v["jobs"],
                    "mean_wait_s": float(np.mean(v["wait"])),
                    "p99_wait_s": float(np.percentile(v["wait"], 99)),
                    "mean_jct_s": float(np.mean(v["jct"])),
                    # the whole distribution, percentile 0 to 100: its tail is what a mean hides
                    "wait_quantiles_s": [float(x) for x in np.percentile(v["wait"], np.arange(101))],
                }
                for t, v in sorted(by_tier.items())
            },
        }
