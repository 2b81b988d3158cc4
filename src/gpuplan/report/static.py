"""Static pictures (PNG, SVG, PDF, ...) of the figures :mod:`gpuplan.report.figures` builds: the
CLI's ``--plot`` draws the very figure dicts the ``--html`` report and ``gpuplan ui`` show, with
matplotlib, so there is one set of figure code.

It draws the part of plotly's figure schema (https://plotly.com/python/reference/) that
figures.py uses, and refuses the rest (a figure added there that this cannot draw fails its test
rather than drawing wrong):

* ``bar`` traces, vertical or ``orientation="h"``, with ``base``, ``marker.color``,
  ``marker.line`` and ``marker.pattern.shape`` (a hatch), under ``layout.barmode`` ``group``
  (plotly's default), ``stack``, ``overlay`` or ``relative``, and ``layout.bargap``;
* ``scatter`` traces, ``mode`` lines and/or markers, ``line.color/dash/width/shape`` (``hv``
  steps), ``marker.color/size/symbol``, ``showlegend``;
* ``layout.shapes`` of type ``line`` and ``rect`` (``xref``/``yref`` ``paper``: a fraction of the
  plot area, as plotly means it) and ``layout.annotations`` with their anchors;
* axis titles, ``type="log"``, ``range``, ``rangemode="tozero"``, ``autorange="reversed"``,
  ``categoryorder="array"``; the title and ``layout.height`` (CSS pixels, drawn at 100 per inch).

Several figures go into one file, as panels stacked top to bottom in the order the report shows
them, so one ``--plot`` path always names one file. matplotlib is imported here only (a second
to load), and through :class:`matplotlib.figure.Figure` rather than pyplot: no GUI backend and no
global figure state, the file format chosen by the suffix (Agg for raster formats).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError, field_ref
from gpuplan.report.figures import Figure, figures

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.typing import LineStyleType

PX_PER_INCH = 100  # plotly sizes are CSS pixels
WIDTH_PX, HEIGHT_PX = 900, 450  # plotly's default height; the report's figures are about 900 px wide
DPI = 150  # raster formats: 1350 px wide, sharp when a slide scales it up
# plotly's dash names and marker symbols as matplotlib writes them
DASHES: dict[str, LineStyleType] = {
    "solid": "-",
    "dot": ":",
    "dash": "--",
    "longdash": "--",
    "dashdot": "-.",
    "longdashdot": "-.",
}
STEPS = {"linear": "default", "hv": "steps-post", "vh": "steps-pre", "hvh": "steps-mid", "spline": "default"}
SYMBOLS = {
    "circle": "o",
    "square": "s",
    "diamond": "D",
    "star": "*",
    "x": "x",
    "cross": "P",
    "triangle-up": "^",
    "triangle-down": "v",
}
ANCHOR_X = {"left": "left", "center": "center", "right": "right", "auto": "center"}
ANCHOR_Y = {"top": "top", "middle": "center", "bottom": "bottom", "auto": "center"}


def _text(s: Any) -> str:
    """Plotly's text markup as plain text; ``$`` escaped, or matplotlib reads it as maths."""
    s = re.sub(r"<br\s*/?>", "\n", str(s))
    return re.sub(r"<[^>]+>", "", s).replace("$", r"\$")


def _title(x: Any) -> str:
    return _text(x.get("text", "") if isinstance(x, dict) else x or "")


def _pt(px: float) -> float:
    """CSS pixels (plotly's sizes) to points (matplotlib's)."""
    return px * 72 / PX_PER_INCH


def _categories(values: list, order: list | None) -> tuple[dict[Any, float], bool]:
    """Positions of bar categories: strings in the order given (plotly's ``categoryarray``) or of
    first appearance, one unit apart; numbers where they are (a linear axis, as plotly's)."""
    if values and all(isinstance(v, (int, float)) for v in values):
        return {v: float(v) for v in values}, False
    pos: dict[Any, float] = {v: float(i) for i, v in enumerate(order or [])}
    for v in values:
        pos.setdefault(v, float(len(pos)))
    return pos, True


