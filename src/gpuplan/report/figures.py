"""Interactive figures of a command's JSON document, in plotly's figure schema (plain dicts: data
and layout), so the page and the HTML report draw them with the plotly.js of plotly's wheel and
hover, zoom and pan come with it. Units are converted here, for display only (GiB, ms, hours)."""

from __future__ import annotations

import json
from collections.abc import Callable

from gpuplan.report.figure_kit import PALETTE, Figure
from gpuplan.report.figures_cluster import (
    checkpoint_waste,
    cluster_utilisation,
    cluster_waits,
    tco_cumulative,
    whatif_costs,
)
from gpuplan.report.figures_serve import serve_curve, serve_memory, serve_sim_percentiles
from gpuplan.report.figures_train import pareto, pipeline_timeline, search_scatter, train_memory, train_step

__all__ = ["BUILDERS", "PALETTE", "Figure", "figures", "pareto", "pipeline_timeline"]


BUILDERS: dict[str, tuple[Callable[..., Figure], ...]] = {
    "train": (train_memory, train_step),
    "search": (search_scatter,),
    "serve": (serve_curve, serve_memory),
    "serve-sim": (serve_sim_percentiles,),
    "pipeline": (pipeline_timeline,),
    "cluster sim": (cluster_utilisation, cluster_waits),
    "cluster whatif": (whatif_costs,),
    "tco": (tco_cumulative,),
    "checkpoint-interval": (checkpoint_waste,),
}


def figures(command: str, doc: dict, slo: dict | None = None) -> list[Figure]:
    """The figures of ``command``'s document. A document from another mode of the command (serve
    with offload, train with ZeRO-Offload) lacks the keys a figure reads: that figure is left out
    and the numbers table still shows."""
    out = []
    for build in BUILDERS.get(command, ()):
        try:
            fig = build(doc, slo) if build is serve_curve else build(doc)
            json.dumps(fig, allow_nan=False)  # a NaN would break the page's JSON: no picture rather than none at all
        except (KeyError, TypeError, IndexError, AttributeError, ValueError):
            continue
        out.append(fig)
    return out
