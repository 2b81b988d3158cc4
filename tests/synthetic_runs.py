"""Runs gpuplan generates itself with known factors plus 5% noise, for the calibration tests."""

from __future__ import annotations

import random

from gpuplan import catalog
from gpuplan.estimate.calibrate import _predict, apply_factors, predicted_kernel
from gpuplan.estimate.run_record import Run, RunPlan

TRUE = {
    "gemm_sustained": 0.78,
    "attention_scale": 0.85,
    "hbm": 0.75,
    "intra_bus": 0.70,
    "inter_bus": 0.60,
    "step_overhead_s": 0.030,
}
NOISE = 0.05


def _plans(single_node: bool = False) -> list[RunPlan]:
    out = []
    for model, seq in (("llama-3.2-1b", 2048), ("llama-3.2-1b", 8192), ("llama-3.1-8b", 4096)):
        for gpus, tp, ogr in ((8, 1, True), (8, 8, None), (32, 1, False), (16, 2, False)):
            if single_node and gpus > 8:
                continue
            out.append(
                RunPlan(
                    model, gpus=gpus, tp=tp, seq_len=seq, global_batch=gpus // tp * 2, sp=False, overlap_grad_reduce=ogr
                )
            )
    return out


def synthetic_runs(seed: int, traces: bool = True, single_node: bool = False, repeats: int = 2) -> list[Run]:
    """Runs as gpuplan predicts them with the TRUE factors, every measured number times
    (1 + N(0, 5%)); with ``traces``, GEMM/attention/elementwise/NCCL kernel time per step too."""
    eff = apply_factors(catalog.gpu("h100-sxm").efficiency, TRUE)
    rng = random.Random(seed)
    runs = []
    for rep in range(repeats):
        for p in _plans(single_node):
            st = _predict(p.resolve(), eff)

            def noisy(x: float) -> float:
                return x * (1 + rng.gauss(0, NOISE))

            kernels = {}
            if traces:
                kernels = {
                    "gemm": noisy(predicted_kernel(st, "gemm")),
                    "attention": noisy(predicted_kernel(st, "attention")),
                    "elementwise": noisy(predicted_kernel(st, "elementwise")),
                    "nccl_all_reduce": noisy(predicted_kernel(st, "nccl")),
                }
            runs.append(
                Run(
                    f"{p.model}-{p.gpus}x-tp{p.tp}-{p.seq_len}-{rep}",
                    "synthetic",
                    step_s=noisy(st.step_s),
                    plan=p,
                    kernels_s={k: v for k, v in kernels.items() if v > 0},
                )
            )
    return runs