def _bars(ax: Axes, traces: list[dict], layout: dict) -> None:
    horizontal = any(t.get("orientation") == "h" for t in traces)
    cat_key, val_key = ("y", "x") if horizontal else ("x", "y")
    axis = layout.get("yaxis" if horizontal else "xaxis", {})
    order = axis.get("categoryarray") if axis.get("categoryorder") == "array" else None
    pos, categorical = _categories([c for t in traces for c in t.get(cat_key, [])], order)
    gap = float(layout.get("bargap", 0.2))
    spacing = min((b - a for a, b in zip(sorted(pos.values()), sorted(pos.values())[1:])), default=1.0) or 1.0
    mode = layout.get("barmode", "group")
    slot = (1 - gap) * spacing
    width = slot / len(traces) if mode == "group" else slot
    top: dict[float, float] = {}  # stacked: where the next bar starts, above (or below) each category
    bottom: dict[float, float] = {}
    for k, t in enumerate(traces):
        cats, vals = t.get(cat_key, []), [float(v or 0.0) for v in t.get(val_key, [])]
        where = [pos[c] for c in cats]
        base = t.get("base")
        starts = [float(b) for b in base] if isinstance(base, list) else [float(base or 0.0)] * len(vals)
        if mode in ("stack", "relative"):
            starts = [(top if v >= 0 else bottom).get(p, 0.0) for p, v in zip(where, vals)]
            for p, s, v in zip(where, starts, vals):
                (top if v >= 0 else bottom)[p] = s + v
        if mode == "group":
            where = [p - slot / 2 + width * (k + 0.5) for p in where]
        marker = t.get("marker", {})
        edge = marker.get("line", {})
        hatch = marker.get("pattern", {}).get("shape")
        style = {
            "color": marker.get("color"),
            "label": _label(t),
            "edgecolor": edge.get("color", "white" if hatch else None),
            "linewidth": _pt(edge.get("width", 0)),
            "hatch": hatch * 3 if hatch else None,
        }
        drawn = (
            ax.barh(where, vals, height=width, left=starts, **style)
            if horizontal
            else ax.bar(where, vals, width=width, bottom=starts, **style)
        )
        for patch, start in zip(drawn, starts):
            if start:  # a stacked bar's base is no edge of the plot (matplotlib pins the axis to it)
                patch.sticky_edges.x.clear()
                patch.sticky_edges.y.clear()
    if categorical:
        ticks, labels = list(pos.values()), [_text(c) for c in pos]
        if horizontal:
            ax.set_yticks(ticks, labels)
        else:
            ax.set_xticks(
                ticks, labels, rotation=30 if len(ticks) > 5 else 0, ha="right" if len(ticks) > 5 else "center"
            )


def _label(t: dict) -> str:
    # a label starting with "_" is left out of the legend (matplotlib's rule)
    return _text(t.get("name", "")) if t.get("showlegend", True) and t.get("name") else "_"


def _scatter(ax: Axes, t: dict) -> None:
    mode = t.get("mode", "lines+markers")
    line, marker = t.get("line", {}), t.get("marker", {})
    color = line.get("color") or marker.get("color")
    ax.plot(
        [float(x) for x in t.get("x", [])],
        [float(y) for y in t.get("y", [])],
        color=color,
        label=_label(t),
        linestyle=DASHES.get(line.get("dash", "solid"), "-") if "lines" in mode else "none",
        linewidth=_pt(line.get("width", 2)),
        drawstyle=STEPS.get(line.get("shape", "linear"), "default"),
        marker=SYMBOLS.get(marker.get("symbol", "circle"), "o") if "markers" in mode else "none",
        markersize=_pt(marker.get("size", 6)),
        markerfacecolor=marker.get("color", color),
        markeredgecolor=marker.get("color", color),
    )


def _transform(ax: Axes, item: dict) -> Any:
    """Data coordinates, or a fraction of the plot area along an axis whose ref is ``paper``."""
    from matplotlib.transforms import blended_transform_factory

    return blended_transform_factory(
        ax.transAxes if item.get("xref") == "paper" else ax.transData,
        ax.transAxes if item.get("yref") == "paper" else ax.transData,
    )


def _shape(ax: Axes, s: dict) -> None:
    from matplotlib.lines import Line2D

    kind = s.get("type", "line")
    x0, x1, y0, y1 = (float(s[k]) for k in ("x0", "x1", "y0", "y1"))
    if kind == "line":
        xs, ys = [x0, x1], [y0, y1]
    elif kind == "rect":
        xs, ys = [x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0]
    else:
        raise ValueError(f"static pictures draw line and rect shapes, not {kind!r}")
    line = s.get("line", {})
    # the axis range grows to show a shape, as plotly's does (its data-coordinate side only)
    ax.update_datalim(list(zip(xs, ys)), updatex=s.get("xref") != "paper", updatey=s.get("yref") != "paper")
    ax.add_line(
        Line2D(
            xs,
            ys,
            transform=_transform(ax, s),
            color=line.get("color", "#444444"),
            linestyle=DASHES.get(line.get("dash", "solid"), "-"),
            linewidth=_pt(line.get("width", 2)),
            zorder=1 if s.get("layer") == "below" else 3,  # plotly draws shapes over the traces unless "below"
        )
    )


