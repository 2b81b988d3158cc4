"""Checkpoint stall as the training loop sees it: the wall time ``end_step`` spends on checkpoints
(building the state dict, waiting for the previous save, staging or writing, committing), per save
and in total, against the training time. Torch-free."""

from __future__ import annotations

import math


def _rank_quantile(sorted_xs: list[float], q: float) -> float:
    """Nearest-rank quantile (a value that was measured)."""
    return sorted_xs[max(0, math.ceil(q * len(sorted_xs)) - 1)]


class StallMeter:
    def __init__(self) -> None:
        self.saves: list[float] = []  # seconds the loop stood still for each checkpoint it started
        self.other_s = 0.0  # other checkpoint work in the loop: committing a finished save

    def save(self, seconds: float) -> None:
        self.saves.append(seconds)

    def other(self, seconds: float) -> None:
        self.other_s += seconds

    @property
    def total_s(self) -> float:
        return sum(self.saves) + self.other_s

    def summary(self, training_s: float) -> dict:
        xs = sorted(self.saves)
        out = {
            "saves": len(xs),
            "total_s": self.total_s,
            "training_s": training_s,
            "fraction": self.total_s / training_s if training_s > 0 else 0.0,
        }
        if xs:
            out.update(
                p50_s=_rank_quantile(xs, 0.5), p95_s=_rank_quantile(xs, 0.95), max_s=xs[-1], mean_s=sum(xs) / len(xs)
            )
        return out

    def line(self, training_s: float) -> str:
        s = self.summary(training_s)
        if not s["saves"]:
            return f"checkpoint stall: no checkpoint in {training_s:.3g} s of training"
        ms = lambda k: f"{s[k] * 1e3:.1f}"  # noqa: E731
        return (
            f"checkpoint stall as the loop sees it: {s['saves']} saves, p50 {ms('p50_s')} ms, p95 {ms('p95_s')} ms,"
            f" max {ms('max_s')} ms, mean {ms('mean_s')} ms; {s['total_s']:.3f} s in all = "
            f"{100 * s['fraction']:.2f}% of {training_s:.3g} s of training"
        )
