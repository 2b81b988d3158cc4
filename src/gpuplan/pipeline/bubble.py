"""The pipeline bubble the performance model adds to a step: simulated, not a closed form.

For a training plan the step's pipeline part is m x t_busiest + bubble, where t_busiest is the
busiest rank's work per micro-batch and the bubble is what the schedule's simulation (simulate.py)
adds on top of that rank's work. Beyond about 2p micro-batches the bubble no longer grows with m
(1F1B's (p-1)(F+B), the zero-bubble and DualPipe forms are all independent of m), so the schedule
is simulated with min(m, 2p) micro-batches (the smallest count the schedule accepts), and costs
are normalised by the busiest rank and rounded to 1% so plans with the same shape share one
simulation.
"""

from __future__ import annotations

import functools

import numpy as np

from gpuplan.pipeline.schedules import Schedule, build
from gpuplan.pipeline.simulate import Compiled, Costs, compile_schedule, durations, run
from gpuplan.specs import schedules


def _sim_microbatches(name: str, p: int, v: int, m: int) -> int:
    """min(m, 2p), raised to what the simulated schedule accepts (DualPipe: 2p; interleaved: a
    multiple of p; the plan's own count already passed gpuplan.specs.validity)."""
    spec = schedules.get(name)
    k = max(min(m, 2 * p), spec.min_microbatches(p))
    if spec.microbatches_per_group:
        k = p * max(1, -(-k // p))
    return k


@functools.lru_cache(maxsize=256)
def _structure(name: str, p: int, v: int, m: int) -> tuple[Schedule, Compiled]:
    sched = build(name, p, m, v)
    return sched, compile_schedule(sched)


@functools.lru_cache(maxsize=1 << 16)
def _bubble(name: str, p: int, v: int, m: int, f: tuple, b: tuple, w: tuple) -> float:
    sched, c = _structure(name, p, v, m)
    start, end = run(c, durations(sched, c, Costs(list(f), list(b), list(w))), 0.0)
    busy = np.bincount(c.rank, weights=end - start, minlength=p)
    return float(end.max() - busy.max())


def pipeline_bubble(schedule: str, vp: int, microbatches: int, f, b, w) -> float:
    """Seconds the schedule adds to m x (busiest rank's per-micro-batch work); ``f``, ``b``, ``w``:
    per-rank forward, input-gradient backward and weight-gradient times of one micro-batch."""
    p = len(f)
    if p == 1:
        return 0.0
    name = schedules.get(schedule).simulated(vp).name  # e.g. zb -> zb-h1, 1f1b with vp > 1 -> interleaved
    scale = max(x + y + z for x, y, z in zip(f, b, w))
    if scale <= 0:
        return 0.0

    def norm(xs) -> tuple:
        return tuple(round(x / scale, 2) for x in xs)

    m = _sim_microbatches(name, p, vp, microbatches)
    return scale * _bubble(name, p, vp, m, norm(f), norm(b), norm(w))
