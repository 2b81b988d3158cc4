"""What a serving simulation measured (``SimResult``): TTFT, inter-token latency (token-weighted),
TPOT and end-to-end percentiles, throughput, preemptions and queueing, its JSON, and whether its p99s
meet an SLO (``meets``, which ``max_rate`` bisects on).

A burst (every request sent at t = 0, ``vllm bench serve --request-rate inf``) has the rate
``math.inf`` here; its JSON writes ``"rate": null`` and ``"burst": true`` (never a float inf, which
JSON cannot hold), every other run ``"burst": false`` and its numeric rate. The throughputs are the
benchmark's (vllm/benchmarks/serve.py ``calculate_metrics``): completed requests, output tokens and
input + output tokens over the duration ``makespan_s``, from the first send to the last completion;
TPOT is per request, (end to end - TTFT) / (output tokens - 1), over the requests of more than one
output token, as there."""

from __future__ import annotations

import math
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
    tpot_s: np.ndarray | None = None  # per request of more than one output token: (e2e - ttft) / (out - 1)
    input_tokens: int = 0  # prompt tokens of all requests

    @property
    def burst(self) -> bool:
        """Every request sent at t = 0 (``--rate inf``)."""
        return math.isinf(self.rate)

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
            "tpot_s": pct(self.tpot_s) if self.tpot_s is not None and len(self.tpot_s) else {},
            "e2e_s": pct(self.e2e_s),
        }

    def to_dict(self) -> dict:
        per_s = 1 / self.makespan_s if self.makespan_s else 0.0
        return {
            "rate": None if self.burst else self.rate,
            "burst": self.burst,
            "requests": self.requests,
            "makespan_s": self.makespan_s,
            "output_tokens_per_s": self.output_tokens * per_s,
            "total_tokens_per_s": (self.input_tokens + self.output_tokens) * per_s,
            "requests_per_s": self.requests * per_s,
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
