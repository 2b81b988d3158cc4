"""Figures of serving: latency and throughput against concurrency, memory, and the simulated
engine's latency percentiles."""

from __future__ import annotations

from gpuplan.report.figure_kit import PALETTE, Figure, hline, layout, vline
from gpuplan.units import GiB


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
        s, n = vline(slo["tpot_s"] * 1e3, f"ITL target {slo['tpot_s'] * 1e3:g} ms")
        shapes.append(s)
        notes.append(n)
    return {
        "data": data,
        "layout": layout(
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
    s1, n1 = hline(mem["capacity"] / GiB, f"capacity {mem['capacity'] / GiB:.2f} GiB")
    s2, n2 = hline(mem["budget"] / GiB, f"engine budget {mem['budget'] / GiB:.2f} GiB", PALETTE[8])
    return {
        "data": data,
        "layout": layout("Memory per GPU", "", "GiB", barmode="stack", shapes=[s1, s2], annotations=[n1, n2]),
    }


def _achieved_rate(run: dict) -> float:
    """The request rate a run put on the engine: the offered rate of an open-loop run, the
    completed requests per second of a closed-loop (``--concurrency``) or trace run, which offer
    none (their ``rate`` is 0), or of a burst (``--rate inf``: ``rate`` null, ``burst`` true)."""
    return run.get("rate") or run.get("requests_per_s") or 0.0


def serve_sim_percentiles(doc: dict) -> Figure:
    """Latency percentiles against request rate (log scale: the tail is the point)."""
    runs = [r for r in doc["runs"] if r.get("rate") is not None or r.get("burst")]
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
            s, n = hline(slo[key] * 1e3, f"{name} {slo[key] * 1e3:g} ms")
            shapes.append(s)
            notes.append(n)
    if slo.get("max_rate"):
        s, n = vline(slo["max_rate"], f"highest rate meeting it: {slo['max_rate']:.3g}/s", PALETTE[2])
        shapes.append(s)
        notes.append(n)
    return {
        "data": data,
        "layout": layout(
            "Latency percentiles against request rate",
            "request rate (requests/s)",
            "latency (ms, log)",
            yaxis={"type": "log"},
            shapes=shapes,
            annotations=notes,
        ),
    }
