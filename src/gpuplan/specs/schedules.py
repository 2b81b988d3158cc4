"""Pipeline schedules, registered once: names, aliases, constraints, memory profile and builder.

Everything that depends on which schedule a plan runs (the plan's checks, the memory model's
micro-batches in flight, the simulated bubble the step time adds, the search's space, the
simulator's action lists and the CLI's choices) reads it from here, so adding a schedule means
adding one entry below and, for a new order, its builder in ``gpuplan.pipeline.schedules``.

Sources, per entry: GPipe (Huang et al. 2019); 1F1B and interleaved 1F1B (Narayanan et al. 2021,
section 2.2); ZB-H1, ZB-H2 and ZB-V (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sections
3 and 6); DualPipe (DeepSeek-V3 report, 2024, section 3.2.1) and DualPipeV (Qi et al. 2025).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError

# How many micro-batches' activations a stage holds at its peak (see ``in_flight``).
IN_FLIGHT = ("1f1b", "all", "v", "dualpipe")


@dataclass(frozen=True)
class ScheduleSpec:
    name: str  # as the simulator and ``gpuplan pipeline`` call it
    description: str
    builder: str  # the action-list builder in gpuplan.pipeline.schedules
    aliases: tuple[str, ...] = ()  # other names accepted for it
    plan_name: str | None = None  # the name training plans and their reports use, when not ``name``
    training: bool = False  # the performance model plans with it (train, search)
    interleaved: str | None = None  # the schedule it becomes with vp > 1 virtual stages per rank
    needs_vp: bool = False  # runs v >= 2 chunks per rank, stage c x p + r on rank r
    v_shape: bool = False  # 2p chunks in a V: rank r holds stages r and 2p - 1 - r (head on rank 0)
    param_copies: int = 1  # copies of a rank's weights (DualPipe: one per direction)
    even_ranks: bool = False
    min_microbatches_per_rank: int = 0  # the schedule needs m >= this x p
    min_microbatches_less: int = 0  # ... less this many (ZB-H2: m >= 2p - 2)
    even_microbatches: bool = False
    microbatches_per_group: bool = False  # m must be a multiple of p (interleaved groups of p)
    in_flight: str = "1f1b"  # memory profile, one of IN_FLIGHT
    hides_expert_all_to_all: bool = False  # the all-to-all runs under the paired chunk's compute
    bidirectional: bool = False  # fed from both ends: a rank's first forward comes from the nearer end
    # the critical rank idles at least the others' extra work / v (1F1B): the search's time bound adds it
    flush_bubble_bound: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def train_name(self) -> str:
        """What ``gpuplan train`` and ``search`` call it."""
        return self.plan_name or self.name

    @property
    def linear(self) -> bool:
        """Its ranks run one chain of stages, so "first" and "last" mean one rank each (ZB-V and
        DualPipe fold the chain back onto rank 0: both ends on one rank)."""
        return not (self.v_shape or self.bidirectional)

    def chunks(self, vp: int) -> int:
        """Model chunks per pipeline rank."""
        return 2 if self.v_shape else vp

    def head_stage(self, pp: int) -> int:
        """The pipeline rank holding the output head: the last, or rank 0 for a V."""
        return 0 if self.v_shape else pp - 1

    def simulated(self, vp: int) -> ScheduleSpec:
        """The schedule the simulator runs for this one with ``vp`` virtual stages per rank."""
        return get(self.interleaved) if vp > 1 and self.interleaved else self

    def microbatch_problem(self, p: int, m: int) -> str | None:
        """Why ``m`` micro-batches on ``p`` ranks cannot run this schedule, or None."""
        if self.microbatches_per_group and m % p:
            return f"needs micro-batches divisible by the {p} stages, got {m}"
        if self.even_microbatches and (m % 2 or m < self.min_microbatches_per_rank * p):
            return f"needs an even number of micro-batches, at least {self.min_microbatches_per_rank} x {p}, got {m}"
        if m < self.min_microbatches(p):
            if self.min_microbatches_less:
                return f"needs at least {self.min_microbatches(p)} micro-batches on {p} stages, got {m}"
            return f"needs at least {self.min_microbatches_per_rank} x {p} micro-batches, got {m}"
        return None

    def min_microbatches(self, p: int) -> int:
        """The fewest micro-batches the schedule accepts on ``p`` ranks (at least one per rank)."""
        return max(1, self.min_microbatches_per_rank * p - self.min_microbatches_less)


# The schedule a plan runs when none is named (ParallelPlan's default; every framework offers it).
DEFAULT = "1f1b"

REGISTRY: tuple[ScheduleSpec, ...] = (
    ScheduleSpec("gpipe", "GPipe: all forwards, then all backwards", "gpipe", in_flight="all"),
    ScheduleSpec(
        "1f1b",
        "1F1B (PipeDream-Flush); interleaved with `vp` > 1",
        "one_f_one_b",
        training=True,
        interleaved="interleaved",
        flush_bubble_bound=True,
    ),
    ScheduleSpec(
        "interleaved", "interleaved 1F1B (v chunks per rank)", "interleaved", needs_vp=True, microbatches_per_group=True
    ),
    ScheduleSpec("zb-h1", "zero bubble H1 (1F1B's memory)", "zb_h1", aliases=("zb",), plan_name="zb", training=True),
    # its first rank runs 2(p - 1) forwards before its first backward: with fewer micro-batches
    # than that the warm-up cannot fill and it runs longer than ZB-H1 (simulated: every p <= 8)
    ScheduleSpec(
        "zb-h2",
        "zero bubble H2 (about twice 1F1B's memory)",
        "zb_h2",
        min_microbatches_per_rank=2,
        min_microbatches_less=2,
    ),
    ScheduleSpec(
        "zb-v", "V-shaped zero bubble (2 chunks per rank)", "zb_v", training=True, v_shape=True, in_flight="v"
    ),
    ScheduleSpec(
        "dualpipe",
        "DualPipe (two directions, overlapped forward and backward)",
        "dualpipe",
        training=True,
        param_copies=2,
        even_ranks=True,
        min_microbatches_per_rank=2,
        even_microbatches=True,
        in_flight="dualpipe",
        hides_expert_all_to_all=True,
        bidirectional=True,
    ),
    ScheduleSpec(
        "dualpipev", "DualPipeV (DualPipe cut in half, in a V)", "dualpipev", v_shape=True, min_microbatches_per_rank=2
    ),
)

_BY_NAME = {n: s for s in REGISTRY for n in s.names}


def get(name: str) -> ScheduleSpec:
    """A schedule by name or alias."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise GpuplanError("schedule", f"unknown schedule {name!r}", f"use one of {', '.join(names())}") from None


