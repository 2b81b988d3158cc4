"""Scheduling and placement policies of the cluster simulator, pluggable.

A *scheduling policy* decides which queued jobs a scheduling pass tries to start, and in what
order; the simulator does the rest (placing, preempting, accounting) through
``ClusterView.try_start``. A *placement* decides where a job that fits goes. Pass an instance of a
subclass as ``ClusterConfig.policy`` or ``ClusterConfig.placement`` to plug in your own; the names
in ``POLICIES`` and ``PLACEMENTS`` are the built-in ones.

Built-in scheduling (as in Slurm's sched/builtin and sched/backfill, without reservations):

* ``fifo``: one queue in arrival order; the head of the queue blocks everything behind it. Tiers
  mean nothing to it, so it never preempts (a victim requeued at the head would take its GPUs
  straight back).
* ``priority``: one queue per tier, highest first; a tier's head blocks its tier and every lower one.
* ``backfill``: as priority, but when a job cannot start, later jobs (up to ``queue_depth``, Slurm's
  ``bf_max_job_test``) that fit now start in its place.

Built-in placement:

* ``pack``: a job that fits on one node goes to the fullest node it fits on (best fit), which
  keeps whole nodes free for gangs;
* ``spread``: the emptiest node (worst fit), which spreads load and failures;
* ``topology``: as pack, and a gang takes its nodes rack by rack, from the rack with the most free
  whole nodes, so it spans as few racks as possible.

A gang (a job bigger than the biggest node it may use) always takes whole free nodes.

Policies see the simulator only through :class:`ClusterView`: the queues, ``try_start``, and the
nodes' capacity, free GPUs and racks (read-only arrays in milli-GPUs); the simulator's other state
is its own.
"""

from __future__ import annotations

from collections import deque
from enum import StrEnum
from typing import Protocol

import numpy as np

from gpuplan.cluster.job import JobRun


class Outcome(StrEnum):
    """What ``try_start`` did with a queued job; compares equal to its name."""

    STARTED = "started"  # it runs now and has left its queue
    PREEMPTING = "preempting"  # room is being made (victims in their grace period): it waits for it
    BLOCKED = "blocked"  # it cannot start, and no preemption can make room


STARTED, PREEMPTING, BLOCKED = Outcome.STARTED, Outcome.PREEMPTING, Outcome.BLOCKED


class ClusterView(Protocol):
    """What a scheduling policy or a placement may see and do of the simulator."""

    @property
    def queue_depth(self) -> int:
        """Jobs a backfill pass looks at per queue (Slurm's ``bf_max_job_test``)."""
        ...

    @property
    def capacity(self) -> np.ndarray:
        """Milli-GPUs of each node."""
        ...

    @property
    def free(self) -> np.ndarray:
        """Milli-GPUs free on each node now."""
        ...

    @property
    def rack(self) -> np.ndarray:
        """The rack of each node."""
        ...

    def queues_by_tier(self) -> list[deque[JobRun]]:
        """The queues, highest tier first (one queue when the policy is not tiered)."""
        ...

    def try_start(self, q: deque[JobRun], i: int) -> Outcome:
        """Start the ``i``-th job of ``q`` if it fits, else preempt for it if allowed, else BLOCKED."""
        ...


class Policy:
    """Serve the queues in one scheduling pass. ``tiered``: one queue per tier, served highest
    tier first; otherwise one queue in arrival order. ``preempts``: whether a job that does not
    fit may preempt lower tiers (with ``ClusterConfig.preempt``)."""

    name = "custom"
    tiered = True
    preempts = True

    def schedule(self, sim: ClusterView) -> None:
        raise NotImplementedError


def _head_of_line(sim: ClusterView) -> None:
    for q in sim.queues_by_tier():
        while q:
            if sim.try_start(q, 0) != STARTED:
                return  # the head waits: it holds back its tier and every lower one


class Fifo(Policy):
    name, tiered, preempts = "fifo", False, False

    def schedule(self, sim: ClusterView) -> None:
        _head_of_line(sim)


class Priority(Policy):
    name = "priority"

    def schedule(self, sim: ClusterView) -> None:
        _head_of_line(sim)


class Backfill(Policy):
    name = "backfill"

    def schedule(self, sim: ClusterView) -> None:
        depth = sim.queue_depth
        for q in sim.queues_by_tier():
            i = 0
            while i < min(len(q), depth):
                outcome = sim.try_start(q, i)
                if outcome == PREEMPTING:
                    return  # room is being made for this job: nothing below it may take it
                if outcome == BLOCKED:
                    i += 1


class Placement:
    """Where a job goes. ``node``: one of ``candidates`` (node indices where it fits now) for a job
    that fits on one node; ``gang``: the order in which a gang takes the free whole nodes
    ``candidates``."""

    name = "custom"

    def node(self, sim: ClusterView, job: JobRun, candidates: np.ndarray) -> int:
        raise NotImplementedError

    def gang(self, sim: ClusterView, job: JobRun, candidates: np.ndarray) -> np.ndarray:
        return candidates[np.argsort(-sim.capacity[candidates], kind="stable")]  # biggest first: fewest nodes


class Pack(Placement):
    name = "pack"

    def node(self, sim: ClusterView, job: JobRun, candidates: np.ndarray) -> int:
        return int(candidates[np.argmin(sim.free[candidates])])


class Spread(Placement):
    name = "spread"

    def node(self, sim: ClusterView, job: JobRun, candidates: np.ndarray) -> int:
        return int(candidates[np.argmax(sim.free[candidates])])


class Topology(Pack):
    name = "topology"

    def gang(self, sim: ClusterView, job: JobRun, candidates: np.ndarray) -> np.ndarray:
        racks, counts = np.unique(sim.rack[candidates], return_counts=True)
        order = np.argsort(-counts, kind="stable")  # the rack with the most free whole nodes first
        return np.concatenate([candidates[sim.rack[candidates] == racks[i]] for i in order])


POLICIES: dict[str, Policy] = {p.name: p for p in (Fifo(), Priority(), Backfill())}
PLACEMENTS: dict[str, Placement] = {p.name: p for p in (Pack(), Spread(), Topology())}
