"""Find the best parallel plan: enumerate every valid one, keep those that fit, rank by speed or cost.

The space: tp (within one scale-up domain, dividing the heads), cp (dividing the sequence), pp,
dp (what is left), ep (MoE: dividing the experts and dp x cp), pipeline schedule and virtual
stages, ZeRO stage, micro-batch and recompute. Every plan is counted: ranked, or rejected with a
reason. Three shortcuts keep it fast without losing the best plan:

* memory is checked for the whole grid at once in numpy (grid.py), on the stages that can be
  the most loaded only;
* recompute only adds time and only saves memory, so for each plan the lightest recompute that
  fits is timed and the heavier ones are counted as ``slower variant`` (not ranked);
* plans are timed in order of a lower bound of their step time, and timing stops once the bound
  passes the ``top``-th best plan found (branch and bound).
Component times are cached by shape (estimate/compute.py), so the plans timed share a few
hundred kernel evaluations.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from gpuplan.errors import DoesNotFit, GpuplanError, require
from gpuplan.estimate.memory import MemoryReport, estimate_memory
from gpuplan.estimate.step_time import StepTime, step_time
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.search.grid import Grid, Layout
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

RECOMPUTE_ORDER = ("none", "selective", "full")
OBJECTIVES = ("throughput", "cost")


@dataclass(frozen=True)
class Candidate:
    plan: ParallelPlan
    config: TrainingConfig
    microbatches: int
    step: StepTime
    memory: MemoryReport

    @property
    def tokens_per_s(self) -> float:
        return self.config.global_batch * self.config.seq_len / self.step.step_s


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Candidate, ...]  # best first, at most ``top``
    feasible: int
    rejected: dict[str, int]  # reason -> plans
    considered: int
    objective: str
    price_per_gpu_hour: float | None
    timed: int = 0  # plans whose step time was computed (the rest were bounded out)


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


def _schedules(m: ModelSpec, pp: int, max_vp: int) -> list[tuple[str, int]]:
    out = [("1f1b", 1)]
    if pp > 1:
        out += [("1f1b", v) for v in range(2, max_vp + 1) if m.num_layers % (pp * v) == 0]
        out.append(("zb", 1))
        if 2 * pp <= m.num_layers:
            out.append(("zb-v", 1))
        if pp % 2 == 0:
            out.append(("dualpipe", 1))
    return out


def search(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, *, top: int = 10,
           objective: str = "throughput", micro_batches: tuple[int, ...] = (1, 2, 4, 8),
           zero_stages: tuple[int, ...] = (0, 1, 2, 3), recompute: tuple[str, ...] = RECOMPUTE_ORDER,
           max_vp: int = 4, price_per_gpu_hour: float | None = None, progress=None) -> SearchResult:
    """Rank every valid plan of ``gpus`` GPUs for ``base`` (its global batch and sequence fixed)."""
    require(gpus >= 1, "gpus", f"must be a positive integer, got {gpus}")
    require(objective in OBJECTIVES, "objective", f"unknown objective {objective!r}", f"use one of {', '.join(OBJECTIVES)}")
    require(base.global_batch >= 1, "global_batch", "the search needs a global batch", "pass --global-batch")
    rec_order = [r for r in RECOMPUTE_ORDER if r in recompute]
    rejected: Counter[str] = Counter()
    considered = 0
    # throughput: this GPU count; cost: also halves of it, since fewer GPUs can be cheaper per token
    worlds = [gpus]
    while objective == "cost" and worlds[-1] % 2 == 0 and worlds[-1] > 1 and len(worlds) < 8:
        worlds.append(worlds[-1] // 2)
    pools = []
    for world in worlds:
        fit = _feasible(m, gpu, world, base, micro_batches, zero_stages, rec_order, max_vp, rejected)
        considered += fit.considered
        if len(fit.layout):
            bound = fit.grid.compute_bound(gpu, fit.mb)[fit.layout, fit.mbs, fit.rec]
            # cost: GPU-seconds per step (tokens per step are the same for every plan)
            pools.append((fit, bound * (world if objective == "cost" else 1), world if objective == "cost" else 1))
    if not pools:
        raise _no_plan(m, gpu, gpus, base, rejected, considered)
    ranked, timed = _branch_and_bound(m, gpu, pools, top, progress)
    return SearchResult(ranked=ranked, feasible=sum(len(f.layout) for f, _, _ in pools),
                        rejected={k: n for k, n in rejected.items() if n},
                        considered=considered, objective=objective, price_per_gpu_hour=price_per_gpu_hour,
                        timed=timed)


@dataclass
class _Fits:
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


def _feasible(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, micro_batches, zero_stages, rec_order,
              max_vp: int, rejected: Counter) -> _Fits:
    """Every plan of ``gpus`` GPUs, checked for memory at once; rejections counted by reason.
    Recompute only adds time and only saves memory, so each plan keeps the lightest recompute
    that fits; the heavier ones are counted as ``slower variant``."""
    n_zero, n_rec = len(zero_stages), len(rec_order)
    layouts, considered = _layouts(m, gpu, gpus, base, max_vp, len(micro_batches) * n_zero * n_rec, rejected)
    grid = Grid(m, base, layouts, micro_batches, zero_stages, rec_order)
    empty = np.zeros(0, dtype=np.int64)
    if not layouts:
        return _Fits(grid, np.zeros((0, len(micro_batches)), dtype=np.int64), empty, empty, empty, empty,
                     np.zeros(0), considered)
    mb, divides = grid.microbatches()
    pp = np.array([lo.pp for lo in layouts])[:, None]
    vp = np.array([lo.vp for lo in layouts])[:, None]
    dualpipe = np.array([lo.schedule == "dualpipe" for lo in layouts])[:, None]
    interleave_bad = divides & (vp > 1) & (mb % pp != 0)
    dualpipe_bad = divides & ~interleave_bad & dualpipe & ((mb < 2 * pp) | (mb % 2 != 0))
    n_var = n_zero * n_rec
    rejected["global batch not divisible by dp x micro-batch"] += int((~divides).sum()) * n_var
    rejected["interleaving needs micro-batches divisible by pp"] += int(interleave_bad.sum()) * n_var
    rejected["DualPipe needs an even number of micro-batches, at least 2 x pp"] += int(dualpipe_bad.sum()) * n_var
    valid = divides & ~interleave_bad & ~dualpipe_bad
    peak = grid.peak_memory(np.where(valid, mb, 1))
    fits = (peak <= gpu.memory_bytes) & valid[:, :, None, None]
    any_fit = fits.any(axis=-1)
    lightest = fits.argmax(axis=-1)
    tried = valid[:, :, None] & np.ones(n_zero, dtype=bool)
    rejected["does not fit in GPU memory"] += int(np.where(any_fit, lightest, n_rec)[tried].sum())
    rejected["slower variant (less recompute fits)"] += int(np.where(any_fit, n_rec - 1 - lightest, 0)[tried].sum())
    li, mi, zi = np.nonzero(any_fit)
    ri = lightest[li, mi, zi]
    return _Fits(grid, mb, li, mi, zi, ri, peak[li, mi, zi, ri], considered)


def _branch_and_bound(m: ModelSpec, gpu: GPUSpec, pools, top: int, progress) -> tuple[tuple[Candidate, ...], int]:
    """Time plans in order of their lower bound until the bound passes the ``top``-th best plan
    timed so far: the plans never timed cannot rank (grid.py, ``compute_bound``)."""
    bound = np.concatenate([b for _, b, _ in pools])
    peak = np.concatenate([f.peak for f, _, _ in pools])
    which = np.concatenate([np.full(len(f.layout), i) for i, (f, _, _) in enumerate(pools)])
    local = np.concatenate([np.arange(len(f.layout)) for f, _, _ in pools])
    order = np.lexsort((peak, bound))
    timed: dict[tuple, StepTime] = {}
    best: list[float] = []  # max-heap (negated) of the ``top`` best keys so far
    done: list[tuple[float, float, int]] = []
    for n, i in enumerate(order):
        if len(best) >= top and bound[i] > -best[0]:
            break
        if progress and n % 64 == 0:
            progress(n, len(order))
        fit, _, scale = pools[which[i]]
        j = local[i]
        lo = fit.grid.layouts[fit.layout[j]]
        zero = int(fit.grid.zero[fit.zero[j]])
        cfg = fit.grid.configs[fit.mbs[j]][fit.rec[j]]
        mb = int(fit.mb[fit.layout[j], fit.mbs[j]])
        # ZeRO-1 and -2 move the same bytes (reduce-scatter, then all-gather): time once
        key = (which[i], fit.layout[j], fit.mbs[j], min(zero, 1) if zero < 3 else 3, fit.rec[j])
        if key not in timed:
            timed[key] = step_time(m, cfg, lo.plan(zero), gpu, mb)
        k = timed[key].step_s * scale
        heapq.heappush(best, -k)
        if len(best) > top:
            heapq.heappop(best)
        done.append((k, peak[i], i))
    if progress:
        progress(len(order), len(order))
    out = []
    for _, _, i in sorted(done)[:top]:  # ties go to less memory
        fit, _, _ = pools[which[i]]
        j = local[i]
        lo = fit.grid.layouts[fit.layout[j]]
        plan = lo.plan(int(fit.grid.zero[fit.zero[j]]))
        cfg = fit.grid.configs[fit.mbs[j]][fit.rec[j]]
        mb = int(fit.mb[fit.layout[j], fit.mbs[j]])
        step = timed[(which[i], fit.layout[j], fit.mbs[j], min(plan.zero, 1) if plan.zero < 3 else 3, fit.rec[j])]
        out.append(Candidate(plan, cfg, mb, step, estimate_memory(m, cfg, plan, gpu.memory_bytes, mb, all_stages=False)))
    return tuple(out), len(timed)


def _layouts(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, max_vp: int, per_layout: int,
             rejected: Counter) -> tuple[list[Layout], int]:
    """Every (tp, cp, pp, dp, ep, schedule, vp) of ``gpus`` GPUs whose degrees divide the model;
    the others are counted as rejected, ``per_layout`` plans each."""
    heads, kv = m.num_heads, m.num_kv_heads
    out: list[Layout] = []
    considered = 0
    for tp in _divisors(min(gpus, gpu.fast_domain)):
        bad_tp = heads % tp or (not m.is_mla and kv % tp)
        for cp in _pow2_upto(gpus // tp):
            if gpus % (tp * cp):
                continue
            bad_cp = base.seq_len % cp or (tp > 1 and (base.seq_len // cp) % tp)
            for pp in _divisors(gpus // (tp * cp)):
                dp = gpus // (tp * cp * pp)
                eps = [1] if not m.is_moe else _divisors(math.gcd(m.num_experts, dp * cp))
                layouts = [Layout(tp, cp, pp, dp, ep, s, v) for ep in eps for s, v in _schedules(m, pp, max_vp)]
                considered += len(layouts) * per_layout
                if bad_tp:
                    rejected["tp does not divide the attention heads"] += len(layouts) * per_layout
                elif bad_cp:
                    rejected["cp (x tp) does not divide the sequence"] += len(layouts) * per_layout
                elif pp > m.num_layers:
                    rejected["more pipeline stages than layers"] += len(layouts) * per_layout
                else:
                    out += layouts
    return out, considered


def _fits_somehow(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig) -> bool:
    """Does any plan fit with every memory saver on (ZeRO-3, full recompute, micro-batch 1)?"""
    return len(_feasible(m, gpu, gpus, base, (1,), (3,), ["full"], 1, Counter()).layout) > 0


def _no_plan(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, rejected: Counter, considered: int):
    reasons = ", ".join(f"{n:,} {r}" for r, n in sorted(rejected.items(), key=lambda kv: -kv[1]) if n)
    if not rejected.get("does not fit in GPU memory"):
        # Suggest a count that really has a plan (the nearest below, then above), never the one that failed
        found = next((n for n in _nearby_counts(gpus, gpu.fast_domain) if _fits_somehow(m, gpu, n, base)), None)
        return GpuplanError("gpus", f"no parallel plan uses {gpus} GPUs for {m.name} ({reasons})",
                            f"use {found} GPUs" if found else "use a GPU count that tp x cp x pp x dp can make")
    fixes = []
    for k in (2, 4, 8, 16, 32, 64, 128):
        if _fits_somehow(m, gpu, gpus * k, base):
            fixes.append(f"--gpus {gpus * k}")
            break
    seq = base.seq_len // 2
    while seq >= 512 and not fixes[1:]:
        if _fits_somehow(m, gpu, gpus, replace(base, seq_len=seq, global_batch=base.global_batch)):
            fixes.append(f"--seq-len {seq}")
            break
        seq //= 2
    if base.optimizer == "adamw" and _fits_somehow(m, gpu, gpus, replace(base, optimizer="adamw8bit")):
        fixes.append("--optimizer adamw8bit")
    fix = "try " + " or ".join(fixes) if fixes else "use a GPU with more memory"
    return DoesNotFit("gpus", f"no plan of {m.name} fits {gpus} x {gpu.name} "
                              f"({considered} plans considered, even with ZeRO-3 and full recompute)", fix)


def _nearby_counts(gpus: int, node: int) -> list[int]:
    """GPU counts near ``gpus`` that parallel plans usually make: whole nodes and powers of two,
    the nearest first, below before above."""
    below = sorted({2 ** k for k in range(0, 40) if 2 ** k < gpus} | {node * k for k in range(1, 65) if node * k < gpus},
                   reverse=True)
    above = sorted({2 ** k for k in range(0, 40) if 2 ** k > gpus} | {node * k for k in range(1, 65) if node * k > gpus})
    return (below[:6] + above[:6])[:12]


def smallest_fitting_plan(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig,
                          factors: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
                          ) -> tuple[ParallelPlan, TrainingConfig] | None:
    """The plan with the fewest GPUs (``gpus`` times a factor) that fits, lightest memory savers
    first (recompute, then ZeRO stage, then the smallest tp x pp); its memory is checked again
    with the full estimate, so what is suggested really fits. None: nothing up to 128x fits."""
    for k in factors:
        fit = _feasible(m, gpu, gpus * k, base, (1,), (0, 1, 2, 3), list(RECOMPUTE_ORDER), 1, Counter())
        order = sorted(range(len(fit.layout)), key=lambda i: (
            int(fit.rec[i]), int(fit.zero[i]), fit.grid.layouts[fit.layout[i]].tp * fit.grid.layouts[fit.layout[i]].pp,
            fit.grid.layouts[fit.layout[i]].schedule != "1f1b"))
        for i in order[:20]:
            plan = fit.grid.layouts[fit.layout[i]].plan(int(fit.grid.zero[fit.zero[i]]))
            config = replace(base, micro_batch=int(fit.grid.mbs[fit.mbs[i]]), recompute=fit.grid.rec[fit.rec[i]])
            micro = base.global_batch // (config.micro_batch * plan.dp)
            if estimate_memory(m, config, plan, gpu.memory_bytes, micro).fits:
                return plan, config
    return None