def names(training: bool = False) -> tuple[str, ...]:
    """Every accepted name (aliases after their schedule); ``training``: those train and search plan
    with, under the names their reports use first."""
    if training:
        return tuple(dict.fromkeys(n for s in REGISTRY if s.training for n in (s.train_name, *s.names)))
    return tuple(n for s in REGISTRY for n in s.names)


def training() -> tuple[ScheduleSpec, ...]:
    """The schedules the performance model plans with, in the search's order."""
    return tuple(s for s in REGISTRY if s.training)


def in_flight(profile: str, stage: Any, pp: Any, vp: Any, microbatches: Any) -> Any:  # scalars or numpy arrays alike
    """Micro-batches whose activations a stage holds at its peak, in units of its full layer set.

    1F1B: min(p - i, m) on stage i; interleaved (vp > 1): (p - i - 1) x 2 + (v - 1) x p + 1 chunks
    of L/(pv) layers, at most m x v (Narayanan et al. 2021; Korthikanti et al. 2022, section
    4.2.3); ZB-H1 keeps 1F1B's peak (Qi et al. 2023, section 3); a V holds p on every rank (section
    6); DualPipe p + 1 of its two stages (DeepSeek-V3 report, Table 2); GPipe all m. Written with
    min/max only, so the search's grid evaluates the same expression over arrays.
    """
    import numpy as np

    if profile == "dualpipe":
        return np.minimum(pp + 1, 2 * microbatches)
    if profile == "v":
        return np.minimum(pp, microbatches)
    if profile == "all":
        return microbatches
    one_f_one_b = np.minimum(pp - stage, microbatches)
    interleaved = np.minimum((pp - stage - 1) * 2 + (vp - 1) * pp + 1, microbatches * vp) / vp
    return np.where(vp == 1, one_f_one_b, interleaved)