def _annotation(ax: Axes, a: dict) -> None:
    ha = ANCHOR_X.get(a.get("xanchor", "auto"), "center")
    va = ANCHOR_Y.get(a.get("yanchor", "auto"), "center")
    arrow = a.get("showarrow", True)  # plotly's default: an arrow to the point from (ax, ay) px away
    # without an arrow, plotly pads the text 3 px away from its anchor point: clear of the line it names
    pad = {"left": 3, "right": -3, "top": -3, "bottom": 3}
    ax.annotate(
        _text(a.get("text", "")),
        (float(a.get("x", 0.5)), float(a.get("y", 0.5))),
        xycoords=_transform(ax, a),
        xytext=(_pt(a.get("ax", -10)), -_pt(a.get("ay", -30))) if arrow else (pad.get(ha, 0), pad.get(va, 0)),
        textcoords="offset points",
        arrowprops={"arrowstyle": "-|>"} if arrow else None,
        ha=ha,
        va=va,
        fontsize="small",
        zorder=4,
    )


def _axis(ax: Axes, name: str, spec: dict) -> None:
    setter = getattr(ax, f"set_{name}label")
    setter(_title(spec.get("title", "")))
    if spec.get("type") == "log":
        getattr(ax, f"set_{name}scale")("log")
    lim = getattr(ax, f"set_{name}lim")
    if spec.get("range"):
        lo, hi = (float(v) for v in spec["range"])
        lim(*((10**lo, 10**hi) if spec.get("type") == "log" else (lo, hi)))  # plotly: a log axis's range is in log10
    elif spec.get("rangemode") == "tozero" and spec.get("type") != "log":
        lo, hi = getattr(ax, f"get_{name}lim")()
        lim(min(lo, 0.0), max(hi, 0.0))
    if spec.get("autorange") == "reversed":
        getattr(ax, f"invert_{name}axis")()


def draw(ax: Axes, fig: Figure) -> None:
    """One plotly-schema figure on one matplotlib Axes."""
    layout, data = fig.get("layout", {}), fig.get("data", [])
    kinds = {t.get("type", "scatter") for t in data} - {"bar", "scatter"}
    if kinds:
        raise ValueError(f"static pictures draw bar and scatter traces, not {sorted(kinds)}")
    bars = [t for t in data if t.get("type") == "bar"]
    if bars:
        _bars(ax, bars, layout)
    for t in data:
        if t.get("type", "scatter") == "scatter":
            _scatter(ax, t)
    for s in layout.get("shapes", []):
        _shape(ax, s)
    ax.autoscale_view()
    for a in layout.get("annotations", []):
        _annotation(ax, a)
    ax.set_title(_title(layout.get("title", "")))
    _axis(ax, "x", layout.get("xaxis", {}))
    _axis(ax, "y", layout.get("yaxis", {}))
    ax.grid(True, alpha=0.3)  # plotly_white's grid
    ax.set_axisbelow(True)
    shown = [t for t in data if not _label(t).startswith("_")]
    if len(shown) > 1 or (shown and layout.get("showlegend")):  # plotly: a legend once there are two traces
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)


def render(figs: list[Figure]) -> MplFigure:
    """The figures as panels of one matplotlib Figure, top to bottom, each as tall as its layout
    says (plotly's 450 px by default)."""
    from matplotlib.figure import Figure as MplFigure

    heights = [float(f.get("layout", {}).get("height", HEIGHT_PX)) for f in figs]
    out = MplFigure(figsize=(WIDTH_PX / PX_PER_INCH, sum(heights) / PX_PER_INCH), layout="constrained")
    axes = out.subplots(len(figs), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, f in zip(axes, figs):
        draw(ax, f)
    return out


def write_plot(path: str | Path, command: str, doc: dict, slo: dict | None = None) -> MplFigure:
    """Draw ``command``'s figures of ``doc`` (the ``--json`` document) into ``path``, the format
    by its suffix; returns the matplotlib Figure drawn (its artists hold the numbers drawn)."""
    import matplotlib

    figs = figures(command, doc, slo)
    if not figs:
        raise GpuplanError(
            "plot",
            f"{command} has no picture of this plan (its document lacks what the pictures draw)",
            f"drop {field_ref('plot')}; {field_ref('json')} and {field_ref('html')} show its numbers",
        )
    out = render(figs)
    # text stays text in an SVG (searchable, smaller) rather than outlined glyphs
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        out.savefig(path, dpi=DPI, bbox_inches="tight")
    return out
