"""Interactive figures of a command's JSON document, in plotly's figure schema (plain dicts: data
and layout), so the page and the HTML report draw them with the plotly.js of plotly's wheel and
hover, zoom and pan come with it. Units are converted here, for display only (GiB, ms, hours)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from gpuplan.units import GiB

Figure = dict[str, Any]
# Okabe-Ito: told apart with every common colour-vision deficiency
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999")


def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
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


def _hline(y: float, text: str, color: str = "#D55E00") -> tuple[dict, dict]:
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


def _vline(x: float, text: str, color: str = "#D55E00") -> tuple[dict, dict]:
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


MEMORY_PARTS = (
    ("weights", "weights"),
    ("fp8_weight_copies", "FP8 weight copies"),
    ("gradients", "gradients"),
    ("optimizer", "optimizer states"),
    ("master_weights", "master weights"),
    ("activations", "activations"),
    ("other", "other (buckets, reserve, context)"),
)


def train_memory(doc: dict) -> Figure:
    """Memory per GPU as stacked bars, one per pipeline stage, against the GPU's capacity."""
    mem = doc["memory"]
    stages = mem.get("stages") or [mem["per_gpu"]]
    x = [f"stage {s.get('stage', i)} ({s.get('layers', '?')} layers)" for i, s in enumerate(stages)]
    data = []
    for (key, name), color in zip(MEMORY_PARTS, PALETTE):
        if not any(s.get(key) for s in stages):
            continue
        data.append(
            {
                "type": "bar",
                "name": name,
                "x": x,
                "y": [s.get(key, 0.0) / GiB for s in stages],
                "marker": {"color": color},
                "hovertemplate": "%{x}<br>" + name + ": %{y:.2f} GiB<extra></extra>",
            }
        )
    cap = mem["gpu_capacity"] / GiB
    shape, note = _hline(cap, f"capacity {cap:.2f} GiB")
    return {
        "data": data,
        "layout": _layout(
            "Memory per GPU by pipeline stage",
            "pipeline stage",
            "GiB per GPU",
            barmode="stack",
            shapes=[shape],
            annotations=[note],
        ),
    }


STEP_PARTS = (
    ("compute", "compute", None),
    ("recompute", "recompute", None),
    ("tp_comm", "TP comm", "tp"),
    ("cp_comm", "CP comm", "cp"),
    ("ep_comm", "EP comm", "ep"),
    ("pp_comm", "PP send/recv", "pp"),
    ("dp_comm", "DP comm", "dp"),
    ("bubble", "pipeline bubble", None),
    ("optimizer", "optimizer step", None),
    ("overlap_contention", "overlap contention", None),
)


def train_step(doc: dict) -> Figure:
    """Step time by part: what is on the critical path, and the communication hidden behind it."""
    perf = doc["performance"]
    parts, comm = perf["breakdown_s"], perf.get("comm", {})
    names, exposed, hidden = [], [], []
    for key, name, dim in STEP_PARTS:
        hid = comm.get(dim, {}).get("hidden_s", 0.0) if dim else 0.0
        if not parts.get(key) and not hid:
            continue
        names.append(name)
        exposed.append(parts.get(key, 0.0))
        hidden.append(hid)
    data = [
        {
            "type": "bar",
            "name": "on the critical path",
            "y": names,
            "x": exposed,
            "orientation": "h",
            "marker": {"color": PALETTE[0]},
            "hovertemplate": "%{y}: %{x:.4g} s<extra>on the critical path</extra>",
        },
        {
            "type": "bar",
            "name": "hidden behind compute",
            "y": names,
            "x": hidden,
            "orientation": "h",
            "marker": {"color": PALETTE[4], "pattern": {"shape": "/"}},
            "hovertemplate": "%{y}: %{x:.4g} s<extra>hidden behind compute</extra>",
        },
    ]
    step = perf["step_s"]
    return {
        "data": data,
        "layout": _layout(
            f"Step time {step:.4g} s, by part",
            "seconds per step",
            "",
            barmode="stack",
            yaxis={"autorange": "reversed", "automargin": True},
        ),
    }


