"""Checkpoint stall of the resilient runtime, sync vs async, at the Young/Daly interval.

A bigger cousin of examples/train_tiny.py (d=512, 8 layers: ~25M parameters, ~0.3 GB of model and
Adam state) trains on CPU; the runtime checkpoints it synchronously and asynchronously (DCP
async_save: the loop stalls only while the state is staged to CPU memory). Reported: seconds of
stall per checkpoint, that stall over one step's time, and over the time between checkpoints at
Daly's optimal interval for a 1-hour MTBF (the fraction of training time lost to stalls).

Run: .venv/bin/python benchmarks/bench_checkpoint.py   (exits 1 unless async stalls less than sync)
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gpuplan.estimate.checkpoint_interval import daly_interval
from gpuplan.train import Resilient

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("train_tiny", ROOT / "examples" / "train_tiny.py")
tiny = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny)
MTBF_S = 3600.0


def measure(async_save: bool) -> dict:
    torch.manual_seed(0)
    model = tiny.TinyGPT(d=512, layers=8, heads=8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with tempfile.TemporaryDirectory() as d, Resilient(model, opt, checkpoint_dir=d, async_save=async_save) as run:
        steps, stalls, costs = [], [], []
        for i in range(12):
            t0 = time.perf_counter()
            x, y = tiny.batch(0, i, 0)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps.append(time.perf_counter() - t0)
            run.end_step()
            if i % 3 == 2:  # checkpoint every third step; the stall is what the loop waits
                t1 = time.perf_counter()
                stalls.append(run.checkpoint())
                run.ckpt.wait()
                costs.append(time.perf_counter() - t1)
    step_s, stall_s, cost_s = statistics.median(steps), statistics.median(stalls), statistics.median(costs)
    interval = daly_interval(cost_s, MTBF_S)
    return {
        "step_s": step_s,
        "stall_s": stall_s,
        "cost_s": cost_s,
        "stall_per_step": stall_s / step_s,
        "daly_interval_s": interval,
        "stall_fraction_at_daly": stall_s / interval,
    }


def main() -> int:
    torch.set_num_threads(2)
    sync, asyn = measure(False), measure(True)
    for name, r in (("sync", sync), ("async", asyn)):
        print(
            f"{name:5s}: step {r['step_s'] * 1e3:.0f} ms, checkpoint {r['cost_s'] * 1e3:.0f} ms, loop stalled "
            f"{r['stall_s'] * 1e3:.1f} ms = {r['stall_per_step']:.2f} steps; at Daly's interval "
            f"({r['daly_interval_s']:.0f} s for a 1 h MTBF) {r['stall_fraction_at_daly']:.2e} of training time"
        )
    ok = asyn["stall_s"] < 0.8 * sync["stall_s"]
    print("async stalls less than sync:", "ok" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
