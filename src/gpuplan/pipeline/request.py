"""A pipeline simulation asked for in user text: the stage times (one, or one per stage), the
costs they make, and a bound on the simulation's size."""

from __future__ import annotations

from gpuplan import inputs
from gpuplan.errors import GpuplanError
from gpuplan.pipeline.simulate import Costs

# The simulation visits every action once: past this many, a typo would run for hours
MAX_ACTIONS = 3_000_000


def stage_times(text: str, field: str, stages: int, *, zero_ok: bool = True) -> float | list[float]:
    """``1.5`` (every stage) or ``1,1,1,1.4`` (one per stage), finite and below 1e9."""
    fix = "write 1.5, or one per stage: 1,1,1,1.4"
    try:
        vals = [inputs.finite(x, field, lo=0, lo_open=not zero_ok, hi=1e9, fix=fix) for x in text.split(",")]
    except GpuplanError as exc:
        raise GpuplanError(field, f"cannot use {text!r} as times ({exc.message})", fix) from None
    if len(vals) not in (1, stages):
        raise GpuplanError(field, f"{len(vals)} times for {stages} stages", "give one time, or one per stage")
    return vals[0] if len(vals) == 1 else vals


def costs_from_text(
    stages: int, f: str, b: str | None, b_full: str | None, w: str, overlap: str | None, p2p: float
) -> Costs:
    """Costs from the times as typed: the input-gradient backward ``b`` (default 1) or the full
    backward ``b_full`` (input + weight gradients), not both."""
    if b is not None and b_full is not None:
        raise GpuplanError(
            "b", "`b` (input-gradient backward) and `b_full` (full backward) are exclusive", "pass one of them"
        )
    f_ = stage_times(f, "f", stages, zero_ok=False)
    w_ = stage_times(w, "w", stages)
    ov_ = None if overlap is None else stage_times(overlap, "overlap", stages)
    if b_full is not None:
        return Costs.from_full_backward(f_, stage_times(b_full, "b_full", stages), w_, ov_, p2p)
    return Costs(f_, 1.0 if b is None else stage_times(b, "b", stages), w_, ov_, p2p)


def check_size(schedule: str, stages: int, microbatches: int, vp: int) -> None:
    """Refuse a simulation of more than :data:`MAX_ACTIONS` actions (F, B and W of every chunk)."""
    from gpuplan.specs import schedules as registry

    actions = stages * microbatches * (vp if registry.get(schedule).needs_vp else 1) * 3
    if actions > MAX_ACTIONS:
        raise GpuplanError(
            "microbatches",
            f"{stages} stages x {microbatches} micro-batches is {actions:,} actions to simulate",
            "simulate fewer: the bubble repeats after a few x stages",
        )
