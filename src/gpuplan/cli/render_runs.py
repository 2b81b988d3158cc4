"""Rich output and JSON documents for ``gpuplan calibrate``, ``compare`` and ``validate`` (training,
serving, ``--calibrated``): predictions set beside measured runs."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from gpuplan.cli.render import console, id_column
from gpuplan.units import GiB


def calibration_dict(cal: Any, out: str | None) -> dict[str, Any]:
    """The JSON document of ``gpuplan calibrate --json``."""

    def factor(f: Any) -> dict[str, Any]:
        return {
            "name": f.name,
            "prior": f.prior,
            "value": f.value,
            "identified": f.identified,
            "fitted": f.fitted,
            "standard_error": f.standard_error,
            "at_bound": f.at_bound,
            "why": f.reason or None,
        }

    return {
        "gpu_family": cal.family,
        "gpus": list(cal.gpus),
        "profile": out,
        "factors": [factor(f) for f in cal.factors],
        "allocator_fraction": factor(cal.allocator_fraction),
        "not_identified": [f.name for f in (*cal.factors, cal.allocator_fraction) if not f.identified],
        "mean_abs_error": {k: cal.mean_abs_error(k) for k in ("prior", "fitted", "loo")},
        "runs": [
            {
                "source": r.source,
                "measured_step_s": r.measured_step_s,
                "prior_step_s": r.prior_step_s,
                "fitted_step_s": r.fitted_step_s,
                "loo_step_s": r.loo_step_s,
            }
            for r in cal.runs
        ],
    }


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1%}"


def render_calibration(doc: dict[str, Any]) -> None:
    console.print(f"[bold]Calibration[/] of {doc['gpu_family']} from {len(doc['runs'])} run(s)")
    t = Table(title="factors")
    for col in ("factor", "catalog", "fitted", "± (1 sigma)", "identified", "why not"):
        t.add_column(col, justify="left" if col in ("factor", "why not") else "right")
    for f in [*doc["factors"], doc["allocator_fraction"]]:
        se = f["standard_error"]
        unit_s = f["name"] == "step_overhead_s"
        t.add_row(
            f["name"],
            f"{f['prior']:.4g}",
            f"{f['value']:.4g}" + (" (bound)" if f["at_bound"] else ""),
            "" if se is None else (f"{se * 1e3:.3g} ms" if unit_s else f"{se:.1%}"),
            "yes" if f["identified"] else ("fitted" if f["fitted"] else "no"),
            f["why"] or "",
        )
    console.print(t)
    r = Table(title="step time per run")
    for col in ("run", "measured s", "catalog", "fitted", "leave-one-out"):
        r.add_column(col, justify="left" if col == "run" else "right")
    for run in doc["runs"]:
        m = run["measured_step_s"]
        r.add_row(
            run["source"],
            f"{m:.4g}",
            _pct(run["prior_step_s"] / m - 1),
            _pct(run["fitted_step_s"] / m - 1),
            _pct(None if run["loo_step_s"] is None else run["loo_step_s"] / m - 1),
        )
    console.print(r)
    e = doc["mean_abs_error"]
    loo = "" if e["loo"] is None else f", leave-one-out {e['loo']:.1%}"
    console.print(f"mean |error|: catalog {e['prior']:.1%}, fitted {e['fitted']:.1%}{loo}")
    if doc["not_identified"]:
        console.print(
            "not identified by these runs (catalog value kept unless fitted): " + ", ".join(doc["not_identified"])
        )
    if doc["profile"]:
        console.print(f"profile written to {doc['profile']} (apply with --calibration {doc['profile']})")


def _value(unit: str, v: float | None) -> str:
    if v is None:
        return ""
    if unit == "bytes":
        return f"{v / GiB:,.2f} GiB"
    if unit == "s":
        return f"{v * 1e3:,.1f} ms" if v < 1 else f"{v:,.3f} s"
    return f"{v:,.0f}"


def render_compare(doc: dict[str, Any]) -> None:
    band = doc["band"]
    kind = ", ".join(str(v) for v in band["category"].values())
    where = (
        f"validation band for {kind}: {band['min_error']:+.1%} .. {band['max_error']:+.1%}"
        if band["calibrated"]
        else f"no published run of this kind ({kind}): flagged beyond ±25%"
    )
    if doc.get("calibration_profile"):
        console.print(doc["calibration_profile"]["summary"])
    console.print(f"[bold]{doc['run']}[/] ({doc['format']}) against gpuplan's plan on {doc['gpu']}; {where}")
    t = Table()
    for col in ("group", "component", "predicted", "measured", "error", ""):
        t.add_column(col, justify="left" if col in ("group", "component", "") else "right")
    for r in doc["rows"]:
        t.add_row(
            r["group"],
            r["component"],
            _value(r["unit"], r["predicted"]),
            _value(r["unit"], r["measured"]),
            _pct(r["error"]),
            "[red]beyond band[/]" if r["flagged"] else "",
        )
    console.print(t)
    for note in doc["notes"]:
        console.print(f"note: {note}")


def render_calibrated_validation(doc: dict[str, Any]) -> None:
    t = Table(title="calibrate on one run, predict the family's others (every run in turn)")
    for col in ("GPU family", "runs", "uncalibrated", "calibrated on one run", "catalog (fit to all, in-sample)"):
        t.add_column(col, justify="left" if col == "GPU family" else "right")
    for fam, v in doc.items():
        t.add_row(
            fam,
            str(v["runs"]),
            f"{v['uncalibrated_mean_abs_error']:.1%}",
            f"{v['calibrated_mean_abs_error']:.1%}",
            f"{v['catalog_mean_abs_error']:.1%}",
        )
    console.print(t)
    console.print("mean |step-time error|; uncalibrated: sustained = 1 (datasheet and measured kernel rates only)")


def render_validation(results, summary, categories=None, memory=None) -> None:
    """``memory``: ``validate.memory_summary`` of the rows that published a peak (None: none did);
    those rows also show the published peak and the error of the prediction of it."""
    table = Table(title="Predicted vs published step time")
    id_column(table, "run", [r.row.id for r in results])
    cols = (
        "GPUs",
        "tp",
        "pp",
        "dp",
        "cp",
        "zero",
        "mbs",
        "recompute",
        "measured s",
        "predicted s",
        "error",
        "pred. MFU",
    )
    mem_cols = ("meas. peak GiB", "mem. error") if memory else ()
    for col in (*cols, "pred. peak GiB", *mem_cols):
        table.add_column(col, justify="left" if col == "recompute" else "right")
    for r in results:
        row = r.row
        published = () if not memory else _memory_cells(r)
        table.add_row(
            row.id,
            str(row.plan.world_size),
            str(row.plan.tp),
            str(row.plan.pp),
            str(row.plan.dp),
            str(row.plan.cp),
            str(row.plan.zero),
            f"{row.config.micro_batch}" + ("" if row.micro_batch_stated else "*"),
            row.config.recompute,
            f"{row.measured_step_s:,.3f}",
            f"{r.predicted_step_s:,.3f}",
            f"{r.error:+.1%}",
            f"{r.mfu:.1%}",
            f"{r.peak_bytes / GiB:,.1f}"
            + (" [red](over)[/]" if r.refused else " [yellow](tight)[/]" if r.tight else ""),
            *published,
        )
    console.print(table)
    if categories:
        ct = Table(title="Error per category (the band `gpuplan train` reports for runs of that kind)")
        for col in ("GPU family", "precision", "context", "parallel", "runs", "mean |error|", "min", "max"):
            ct.add_column(col, justify="left" if col in ("GPU family", "precision", "context", "parallel") else "right")
        for key, s in categories.items():
            ct.add_row(
                *key,
                str(int(s["rows"])),
                f"{s['mean_abs_error']:.1%}",
                f"{s['min_error']:+.1%}",
                f"{s['max_error']:+.1%}",
            )
        console.print(ct)
    if any(not r.row.micro_batch_stated for r in results):
        console.print("mbs *: not stated by the source; the fastest that fits, as `gpuplan search` picks it")
    console.print(
        f"{summary['rows']} runs: mean |error| {summary['mean_abs_error']:.1%}, "
        f"max |error| {summary['max_abs_error']:.1%}, mean signed {summary['mean_signed_error']:+.1%}; "
        f"{summary['refused']} of them over the GPU's memory in gpuplan's memory model (it ran: a wrong refusal), "
        f"{summary['tight']} into the allocator's reserve only (tight: a warning)"
    )
    if memory:
        console.print(
            f"peak memory: {memory['rows']} rows, mean |error| {memory['mean_abs_error']:.1%}, "
            f"max {memory['max_abs_error']:.1%} (mean signed {memory['mean_signed_error']:+.1%}; a published "
            "reserved peak is compared with gpuplan's peak less the CUDA context)"
        )


def _memory_cells(r) -> tuple[str, str]:
    """(published peak GiB, error of the prediction of it), or dashes for a row without one."""
    if r.memory_error is None:
        return "-", "-"
    return f"{r.row.measured_peak_bytes / GiB:,.1f}", f"{r.memory_error:+.1%}"


def render_serve_validation(checks, summary) -> None:
    table = Table(title="Predicted vs published serving runs")
    id_column(table, "run", [c.row.id for c in checks])
    for col in ("metric", "measured", "predicted", "error"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for c in checks:
        table.add_row(c.row.id, c.row.metric, f"{c.row.measured:,.2f}", f"{c.predicted:,.2f}", f"{c.error:+.1%}")
    console.print(table)
    console.print(
        f"{summary['rows']} runs: median |error| {summary['median_abs_error']:.1%}, mean |error| "
        f"{summary['mean_abs_error']:.1%}, max |error| {summary['max_abs_error']:.1%}"
    )
