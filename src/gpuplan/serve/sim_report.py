"""What a serving simulation measured (``SimResult``): TTFT, inter-token latency (token-weighted)
and end-to-end percentiles, throughput, preemptions and queueing, its JSON, and whether its p99s
meet an SLO (``meets``, which ``max_rate`` bisects on)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SimResult:
    rate: float  # offered requests/s
    requests: int
    makespan_s: float
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    itl_s: np.ndarray  # distinct inter-token gaps ...
    itl_weight: np.ndarray  # ... and how many tokens had each
    output_tokens: int
    preemptions: int
    iterations: int
    clients: int | None = None  # closed loop of this many clients; None: open arrivals
    queued_mean: float = 0.0  # requests waiting for a seat, averaged over time
    arrival_s: np.ndarray | None = None  # when each request was sent (a closed loop sets them)

    def percentiles(self) -> dict:
        def pct(x, w=None):
            if w is None:
                return {f"p{q}": float(np.percentile(x, q)) for q in (50, 90, 99)} | {"mean": float(np.mean(x))}
            order = np.argsort(x)
            x, w = x[order], w[order]
            cum = np.cumsum(w) / w.sum()
            return {f"p{q}": float(x[min(len(x) - 1, np.searchsorted(cum, q / 100))]) for q in (50, 90, 99)} | {
                "mean": float((x * w).sum() / w.sum())
            }

        return {
            "ttft_s": pct(self.ttft_s),
            "itl_s": pct(self.itl_s, self.itl_weight) if len(self.itl_s) else {},
            "e2e_s": pct(self.e2e_s),
        }

    def to_dict(self) -> dict:
        return {
            "rate": self.rate,
            "requests": self.requests,
            "makespan_s": self.makespan_s,
            "output_tokens_per_s": self.output_tokens / self.makespan_s if self.makespan_s else 0.0,
            "requests_per_s": self.requests / self.makespan_s if self.makespan_s else 0.0,
            "preemptions": self.preemptions,
            "iterations": self.iterations,
            "clients": self.clients,
            "queued_mean": self.queued_mean,
            **self.percentiles(),
        }


def meets(result: SimResult, ttft_slo_s: float | None, itl_slo_s: float | None) -> bool:
    p = result.percentiles()
    return (ttft_slo_s is None or p["ttft_s"]["p99"] <= ttft_slo_s) and (
        itl_slo_s is None or not p["itl_s"] or p["itl_s"]["p99"] <= itl_slo_s
    )
