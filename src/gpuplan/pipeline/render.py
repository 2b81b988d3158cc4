"""A pipeline timeline as Chrome trace JSON (Perfetto, chrome://tracing) and as a PNG diagram.

Trace Event Format (Google, "Trace Event Format" document): complete events ``ph: "X"`` with
``ts``/``dur`` in microseconds, one process per rank, thread 0 for compute and thread 1 for
communication, flow events (``ph: "s"``/``"f"``) from each send to the receive that uses it, and
``process_name``/``thread_name`` metadata.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpuplan.pipeline.simulate import Timeline

COLORS = {"F": "#4c9be8", "B": "#2ca02c", "W": "#8c6bb1", "BW": "#17a673", "FB": "#f28e2b"}


def chrome_trace(t: Timeline, unit_s: float = 1e-3) -> dict:
    """``unit_s``: seconds per unit of the timeline's costs (1 ms when costs are unitless)."""
    us = unit_s * 1e6
    events = []
    for r in range(t.schedule.ranks):
        events.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}})
        events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 0, "args": {"name": "compute"}})
        events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 1, "args": {"name": "communication"}})
    for e in t.events:
        label = " + ".join(op.label() for op in e.action.ops)
        events.append(
            {
                "ph": "X",
                "name": label,
                "cat": e.action.kind,
                "pid": e.rank,
                "tid": 0,
                "ts": e.start * us,
                "dur": (e.end - e.start) * us,
                "args": {
                    "ops": [dict(kind=o.kind, microbatch=o.mb, stage=o.stage, stream=o.stream) for o in e.action.ops]
                },
            }
        )
    for i, x in enumerate(t.transfers):
        events.append(
            {
                "ph": "X",
                "name": f"send {x.label}",
                "cat": "p2p",
                "pid": x.src,
                "tid": 1,
                "ts": x.start * us,
                "dur": max(x.end - x.start, 0.0) * us,
                "args": {"to": x.dst},
            }
        )
        events.append({"ph": "s", "name": "p2p", "cat": "p2p", "id": i, "pid": x.src, "tid": 1, "ts": x.start * us})
        events.append(
            {"ph": "f", "bp": "e", "name": "p2p", "cat": "p2p", "id": i, "pid": x.dst, "tid": 0, "ts": x.end * us}
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"schedule": t.schedule.name, "makespan": t.makespan_s, "bubble_fraction": t.bubble_fraction},
    }


def write_trace(t: Timeline, path: Path, unit_s: float = 1e-3) -> None:
    Path(path).write_text(json.dumps(chrome_trace(t, unit_s), allow_nan=False))


def write_plot(t: Timeline, path: Path, unit_s: float = 1e-3) -> None:
    """The usual pipeline diagram: one row per rank, one box per action, micro-batch numbers inside
    where they fit. ``unit_s``: seconds per unit of the costs (``--unit``), for the time axis.

    Readable at 64 ranks: a row is at least 0.22 in (16 pt) tall, the rank labels thin out to every
    2nd/4th/8th rank beyond 32 and the text is at least 8 pt at the saved size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = t.schedule.ranks
    width = max(10.0, min(20.0, len(t.events) / p * 0.35))
    row_in = 0.3 if p <= 16 else 0.24
    fig, ax = plt.subplots(figsize=(width, row_in * p + 2.0))
    scale, unit_name = (unit_s * 1e3, "ms") if unit_s < 1 else (unit_s, "s")
    # One collection per (rank, kind), not one patch per action: drawing then costs about what the
    # simulation does (16 ranks x 256 micro-batches took 112 s with a patch and a label per action).
    bars: dict[tuple[int, str], list] = {}
    for e in t.events:
        bars.setdefault((e.rank, e.action.kind), []).append((e.start * scale, (e.end - e.start) * scale))
    for (rank, kind), spans in bars.items():
        ax.broken_barh(spans, (p - 1 - rank + 0.05, 0.9), facecolors=COLORS[kind], edgecolors="white", linewidth=0.5)
    # Micro-batch numbers only where a box is wide enough to read them (about 2.5 mm at 8 pt) and
    # the row tall enough
    makespan = t.makespan_s * scale
    if makespan > 0 and row_in >= 0.22 and len(t.events) / p <= 200:
        for e in t.events:
            label = "/".join(str(o.mb) for o in e.action.ops)
            if (e.end - e.start) * scale / makespan * width >= 0.1 * len(label):
                ax.text(
                    (e.start + e.end) / 2 * scale,
                    p - 1 - e.rank + 0.5,
                    label,
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
    step = 1 if p <= 32 else 2 ** math.ceil(math.log2(p / 32))
    shown = range(0, p, step)
    ax.set_yticks([p - 1 - r + 0.5 for r in shown], [f"rank {r}" for r in shown], fontsize=10)
    ax.set_ylim(0, p)
    ax.set_xlim(0, makespan)
    ax.set_xlabel(f"time ({unit_name})", fontsize=11)
    ax.tick_params(axis="x", labelsize=10)
    ax.set_title(
        f"{t.schedule.name}: {p} ranks, {t.schedule.microbatches} micro-batches, bubble {t.bubble_fraction:.1%}",
        fontsize=12,
    )
    kinds = [k for k in COLORS if (any(k == kind for _, kind in bars))]
    names = {"F": "F", "B": "B (input)", "W": "W (weight)", "BW": "full backward", "FB": "F&B overlapped"}
    ax.legend(
        [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in kinds],
        [names[k] for k in kinds],
        loc="lower center",
        bbox_to_anchor=(0.5, 1.02 + 0.3 / (row_in * p + 2.0)),
        ncol=len(kinds),
        fontsize=10,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
