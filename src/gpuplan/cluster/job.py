"""A cluster job: what was asked for (:class:`Job`, never changed by a run) and how its run is going
(:class:`JobRun`, the simulator's own record, one per job).

Capacity is counted in milli-GPUs so sharing tasks (a fraction of one GPU, as in Alibaba's openb
trace) and gangs of whole GPUs live on the same nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

MILLI = 1000


class JobState(StrEnum):
    """Where a job is in its life; compares equal to its name (``"done"``)."""

    NEW = "new"
    QUEUED = "queued"
    RUNNING = "running"
    GRACE = "grace"  # SIGTERM sent (preemption or spot reclaim), not yet released
    DONE = "done"


# the members as module names: the simulator's inner loops compare with these (reading an enum
# member off its class costs several times a comparison)
NEW, QUEUED, RUNNING, GRACE, DONE = (JobState.NEW, JobState.QUEUED, JobState.RUNNING, JobState.GRACE, JobState.DONE)


@dataclass(frozen=True)
class Job:
    """A job as submitted: size, work, tier and checkpoint policy."""

    id: int
    arrival_s: float
    gpus: float  # whole GPUs, or a fraction of one (sharing tasks)
    work_s: float  # GPU-busy time the job needs, checkpoints and restarts not included
    tier: int = 0
    spot: bool = False
    checkpoint: str = "none"  # none | <seconds> | daly | sigterm
    interval_s: float = math.inf  # seconds of work between checkpoints (``checkpoint`` decides it when set)
    cost_s: float = 0.0
    restart_s: float = 0.0
    gpu_models: frozenset[str] | None = None  # GPU models it can run on (None: any)

    @property
    def milli(self) -> int:
        return int(round(self.gpus * MILLI))

    @property
    def on_sigterm(self) -> bool:
        return self.checkpoint == "sigterm"


@dataclass(eq=False, slots=True)
class JobRun:
    """A job's run on the simulated cluster: the simulator's state and what the job went through."""

    job: Job
    interval_s: float  # work between checkpoints as run (Daly's interval for ``checkpoint="daly"``)
    remaining_s: float
    state: JobState = JobState.NEW
    start_s: float = 0.0  # start of the current run (or of the grace checkpoint)
    sigterm_s: float = math.nan  # when the current run got SIGTERM (its grace period began)
    restarting: bool = False  # the current run pays the restart cost first
    epoch: int = 0  # bumped by every start, interruption and SIGTERM: stale events see a new epoch
    placed: list[tuple[int, int]] = field(default_factory=list)  # (node, milli-GPUs)
    first_start_s: float = math.nan
    finish_s: float = math.nan
    preemptions: int = 0
    interruptions: int = 0
    # copies of the spec's fields the simulator's inner loops read (never changed)
    id: int = field(init=False)
    gpus: float = field(init=False)
    milli: int = field(init=False)
    tier: int = field(init=False)
    spot: bool = field(init=False)
    cost_s: float = field(init=False)
    restart_s: float = field(init=False)

    def __post_init__(self) -> None:
        j = self.job
        self.id, self.gpus, self.milli, self.tier = j.id, j.gpus, j.milli, j.tier
        self.spot, self.cost_s, self.restart_s = j.spot, j.cost_s, j.restart_s

    @property
    def arrival_s(self) -> float:
        return self.job.arrival_s

    @property
    def work_s(self) -> float:
        return self.job.work_s

    @property
    def on_sigterm(self) -> bool:
        return self.job.on_sigterm

    @property
    def wait_s(self) -> float:
        """Queue delay before the first start."""
        return self.first_start_s - self.job.arrival_s

    @property
    def jct_s(self) -> float:
        """Job completion time: arrival to finish."""
        return self.finish_s - self.job.arrival_s

    def milli_on(self, node: int) -> int:
        return sum(m for n, m in self.placed if n == node)
