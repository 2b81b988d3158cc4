"""The search's space: every (tp, cp, pp, dp, ep, etp, schedule, vp) layout of a GPU count, the
plan-validity rules applied to it (gpuplan.specs.validity) with each rejection counted by reason,
and the memory check of every plan of the grid at once (grid.py)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpuplan.search.constraints import Constraints
from gpuplan.search.grid import Grid, Layout
from gpuplan.specs import schedules, validity
from gpuplan.specs.framework import FRAMEWORKS, Framework, get as get_framework
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.training import TrainingConfig
from gpuplan.specs.validity import Reason

RECOMPUTE_ORDER = ("none", "selective", "full")  # lightest first: each saves memory and costs time


def _divisors(n: int) -> list[int]:
    # up to the square root: a million GPUs must not mean a million trial divisions per (tp, cp)
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _pow2_upto(n: int) -> list[int]:
    out, d = [], 1
    while d <= n:
        out.append(d)
        d *= 2
    return out


# the rules a (schedule, vp) pair must meet on its own: the search leaves out the pairs that break
# them rather than counting them (they are not plans of this pipeline depth)
_SCHEDULE_RULES = tuple(
    r
    for r in validity.RULES
    if r.reason in (Reason.VP_WITHOUT_PP, Reason.VP_SCHEDULE, Reason.ODD_PP, Reason.VP_LAYERS, Reason.V_LAYERS)
)


SCHEDULE_ORDER = [s.train_name for s in schedules.training()]  # the registry's order: 1F1B, the simplest, first


def _schedules(m: ModelSpec, pp: int, max_vp: int, fw: Framework = FRAMEWORKS["generic"]) -> list[tuple[str, int]]:
    """Every training schedule (gpuplan.specs.schedules) and virtual-stage count a depth of ``pp``
    can run that ``fw`` has; with one stage they are all the same plan, so only 1F1B."""
    if pp == 1:
        return [(schedules.training()[0].train_name, 1)]
    out = []
    for spec in schedules.training():
        if spec.train_name not in fw.schedules:
            continue
        for v in range(1, (max_vp if spec.interleaved and fw.interleaving else 1) + 1):
            x = validity.View(pp=pp, vp=v, schedule=spec.train_name)
            if validity.first_violation(_SCHEDULE_RULES, x, m) is None:
                out.append((spec.train_name, v))
    return out


def _expert_splits(m: ModelSpec, tp: int, cp: int, dp: int, etp: int | None) -> list[tuple[int, int | None]]:
    """(ep, etp) pairs of a (tp, cp, dp) layout: without folding (etp None) ep divides the experts
    and dp x cp; with MoE parallel folding at etp 1 (Megatron-Bridge's MoE recipes) and at a
    ``--etp`` asked for, ep x etp divides tp x cp x dp (specs/validity.py)."""
    if not m.is_moe:
        return [(1, None)]
    out: list[tuple[int, int | None]] = [(ep, None) for ep in _divisors(math.gcd(m.num_experts, dp * cp))]
    for e in sorted({1} | ({etp} if etp is not None else set())):
        ranks = tp * cp * dp
        if e == tp or ranks % e:  # etp = tp is the unfolded layout above
            continue
        out += [(ep, e) for ep in _divisors(math.gcd(m.num_experts, ranks // e))]
    return out


def enumerate_layouts(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    max_vp: int,
    fw: Framework = FRAMEWORKS["generic"],
    etp: int | None = None,
) -> list[Layout]:
    """The search's space of (tp, cp, pp, dp, ep, etp, schedule, vp) on ``gpus`` GPUs: tp within
    one scale-up domain, power-of-two cp, ep and etp as ``_expert_splits`` gives them (``etp``: a
    fixed --etp to enumerate too), and the schedules each depth can run under ``fw``; the model
    and sequence rules are not applied yet (``valid_layouts`` counts them)."""
    out: list[Layout] = []
    for tp in _divisors(min(gpus, gpu.fast_domain)):
        for cp in _pow2_upto(gpus // tp):
            if gpus % (tp * cp):
                continue
            for pp in _divisors(gpus // (tp * cp)):
                dp = gpus // (tp * cp * pp)
                out += [
                    Layout(tp, cp, pp, dp, ep, s, v, etp=e)
                    for ep, e in _expert_splits(m, tp, cp, dp, etp)
                    for s, v in _schedules(m, pp, max_vp, fw)
                ]
    return out


def layout_view(layouts: list[Layout], seq_len: int, cp_comm: str = "p2p") -> validity.View:
    """Layouts as arrays for the plan-validity rules (the search assumes sequence parallelism)."""
    col = {k: np.array([getattr(lo, k) for lo in layouts]) for k in ("tp", "cp", "pp", "dp", "ep", "vp", "schedule")}
    etp = np.array([lo.expert_tp for lo in layouts])
    folded = np.array([lo.etp is not None for lo in layouts])
    return validity.View(**col, etp=etp, folded=folded, sp=True, seq_len=seq_len, cp_comm=cp_comm)


def valid_layouts(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    base: TrainingConfig,
    max_vp: int,
    per_layout: int,
    rejected: Counter,
    constraints: Constraints | None = None,
    cp_only: bool = False,
) -> tuple[list[Layout], int]:
    """Every layout of ``gpus`` GPUs that the plan-validity rules and the framework accept
    (gpuplan.specs.validity, specs.framework); the others are counted as rejected by their first
    broken rule, ``per_layout`` plans each. ``cp_only``: only the layouts with context parallelism
    (a further K,V exchange searched: the others are the same plans under every exchange)."""
    fw = get_framework(base.framework)
    layouts = enumerate_layouts(m, gpu, gpus, max_vp, fw, constraints.etp if constraints is not None else None)
    if cp_only:
        layouts = [lo for lo in layouts if lo.cp > 1]
    if not layouts:
        return [], 0
    considered = len(layouts) * per_layout
    if constraints is not None:  # the user's constraints first: they name the flag
        kept = []
        for lo in layouts:
            why = constraints.reason(lo)
            if why:
                rejected[why] += per_layout
            else:
                kept.append(lo)
        layouts = kept
        if not layouts:
            return [], considered
    rules = validity.STRUCTURE + validity.MODEL
    codes = validity.reasons(rules, layout_view(layouts, base.seq_len, base.cp_exchange), m)
    _count(rejected, rules, codes, per_layout)
    out = []
    for lo, c in zip(layouts, codes.tolist()):
        if c >= 0:
            continue
        if lo.pp > 1 and not fw.pipeline:
            rejected[f"{fw.name} has no pipeline parallelism"] += per_layout
            continue
        if base.mtp_layers and not fw.mtp_with_pp_cp and (lo.pp > 1 or lo.cp > 1):
            rejected[f"{fw.name} runs multi-token prediction without pipeline or context parallelism"] += per_layout
            continue
        out.append(lo)
    return out, considered


def _count(rejected: Counter, rules: tuple[validity.Rule, ...], codes: np.ndarray, each: int) -> None:
    """Add ``each`` plans per entry of ``codes`` (an index into ``rules``, -1: valid) to their reason."""
    for i, n in zip(*np.unique(codes[codes >= 0], return_counts=True)):
        rejected[rules[int(i)].reason] += int(n) * each


@dataclass
class Fits:
    """The plans of one GPU count that fit, as indices into ``grid`` (one per (layout, mbs, zero),
    with the lightest recompute that fits)."""

    grid: Grid
    mb: np.ndarray  # micro-batches per step by (layout, mbs)
    layout: np.ndarray
    mbs: np.ndarray
    zero: np.ndarray
    rec: np.ndarray
    peak: np.ndarray  # bytes on the most loaded GPU
    considered: int


def feasible_plans(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    base: TrainingConfig,
    micro_batches,
    zero_stages,
    rec_order,
    max_vp: int,
    rejected: Counter,
    constraints: Constraints | None = None,
    cp_only: bool = False,
) -> Fits:
    """Every plan of ``gpus`` GPUs, checked for memory at once; rejections counted by reason.
    Recompute only adds time and only saves memory, so each plan keeps the lightest recompute
    that fits; the heavier ones are counted as ``slower variant``. ``cp_only``: valid_layouts'."""
    n_zero, n_rec = len(zero_stages), len(rec_order)
    layouts, considered = valid_layouts(
        m, gpu, gpus, base, max_vp, len(micro_batches) * n_zero * n_rec, rejected, constraints, cp_only
    )
    grid = Grid(m, base, layouts, micro_batches, zero_stages, rec_order, gpu)
    empty = np.zeros(0, dtype=np.int64)
    if not layouts:
        return Fits(
            grid, np.zeros((0, len(micro_batches)), dtype=np.int64), empty, empty, empty, empty, np.zeros(0), considered
        )
    mb, _ = grid.microbatches()
    col = {k: np.array([getattr(lo, k) for lo in layouts])[:, None] for k in ("dp", "pp", "vp", "schedule")}
    shape = (len(layouts), len(micro_batches))
    x = validity.View(
        **{k: np.broadcast_to(v, shape) for k, v in col.items()},
        micro_batch=np.broadcast_to(np.array(micro_batches)[None, :], shape),
        global_batch=base.global_batch,
    )
    codes = validity.reasons(validity.BATCH, x, m)  # the first batch rule each (layout, mbs) breaks
    _count(rejected, validity.BATCH, codes, n_zero * n_rec)
    valid = codes < 0
    peak = grid.peak_memory(np.where(valid, mb, 1))
    # ZeRO stages the framework cannot combine with pipeline parallelism (DeepSpeed: ZeRO-2/3)
    fw = get_framework(base.framework)
    zero_ok = ~((col["pp"] > 1)[:, :, None] & ~np.isin(grid.zero, fw.zero_with_pp)[None, None, :])  # (L, 1, Z)
    zero_bad = valid[:, :, None] & ~zero_ok
    rejected[f"{fw.name} cannot combine this ZeRO stage with pipeline parallelism"] += int(zero_bad.sum()) * n_rec
    if base.fp8_params:  # estimate_memory refuses FP8 parameters under ZeRO-3
        fp8_bad = (grid.zero == 3)[None, None, :]
        rejected[Reason.FP8_PARAMS_ZERO3] += int((valid[:, :, None] & zero_ok & fp8_bad).sum()) * n_rec
        zero_ok = zero_ok & ~fp8_bad
    fits = (peak <= gpu.memory_bytes) & (valid[:, :, None] & zero_ok)[:, :, :, None]
    any_fit = fits.any(axis=-1)
    lightest = fits.argmax(axis=-1)
    tried = valid[:, :, None] & zero_ok
    rejected[Reason.MEMORY] += int(np.where(any_fit, lightest, n_rec)[tried].sum())
    rejected[Reason.SLOWER_VARIANT] += int(np.where(any_fit, n_rec - 1 - lightest, 0)[tried].sum())
    li, mi, zi = np.nonzero(any_fit)
    ri = lightest[li, mi, zi]
    return Fits(grid, mb, li, mi, zi, ri, peak[li, mi, zi, ri], considered)
