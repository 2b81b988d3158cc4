"""Speed target of expert placement: 256 experts x 61 layers (DeepSeek-V3's shape, 288 slots on
32 GPUs in 4 nodes), for both policies, after numpy is loaded, as a ratio to the reference workload
timed in the same process (reference.py; formerly 50 ms on 2 cores).

Run: .venv/bin/python benchmarks/bench_experts.py   (exits 1 if a target is missed)
"""

from __future__ import annotations

import sys
import time

from reference import ratio, reference_s, verdict

from gpuplan.experts.loads import synthetic_loads
from gpuplan.experts.placement import place

TARGET_RATIO = ratio(0.050)


def main() -> int:
    ok = True
    ref = reference_s()
    for skew in (0.5, 1.0, 1.5):
        loads = synthetic_loads(61, 256, skew, seed=0)
        for policy in ("hierarchical", "global"):
            place(loads[:1], 288, 32, 4, 8, policy)  # numpy warm-up
            best = min(_timed(loads, policy) for _ in range(3))
            _, passed, text = verdict(best, ref, TARGET_RATIO)
            ok &= passed
            print(f"place 256 experts x 61 layers, skew {skew}, {policy}: {best * 1e3:.1f} ms = {text}")
    return 0 if ok else 1


def _timed(loads, policy) -> float:
    t0 = time.perf_counter()
    place(loads, 288, 32, 4, 8, policy)
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
