"""Find the best parallel plan: enumerate every valid one, keep those that fit, rank by speed or cost.

The space: tp (within one scale-up domain, dividing the heads), cp (dividing the sequence), pp,
dp (what is left), ep (MoE: dividing the experts and dp x cp) and etp (MoE with tp > 1: unset,
the experts split like the dense layers, or 1, MoE parallel folding with ep dividing the experts
and tp x cp x dp), pipeline schedule and virtual stages, ZeRO stage, micro-batch and recompute. Every plan is counted: ranked, or rejected with a
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
from gpuplan.estimate.offload import OffloadTrainEstimate
from gpuplan.estimate.step_time import StepTime, step_time
from gpuplan.search.grid import Grid, Layout
from gpuplan.specs import schedules, validity
from gpuplan.specs.framework import FRAMEWORKS, Framework, get as get_framework
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig
from gpuplan.specs.validity import Reason

RECOMPUTE_ORDER = ("none", "selective", "full")
OBJECTIVES = ("throughput", "cost")


@dataclass(frozen=True)
class Candidate:
    plan: ParallelPlan
    config: TrainingConfig
    microbatches: int
    step: StepTime
    memory: MemoryReport  # without offload (the plan's own states); with offload see ``offload``
    offload: OffloadTrainEstimate | None = None  # set for a plan that offloads (search --offload)

    @property
    def gpu_bytes(self) -> float:
        """Bytes on the most loaded GPU, as the plan runs (offloaded states off the GPU)."""
        return self.offload.gpu_total if self.offload else self.memory.per_gpu.total

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
    framework: str = "generic"  # the framework profile the plans were searched under
    offload: str = "none"  # the --offload choice searched (search/offload.py)
    host: str | None = None  # the host the offload variants were sized for


SEARCH_SCHEDULES = ("1f1b", "interleaved", "zb", "zb-v", "dualpipe")  # "interleaved" = 1f1b with vp > 1


@dataclass(frozen=True)
class Constraints:
    """What the user fixes or bounds (Calculon-style): a TP fixed by the NVLink domain, a PP capped
    by the framework, only some schedules. Plans outside are counted as rejected, with the flag."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    dp: int | None = None
    etp: int | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    max_cp: int | None = None
    max_ep: int | None = None
    schedules: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "ep", "dp", "etp", "max_tp", "max_pp", "max_cp", "max_ep"):
            value = getattr(self, name)
            require(value is None or value >= 1, name.replace("_", "-"), f"must be a positive integer, got {value}")
        for name in ("tp", "pp", "cp", "ep"):
            fixed, most = getattr(self, name), getattr(self, f"max_{name}")
            require(
                fixed is None or most is None or fixed <= most,
                name,
                f"--{name} {fixed} is above --max-{name} {most}",
                "drop one of them",
            )
        if self.schedules is not None:
            bad = [x for x in self.schedules if x not in SEARCH_SCHEDULES]
            require(
                not bad and bool(self.schedules),
                "schedule",
                f"unknown schedule(s) {', '.join(bad) or '(none)'}",
                f"use some of {', '.join(SEARCH_SCHEDULES)}",
            )

    def reason(self, lo: Layout) -> str | None:
        """Why a layout is outside the constraints (the flag that excludes it), or None."""
        for name in ("tp", "pp", "cp", "ep", "dp"):
            fixed = getattr(self, name)
            if fixed is not None and getattr(lo, name) != fixed:
                return f"{name} is not {fixed} (--{name})"
        if self.etp is not None and lo.expert_tp != self.etp:
            return f"etp is not {self.etp} (--etp)"
        for name in ("tp", "pp", "cp", "ep"):
            most = getattr(self, f"max_{name}")
            if most is not None and getattr(lo, name) > most:
                return f"{name} above {most} (--max-{name})"
        if self.schedules is not None:
            spec = schedules.get(lo.schedule)  # the --schedule name: interleaved 1F1B is 1f1b with vp > 1
            kind = "interleaved" if lo.vp > 1 and spec.interleaved else spec.train_name
            if kind not in self.schedules:
                return f"schedule {kind} not asked for (--schedule)"
        return None


