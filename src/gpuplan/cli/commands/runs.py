"""``gpuplan calibrate`` and ``gpuplan compare``: measured runs against the model (runs/, estimate/calibrate.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan.cli.options import AgainstOpt, CalibrationOpt, JsonOpt, RunFormatOpt
from gpuplan.cli.output import emit_json
from gpuplan.errors import GpuplanError


def calibrate(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="Runs: telemetry .jsonl, a run .toml (a log, an optional trace "
            "and its [plan]), or logs with --against."
        ),
    ],
    out: Annotated[str | None, typer.Option(help="Write the cluster profile (TOML) here.")] = None,
    run_format: RunFormatOpt = None,
    against: AgainstOpt = None,
    loo: Annotated[bool, typer.Option("--loo/--no-loo", help="Leave-one-out error: one more fit per run.")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Fit GEMM, attention, HBM, bus and per-step overhead factors to your runs; write a profile."""
    from gpuplan.cli.render_runs import calibration_dict, render_calibration
    from gpuplan.estimate.calibrate import calibrate_runs
    from gpuplan.estimate.profile import write_profile
    from gpuplan.inputs import output_path
    from gpuplan.runs.readers import read_runs

    out = output_path(out, "out", suffixes=(".toml",))  # before the fit: an unwritable path fails first
    cal = calibrate_runs(read_runs(runs, run_format, against), leave_one_out=loo)
    if out:
        write_profile(cal, out)
    doc = calibration_dict(cal, out)
    if json_out:
        emit_json(doc)
    else:
        render_calibration(doc)


def compare(
    run: Annotated[str, typer.Argument(help="A run: telemetry .jsonl, a run .toml, a log or a profiler trace.")],
    against: AgainstOpt = None,
    run_format: RunFormatOpt = None,
    calibration: CalibrationOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Predicted vs measured per component (step, kernels, memory); flags what is beyond the band."""
    from gpuplan.cli.render_runs import render_compare
    from gpuplan.runs.compare import compare_calibrated
    from gpuplan.runs.readers import read_runs

    (r,) = read_runs([run], run_format, against)
    if r.plan is None:
        raise GpuplanError("against", f"{run} carries no plan", 'pass --against "MODEL --gpus N --tp T ..."')
    doc = compare_calibrated(r, r.plan.resolve(), calibration)
    if json_out:
        emit_json(doc)
    else:
        render_compare(doc)
