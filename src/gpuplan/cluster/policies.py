"""Scheduling and placement policies of the cluster simulator, pluggable.

A *scheduling policy* decides which queued jobs a scheduling pass tries to start, and in what
order; the simulator does the rest (placing, preempting, accounting) through
``ClusterSim.try_start``. A *placement* decides where a job that fits goes. Pass an instance of a
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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from gpuplan.cluster.sim import ClusterSim, Job

STARTED, PREEMPTING, BLOCKED = "started", "preempting", "blocked"


class Policy:
    """Serve the queues in one scheduling pass. ``tiered``: one queue per tier, served highest
    tier first; otherwise one queue in arrival order. ``preempts``: whether a job that does not
    fit may preempt lower tiers (with ``ClusterConfig.preempt``)."""

    name = "custom"
    tiered = True
    preempts = True

    def schedule(self, sim: ClusterSim) -> None:
        raise NotImplementedError


def _head_of_line(sim: ClusterSim) -> None:
    for q in sim.queues_by_tier():
        while q:
            if sim.try_start(q, 0) != STARTED:
                return  # the head waits: it holds back its tier and every lower one


class Fifo(Policy):
    name, tiered, preempts = "fifo", False, False

    def schedule(self, sim: ClusterSim) -> None:
        _head_of_line(sim)


class Priority(Policy):
    name = "priority"

    def schedule(self, sim: ClusterSim) -> None:
        _head_of_line(sim)


class Backfill(Policy):
    name = "backfill"

    def schedule(self, sim: ClusterSim) -> None:
        depth = sim.cfg.queue_depth
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

    def node(self, sim: ClusterSim, job: Job, candidates: np.ndarray) -> int:
        raise NotImplementedError

    def gang(self, sim: ClusterSim, job: Job, candidates: np.ndarray) -> np.ndarray:
        return candidates[np.argsort(-sim.capacity[candidates], kind="stable")]  # biggest first: fewest nodes


class Pack(Placement):
    name = "pack"

    def node(self, sim, job, candidates):
        return int(candidates[np.argmin(sim.free[candidates])])


class Spread(Placement):
    name = "spread"

    def node(self, sim, job, candidates):
        return int(candidates[np.argmax(sim.free[candidates])])


class Topology(Pack):
    name = "topology"

    def gang(self, sim, job, candidates):
        racks, counts = np.unique(sim.rack[candidates], return_counts=True)
        order = np.argsort(-counts, kind="stable")  # the rack with the most free whole nodes first
        return np.concatenate([candidates[sim.rack[candidates] == racks[i]] for i in order])


POLICIES: dict[str, Policy] = {p.name: p for p in (Fifo(), Priority(), Backfill())}
PLACEMENTS: dict[str, Placement] = {p.name: p for p in (Pack(), Spread(), Topology())}
