"""How a model's layers are split over the pipeline ranks: evenly, or with Megatron's uneven ends.

Real runs split layers unevenly to make room for the embedding on the first rank and the output
layer and loss on the last: Llama 3 405B puts 126 layers on 16 stages as 7, 8 x 14, 7 (Llama 3
report, 2024, section 3.3.2). Megatron-Core states it with ``--decoder-first-pipeline-num-layers``
and ``--decoder-last-pipeline-num-layers`` (TransformerConfig.num_layers_in_first_pipeline_stage /
num_layers_in_last_pipeline_stage; megatron/core/transformer/transformer_block.py,
get_num_layers_to_build): the stages not named share the remaining layers equally, and must
divide them; with interleaving (vp > 1) every rank's count, the first and last included, must be
a multiple of vp (each rank's layers are cut into vp equal chunks; Megatron MR 2795 quotes the
error "number of layers at last stage: 6 must be divisible by virtual pipeline parallel degree 4").
An end may also hold one layer fewer than a multiple of vp: Megatron-Core's
``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` count the
embedding and the loss as one layer of the first and last chunk, which is how Llama 3 runs 126
layers on pp 16 x vp 2 (7 = 3 + 4 layers on the first and last rank).

Without first/last counts gpuplan keeps its even split: with vp = 1 a remainder goes one layer
each to the later ranks (they hold fewer micro-batches in flight under 1F1B). Megatron refuses a
layer count pp does not divide, but gpuplan has always accepted it, and the search relies on it
(61 or 94 layers on pp 8). With vp > 1 an uneven count is refused, as Megatron does, with a
first/last split that would work named in the message. A Megatron-Core layout
(``ParallelPlan.layout``, specs/layout.py) states each virtual stage's layers instead, chunks of
any size: a rank's layers are its chunks' sum, and its time and memory are taken over them as
over equal chunks (the schedule's bubble and in-flight counts assume equal chunks).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuplan.errors import GpuplanError
from gpuplan.specs import schedules

if TYPE_CHECKING:
    from gpuplan.specs.model import ModelSpec
    from gpuplan.specs.parallel import ParallelPlan


def layers_per_stage(num_layers: int, pp: int) -> list[int]:
    """Even split; when it does not divide, the later stages take one more layer each (they hold
    fewer micro-batches in flight under 1F1B)."""
    base, extra = divmod(num_layers, pp)
    return [base + (1 if i >= pp - extra else 0) for i in range(pp)]


def stage_layers(m: ModelSpec, plan: ParallelPlan) -> list[int]:
    """Transformer layers on each pipeline rank (all its virtual chunks together), first rank
    first. ``m``: a ModelSpec (or anything with ``num_layers``); ``plan``: a ParallelPlan.
    Raises GpuplanError for a split that cannot run, naming one that would."""
    return list(
        _stage_layers(
            m.num_layers,
            plan.pp,
            plan.vp,
            plan.schedule,
            plan.first_stage_layers,
            plan.last_stage_layers,
            plan.layout,
        )
    )


def shape_layers(
    num_layers: int, pp: int, vp: int, schedule: str, first: int | None, last: int | None, layout: str | None = None
) -> tuple[int, ...]:
    """``stage_layers`` of a pipeline shape given by its numbers (``num_layers`` on ``pp`` ranks of
    ``vp`` chunks, first/last stage layers or None, a Megatron layout or None) rather than a
    ParallelPlan: for the search, which splits thousands of layouts of a few shapes."""
    return _stage_layers(num_layers, pp, vp, schedule, first, last, layout)


@functools.lru_cache(maxsize=4096)
def _stage_layers(
    num_layers: int,
    pp: int,
    vp: int,
    schedule: str,
    first: int | None,
    last: int | None,
    layout: str | None = None,
) -> tuple[int, ...]:
    L = num_layers
    if layout is not None:
        if not schedules.get(schedule).linear:
            raise GpuplanError(
                "pipeline_layout",
                f"a layout needs a linear pipeline; the {schedule} schedule puts both ends on rank 0",
                "use `schedule=1f1b`, or drop `pipeline_layout`",
            )
        from gpuplan.specs import layout as layouts

        return layouts.check(layout, pp, L).rank_layers(pp)
    if first is None and last is None:
        if vp > 1 and L % (pp * vp):
            raise GpuplanError(
                "vp",
                f"{L} layers do not split into pp x vp = {pp * vp} equal chunks (Megatron refuses this too)",
                _fix(L, pp, vp),
            )
        return tuple(layers_per_stage(L, pp))
    if not schedules.get(schedule).linear:  # ZB-V and DualPipe put both ends on rank 0
        linear = [s.train_name for s in schedules.training() if s.linear]
        raise GpuplanError(
            "first_stage_layers",
            f"first/last stage layer counts need a linear pipeline; the {schedule} schedule puts both ends on rank 0",
            f"use `schedule={' or '.join(linear)}`, or drop `first_stage_layers`/`last_stage_layers`",
        )
    ends = {"first_stage_layers": first, "last_stage_layers": last}
    for name, n in ends.items():
        if n is not None and n % vp and (n + 1) % vp:  # (n + 1): the embedding or loss counted as a layer
            raise GpuplanError(
                name,
                f"{n} layers on the {name.split('_')[0]} stage do not make vp = {vp} equal chunks",
                _fix(L, pp, vp),
            )
    named = sum(n for n in ends.values() if n is not None)
    middle = pp - sum(n is not None for n in ends.values())
    rest = L - named
    if middle == 0:
        if rest != 0:
            raise GpuplanError(
                "first_stage_layers",
                f"first + last stage layers = {named} but the model has {L} layers (pp = 2 has no middle stage)",
                _fix(L, pp, vp),
            )
    elif rest < middle * vp:
        raise GpuplanError(
            "first_stage_layers",
            f"the split leaves {max(rest, 0)} layers for {middle} other stages: a stage would hold no layer",
            _fix(L, pp, vp),
        )
    elif rest % (middle * vp):
        raise GpuplanError(
            "first_stage_layers",
            f"the {rest} layers left do not divide over the {middle} other "
            f"stages" + (f" x vp = {vp} chunks" if vp > 1 else ""),
            _fix(L, pp, vp),
        )
    each = rest // middle if middle else 0
    counts = [each] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return tuple(counts)


def accounted_split(num_layers: int, pp: int, vp: int = 1, mtp: int = 0) -> tuple[int, int] | None:
    """(first, last) stage layers that count the embedding and the loss each as one layer's place
    (Megatron-Core's --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split:
    the first and last chunk hold one layer fewer, so num_layers + 2 must make pp x vp equal
    chunks) and, with vp = 1, each MTP depth as one more on the last stage (NeMo's DeepSeek-V3
    recipe, scripts/performance/llm/pretrain_deepseek_v3.py: 64/pp - 1 and 64/pp - 2 layers for 61
    layers, the embedding, the loss and one MTP layer). Llama 3 405B's 126 layers on pp 16 come out
    7, 8 x 14, 7 (Llama 3 report, section 3.3.2). None where it does not divide, leaves a stage
    without a layer, or is the even split."""
    if pp < 2:
        return None
    mtp = mtp if vp == 1 else 0  # Megatron's flags count the embedding and the loss only
    slots = num_layers + 2 + mtp
    if slots % (pp * vp):
        return None
    per = slots // pp
    first, last = per - 1, per - 1 - mtp
    if min(first, last) < 1:
        return None
    try:
        counts = _stage_layers(num_layers, pp, vp, schedules.DEFAULT, first, last)
    except GpuplanError:
        return None
    if vp == 1 and list(counts) == layers_per_stage(num_layers, pp):
        return None
    return first, last


def accounted_plan(num_layers: int, plan: ParallelPlan, mtp: int = 0) -> ParallelPlan | None:
    """``plan`` moved to ``accounted_split`` where that applies: an even split (no first/last stage
    counts, no layout) over a linear pipeline. What ``train`` names as a faster split and ``search``
    tries on its ranked plans; None where it does not apply."""
    p = plan
    if p.pp < 2 or p.first_stage_layers is not None or p.last_stage_layers is not None or p.layout is not None:
        return None
    if not schedules.get(p.schedule).linear:
        return None
    split = accounted_split(num_layers, p.pp, p.vp, mtp)
    return None if split is None else replace(p, first_stage_layers=split[0], last_stage_layers=split[1])


def suggest_split(num_layers: int, pp: int, vp: int = 1) -> tuple[int, int, int] | None:
    """(first, last, per middle stage) for ``num_layers`` on ``pp`` ranks of ``vp`` chunks: the
    split with the fewest layers on the busiest rank, then the most even ends, then the lighter
    last stage (it also holds the output layer and the loss). None when no split works (every
    count must be a positive multiple of vp)."""
    if pp < 2:
        return None
    best = None
    middle = pp - 2
    for first in range(vp, num_layers + 1, vp):
        for last in range(vp, num_layers - first + 1, vp):
            rest = num_layers - first - last
            if middle == 0:
                if rest:
                    continue
                each = 0
            elif rest < middle * vp or rest % (middle * vp):
                continue
            else:
                each = rest // middle
            key = (max(first, last, each), abs(first - last), last - first)
            if best is None or key < best[0]:
                best = (key, (first, last, each))
    return best[1] if best else None


def _fix(num_layers: int, pp: int, vp: int) -> str:
    """The fix to print: a first/last split that works, or the vp values that admit one."""
    found = suggest_split(num_layers, pp, vp)
    if found:
        first, last, each = found
        mid = f", {each} on each of the {pp - 2} middle stages" if pp > 2 else ""
        return f"e.g. `first_stage_layers={first}` `last_stage_layers={last}`{mid}"
    ok = [v for v in range(1, 9) if v != vp and (num_layers % (pp * v) == 0 or suggest_split(num_layers, pp, v))]
    if not ok:
        return "use `vp=1`"
    choices = ", ".join(map(str, ok[:-1])) + (" or " if len(ok) > 1 else "") + str(ok[-1])
    return (
        f"no split of {num_layers} layers works with pp={pp} x vp={vp} (every stage's layers must be a "
        f"multiple of vp); use `vp={choices}`, with `first_stage_layers`/`last_stage_layers` where uneven"
    )
