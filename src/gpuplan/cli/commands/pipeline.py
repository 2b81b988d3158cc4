"""``gpuplan pipeline``: one pipeline schedule simulated (pipeline/)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import HtmlOpt, JsonOpt
from gpuplan.cli.output import report, show
from gpuplan.cli.params import (
    at_least,
    between,
    checked,
    html_file,
    out_file,
    plot as plot_path,
)


@checked(
    stages=at_least(1, 1024),
    microbatches=at_least(1, 100_000),
    vp=at_least(1, 64),
    p2p=between(0, 1e9),
    activation_gib=between(0, 1e6),
    trace=out_file,
    plot=plot_path,
    html=html_file,
)
def pipeline(
    schedule: Annotated[
        str, typer.Option(help="gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe, dualpipev.")
    ] = "1f1b",
    stages: Annotated[int, typer.Option(help="Pipeline ranks.")] = 4,
    microbatches: Annotated[int, typer.Option(help="Micro-batches per step (DualPipe: both directions together).")] = 8,
    vp: Annotated[int, typer.Option(help="Model chunks per rank (interleaved only).")] = 2,
    f: Annotated[
        str,
        typer.Option("--f", help="Forward time of one micro-batch on one stage (or one per stage, comma-separated)."),
    ] = "1",
    b: Annotated[str | None, typer.Option("--b", help="Input-gradient backward time (B without W).")] = None,
    b_full: Annotated[
        str | None, typer.Option("--b-full", help="Full backward time (input + weight gradients).")
    ] = None,
    w: Annotated[str, typer.Option("--w", help="Weight-gradient backward time (W).")] = "1",
    overlap: Annotated[
        str | None, typer.Option(help="Time of one overlapped forward+backward pair (F&B); default F + B + W.")
    ] = None,
    p2p: Annotated[float, typer.Option(help="Send/receive time between neighbouring stages.")] = 0.0,
    unit: Annotated[str, typer.Option(help="What one time unit is, for the trace: e.g. 1ms, 10ms, 1s.")] = "1ms",
    activation_gib: Annotated[
        float | None, typer.Option(help="Activation GiB of one micro-batch on one stage.")
    ] = None,
    trace: Annotated[str | None, typer.Option(help="Write a Chrome trace JSON (Perfetto, chrome://tracing).")] = None,
    plot: Annotated[str | None, typer.Option(help="Write a timeline picture (PNG, SVG, PDF).")] = None,
    html: HtmlOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Simulate a pipeline schedule: per-rank idle time, bubble, makespan, activations in flight."""
    from pathlib import Path

    from gpuplan.pipeline.render import write_plot, write_trace
    from gpuplan.pipeline.request import check_size, costs_from_text
    from gpuplan.pipeline.schedules import build
    from gpuplan.pipeline.simulate import simulate
    from gpuplan.units import GiB

    unit_s = inputs.duration(unit, "unit", max_s=86400)
    costs = costs_from_text(stages, f, b, b_full, w, overlap, p2p)
    check_size(schedule, stages, microbatches, vp)
    sched = build(schedule, stages, microbatches, vp)
    from gpuplan.cli.render import progress

    with progress(json_out or not plot) as bar:
        task = bar.add_task("simulating" + (" and plotting" if plot else ""), total=2 if plot else 1)
        t = simulate(sched, costs, activation_gib * GiB if activation_gib is not None else None)
        bar.advance(task)
        if trace:
            write_trace(t, Path(trace), unit_s)
        if plot:
            write_plot(t, Path(plot), unit_s)
            bar.advance(task)
    doc = t.to_dict()
    # the schedule runs in the user's time units; the fields named _s are seconds (one unit is unit_s)
    doc["makespan_s"] = t.makespan_s * unit_s
    doc["busy_s"] = [x * unit_s for x in t.busy_s]
    doc["idle_s"] = [x * unit_s for x in t.idle_s]
    doc |= {
        "costs": {
            "f": costs.f,
            "b": costs.b,
            "w": costs.w,
            "overlap": costs.overlap,
            "p2p": p2p,
            "unit_s": unit_s,
            "backward_convention": "b is the input-gradient backward; full = b + w",
        },
        "bubble_ratio": t.bubble_ratio,
        "trace": trace,
        "plot": plot,
    }
    report(html, "pipeline", doc)
    show(doc, json_out, "render_sims.render_pipeline")
