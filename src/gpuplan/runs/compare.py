"""Predicted against measured, component by component, for one run.

What a run measured decides the rows: the step time (any log), tokens/s per GPU (torchtitan,
telemetry), kernel seconds per step by category (a profiler trace: ``gpuplan.runs.trace``), peak
allocated and reserved memory (Megatron's memory report, telemetry, torchtitan's reserved) and
memory by component (telemetry's memory record). The model's step-time breakdown is listed beside
them (compute, each communication dimension, bubble, optimizer): a log has no measured column for
those, a trace covers them by kernel kind.

A row is flagged when its error (predicted / measured - 1) lies outside what validation measured
for published runs of the same kind (``gpuplan.estimate.validate.error_band``: the signed
[min, max] of the category's errors); for components, and for a kind no published run covers,
outside +-``DEFAULT_BAND`` or the band's largest magnitude, whichever is larger.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuplan.estimate.calibrate import KERNEL_KINDS, measured_kernel, predicted_kernel
from gpuplan.estimate.run_record import Resolved, Run

DEFAULT_BAND = 0.25
MEMORY_COMPONENTS = ("weights", "gradients", "optimizer", "master_weights", "activations")


def compare_run(run: Run, res: Resolved) -> dict[str, Any]:
    """Rows of predicted vs measured (seconds or bytes) with errors and flags; ``res.gpu`` may
    carry a calibration profile's efficiency."""
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.estimate.step_time import step_time
    from gpuplan.estimate.validate import error_band

    st = step_time(res.model, res.config, res.plan, res.gpu, res.microbatches)
    mem = estimate_memory(res.model, res.config, res.plan, res.gpu, res.microbatches).per_gpu
    band = error_band(res.gpu, res.config, res.plan, st.step_s, res.model)
    if band["calibrated"]:
        lo, hi = band["min_error"], band["max_error"]
        wide = max(DEFAULT_BAND, abs(lo), abs(hi))
    else:
        lo, hi, wide = -DEFAULT_BAND, DEFAULT_BAND, DEFAULT_BAND
    rows: list[dict[str, Any]] = []

    def row(group: str, name: str, predicted: float, measured: float | None, unit: str, step: bool = False) -> None:
        err = None if not measured else predicted / measured - 1
        limits = (lo, hi) if step else (-wide, wide)
        flagged = err is not None and not (limits[0] <= err <= limits[1])
        rows.append(
            {
                "group": group,
                "component": name,
                "unit": unit,
                "predicted": predicted,
                "measured": measured,
                "error": err,
                "band": list(limits) if measured else None,
                "flagged": flagged,
            }
        )

    row("step", "step time", st.step_s, run.measured_step_s(res), "s", step=True)
    if run.tokens_per_s_per_gpu:
        row(
            "step",
            "tokens/s per GPU",
            res.tokens_per_step / (st.step_s * res.plan.world_size),
            run.tokens_per_s_per_gpu,
            "tokens/s",
        )
    for name, value in st.breakdown.items():
        row("breakdown", name, value, None, "s")
    if run.kernels_s:
        for kind in KERNEL_KINDS:
            row(
                "kernels",
                kind if kind != "nccl" else "nccl (all-reduce, all-gather, reduce-scatter)",
                predicted_kernel(st, kind),
                measured_kernel(run.kernels_s, kind) or None,
                "s",
            )
        for name in ("nccl_send_recv", "idle"):
            if run.kernels_s.get(name):
                rows.append(
                    {
                        "group": "kernels",
                        "component": name,
                        "unit": "s",
                        "predicted": None,
                        "measured": run.kernels_s[name],
                        "error": None,
                        "band": None,
                        "flagged": False,
                    }
                )
    context = mem.other.get("cuda_context", 0.0)
    reserve = mem.other.get("allocator_reserve", 0.0)
    if run.peak_allocated_bytes:
        row("memory", "peak allocated", mem.total - context - reserve, run.peak_allocated_bytes, "bytes")
    if run.peak_reserved_bytes:
        row("memory", "peak reserved", mem.total - context, run.peak_reserved_bytes, "bytes")
    for name in MEMORY_COMPONENTS:
        if name in run.memory_bytes:
            row("memory", name, getattr(mem, name), run.memory_bytes[name], "bytes")
    return {
        "run": run.source,
        "format": run.format,
        "plan": run.plan.to_dict() if run.plan else None,
        "gpu": res.gpu.id,
        "efficiency": {"name": res.gpu.efficiency.name if res.gpu.efficiency else None},
        "band": band,
        "rows": rows,
        "flagged": [r["component"] for r in rows if r["flagged"]],
        "notes": list(run.notes),
        "microbatches": res.microbatches,
        "plan_resolved": dataclasses.asdict(res.plan),
    }


def compare_calibrated(run: Run, res: Resolved, calibration: str | None) -> dict[str, Any]:
    """:func:`compare_run` with a calibration profile applied to the resolved plan (its efficiency
    for the GPU, its allocator reserve), and the profile described in the document."""
    from gpuplan.estimate.profile import calibrated

    hw, prof, reserve = calibrated(res.gpu, calibration, None)
    if prof:
        cfg = res.config if reserve is None else dataclasses.replace(res.config, allocator_fraction=reserve)
        res = dataclasses.replace(res, gpu=hw, config=cfg)
    doc = compare_run(run, res)
    doc["calibration_profile"] = {**prof.describe(), "summary": prof.summary()} if prof else None
    return doc
