"""Figures of training: memory and step time of a plan, the search's plans as step time against
cost, and the pipeline schedule's timeline."""

from __future__ import annotations

import math

from gpuplan.report.figure_kit import PALETTE, Figure, hline, layout
from gpuplan.units import GiB

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
    shape, note = hline(cap, f"capacity {cap:.2f} GiB")
    return {
        "data": data,
        "layout": layout(
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
        "layout": layout(
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
        "layout": layout("Plans: step time against cost", "step time (s)", f"cost per step ({unit})"),
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
        "layout": layout(
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
