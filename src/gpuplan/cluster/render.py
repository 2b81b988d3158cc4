"""Cluster runs as a Chrome trace (jobs on nodes) and as plots (utilisation, queue delay by tier)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpuplan.cluster.sim import ClusterSim


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
    for job, tier, nodes, start, end, outcome, gpus in sorted(sim.segments, key=lambda s: s[3]):
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
    if not sim.segments:
        return np.zeros(0), np.zeros(0)
    seg = np.array([(s[3], s[4], s[6]) for s in sim.segments])
    t0, t1 = seg[:, 0].min(), seg[:, 1].max()
    edges = np.linspace(t0, t1, bins + 1)
    width = edges[1] - edges[0]
    busy = np.zeros(bins)
    for start, end, g in seg:  # overlap of each run with each bin
        lo, hi = np.searchsorted(edges, start, "right") - 1, np.searchsorted(edges, end, "left")
        for b in range(max(lo, 0), min(hi, bins)):
            busy[b] += g * max(0.0, min(end, edges[b + 1]) - max(start, edges[b]))
    return edges[:-1], busy / (width * sim.capacity.sum() / 1000)


def write_plot(sim: ClusterSim, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, u = utilisation_over_time(sim)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    a.plot(t / 3600, u * 100)
    a.set_xlabel("hours")
    a.set_ylabel("GPUs busy (%)")
    a.set_title("Utilisation over time")
    tiers = sorted({j.tier for j in sim.jobs})
    waits = [
        [(j.first_start_s - j.arrival_s) / 60 for j in sim.jobs if j.tier == tier and j.state == "done"]
        for tier in tiers
    ]
    b.boxplot(waits, showfliers=False)
    b.set_xticks(range(1, len(tiers) + 1), [f"tier {x}" for x in tiers])
    b.set_ylabel("queueing delay (min)")
    b.set_title("Queueing delay by tier")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
