"""One job under exponential failures, simulated: the oracle for Daly's expected waste.

The job does ``work_s`` in segments of ``interval_s``, each followed by a checkpoint of ``cost_s``;
a failure (exponential, mean ``mtbf_s``) during a segment or its checkpoint loses the segment, and
the restart (``restart_s``, which can itself fail) precedes the retry: Daly's (2006) model. The
attempts of all seeds run at once in numpy.
"""

from __future__ import annotations

import numpy as np

from gpuplan.errors import require


def simulate_waste(
    work_s: float,
    interval_s: float,
    cost_s: float,
    mtbf_s: float,
    restart_s: float = 0.0,
    seeds: int = 200,
    seed: int = 0,
) -> np.ndarray:
    """Waste fraction (1 - work / wall time) of each of ``seeds`` runs."""
    require(
        work_s > 0 and interval_s > 0 and cost_s >= 0 and mtbf_s > 0 and restart_s >= 0,
        "interval",
        "times must be positive",
    )
    rng = np.random.default_rng(seed)
    segments = int(np.ceil(work_s / interval_s))
    need = interval_s + cost_s
    wall = np.zeros(seeds)
    left = np.full(seeds, segments)
    while (left > 0).any():
        active = left > 0
        x = rng.exponential(mtbf_s, size=seeds)
        ok = active & (x >= need)
        fail = active & ~ok
        wall[ok] += need
        left[ok] -= 1
        wall[fail] += x[fail]
        # restart until one restart runs through without a failure
        pending = fail.copy()
        while pending.any():
            y = rng.exponential(mtbf_s, size=seeds)
            done = pending & (y >= restart_s)
            wall[done] += restart_s
            wall[pending & ~done] += y[pending & ~done]
            pending &= ~done
    return 1 - segments * interval_s / wall
