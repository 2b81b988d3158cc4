"""Placement, scheduling passes and preemption of the cluster simulator (sim.py), and the view of
it that scheduling policies and placements get (policies.ClusterView)."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from gpuplan.cluster.job import RUNNING, Job, JobRun
from gpuplan.cluster.policies import BLOCKED, PREEMPTING, STARTED, Outcome, Placement, Policy

if TYPE_CHECKING:  # pragma: no cover
    from gpuplan.cluster.config import ClusterConfig
    from gpuplan.cluster.des import Simulator
    from gpuplan.cluster.report import Metrics


class Scheduling:
    """The scheduling half of ``ClusterSim``: where a job can start, starting it through the
    policy's pass, and making room for it by preemption."""

    # the simulator's state this half reads (set by ClusterSim.__init__)
    cfg: ClusterConfig
    sim: Simulator
    m: Metrics
    policy: Policy
    placement: Placement
    runs: dict[int, JobRun]
    running: dict[int, JobRun]
    queues: dict[int, deque[JobRun]]
    on_node: list[set[int]]
    up: np.ndarray
    cap: int
    models: np.ndarray | None
    _masks: dict[frozenset, tuple[np.ndarray | None, int]]
    _capacity: np.ndarray
    _free: np.ndarray
    _rack: np.ndarray
    _tier_index: dict[int, int]
    _run_milli: np.ndarray
    _run_jobs: np.ndarray
    _grace_milli: np.ndarray
    _grace_jobs: int

    def _start(self, j: JobRun, placed: list) -> None:
        raise NotImplementedError

    def _begin_grace(self, j: JobRun, cause: str) -> None:
        raise NotImplementedError

    # -- what policies see (policies.ClusterView) ------------------------------------------------------
    @staticmethod
    def _read_only(a: np.ndarray) -> np.ndarray:
        v = a.view()
        v.flags.writeable = False
        return v

    @property
    def capacity(self) -> np.ndarray:
        """Milli-GPUs of each node (read-only)."""
        return self._read_only(self._capacity)

    @property
    def free(self) -> np.ndarray:
        """Milli-GPUs free on each node now (read-only)."""
        return self._read_only(self._free)

    @property
    def rack(self) -> np.ndarray:
        """The rack of each node (read-only)."""
        return self._read_only(self._rack)

    @property
    def queue_depth(self) -> int:
        return self.cfg.queue_depth

    def _allowed(self, j: Job) -> tuple[np.ndarray | None, int]:
        """The nodes a job may use (None: all) and the biggest of them, in milli-GPUs."""
        if j.gpu_models is None or self.models is None:
            return None, self.cap
        if j.gpu_models not in self._masks:
            mask = np.isin(self.models, list(j.gpu_models))
            self._masks[j.gpu_models] = mask, int(self._capacity[mask].max()) if mask.any() else 0
        return self._masks[j.gpu_models]

    # -- scheduling ------------------------------------------------------------------------------------
    def _place(self, j: JobRun) -> list | None:
        """Where ``j`` can start now, as [(node, milli-GPUs)], or None."""
        need = j.milli
        mask, cap = self._allowed(j.job)
        if need <= cap:
            fits = self._free >= need
            if mask is not None:
                fits &= mask
            ok = np.nonzero(fits)[0]
            return [(self.placement.node(self, j, ok), need)] if len(ok) else None
        whole = (self._free == self._capacity) & self.up
        if mask is not None:
            whole &= mask
        whole = np.nonzero(whole)[0]
        if self._capacity[whole].sum() < need:
            return None
        out, left = [], need
        for n in self.placement.gang(self, j, whole):
            take = int(min(self._capacity[n], left))
            out.append((int(n), take))
            left -= take
            if left <= 0:
                return out
        return None

    def queues_by_tier(self) -> list[deque[JobRun]]:
        """The queues, highest tier first (for scheduling policies)."""
        return [self.queues[t] for t in sorted(self.queues, reverse=True)]

    def try_start(self, q: deque[JobRun], i: int) -> Outcome:
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

    def _preempt_for(self, j: JobRun) -> bool:
        """Make room for ``j`` by sending SIGTERM to lower-tier jobs, node by node so the room is
        where ``j`` can use it: for a one-node job, the node whose victims lose the least unsaved
        work; for a gang, the cheapest nodes that can be emptied entirely. GPUs of jobs already in
        their grace period count as coming free, so a job whose room is on its way preempts no one
        more. True when room is on its way: the job waits for it, and the policy must not hand
        that room to jobs behind it (else they restart on it, are preempted again, and so on)."""
        below = self._tier_index[j.tier]  # the tiers below j's: rows :below of the per-tier counts
        if not self._grace_jobs and not self._run_jobs[:below].any():
            return False  # no job in its grace period, none of a lower tier running
        mask, cap = self._allowed(j.job)
        plans: list[tuple[float, int, list[JobRun]]] = []  # (cost, node, victims)
        # only the nodes that can give a plan (the counts the simulator keeps say which, exactly):
        # for a one-node job, those big enough where the free, coming and lower-tier GPUs hold it;
        # for a gang, those where no job of j's tier or above is running
        nodes = self.up if mask is None else self.up & mask
        if j.milli <= cap:
            room = self._free + self._grace_milli + self._run_milli[:below].sum(axis=0)
            nodes = nodes & (self._capacity >= j.milli) & (room >= j.milli)
        else:
            nodes = nodes & ~self._run_jobs[below:].any(axis=0)
        one_node = j.milli <= cap
        for n in map(int, np.flatnonzero(nodes)):
            on = [self.runs[i] for i in self.on_node[n]]
            # the lower-tier running jobs here, cheapest first: (unsaved GPU-seconds, job)
            low = sorted(
                ((self._unsaved(v) * v.gpus, v) for v in on if v.state == RUNNING and v.tier < j.tier),
                key=lambda cv: cv[0],
            )
            if one_node:
                need, chosen = j.milli - int(self._free[n]) - int(self._grace_milli[n]), []
                for c, v in low:
                    if need <= 0:
                        break
                    chosen.append((c, v))
                    need -= v.milli_on(n)
                if need <= 0:
                    plans.append((sum(c for c, _ in chosen), n, [v for _, v in chosen]))
                    if plans[-1][0] == 0:  # no later node beats it: costs are never negative
                        break
            else:  # every job here can go (``nodes`` holds only those)
                plans.append((sum(c for c, _ in low), n, [v for _, v in low]))
        if j.milli <= cap:
            if not plans:
                return False
            plans = [min(plans, key=lambda p: p[:2])]
        else:  # the cheapest nodes to empty until their GPUs hold the gang
            emptied: list[tuple[float, int, list[JobRun]]] = []
            room = 0
            for p in sorted(plans, key=lambda p: p[:2]):
                if room >= j.milli:
                    break
                emptied.append(p)
                room += int(self._capacity[p[1]])
            if room < j.milli:
                return False
            plans = emptied
        victims = {v.id: v for _, _, vs in plans for v in vs}
        for v in victims.values():
            v.preemptions += 1
            self.m.preemptions += 1
            self._begin_grace(v, "preemption")
        return True

    def _unsaved(self, v: JobRun) -> float:
        run = max(0.0, self.sim.now - v.start_s - (v.restart_s if v.restarting else 0.0))
        if not math.isfinite(v.interval_s):
            return run
        return run % (v.interval_s + v.cost_s)
