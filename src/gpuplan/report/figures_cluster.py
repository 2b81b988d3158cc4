"""Figures of the cluster commands: utilisation and waits of a simulated cluster, what preemption
costs per checkpoint policy, checkpoint waste against the interval, and cost over time."""

from __future__ import annotations

import math

from gpuplan.report.figure_kit import PALETTE, Figure, layout


def cluster_utilisation(doc: dict) -> Figure:
    u = doc["utilisation_over_time"]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "name": "GPUs busy",
                "x": [t / 3600 for t in u["t_s"]],
                "y": [b * 100 for b in u["busy_fraction"]],
                "line": {"color": PALETTE[0]},
                "hovertemplate": "%{x:.1f} h: %{y:.1f}% busy<extra></extra>",
            }
        ],
        "layout": layout("Utilisation over time", "hours", "GPUs busy (%)", yaxis={"range": [0, 105]}),
    }


def cluster_waits(doc: dict) -> Figure:
    """Queueing delay per tier as a distribution (share of jobs that waited at most x) on a log axis,
    so the tail shows: a box plot's whisker stopped at 1.75 min where p99 was 2.8 h."""
    data, floor = [], 1.0  # a wait of zero drawn at 1 s (log axis)
    for (tier, v), color in zip(doc["tiers"].items(), PALETTE):
        q = v.get("wait_quantiles_s")
        if not q:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"tier {tier} ({v['jobs']} jobs)",
                "x": [max(w, floor) for w in q],
                "y": [i / (len(q) - 1) * 100 for i in range(len(q))],
                "customdata": q,
                "line": {"color": color, "shape": "hv"},
                "hovertemplate": "%{y:.0f}% of jobs waited at most %{customdata:,.0f} s<extra>tier "
                + tier
                + "</extra>",
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"tier {tier} p99",
                "showlegend": False,
                "x": [max(v["p99_wait_s"], floor)],
                "y": [99],
                "marker": {"color": color, "size": 10, "symbol": "diamond"},
                "hovertemplate": "tier " + tier + " p99: %{x:,.0f} s<extra></extra>",
            }
        )
    return {
        "data": data,
        "layout": layout(
            "Queueing delay by tier (the tail included)",
            "queueing delay (s, log; no wait drawn at 1 s)",
            "jobs that waited at most this (%)",
            xaxis={"type": "log"},
        ),
    }


def whatif_costs(doc: dict) -> Figure:
    pol = doc["policies"]
    x = [p["checkpoint"] for p in pol]
    return {
        "data": [
            {
                "type": "bar",
                "name": "work lost to the preemption",
                "x": x,
                "y": [p["lost_usd"] for p in pol],
                "marker": {"color": PALETTE[5]},
                "hovertemplate": "%{x}: $%{y:,.2f} lost<extra></extra>",
            },
            {
                "type": "bar",
                "name": "checkpointing",
                "x": x,
                "y": [p["overhead_usd"] for p in pol],
                "marker": {"color": PALETTE[0]},
                "hovertemplate": "%{x}: $%{y:,.2f} checkpointing<extra></extra>",
            },
        ],
        "layout": layout("Dollars per checkpoint policy", "checkpoint policy", "USD", barmode="stack"),
    }


def checkpoint_waste(doc: dict) -> Figure:
    """Expected waste against the checkpoint interval, with Young's and Daly's intervals marked."""
    from gpuplan.estimate.checkpoint_interval import expected_waste_fraction

    m, c, r = doc["mtbf_s"], doc["cost_s"], doc["restart_s"]
    lo, hi = math.log10(max(c, 1.0) / 4), math.log10(m * 4)
    xs = [10 ** (lo + (hi - lo) * i / 200) for i in range(201)]
    ys = [expected_waste_fraction(x, c, m, r) * 100 for x in xs]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "expected waste",
            "x": [x / 60 for x in xs],
            "y": ys,
            "line": {"color": PALETTE[0]},
            "hovertemplate": "every %{x:,.1f} min: %{y:.2f}% wasted<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "Daly",
            "x": [doc["daly_s"] / 60],
            "y": [doc["expected_waste_fraction"] * 100],
            "marker": {"color": PALETTE[5], "size": 12, "symbol": "star"},
            "hovertemplate": "Daly: every %{x:,.1f} min, %{y:.2f}% wasted<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "Young",
            "x": [doc["young_s"] / 60],
            "y": [doc["expected_waste_fraction_young"] * 100],
            "marker": {"color": PALETTE[1], "size": 10},
            "hovertemplate": "Young: every %{x:,.1f} min, %{y:.2f}% wasted<extra></extra>",
        },
    ]
    return {
        "data": data,
        "layout": layout(
            "Checkpoint interval against expected waste",
            "checkpoint interval (min, log)",
            "expected waste (% of wall time)",
            xaxis={"type": "log"},
            yaxis={"rangemode": "tozero"},
        ),
    }


def tco_cumulative(doc: dict) -> Figure:
    rows = doc["cumulative"]
    months = [r["month"] for r in rows]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": name,
            "x": months,
            "y": [r[key] for r in rows],
            "line": {"color": color},
            "hovertemplate": name + ", month %{x}: $%{y:,.0f}<extra></extra>",
        }
        for (key, name), color in zip((("on_demand", "on-demand"), ("spot", "spot"), ("owned", "owned")), PALETTE)
        if rows and rows[0].get(key) is not None
    ]
    return {"data": data, "layout": layout("Cumulative cost", "month", "USD")}
