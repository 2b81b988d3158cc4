"""A cluster simulation set up from what the user gave, checked before it runs: the node failure
rate (a preset or a duration), that jobs interrupted at the given rates can still make progress,
and the jobs of a trace this cluster can run at all (the rest counted by reason)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from gpuplan import inputs
from gpuplan.cluster.sim import NODE_MTBF_PRESETS, ClusterConfig, ClusterSim, Job
from gpuplan.errors import GpuplanError, field_ref
from gpuplan.estimate.checkpoint_interval import NO_PROGRESS, daly_interval, expected_waste_fraction
from gpuplan.units import fmt_duration


def node_mtbf(text: str) -> float | None:
    """A node's mean time between failures in seconds: a preset of NODE_MTBF_PRESETS (llama3,
    rsc1, rsc2), ``none`` (no failures: None) or a duration."""
    if text == "none" or text in NODE_MTBF_PRESETS:
        return NODE_MTBF_PRESETS.get(text)
    try:
        return inputs.duration(text, "node_mtbf")
    except GpuplanError:
        raise GpuplanError(
            "node_mtbf",
            f"cannot read {text!r} as a preset or a duration",
            f"use {', '.join(NODE_MTBF_PRESETS)}, none, or a duration like 264d",
        ) from None


def check_progress(
    mtbf_s: float | None,
    spot_reclaims_per_s: float,
    cost_s: float,
    restart_s: float,
    checkpoint: str = "daly",
    longest_s: float = 0.0,
    grace_s: float = 0.0,
    longest_spot_s: float | None = None,
) -> None:
    """Refuse interruption rates at which a job never finishes (node failures every ``mtbf_s``;
    spot jobs also reclaimed ``spot_reclaims_per_s``), rather than simulate them without end.

    Under the job's own checkpoint policy (Daly's exact waste model, which
    ``expected_waste_fraction`` implements): ``daly`` at Daly's interval, a duration at that
    interval; ``none`` restarts the longest job (``longest_s`` of work) from scratch at every
    interruption, as ``sigterm`` does at a node failure (no SIGTERM) or at a reclaim whose
    ``grace_s`` is too short to write its checkpoint; reclaims take spot jobs only, the longest of
    them ``longest_spot_s`` (``longest_s`` when not given)."""
    for name, rate in (
        ("node_mtbf", 1 / mtbf_s if mtbf_s else 0.0),
        ("spot_reclaim_per_hour", spot_reclaims_per_s),
    ):
        if not rate:
            continue
        every = 1 / (rate + (1 / mtbf_s if mtbf_s and name != "node_mtbf" else 0.0))
        if checkpoint == "daly":
            interval, cost = daly_interval(cost_s, every), cost_s
        elif checkpoint == "sigterm" and name != "node_mtbf" and grace_s >= cost_s:
            continue  # a reclaim's SIGTERM checkpoint saves the work (failures were checked above)
        else:
            reclaimed = longest_spot_s if name != "node_mtbf" and longest_spot_s is not None else longest_s
            if checkpoint in ("none", "sigterm") or 0 < reclaimed <= float(checkpoint):
                # an interval no shorter than the job never checkpoints it: as `none`
                interval, cost = reclaimed, 0.0
            else:
                interval, cost = float(checkpoint), cost_s
        if interval <= 0:
            continue
        waste = expected_waste_fraction(interval, cost, every, restart_s)
        if waste >= NO_PROGRESS:
            policy = "no checkpoint" if cost == 0 else f"checkpoints every {fmt_duration(interval)}"
            raise GpuplanError(
                name,
                f"a job interrupted every {fmt_duration(every)} has no time to work ({waste:.1%} "
                f"of it goes to restarts of {fmt_duration(restart_s)}, checkpoints of "
                f"{fmt_duration(cost_s)} and lost work; {policy}"
                + (f", {fmt_duration(interval)} of work" if cost == 0 else "")
                + ")",
                f"use a longer {field_ref('node_mtbf')} (llama3: 264 node-days), fewer "
                f"{field_ref('spot_reclaim_per_hour')}, a checkpoint policy that saves the work "
                f"({field_ref('checkpoint', 'daly')}), or a shorter {field_ref('restart')} or "
                f"{field_ref('checkpoint_cost')}",
            )


def runnable_jobs(
    cfg: ClusterConfig,
    jobs: list[Job],
    skipped: Counter[str],
    source: str,
    *,
    checkpoint: str,
    cost_s: float,
    restart_s: float,
) -> list[Job]:
    """The jobs of a trace (read from ``source``) that can run on ``cfg``'s cluster, numbered
    afresh and given the checkpoint policy; the others are counted in ``skipped`` by reason. A
    trace with nothing to run is refused rather than simulating failures and repairs forever."""
    probe, runnable = ClusterSim(cfg, []), []
    for j in jobs:
        why = probe.never_fits(j)
        if why is None:
            runnable.append(j)
        else:
            skipped[why[0]] += 1
    if not runnable:
        why_not = ", ".join(f"{n:,} {r}" for r, n in skipped.items()) or "no rows"
        raise GpuplanError(
            "trace",
            f"{source} has no job this cluster can run ({why_not})",
            "pass a trace with GPU jobs, or a cluster with the GPUs they need",
        )
    return [
        dataclasses.replace(j, id=k, checkpoint=checkpoint, cost_s=cost_s, restart_s=restart_s)
        for k, j in enumerate(runnable)
    ]
