"""The reference every benchmark times in the same process, so that its target is a ratio.

Absolute seconds do not travel between machines (the same benchmarks took 2-3x longer on another
2-core machine than on the one that set them); a ratio to work of the same kind timed in the same
run does. The reference is plain Python and numpy of the kinds gpuplan's hot paths mix: a heap of
events (the cluster and serving simulators), dict and tuple work (the estimators' caches and
loops) and vectorised reductions over a grid (the search). It does not call gpuplan, so making
gpuplan faster moves the ratio.

Each benchmark's target is ``ratio(former_target_s)`` x reference: its former absolute target over
``CALIBRATION_S``, the reference's time on the 2-core machine where these ratios were set.
"""

from __future__ import annotations

import heapq
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _workload() -> float:
    rng = random.Random(0)
    heap: list[tuple[float, int]] = []
    for i in range(50_000):
        heapq.heappush(heap, (rng.random(), i))
    acc = 0
    table: dict[tuple[int, int], int] = {}
    while heap:
        _, i = heapq.heappop(heap)
        key = (i & 1023, i % 7)
        table[key] = table.get(key, 0) + 1
        acc += i & 7
    grid = np.arange(1_000_000, dtype=np.float64).reshape(1000, 1000)
    for _ in range(5):
        acc += int(np.maximum.reduce(np.minimum(grid, 5e5) * 1.5, axis=0).sum()) & 1
    return float(acc + len(table))


# reference_s() on the machine that set the ratios (2 shared cores, idle); provisional: re-measure
# it with `python benchmarks/reference.py` on an idle machine when the targets are next reviewed
CALIBRATION_S = 0.15


def ratio(former_target_s: float) -> float:
    """A former absolute target as a ratio to the reference."""
    return round(former_target_s / CALIBRATION_S, 4)


def reference_s(repeats: int = 3) -> float:
    """Seconds of the reference workload on this machine now (best of ``repeats``)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _workload()
        best = min(best, time.perf_counter() - t0)
    return best


def children(code: str, *args: str, runs: int = 3) -> list:
    """Run ``code`` in ``runs`` fresh interpreters (cold caches, as one CLI call) and parse the JSON
    each prints; the child finds this module on the path given as its last argument."""
    here = str(Path(__file__).resolve().parent)
    return [json.loads(subprocess.run([sys.executable, "-c", code, *args, here], check=True, capture_output=True,
                                      text=True).stdout) for _ in range(runs)]  # fmt: skip


def verdict(seconds: float, ref_s: float, target_ratio: float) -> tuple[float, bool, str]:
    """(ratio, passed, text) for a timing against the reference."""
    ratio = seconds / ref_s
    ok = ratio <= target_ratio
    return ratio, ok, f"{ratio:.3f} x reference (target {target_ratio:g} x) {'ok' if ok else 'MISSED'}"


if __name__ == "__main__":
    print(f"reference: {reference_s():.3f} s")
