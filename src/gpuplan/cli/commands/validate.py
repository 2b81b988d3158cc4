"""``gpuplan validate``: predictions against published runs."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan.cli.flags import shown
from gpuplan.cli.options import JsonOpt
from gpuplan.cli.output import emit_json
from gpuplan.cli.params import (
    checked,
)
from gpuplan.errors import GpuplanError


@checked()
def validate(
    kind: Annotated[
        str,
        typer.Argument(
            help="training (step time), training-held-out (published runs never fitted to), serving "
            "(throughput and latency), serving-held-out (published engine benchmarks never fitted to), serving-kv (KV pools), offload or offload-held-out (published offload runs never fitted to)."
        ),
    ] = "training",
    calibrated: Annotated[
        bool,
        typer.Option(
            "--calibrated",
            help="Training: calibrate on one run of a GPU family, "
            "predict the family's others (each in turn), against uncalibrated.",
        ),
    ] = False,
    generic: Annotated[
        bool,
        typer.Option(
            "--generic",
            help="Serving: every row under the engine-neutral generic profile instead of its engine's.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Predictions against published runs: per-row error, mean/median and max."""
    if calibrated and kind != "training":
        raise GpuplanError(
            "calibrated", "--calibrated refits on the shared training runs only", "use: gpuplan validate training"
        )
    if generic and kind != "serving":
        raise GpuplanError(
            "generic", "--generic applies to the shared serving rows only", "use: gpuplan validate serving"
        )
    if kind in ("offload", "offload-held-out"):
        from gpuplan.serve.offload_validate import (
            CSV as OFF_CSV,
            HELD_OUT as OFF_HELD_OUT,
            summary as off_summary,
            to_dict as off_dict,
            validate_offload,
        )

        off_checks = validate_offload(OFF_HELD_OUT if kind == "offload-held-out" else OFF_CSV)
        if json_out:
            emit_json(off_dict(off_checks))
            return
        from gpuplan.cli.offload import render_offload_validation

        title = "offload, held out: predicted vs published" if kind == "offload-held-out" else None
        render_offload_validation(off_checks, off_summary(off_checks), *([title] if title else []))
        return
    if kind == "serving-kv":  # held out: KV pools against engines' startup logs
        from gpuplan.cli.render_serve import render_kv_validation
        from gpuplan.serve.validate_kv import to_dict as kv_dict, validate_kv_pools

        kdoc = kv_dict(validate_kv_pools())
        emit_json(kdoc) if json_out else render_kv_validation(kdoc)
        return
    if kind == "serving-held-out":  # held out: throughput and latency against published engine benchmarks
        from gpuplan.cli.render_serve import render_serving_held_out
        from gpuplan.serve.validate_held_out import summary as ho_summary, to_rows, validate_held_out

        ho_checks = validate_held_out()
        hdoc = {"rows": to_rows(ho_checks), "summary": ho_summary(ho_checks)}
        emit_json(hdoc) if json_out else render_serving_held_out(shown(hdoc))  # fields as flags
        return
    if kind == "serving":
        from gpuplan.serve.validate import summary as serve_summary, to_dict as serve_dict, validate_serving

        checks = validate_serving(engines=not generic)
        if json_out:
            emit_json(serve_dict(checks))
            return
        from gpuplan.cli.render_runs import render_serve_validation

        render_serve_validation(checks, serve_summary(checks))
        return
    if kind not in ("training", "training-held-out"):
        raise GpuplanError(
            "kind",
            f"unknown validation set {kind!r}",
            "use training, training-held-out, serving, serving-held-out, serving-kv, offload or offload-held-out",
        )
    if calibrated:
        from gpuplan.estimate.calibrate import calibrated_validation

        doc = calibrated_validation()
        if json_out:
            emit_json(doc)
        else:
            from gpuplan.cli.render_runs import render_calibrated_validation

            render_calibrated_validation(doc)
        return
    from gpuplan.estimate.validate import (
        CSVS,
        HELD_OUT,
        by_category,
        memory_summary,
        summary,
        to_dict,
        validate_training,
    )

    results = validate_training(HELD_OUT if kind == "training-held-out" else CSVS)
    if json_out:
        emit_json(to_dict(results))
        return
    from gpuplan.cli.render_runs import render_validation

    render_validation(results, summary(results), by_category(results), memory_summary(results))
