"""What a preemption costs a job under each checkpoint policy: the motivating story in numbers.

A job of ``gpus`` GPUs runs ``hours`` of work; it is preempted at ``preempt_at_s``. Under a
policy that checkpoints every ``tau`` seconds at ``cost_s`` each, by the preemption it has spent
n = floor(t / (tau + c)) checkpoints and loses the work since the last one completed; a restart
costs ``restart_s`` more. Lost GPU-hours = GPUs x (work since the last checkpoint + restart), each
hour priced at ``price``; the checkpoints written until then are reported as the policy's overhead. "none" loses everything done so far;
"optimal" uses Daly's interval for the given MTBF (estimate/checkpoint_interval.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import field_ref, require
from gpuplan.estimate.checkpoint_interval import daly_interval, require_checkpoint_fits
from gpuplan.units import HOUR


@dataclass(frozen=True)
class PolicyLoss:
    checkpoint: str
    interval_s: float | None
    lost_work_s: float  # work since the last completed checkpoint
    checkpoint_overhead_s: float  # time spent writing checkpoints before the preemption
    restart_s: float
    gpus: int
    price_per_gpu_hour: float

    @property
    def lost_gpu_hours(self) -> float:
        """What the preemption destroys: the work since the last checkpoint, and the restart."""
        return self.gpus * (self.lost_work_s + self.restart_s) / HOUR

    @property
    def lost_usd(self) -> float:
        return self.lost_gpu_hours * self.price_per_gpu_hour

    @property
    def overhead_gpu_hours(self) -> float:
        """What the policy itself cost until then: GPUs idle while checkpoints were written."""
        return self.gpus * self.checkpoint_overhead_s / HOUR

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "interval_s": self.interval_s,
            "lost_work_s": self.lost_work_s,
            "checkpoint_overhead_s": self.checkpoint_overhead_s,
            "restart_s": self.restart_s,
            "lost_gpu_hours": self.lost_gpu_hours,
            "lost_usd": self.lost_usd,
            "overhead_gpu_hours": self.overhead_gpu_hours,
            "overhead_usd": self.overhead_gpu_hours * self.price_per_gpu_hour,
            "total_usd": (self.lost_gpu_hours + self.overhead_gpu_hours) * self.price_per_gpu_hour,
        }


def loss(
    policy: str,
    *,
    gpus: int,
    preempt_at_s: float,
    cost_s: float,
    restart_s: float,
    price: float,
    mtbf_s: float | None = None,
) -> PolicyLoss:
    require(gpus >= 1, "gpus", f"must be at least 1, got {gpus}")
    require(preempt_at_s >= 0, "preempt_at", "must not be negative")
    require(cost_s > 0, "cost", "checkpoint cost must be positive")
    require(restart_s >= 0, "restart", "must not be negative")
    require(price >= 0, "price", "must not be negative")
    if policy == "none":
        return PolicyLoss("none", None, preempt_at_s, 0.0, restart_s, gpus, price)
    if policy == "optimal":
        require(
            mtbf_s is not None and mtbf_s > 0,
            "mtbf",
            "the optimal interval needs a mean time between preemptions",
            f"pass {field_ref('mtbf')}, e.g. {field_ref('mtbf', '24h')}",
        )
        require_checkpoint_fits(cost_s, mtbf_s, "preemptions")  # type: ignore[arg-type]  # required above
        tau = daly_interval(cost_s, mtbf_s)  # type: ignore[arg-type]
    else:
        tau = policy_interval(policy)
    n = math.floor(preempt_at_s / (tau + cost_s))  # checkpoints completed before the preemption
    done = n * (tau + cost_s)
    return PolicyLoss(policy, tau, preempt_at_s - done, n * cost_s, restart_s, gpus, price)


def policy_interval(policy: str) -> float:
    from gpuplan.units import parse_duration

    return parse_duration(policy, "checkpoint")
