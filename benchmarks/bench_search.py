"""Speed targets of the plan search: Llama-3.1-405B on 16,384 H100s at 8K under 2 s, a 70B on
64 GPUs under 0.2 s, each in a fresh process (cold caches, the way the CLI runs it).

Run: .venv/bin/python benchmarks/bench_search.py   (exits 1 if a target is missed)
"""

from __future__ import annotations

import json
import subprocess
import sys

CASES = [("llama-3.1-405b", 16384, 2048, 2.0), ("llama-3.1-70b", 64, 512, 0.2)]

CHILD = """
import json, sys, time
from gpuplan import catalog
from gpuplan.search.plans import search
from gpuplan.specs.training import TrainingConfig
m, g = catalog.model(sys.argv[1]), catalog.gpu("h100-sxm")
t0 = time.perf_counter()
r = search(m, g, int(sys.argv[2]), TrainingConfig(seq_len=8192, global_batch=int(sys.argv[3])))
print(json.dumps({"s": time.perf_counter() - t0, "considered": r.considered, "feasible": r.feasible}))
"""


def main() -> int:
    ok = True
    for model, gpus, gb, target in CASES:
        runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, model, str(gpus), str(gb)], check=True,
                                          capture_output=True, text=True).stdout) for _ in range(3)]
        best = min(r["s"] for r in runs)
        passed = best <= target
        ok &= passed
        print(f"search {model} on {gpus} GPUs: {best:.3f} s (target {target} s) {'ok' if passed else 'MISSED'}; "
              f"{runs[0]['considered']:,} plans, {runs[0]['feasible']:,} fit")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
