"""``gpuplan checkpoint-interval``: Young's and Daly's intervals (estimate/checkpoint_interval.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import HtmlOpt, JsonOpt, PlotOpt
from gpuplan.cli.output import emit_json, plot as write_plot, report
from gpuplan.cli.params import checked, html_file, plot as plot_path


@checked(html=html_file, plot=plot_path)
def checkpoint_interval(
    mtbf: Annotated[str, typer.Option(help="Mean time between failures or preemptions, e.g. 3.1h.")],
    cost: Annotated[str, typer.Option("--checkpoint-cost", "--cost", help="Time to write one checkpoint, e.g. 60s.")],
    restart: Annotated[str, typer.Option(help="Time to restart after a failure, e.g. 10m.")] = "0s",
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Young's and Daly's optimal checkpoint intervals and the expected share of time wasted."""
    from gpuplan.estimate.checkpoint_interval import intervals
    from gpuplan.units import fmt_duration

    m, c = inputs.duration(mtbf, "mtbf"), inputs.duration(cost, "checkpoint_cost")
    doc = intervals(c, m, inputs.duration(restart, "restart", zero_ok=True))
    report(html, "checkpoint-interval", doc)
    write_plot(plot, "checkpoint-interval", doc)
    if json_out:
        emit_json(doc)
        return
    from gpuplan.cli.render import console

    console.print(
        f"checkpoint every {fmt_duration(doc['daly_s'])} (Daly; Young: {fmt_duration(doc['young_s'])}) for an "
        f"MTBF of {fmt_duration(doc['mtbf_s'])} and {fmt_duration(doc['cost_s'])} checkpoints: expected waste "
        f"{doc['expected_waste_fraction']:.2%} of wall time (checkpoints, lost work"
        f"{', restarts' if doc['restart_s'] else ''})"
    )
