"""What every figure shares: plotly's figure dict, the palette, axes and marker lines."""

from __future__ import annotations

from typing import Any

Figure = dict[str, Any]
# Okabe-Ito: told apart with every common colour-vision deficiency
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999")


def layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title},
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "hovermode": "closest",
        "template": "plotly_white",
    }
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(layout.get(k), dict):
            layout[k] = {**layout[k], **v}
        else:
            layout[k] = v
    return layout


def hline(y: float, text: str, color: str = "#D55E00") -> tuple[dict, dict]:
    shape = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": color, "dash": "dash"},
    }
    note = {"xref": "paper", "x": 1, "y": y, "text": text, "showarrow": False, "xanchor": "right", "yanchor": "bottom"}
    return shape, note


def vline(x: float, text: str, color: str = "#D55E00") -> tuple[dict, dict]:
    shape = {
        "type": "line",
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "x0": x,
        "x1": x,
        "line": {"color": color, "dash": "dash"},
    }
    note = {"yref": "paper", "y": 1, "x": x, "text": text, "showarrow": False, "xanchor": "left", "yanchor": "top"}
    return shape, note
