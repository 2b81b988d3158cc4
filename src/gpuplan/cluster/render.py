"""Cluster runs as a Chrome trace (jobs on nodes) and as plots (utilisation, queue delay by tier)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpuplan.cluster.job import JobState
from gpuplan.cluster.sim import ClusterSim
from gpuplan.units import fmt_duration


def chrome_trace(sim: ClusterSim, max_nodes: int = 512) -> dict:
    """One process per node (the first ``max_nodes``), one complete event per job run on it."""
    events = []
    for n in range(min(sim.cfg.nodes, max_nodes)):
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": n,
                "args": {"name": f"node {n} (rack {n // sim.cfg.nodes_per_rack})"},
            }
        )
    lanes: dict[int, list[float]] = {}  # node -> end time of each lane (jobs sharing a node get lanes)
    for job, tier, nodes, start, end, outcome, gpus in sorted(sim.segments, key=lambda s: s.start_s):
        for n in nodes:
            if n >= max_nodes:
                continue
            ends = lanes.setdefault(n, [])
            lane = next((i for i, e in enumerate(ends) if e <= start), len(ends))
            if lane == len(ends):
                ends.append(end)
            else:
                ends[lane] = end
            events.append(
                {
                    "ph": "X",
                    "name": f"job {job}",
                    "cat": outcome,
                    "pid": n,
                    "tid": lane,
                    "ts": start * 1e6,
                    "dur": (end - start) * 1e6,
                    "args": {"tier": tier, "gpus": gpus, "outcome": outcome, "gang_nodes": len(nodes)},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(sim: ClusterSim, path: str | Path) -> None:
    Path(path).write_text(json.dumps(chrome_trace(sim)))


def utilisation_over_time(sim: ClusterSim, bins: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(bin start times, busy GPU share) from the job runs."""
    return sim.utilisation_series(bins)


def write_plot(sim: ClusterSim, path: str | Path) -> None:
    """Utilisation over time, and queueing delay per tier as the share of jobs that waited at most
    x on a log axis: a box plot's whisker (1.5 IQR) stopped at 1.75 min where p99 was 2.8 h."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, u = utilisation_over_time(sim)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.plot(t / 3600, u * 100)
    a.set_xlabel("time (hours)")
    a.set_ylabel("GPUs busy (%)")
    a.set_ylim(0, 105)
    a.set_title("Utilisation over time")
    floor = 1.0  # seconds: a job that did not wait is drawn here (log axis)
    for k, tier in enumerate(sorted({j.tier for j in sim.jobs})):
        waits = np.sort([r.wait_s for r in sim.runs.values() if r.tier == tier and r.state == JobState.DONE])
        if not len(waits):
            continue
        share = np.arange(1, len(waits) + 1) / len(waits) * 100
        (line,) = b.step(np.maximum(waits, floor), share, where="post", label=f"tier {tier} ({len(waits)} jobs)")
        p99 = float(np.percentile(waits, 99))
        b.plot([max(p99, floor)], [99], marker="D", color=line.get_color())
        b.annotate(
            f"p99 {fmt_duration(p99)}",
            (max(p99, floor), 99),
            textcoords="offset points",
            xytext=(6, -14 - 12 * k),
            fontsize=8,
        )
    b.set_xscale("log")
    b.set_xlabel("queueing delay (s, log scale; no wait drawn at 1 s)")
    b.set_ylabel("jobs that waited at most this (%)")
    b.set_ylim(0, 102)
    b.grid(True, which="major", alpha=0.3)
    b.legend(fontsize=8, loc="lower right")
    b.set_title("Queueing delay by tier, tail included")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