def _plan_label(p: dict) -> str:
    pl, tr = p["plan"], p["training"]
    parts = [f"{k}{pl[k]}" for k in ("dp", "tp", "pp", "cp", "ep") if pl.get(k, 1) != 1 or k == "dp"]
    parts += [f"etp{pl['etp']}"] if pl.get("etp") is not None else []
    return " ".join(parts) + f" zero{pl['zero']} mb{tr['micro_batch']} {tr['recompute']} {pl['schedule']}"


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both (lower is better), by the first value."""
    front, best = [], math.inf
    for i in sorted(range(len(points)), key=lambda i: points[i]):
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def search_scatter(doc: dict) -> Figure:
    """Step time against cost of the ranked plans, the Pareto front, and the plan chosen."""
    plans = doc["plans"]
    use_usd = all(p.get("cost_usd") is not None for p in plans)
    cost = [p["cost_usd"] if use_usd else p["gpu_hours"] for p in plans]
    step = [p["time"]["step_s"] for p in plans]
    labels = [f"#{p.get('rank', i + 1)} {_plan_label(p)} ({p['gpu']['count']} GPUs)" for i, p in enumerate(plans)]
    front = pareto(list(zip(step, cost)))
    unit = "USD" if use_usd else "GPU-hours"
    data = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "plans",
            "x": step,
            "y": cost,
            "text": labels,
            "marker": {"color": PALETTE[0], "size": 9},
            "hovertemplate": "%{text}<br>%{x:.4g} s per step<br>%{y:,.4g} " + unit + "<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "Pareto front",
            "x": [step[i] for i in front],
            "y": [cost[i] for i in front],
            "line": {"color": PALETTE[1], "shape": "hv"},
            "hoverinfo": "skip",
        },
    ]
    if plans:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "chosen plan",
                "x": [step[0]],
                "y": [cost[0]],
                "text": [labels[0]],
                "marker": {"color": PALETTE[5], "size": 16, "symbol": "star"},
                "hovertemplate": "chosen: %{text}<extra></extra>",
            }
        )
    return {
        "data": data,
        "layout": _layout("Plans: step time against cost", "step time (s)", f"cost per step ({unit})"),
    }


def serve_curve(doc: dict, slo: dict | None = None) -> Figure:
    """Throughput against latency as concurrency grows, with the latency target."""
    curve = doc["throughput_curve"]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "by concurrency",
            "x": [c["tpot_s"] * 1e3 for c in curve],
            "y": [c["output_tokens_per_s"] for c in curve],
            "text": [f"concurrency {c['concurrency']}" for c in curve],
            "marker": {"color": PALETTE[0]},
            "hovertemplate": "%{text}<br>TPOT %{x:.2f} ms<br>%{y:,.0f} output tokens/s<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": f"this plan (concurrency {doc['concurrency']})",
            "x": [doc["tpot_s"] * 1e3],
            "y": [doc["output_tokens_per_s"]],
            "marker": {"color": PALETTE[5], "size": 14, "symbol": "star"},
            "hovertemplate": "TPOT %{x:.2f} ms<br>%{y:,.0f} output tokens/s<extra>this plan</extra>",
        },
    ]
    shapes, notes = [], []
    if slo and slo.get("tpot_s"):
        s, n = _vline(slo["tpot_s"] * 1e3, f"ITL target {slo['tpot_s'] * 1e3:g} ms")
        shapes.append(s)
        notes.append(n)
    return {
        "data": data,
        "layout": _layout(
            "Throughput against latency by concurrency",
            "time per output token (ms)",
            "output tokens/s",
            shapes=shapes,
            annotations=notes,
        ),
    }


def serve_memory(doc: dict) -> Figure:
    mem = doc["memory"]
    per = mem["per_gpu"]
    data = [
        {
            "type": "bar",
            "name": name,
            "x": ["per GPU"],
            "y": [per[key] / GiB],
            "marker": {"color": color},
            "hovertemplate": name + ": %{y:.2f} GiB<extra></extra>",
        }
        for (key, name), color in zip(
            (("weights", "weights"), ("kv_cache", "KV cache"), ("activations", "activations"), ("other", "other")),
            PALETTE,
        )
        if key in per
    ]
    s1, n1 = _hline(mem["capacity"] / GiB, f"capacity {mem['capacity'] / GiB:.2f} GiB")
    s2, n2 = _hline(mem["budget"] / GiB, f"engine budget {mem['budget'] / GiB:.2f} GiB", PALETTE[8])
    return {
        "data": data,
        "layout": _layout("Memory per GPU", "", "GiB", barmode="stack", shapes=[s1, s2], annotations=[n1, n2]),
    }


def _achieved_rate(run: dict) -> float:
    """The request rate a run put on the engine: the offered rate of an open-loop run, the
    completed requests per second of a closed-loop (``--concurrency``) or trace run, which offer
    none (their ``rate`` is 0)."""
    return run.get("rate") or run.get("requests_per_s") or 0.0


def serve_sim_percentiles(doc: dict) -> Figure:
    """Latency percentiles against request rate (log scale: the tail is the point)."""
    runs = [r for r in doc["runs"] if r.get("rate") is not None]
    runs.sort(key=_achieved_rate)
    rate = [_achieved_rate(r) for r in runs]
    data = []
    series = (("ttft_s", "TTFT", 0), ("itl_s", "ITL", 2), ("e2e_s", "end to end", 3))
    for key, name, color in series:
        for pct, dash in (("p50", "dot"), ("p90", "dash"), ("p99", "solid")):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"{name} {pct}",
                    "x": rate,
                    "y": [r[key][pct] * 1e3 for r in runs],
                    "line": {"color": PALETTE[color], "dash": dash},
                    "hovertemplate": f"{name} {pct}: " + "%{y:,.2f} ms at %{x} req/s<extra></extra>",
                }
            )
    shapes, notes = [], []
    slo = doc.get("slo") or {}
    for key, name in (("ttft_p99_s", "TTFT p99 target"), ("itl_p99_s", "ITL p99 target")):
        if slo.get(key):
            s, n = _hline(slo[key] * 1e3, f"{name} {slo[key] * 1e3:g} ms")
            shapes.append(s)
            notes.append(n)
    if slo.get("max_rate"):
        s, n = _vline(slo["max_rate"], f"highest rate meeting it: {slo['max_rate']:.3g}/s", PALETTE[2])
        shapes.append(s)
        notes.append(n)
    return {
        "data": data,
        "layout": _layout(
            "Latency percentiles against request rate",
            "request rate (requests/s)",
            "latency (ms, log)",
            yaxis={"type": "log"},
            shapes=shapes,
            annotations=notes,
        ),
    }


KIND_NAMES = {
    "F": "forward",
    "B": "backward (input)",
    "W": "backward (weight)",
    "BW": "full backward",
    "FB": "forward & backward overlapped",
}
KIND_COLORS = {"F": PALETTE[0], "B": PALETTE[2], "W": PALETTE[3], "BW": PALETTE[4], "FB": PALETTE[1]}


def pipeline_timeline(doc: dict) -> Figure:
    """One row per rank, one box per action; readable at 64 ranks (the height grows with ranks)."""
    ev = doc["events"]
    unit = doc.get("costs", {}).get("unit_s") or 1e-3
    scale, unit_name = (1e3, "ms") if unit < 1 else (1.0, "s")
    ranks = doc["stages"]
    data = []
    for kind, name in KIND_NAMES.items():
        idx = [i for i, k in enumerate(ev["kind"]) if k == kind]
        if not idx:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": name,
                "y": [f"rank {ev['rank'][i]}" for i in idx],
                "base": [ev["start"][i] * unit * scale for i in idx],
                "x": [(ev["end"][i] - ev["start"][i]) * unit * scale for i in idx],
                "text": [f"micro-batch {ev['microbatch'][i]}" for i in idx],
                "marker": {"color": KIND_COLORS[kind], "line": {"width": 0.5, "color": "white"}},
                "hovertemplate": "%{y}, "
                + name
                + " %{text}<br>%{base:.4g} to %{x:.4g} "
                + unit_name
                + " long<extra></extra>",
            }
        )
    return {
        "data": data,
        "layout": _layout(
            f"{doc['schedule']}: {ranks} ranks, {doc['microbatches']} micro-batches, bubble {doc['bubble_fraction']:.1%}",
            f"time ({unit_name})",
            "",
            barmode="overlay",
            bargap=0.15,
            height=max(320, 16 * ranks + 140),
            yaxis={
                "autorange": "reversed",
                "categoryorder": "array",
                "categoryarray": [f"rank {r}" for r in range(ranks)],
                "automargin": True,
            },
        ),
    }


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
        "layout": _layout("Utilisation over time", "hours", "GPUs busy (%)", yaxis={"range": [0, 105]}),
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
        "layout": _layout(
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
        "layout": _layout("Dollars per checkpoint policy", "checkpoint policy", "USD", barmode="stack"),
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
        "layout": _layout(
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
    return {"data": data, "layout": _layout("Cumulative cost", "month", "USD")}


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