def parse_choices(text: str | None, field: str, kind: type = str) -> tuple | None:
    """A comma-separated CLI list (``--zero 1,3``), or None when not given."""
    if text is None:
        return None
    items = [x.strip() for x in text.split(",") if x.strip()]
    try:
        values = tuple(kind(x) for x in items)
    except ValueError:
        raise GpuplanError(field, f"cannot read {text!r}", f"give a comma-separated list, e.g. --{field} 1,3") from None
    require(bool(values), field, "is empty", f"give a comma-separated list, e.g. --{field} 1,3")
    return values


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


_SCHEDULE_ORDER = [s.train_name for s in schedules.training()]  # the registry's order: 1F1B, the simplest, first


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


def search(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    base: TrainingConfig,
    *,
    top: int = 10,
    objective: str = "throughput",
    micro_batches: tuple[int, ...] = (1, 2, 4, 8),
    zero_stages: tuple[int, ...] = (0, 1, 2, 3),
    recompute: tuple[str, ...] = RECOMPUTE_ORDER,
    max_vp: int = 4,
    price_per_gpu_hour: float | None = None,
    progress=None,
    constraints: Constraints | None = None,
    offload: str = "none",
    host: HostSpec | None = None,
) -> SearchResult:
    """Rank every valid plan of ``gpus`` GPUs for ``base`` (its global batch and sequence fixed).

    ``zero_stages``, ``recompute`` and ``constraints`` narrow the space; the plans they leave out
    are counted as rejected under the flag that excluded them. ``offload`` (none, auto, optimizer,
    optimizer+params) adds ZeRO-Offload variants of the pp = 1 layouts, sized for ``host`` (the
    catalog's host for the GPU when not given): search/offload.py."""
    from gpuplan.search.offload import modes_for

    offload_modes = modes_for(offload)
    require(gpus >= 1, "gpus", f"must be a positive integer, got {gpus}")
    require(
        objective in OBJECTIVES, "objective", f"unknown objective {objective!r}", f"use one of {', '.join(OBJECTIVES)}"
    )
    require(base.global_batch >= 1, "global_batch", "the search needs a global batch", "pass --global-batch")
    fw = get_framework(base.framework)
    # only what the framework runs: its recompute modes and ZeRO stages
    for z in zero_stages:
        require(z in (0, 1, 2, 3), "zero", f"unknown ZeRO stage {z}", "use some of 0, 1, 2, 3")
    for r in recompute:
        require(
            r in RECOMPUTE_ORDER,
            "recompute",
            f"unknown recompute mode {r!r}",
            f"use some of {', '.join(RECOMPUTE_ORDER)}",
        )
    rec_order = [r for r in RECOMPUTE_ORDER if r in recompute and r in fw.recompute]
    zero_stages = tuple(z for z in zero_stages if z in fw.zero_stages)
    require(
        bool(rec_order and zero_stages),
        "framework",
        f"the {fw.name} profile runs none of the recompute modes or ZeRO stages asked for",
        "widen the search, or use another --framework",
    )
    # variants the framework runs but the caller left out, counted per plan enumerated below
    all_rec = [r for r in RECOMPUTE_ORDER if r in fw.recompute]
    left_out = len(fw.zero_stages) * len(all_rec) - len(zero_stages) * len(rec_order)
    rejected: Counter[str] = Counter()
    considered = 0
    # throughput: this GPU count; cost: also halves of it, since fewer GPUs can be cheaper per token
    worlds = [gpus]
    while objective == "cost" and worlds[-1] % 2 == 0 and worlds[-1] > 1 and len(worlds) < 8:
        worlds.append(worlds[-1] // 2)
    pools = []
    offloaded: list[tuple[Candidate, float]] = []  # offload variants, with their ranking key
    if offload_modes and host is None:
        from gpuplan.catalog.hosts import host_for_gpu

        host = host_for_gpu(gpu.id)
    for world in worlds:
        fit = _feasible(m, gpu, world, base, micro_batches, zero_stages, rec_order, max_vp, rejected, constraints)
        considered += fit.considered
        if offload_modes and host is not None:
            found, n = _offload_candidates(
                m, gpu, world, base, host, offload_modes, micro_batches, rec_order, fit, rejected
            )
            considered += n
            offloaded += [(c, c.step.step_s * (world if objective == "cost" else 1)) for c in found]
        if left_out:
            extra = fit.considered // (len(zero_stages) * len(rec_order)) * left_out
            rejected["ZeRO stage or recompute not asked for (--zero, --recompute)"] += extra
            considered += extra
        if len(fit.layout):
            bound = fit.grid.compute_bound(gpu, fit.mb)[fit.layout, fit.mbs, fit.rec]
            # cost: GPU-seconds per step (tokens per step are the same for every plan)
            pools.append((fit, bound * (world if objective == "cost" else 1), world if objective == "cost" else 1))
    if not pools and not offloaded:
        raise _no_plan(m, gpu, gpus, base, rejected, considered, constraints, offload_modes)
    ranked, timed = _branch_and_bound(m, gpu, pools, top, progress) if pools else ((), 0)
    if offloaded:  # exact: the bound search returned the best ``top`` without offload; merge and cut
        per = [c.plan.world_size if objective == "cost" else 1 for c in ranked]
        merged = [(c.step.step_s * k, c.gpu_bytes, i, c) for i, (c, k) in enumerate(zip(ranked, per))]
        merged += [(k, c.gpu_bytes, len(merged) + i, c) for i, (c, k) in enumerate(offloaded)]
        ranked = tuple(c for *_, c in sorted(merged, key=lambda x: x[:3])[:top])
        timed += len(offloaded)
    return SearchResult(
        ranked=ranked,
        feasible=sum(len(f.layout) for f, _, _ in pools) + len(offloaded),
        rejected={str(k): n for k, n in rejected.items() if n},
        considered=considered,
        objective=objective,
        price_per_gpu_hour=price_per_gpu_hour,
        timed=timed,
        framework=base.framework,
        offload=offload,
        host=host.name if offload_modes and host is not None else None,
    )


def _offload_candidates(
    m: ModelSpec,
    gpu: GPUSpec,
    world: int,
    base: TrainingConfig,
    host: HostSpec,
    modes: tuple[str, ...],
    micro_batches,
    rec_order,
    fit: _Fits,
    rejected: Counter,
) -> tuple[list[Candidate], int]:
    """The offload variants of this GPU count's layouts (search/offload.py) as ranked candidates."""
    from gpuplan.search.offload import offload_variants

    layouts = fit.grid.layouts
    found, n = offload_variants(m, gpu, host, base, layouts, modes, tuple(micro_batches), list(rec_order), rejected)
    out = []
    for v in found:
        plan = layouts[v.layout_index].plan(v.zero)
        memory = estimate_memory(m, v.config, plan, gpu.memory_bytes, v.microbatches, all_stages=False)
        out.append(Candidate(plan, v.config, v.microbatches, v.step, memory, offload=v.estimate))
    return out, n


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


def _feasible(
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
) -> _Fits:
    """Every plan of ``gpus`` GPUs, checked for memory at once; rejections counted by reason.
    Recompute only adds time and only saves memory, so each plan keeps the lightest recompute
    that fits; the heavier ones are counted as ``slower variant``."""
    n_zero, n_rec = len(zero_stages), len(rec_order)
    layouts, considered = _layouts(
        m, gpu, gpus, base, max_vp, len(micro_batches) * n_zero * n_rec, rejected, constraints
    )
    grid = Grid(m, base, layouts, micro_batches, zero_stages, rec_order)
    empty = np.zeros(0, dtype=np.int64)
    if not layouts:
        return _Fits(
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
    fits = (peak <= gpu.memory_bytes) & (valid[:, :, None] & zero_ok)[:, :, :, None]
    any_fit = fits.any(axis=-1)
    lightest = fits.argmax(axis=-1)
    tried = valid[:, :, None] & zero_ok
    rejected[Reason.MEMORY] += int(np.where(any_fit, lightest, n_rec)[tried].sum())
    rejected[Reason.SLOWER_VARIANT] += int(np.where(any_fit, n_rec - 1 - lightest, 0)[tried].sum())
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
        # keyed on every input of the step time (the stage-level caches in step_time already share
        # the work between plans that differ only where a stage's time does not)
        key = (which[i], fit.layout[j], fit.mbs[j], zero, fit.rec[j])
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
        step = timed[(which[i], fit.layout[j], fit.mbs[j], plan.zero, fit.rec[j])]
        out.append(
            Candidate(plan, cfg, mb, step, estimate_memory(m, cfg, plan, gpu.memory_bytes, mb, all_stages=False))
        )
    return tuple(out), len(timed)


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
    and sequence rules are not applied yet (``_layouts`` counts them)."""
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


def layout_view(layouts: list[Layout], seq_len: int) -> validity.View:
    """Layouts as arrays for the plan-validity rules (the search assumes sequence parallelism)."""
    col = {k: np.array([getattr(lo, k) for lo in layouts]) for k in ("tp", "cp", "pp", "dp", "ep", "vp", "schedule")}
    etp = np.array([lo.expert_tp for lo in layouts])
    folded = np.array([lo.etp is not None for lo in layouts])
    return validity.View(**col, etp=etp, folded=folded, sp=True, seq_len=seq_len)


def _layouts(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    base: TrainingConfig,
    max_vp: int,
    per_layout: int,
    rejected: Counter,
    constraints: Constraints | None = None,
) -> tuple[list[Layout], int]:
    """Every layout of ``gpus`` GPUs that the plan-validity rules and the framework accept
    (gpuplan.specs.validity, specs.framework); the others are counted as rejected by their first
    broken rule, ``per_layout`` plans each."""
    fw = get_framework(base.framework)
    layouts = enumerate_layouts(m, gpu, gpus, max_vp, fw, constraints.etp if constraints is not None else None)
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
    codes = validity.reasons(rules, layout_view(layouts, base.seq_len), m)
    _count(rejected, rules, codes, per_layout)
    out = []
    for lo, c in zip(layouts, codes.tolist()):
        if c >= 0:
            continue
        if lo.pp > 1 and not fw.pipeline:
            rejected[f"{fw.name} has no pipeline parallelism"] += per_layout
            continue
        out.append(lo)
    return out, considered


def _count(rejected: Counter, rules: tuple[validity.Rule, ...], codes: np.ndarray, each: int) -> None:
    """Add ``each`` plans per entry of ``codes`` (an index into ``rules``, -1: valid) to their reason."""
    for i, n in zip(*np.unique(codes[codes >= 0], return_counts=True)):
        rejected[rules[int(i)].reason] += int(n) * each


def _fits_somehow(
    m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, constraints: Constraints | None = None
) -> bool:
    """Does any plan fit with every memory saver on (ZeRO-3, full recompute, micro-batch 1)?"""
    return len(_feasible(m, gpu, gpus, base, (1,), (3,), ["full"], 1, Counter(), constraints).layout) > 0


def _no_plan(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    base: TrainingConfig,
    rejected: Counter,
    considered: int,
    constraints: Constraints | None = None,
    offload_modes: tuple[str, ...] = (),
):
    reasons = ", ".join(f"{n:,} {r}" for r, n in sorted(rejected.items(), key=lambda kv: -kv[1]) if n)
    constrained = constraints is not None and any("(--" in r for r in rejected)
    if not rejected.get(Reason.MEMORY) and constrained:
        return GpuplanError(
            "gpus",
            f"no parallel plan of {gpus} GPUs for {m.name} meets the constraints ({reasons})",
            "relax --tp/--pp/--cp/--ep/--dp, the --max-* bounds or --schedule",
        )
    if not rejected.get(Reason.MEMORY):
        # Suggest a count that really has a plan (the nearest below, then above), never the one that failed
        found = next((n for n in _nearby_counts(gpus, gpu.fast_domain) if _fits_somehow(m, gpu, n, base)), None)
        return GpuplanError(
            "gpus",
            f"no parallel plan uses {gpus} GPUs for {m.name} ({reasons})",
            f"use {found} GPUs" if found else "use a GPU count that tp x cp x pp x dp can make",
        )
    fixes = []
    for k in (2, 4, 8, 16, 32, 64, 128):
        if _fits_somehow(m, gpu, gpus * k, base, constraints):
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
    if not offload_modes and base.optimizer == "adamw" and _fits_with_offload(m, gpu, gpus, base, constraints):
        fixes.append("--offload auto")
    fix = "try " + " or ".join(fixes) if fixes else "use a GPU with more memory"
    return DoesNotFit(
        "gpus",
        f"no plan of {m.name} fits {gpus} x {gpu.name} "
        f"({considered} plans considered, even with ZeRO-3 and full recompute)",
        fix,
    )


def _fits_with_offload(
    m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, constraints: Constraints | None = None
) -> bool:
    """Does a plan fit with ZeRO-Offload or ZeRO-Infinity offload (micro-batch 1, full recompute)
    on the catalog's host for this GPU?"""
    from gpuplan.catalog.hosts import host_for_gpu
    from gpuplan.search.offload import offload_variants

    layouts, _ = _layouts(m, gpu, gpus, base, 1, 1, Counter(), constraints)
    modes = ("optimizer", "optimizer+params")
    found, _ = offload_variants(m, gpu, host_for_gpu(gpu.id), base, layouts, modes, (1,), ["full"], Counter())
    return bool(found)


def _nearby_counts(gpus: int, node: int) -> list[int]:
    """GPU counts near ``gpus`` that parallel plans usually make: whole nodes and powers of two,
    the nearest first, below before above."""
    below = sorted(
        {2**k for k in range(0, 40) if 2**k < gpus} | {node * k for k in range(1, 65) if node * k < gpus}, reverse=True
    )
    above = sorted({2**k for k in range(0, 40) if 2**k > gpus} | {node * k for k in range(1, 65) if node * k > gpus})
    return (below[:6] + above[:6])[:12]


def smallest_fitting_plan(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    base: TrainingConfig,
    factors: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128),
) -> tuple[ParallelPlan, TrainingConfig] | None:
    """The plan with the fewest GPUs (``gpus`` times a factor) that fits, lightest memory savers
    first (recompute, then ZeRO stage, then the smallest tp x pp); its memory is checked again
    with the full estimate, so what is suggested really fits. None: nothing up to 128x fits."""
    for k in factors:
        fit = _feasible(m, gpu, gpus * k, base, (1,), (0, 1, 2, 3), list(RECOMPUTE_ORDER), 1, Counter())
        order = sorted(
            range(len(fit.layout)),
            key=lambda i: (
                int(fit.rec[i]),
                int(fit.zero[i]),
                fit.grid.layouts[fit.layout[i]].tp * fit.grid.layouts[fit.layout[i]].pp,
                _SCHEDULE_ORDER.index(schedules.get(fit.grid.layouts[fit.layout[i]].schedule).train_name),
            ),
        )
        for i in order[:20]:
            plan = fit.grid.layouts[fit.layout[i]].plan(int(fit.grid.zero[fit.zero[i]]))
            config = fit.grid.configs[fit.mbs[i]][fit.rec[i]]
            micro = base.global_batch // (config.micro_batch * plan.dp)
            if estimate_memory(m, config, plan, gpu.memory_bytes, micro).fits:
                return plan, config
    return None
