"""Speed targets: one `train` estimate under 5 ms in-process, `gpuplan --help` under 0.3 s.

Run: .venv/bin/python benchmarks/bench_train.py   (exits 1 if a target is missed)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpuplan import catalog
from gpuplan.estimate.train import TrainRequest, estimate_training
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

ESTIMATE_TARGET_S = 5e-3
HELP_TARGET_S = 0.3


def one_estimate(model: str) -> None:
    req = TrainRequest(model=catalog.model(model), gpu=catalog.gpu("h100-sxm"),
                       plan=ParallelPlan(dp=4, tp=8, pp=2, zero=1),
                       config=TrainingConfig(seq_len=8192, global_batch=512, recompute="selective"),
                       tokens=2e12, mfu=0.4, price_per_gpu_hour=3.0)
    estimate_training(req)


def bench_estimate() -> dict[str, float]:
    out = {}
    for model in ("llama-3.1-70b", "deepseek-v3"):
        t0 = time.perf_counter()
        one_estimate(model)  # first call: reads the catalog and fills the caches
        cold = time.perf_counter() - t0
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            one_estimate(model)
            times.append(time.perf_counter() - t0)
        out[f"{model} cold"] = cold
        out[f"{model} warm median"] = statistics.median(times)
    return out


def bench_help() -> float:
    exe = Path(sys.executable).with_name("gpuplan")
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([str(exe), "--help"], check=True, capture_output=True)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> int:
    ok = True
    for name, seconds in bench_estimate().items():
        target = ESTIMATE_TARGET_S if "warm" in name else None
        flag = "" if target is None else ("ok" if seconds < target else "MISSED")
        ok &= flag != "MISSED"
        print(f"train estimate, {name}: {seconds * 1e3:7.2f} ms {flag}")
    help_s = bench_help()
    ok &= help_s < HELP_TARGET_S
    print(f"gpuplan --help (median of 5): {help_s * 1e3:7.1f} ms {'ok' if help_s < HELP_TARGET_S else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
