"""Speed targets: one `train` estimate in-process and `gpuplan --help`, as ratios to the reference
workload timed in the same run (reference.py; formerly 5 ms and 0.3 s).

Run: .venv/bin/python benchmarks/bench_train.py   (exits 1 if a target is missed)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from reference import ratio, reference_s, verdict

from gpuplan import catalog
from gpuplan.estimate.train import TrainRequest, estimate_training
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

ESTIMATE_TARGET_RATIO = ratio(5e-3)
HELP_TARGET_RATIO = ratio(0.3)


def one_estimate(model: str) -> None:
    req = TrainRequest(
        model=catalog.model(model),
        gpu=catalog.gpu("h100-sxm"),
        plan=ParallelPlan(dp=4, tp=8, pp=2, zero=1),
        config=TrainingConfig(seq_len=8192, global_batch=512, recompute="selective"),
        tokens=2e12,
        mfu=0.4,
        price_per_gpu_hour=3.0,
    )
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
    ref = reference_s()
    for name, seconds in bench_estimate().items():
        text = ""
        if "warm" in name:
            _, passed, text = verdict(seconds, ref, ESTIMATE_TARGET_RATIO)
            ok &= passed
        print(f"train estimate, {name}: {seconds * 1e3:7.2f} ms {text}")
    help_s = bench_help()
    _, passed, text = verdict(help_s, ref, HELP_TARGET_RATIO)
    ok &= passed
    print(f"gpuplan --help (median of 5): {help_s * 1e3:7.1f} ms = {text}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
