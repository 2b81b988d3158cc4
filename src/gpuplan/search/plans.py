"""Find the best parallel plan: enumerate every valid one, keep those that fit, rank by speed or cost.

The space: tp (within one scale-up domain, dividing the heads), cp (dividing the sequence), pp,
dp (what is left), ep (MoE: dividing the experts and dp x cp), pipeline schedule and virtual
stages, ZeRO stage, micro-batch and recompute. Every plan is counted: ranked, or rejected with a
reason. Two shortcuts keep it fast without losing the best plan:

* recompute only adds time and only saves memory, so for each plan the lightest recompute that
  fits is timed and the heavier ones are counted as ``slower variant`` (not ranked);
* memory is checked before time, on the stages that can be the most loaded only.
Component times are cached by shape (estimate/compute.py), so the thousands of plans share a few
hundred kernel evaluations; ranking and counting are numpy.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from gpuplan.errors import GpuplanError, require
from gpuplan.estimate.memory import MemoryReport, estimate_memory
from gpuplan.estimate.step_time import StepTime, step_time
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
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


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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
    found: list[Candidate] = []
    rejected: Counter[str] = Counter()
    considered = 0
    # throughput: this GPU count; cost: also halves of it, since fewer GPUs can be cheaper per token
    worlds = [gpus]
    while objective == "cost" and worlds[-1] % 2 == 0 and worlds[-1] > 1 and len(worlds) < 8:
        worlds.append(worlds[-1] // 2)
    for world in worlds:
        f, r, c = _enumerate(m, gpu, world, base, micro_batches, zero_stages, rec_order, max_vp, progress)
        found += f
        rejected.update(r)
        considered += c
    if not found:
        raise _no_plan(m, gpu, gpus, base, rejected, considered)
    steps = np.array([c.step.step_s for c in found])
    mem = np.array([c.memory.per_gpu.total for c in found])
    if objective == "cost":  # GPU-seconds per token (x price, the same order): less is better
        key = steps * np.array([c.plan.world_size for c in found]) / np.array([c.tokens_per_s * c.step.step_s for c in found])
    else:
        key = steps
    order = np.lexsort((mem, key))[:top]  # ties go to less memory
    return SearchResult(ranked=tuple(found[i] for i in order), feasible=len(found), rejected=dict(rejected),
                        considered=considered, objective=objective, price_per_gpu_hour=price_per_gpu_hour)


def _enumerate(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, micro_batches, zero_stages, rec_order,
               max_vp: int, progress, any_fit: bool = False) -> tuple[list[Candidate], Counter, int]:
    """All plans of ``gpus`` GPUs: the ones that fit (timed), rejections by reason, plans seen.
    ``any_fit``: stop at the first plan that fits, untimed (a feasibility check)."""
    configs = {(mbs, rec): replace(base, micro_batch=mbs, recompute=rec) for mbs in micro_batches for rec in rec_order}
    timed: dict[tuple, StepTime] = {}
    rejected: Counter[str] = Counter()
    found: list[Candidate] = []
    considered = 0
    heads, kv = m.num_heads, m.num_kv_heads
    tps = [t for t in _divisors(min(gpus, gpu.fast_domain))]
    outer = [(tp, cp) for tp in tps for cp in _pow2_upto(gpus // tp)]
    for i, (tp, cp) in enumerate(outer):
        if progress:
            progress(i, len(outer))
        rest = gpus // tp
        if gpus % (tp * cp):
            continue
        per_layout = len(zero_stages) * len(micro_batches) * len(rec_order)
        bad_tp = heads % tp or (not m.is_mla and kv % tp)
        bad_cp = base.seq_len % cp or (tp > 1 and (base.seq_len // cp) % tp)
        for pp in _divisors(rest // cp):
            dp = rest // (cp * pp)
            eps = [1] if not m.is_moe else [e for e in _divisors(math.gcd(m.num_experts, dp * cp))]
            layouts = [(ep, s, v) for ep in eps for s, v in _schedules(m, pp, max_vp)]
            n_plans = len(layouts) * per_layout
            considered += n_plans
            if bad_tp:
                rejected["tp does not divide the attention heads"] += n_plans
                continue
            if bad_cp:
                rejected["cp (x tp) does not divide the sequence"] += n_plans
                continue
            if pp > m.num_layers:
                rejected["more pipeline stages than layers"] += n_plans
                continue
            for ep, sched, vp in layouts:
                plan = ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vp=vp, schedule=sched)
                for mbs in micro_batches:
                    n_var = len(zero_stages) * len(rec_order)
                    if base.global_batch % (dp * mbs):
                        rejected["global batch not divisible by dp x micro-batch"] += n_var
                        continue
                    mb = base.global_batch // (dp * mbs)
                    if vp > 1 and mb % pp:
                        rejected["interleaving needs micro-batches divisible by pp"] += n_var
                        continue
                    if sched == "dualpipe" and mb < pp:
                        rejected["DualPipe needs at least pp micro-batches"] += n_var
                        continue
                    zplans = {z: replace(plan, zero=z) for z in zero_stages}
                    # the most frugal variants (ZeRO-2 or -3 with the most recompute) bound the rest
                    if not any(_fits(m, gpu, configs[mbs, rec_order[-1]], zplans[z], mb)
                               for z in zero_stages if z >= min(2, max(zero_stages))):
                        # the most memory-frugal variant does not fit: none does
                        rejected["does not fit in GPU memory"] += n_var
                        continue
                    for zero in zero_stages:
                        zplan = zplans[zero]
                        rec = _lightest_fitting(m, gpu, configs, zplan, mbs, mb, rec_order)
                        if rec is None:
                            rejected["does not fit in GPU memory"] += len(rec_order)
                            continue
                        start = rec_order.index(rec)  # lighter ones were checked and do not fit
                        heavier = len(rec_order) - 1 - start
                        rejected["does not fit in GPU memory"] += start
                        rejected["slower variant (less recompute fits)"] += heavier
                        if any_fit:
                            return [None], rejected, considered
                        cfg = configs[mbs, rec]
                        mem = estimate_memory(m, cfg, zplan, gpu.memory_bytes, mb, all_stages=False)
                        # ZeRO-1 and -2 move the same bytes (reduce-scatter, then all-gather): time once
                        key = (dp, tp, pp, cp, ep, vp, sched, min(zero, 1) if zero < 3 else 3, mbs, rec)
                        if key not in timed:
                            timed[key] = step_time(m, cfg, zplan, gpu, mb)
                        found.append(Candidate(zplan, cfg, mb, timed[key], mem))
    if progress:
        progress(len(outer), len(outer))
    return found, rejected, considered


def _fits(m: ModelSpec, gpu: GPUSpec, cfg: TrainingConfig, plan: ParallelPlan, mb: int) -> bool:
    return estimate_memory(m, cfg, plan, gpu.memory_bytes, mb, all_stages=False).fits


def _lightest_fitting(m, gpu, configs, plan, mbs, mb, rec_order, start: int = 0) -> str | None:
    """The least recompute from ``rec_order[start:]`` that fits (memory falls as recompute grows)."""
    if not _fits(m, gpu, configs[mbs, rec_order[-1]], plan, mb):
        return None
    for rec in rec_order[start:-1]:
        if _fits(m, gpu, configs[mbs, rec], plan, mb):
            return rec
    return rec_order[-1]


def _fits_somehow(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig) -> bool:
    """Does any plan fit with every memory saver on (ZeRO-3, full recompute, micro-batch 1)?"""
    found, _, _ = _enumerate(m, gpu, gpus, base, (1,), (3,), ["full"], 1, None, any_fit=True)
    return bool(found)


def _no_plan(m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, rejected: Counter, considered: int):
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(rejected.items(), key=lambda kv: -kv[1]))
    if not rejected.get("does not fit in GPU memory"):
        return GpuplanError("gpus", f"no parallel plan uses {gpus} GPUs for {m.name} ({reasons})",
                            f"use a GPU count that tp x cp x pp x dp can make, e.g. {gpu.fast_domain * max(1, gpus // gpu.fast_domain)}")
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
    return GpuplanError("gpus", f"no plan of {m.name} fits {gpus} x {gpu.name} "
                                f"({considered} plans considered, even with ZeRO-3 and full recompute)", fix)
