"""What a cluster simulation reports: GPU time by cause, utilisation and goodput, queue delay and
job completion time by tier (:class:`ClusterReport`; ``to_dict`` is the CLI's JSON document)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from gpuplan.cluster.job import MILLI, JobState

if TYPE_CHECKING:  # pragma: no cover
    from gpuplan.cluster.sim import ClusterSim

# Where GPU-seconds go: ``useful`` work, and the causes of everything else
CAUSES = ("useful", "checkpoint", "restart", "lost_failure", "lost_preemption", "lost_reclaim", "grace")


class Segment(NamedTuple):
    """One run of a job on its nodes, from start to release (for traces and plots)."""

    job: int
    tier: int
    nodes: tuple[int, ...]
    start_s: float
    end_s: float
    outcome: str  # done | failure | preemption | reclaim | checkpointed on SIGTERM
    gpus: float


@dataclass
class Metrics:
    """Counters the simulator keeps while it runs."""

    gpu_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    preemptions: int = 0
    failures: int = 0
    reclaims: int = 0


@dataclass(frozen=True)
class TierReport:
    jobs: int
    mean_wait_s: float
    p99_wait_s: float
    mean_jct_s: float
    # the whole distribution, percentile 0 to 100: its tail is what a mean hides
    wait_quantiles_s: list[float]


@dataclass(frozen=True)
class ClusterReport:
    gpus: int
    jobs: int
    finished: int
    makespan_s: float
    utilisation: float  # GPU-seconds busy / GPU-seconds available over the makespan
    goodput: float  # useful GPU-seconds / GPU-seconds available
    gpu_hours: dict[str, float]  # by cause (CAUSES)
    gpu_hours_lost: float
    usd_lost: float
    usd_lost_by_cause: dict[str, float]
    preemptions: int
    failures: int
    reclaims: int
    events: int
    utilisation_over_time: dict[str, list[float]]  # t_s (bin starts), busy_fraction
    tiers: dict[str, TierReport]  # by tier, as a string key (JSON)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (the CLI's JSON document)."""
        return asdict(self)


def utilisation_series(segments: list[Segment], gpus: float, bins: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """(bin start times, share of ``gpus`` busy in each bin) from the job runs: each run's GPU-time
    inside a bin is the difference of its cumulative busy time at the bin's two edges."""
    if not segments:
        return np.zeros(0), np.zeros(0)
    seg = np.array([(s.start_s, s.end_s, s.gpus) for s in segments], dtype=float)
    start, end, g = seg[:, 0], seg[:, 1], seg[:, 2]
    edges = np.linspace(start.min(), end.max(), bins + 1)
    width = edges[1] - edges[0]
    if width <= 0:
        return edges[:-1], np.zeros(bins)
    # GPU-seconds done by time x: sum of g * clip(x - start, 0, end - start), in chunks of runs
    done = np.zeros(bins + 1)
    for lo in range(0, len(seg), 4096):
        s_, e_, g_ = start[lo : lo + 4096], end[lo : lo + 4096], g[lo : lo + 4096]
        done += (np.clip(edges[:, None] - s_[None, :], 0.0, (e_ - s_)[None, :]) * g_[None, :]).sum(axis=1)
    return edges[:-1], np.diff(done) / (width * gpus)


def build_report(sim: ClusterSim) -> ClusterReport:
    """The report of a finished run of ``sim``."""
    cfg, jobs = sim.cfg, sim.jobs
    gpus = int(sim.capacity.sum()) // MILLI
    span = max(sim.end_s, max((j.arrival_s for j in jobs), default=0.0)) - min((j.arrival_s for j in jobs), default=0.0)
    done = [r for r in sim.runs.values() if r.state == JobState.DONE]
    by_tier: dict[int, tuple[list[float], list[float]]] = {}
    for r in done:
        wait, jct = by_tier.setdefault(r.tier, ([], []))
        wait.append(r.wait_s)
        jct.append(r.jct_s)
    hours = {k: v / 3600 for k, v in sim.m.gpu_s.items()}
    t_s, busy = sim.utilisation_series()
    lost = sum(v for k, v in hours.items() if k != "useful")
    return ClusterReport(
        gpus=gpus,
        jobs=len(jobs),
        finished=len(done),
        makespan_s=span,
        utilisation=sim.busy_gpu_s / (gpus * span) if span else 0.0,
        goodput=sim.m.gpu_s["useful"] / (gpus * span) if span else 0.0,
        gpu_hours=hours,
        gpu_hours_lost=lost,
        usd_lost=lost * cfg.price_per_gpu_hour,
        usd_lost_by_cause={k: v * cfg.price_per_gpu_hour for k, v in hours.items() if k != "useful"},
        preemptions=sim.m.preemptions,
        failures=sim.m.failures,
        reclaims=sim.m.reclaims,
        events=sim.sim.events,
        utilisation_over_time={"t_s": t_s.tolist(), "busy_fraction": busy.tolist()},
        tiers={
            str(t): TierReport(
                jobs=len(wait),
                mean_wait_s=float(np.mean(wait)),
                p99_wait_s=float(np.percentile(wait, 99)),
                mean_jct_s=float(np.mean(jct)),
                wait_quantiles_s=[float(x) for x in np.percentile(wait, np.arange(101))],
            )
            for t, (wait, jct) in sorted(by_tier.items())
        },
    )
