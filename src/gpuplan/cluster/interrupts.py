"""Interruptions of running jobs in the cluster simulator (sim.py): spot reclaims (at a rate per
job, or a provider's reclaim events), and the grace period between SIGTERM and SIGKILL in which
a job that checkpoints on SIGTERM saves its work (Kubernetes terminationGracePeriodSeconds,
Slurm's GraceTime)."""

from __future__ import annotations

from collections import deque

import numpy as np

from gpuplan.cluster.des import EventPriority
from gpuplan.cluster.job import GRACE, QUEUED, RUNNING, JobRun
from gpuplan.cluster.scheduling import Scheduling


class Interruptions(Scheduling):
    """SIGTERM, the grace period and what it saves: ``ClusterSim`` is this with its events."""

    # the simulator's state and steps this part uses besides Scheduling's (set by ClusterSim)
    rng: np.random.Generator
    busy_gpu_s: float
    _holding: dict[int, bool]

    def _release(self, j: JobRun, outcome: str) -> None:
        raise NotImplementedError

    def _done(self, j: JobRun) -> None:
        raise NotImplementedError

    def _queue(self, j: JobRun) -> deque[JobRun]:
        raise NotImplementedError

    def _interrupt(self, j: JobRun, cause: str) -> None:
        raise NotImplementedError

    def _finish_time(self, j: JobRun, start: float) -> float:
        raise NotImplementedError

    def _finish(self, sim, j: JobRun, epoch: int):
        raise NotImplementedError

    def _reclaim(self, sim, j: JobRun, epoch: int):
        if epoch != j.epoch or j.state != RUNNING:
            return
        self.m.reclaims += 1
        self._begin_grace(j, "reclaim")

    def _reclaim_event(self, sim, gpus: float):
        """The provider takes back ``gpus`` GPUs of spot capacity: SIGTERM to running spot jobs,
        in random order, until they hold that many."""
        spot = sorted((j for j in self.running.values() if j.spot and j.state == RUNNING), key=lambda j: j.id)
        taken = 0.0
        for k in self.rng.permutation(len(spot)):
            if taken >= gpus:
                break
            self.m.reclaims += 1
            self._begin_grace(spot[k], "reclaim")
            taken += spot[k].gpus

    def _begin_grace(self, j: JobRun, cause: str) -> None:
        """SIGTERM now, SIGKILL after the grace period (or once a SIGTERM checkpoint is written)."""
        now, g = self.sim.now, self.cfg.grace_s
        if self._holding.get(j.id) is False:  # its GPUs now come free at the end of the grace period
            self._holding[j.id] = True
            self._grace_jobs += 1
            t = self._tier_index[j.tier]
            for n, milli in j.placed:
                self._run_milli[t, n] -= milli
                self._run_jobs[t, n] -= 1
                self._grace_milli[n] += milli
        j.state = GRACE
        j.epoch += 1
        j.sigterm_s = now
        if j.on_sigterm and g >= j.cost_s:
            # it stops and writes a checkpoint of everything done so far; the work counts as saved
            # once the write completes (a failure meanwhile loses it: _grace_saved never runs)
            self.sim.schedule(now + j.cost_s, EventPriority.CAPACITY, self._grace_saved, j, j.epoch)
        elif (finish := self._finish_time(j, j.start_s)) <= now + g:
            # it does not checkpoint on SIGTERM but runs on, and its work ends before SIGKILL would
            self.sim.schedule(finish, EventPriority.FINISH, self._finish, j, j.epoch)
        else:
            self.sim.schedule(now + g, EventPriority.CAPACITY, self._grace_end, j, j.epoch, cause)

    def _account_saved(self, j: JobRun, now: float) -> None:
        elapsed = now - j.start_s
        restart = min(elapsed, j.restart_s) if j.restarting else 0.0
        work = min(j.remaining_s, max(0.0, elapsed - restart))
        self.m.gpu_s["restart"] += j.gpus * restart
        self.m.gpu_s["useful"] += j.gpus * work
        self.busy_gpu_s += j.gpus * elapsed
        j.remaining_s -= work
        j.start_s = now

    def _grace_saved(self, sim, j: JobRun, epoch: int):
        if epoch != j.epoch:
            return
        self._account_saved(j, j.sigterm_s)  # the work up to SIGTERM, now on disk
        self.m.gpu_s["checkpoint"] += j.gpus * (sim.now - j.start_s)
        self.busy_gpu_s += j.gpus * (sim.now - j.start_s)
        j.restarting = True
        j.epoch += 1
        self._release(j, "checkpointed on SIGTERM")
        if j.remaining_s <= 0:
            self._done(j)
        else:
            j.state = QUEUED
            self._queue(j).appendleft(j)
        self._schedule_pass()

    def _grace_end(self, sim, j: JobRun, epoch: int, cause: str):
        if epoch != j.epoch:
            return
        self._interrupt(j, cause)
        self._schedule_pass()
