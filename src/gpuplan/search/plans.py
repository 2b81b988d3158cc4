"""Find the best parallel plan: enumerate every valid one, keep those that fit, rank by speed or cost.

The pieces: constraints.py (what the user fixes), space.py (the layouts, their validity and the
memory grid), advice.py (what to change when nothing fits); this module ranks. The space: tp (within one scale-up domain, dividing the heads), cp (dividing the sequence), pp,
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
import itertools
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from gpuplan.errors import field_ref, require
from gpuplan.estimate.memory import MemoryReport, estimate_memory
from gpuplan.estimate.offload import OffloadTrainEstimate
from gpuplan.estimate.step_time import StepTime, step_time
from gpuplan.search.advice import NOT_ASKED, no_plan_error, smallest_fitting_plan
from gpuplan.search.constraints import SEARCH_SCHEDULES, Constraints, parse_choices
from gpuplan.search.space import RECOMPUTE_ORDER, Fits, enumerate_layouts, feasible_plans, layout_view, valid_layouts
from gpuplan.specs.framework import get as get_framework
from gpuplan.specs.hardware import GPUSpec, for_job
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import accounted_plan
from gpuplan.specs.training import SEARCH_MICRO_BATCHES, TrainingConfig

__all__ = [
    "OBJECTIVES",
    "RECOMPUTE_ORDER",
    "SEARCH_SCHEDULES",
    "Candidate",
    "Constraints",
    "SearchResult",
    "enumerate_layouts",
    "layout_view",
    "parse_choices",
    "search",
    "smallest_fitting_plan",
    "valid_layouts",
]

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


def search(
    m: ModelSpec,
    gpu: GPUSpec,
    gpus: int,
    base: TrainingConfig,
    *,
    top: int = 10,
    objective: str = "throughput",
    micro_batches: tuple[int, ...] = SEARCH_MICRO_BATCHES,
    zero_stages: tuple[int, ...] = (0, 1, 2, 3),
    recompute: tuple[str, ...] = RECOMPUTE_ORDER,
    max_vp: int = 4,
    price_per_gpu_hour: float | None = None,
    progress=None,
    constraints: Constraints | None = None,
    offload: str = "none",
    host: HostSpec | None = None,
    cp_comms: tuple[str, ...] = (),
) -> SearchResult:
    """Rank every valid plan of ``gpus`` GPUs for ``base`` (its global batch and sequence fixed).

    ``zero_stages``, ``recompute`` and ``constraints`` narrow the space; the plans they leave out
    are counted as rejected under the flag that excluded them. ``offload`` (none, auto, optimizer,
    optimizer+params) adds ZeRO-Offload variants of the pp = 1 layouts, sized for ``host`` (the
    catalog's host for the GPU when not given): search/offload.py. ``cp_comms``: the
    context-parallel K,V exchanges to search (``TrainingConfig.cp_comm``), each layout with cp > 1
    once per exchange; empty: ``base``'s alone."""
    from gpuplan.search.offload import modes_for

    offload_modes = modes_for(offload)
    require(gpus >= 1, "gpus", f"must be a positive integer, got {gpus}")
    require(
        objective in OBJECTIVES, "objective", f"unknown objective {objective!r}", f"use one of {', '.join(OBJECTIVES)}"
    )
    require(
        base.global_batch >= 1, "global_batch", "the search needs a global batch", f"pass {field_ref('global_batch')}"
    )
    fw = get_framework(base.framework)
    exchanges = tuple(dict.fromkeys(cp_comms)) or (base.cp_exchange,)
    bases = [replace(base, cp_comm=ex) for ex in exchanges]  # each refuses an exchange fw lacks
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
        f"widen the search, or use another {field_ref('framework')}",
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
    for world, (k, cfg) in itertools.product(worlds, enumerate(bases)):
        # a further exchange adds only the layouts it changes: those with context parallelism
        fit = feasible_plans(
            m, gpu, world, cfg, micro_batches, zero_stages, rec_order, max_vp, rejected, constraints, k > 0
        )
        considered += fit.considered
        if offload_modes and host is not None and k == 0:
            found, n = _offload_candidates(
                m, gpu, world, cfg, host, offload_modes, micro_batches, rec_order, fit, rejected
            )
            considered += n
            offloaded += [(c, c.step.step_s * (world if objective == "cost" else 1)) for c in found]
        if left_out:
            extra = fit.considered // (len(zero_stages) * len(rec_order)) * left_out
            rejected[NOT_ASKED] += extra
            considered += extra
        if len(fit.layout):
            # one GPU runs at its own clock, as step_time times it (specs/hardware.py for_job)
            bound = fit.grid.compute_bound(for_job(gpu, world), fit.mb)[fit.layout, fit.mbs, fit.rec]
            # cost: GPU-seconds per step (tokens per step are the same for every plan)
            pools.append((fit, bound * (world if objective == "cost" else 1), world if objective == "cost" else 1))
    if not pools and not offloaded:
        raise no_plan_error(m, gpu, gpus, base, rejected, considered, constraints, offload_modes)
    ranked, timed = _branch_and_bound(m, gpu, pools, top, progress) if pools else ((), 0)
    ranked = _accounted_splits(m, gpu, ranked, objective)
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
    fit: Fits,
    rejected: Counter,
) -> tuple[list[Candidate], int]:
    """The offload variants of this GPU count's layouts (search/offload.py) as ranked candidates."""
    from gpuplan.search.offload import offload_variants

    layouts = fit.grid.layouts
    found, n = offload_variants(m, gpu, host, base, layouts, modes, tuple(micro_batches), list(rec_order), rejected)
    out = []
    for v in found:
        plan = layouts[v.layout_index].plan(v.zero)
        memory = estimate_memory(m, v.config, plan, gpu, v.microbatches, all_stages=False)
        out.append(Candidate(plan, v.config, v.microbatches, v.step, memory, offload=v.estimate))
    return out, n


def _accounted_splits(
    m: ModelSpec, gpu: GPUSpec, ranked: tuple[Candidate, ...], objective: str
) -> tuple[Candidate, ...]:
    """The ranked plans, each on Megatron's accounted split where that is faster and fits
    (specs/split.py ``accounted_split``: the embedding, the loss and at vp 1 each MTP depth in a
    layer's place; ``train`` names it as ``faster_split``). The grid enumerates even splits only:
    every split of every layout would multiply the plans timed, so only the ranked ones are tried."""
    out = []
    for c in ranked:
        alt = accounted_plan(m.num_layers, c.plan, c.config.mtp_layers)
        if alt is not None:
            mem = estimate_memory(m, c.config, alt, gpu, c.microbatches, all_stages=False)
            if mem.fits:
                step = step_time(m, c.config, alt, gpu, c.microbatches)
                if step.step_s < c.step.step_s:
                    c = replace(c, plan=alt, step=step, memory=mem)
        out.append(c)
    per = (lambda c: c.plan.world_size) if objective == "cost" else (lambda c: 1)
    return tuple(sorted(out, key=lambda c: (c.step.step_s * per(c), c.gpu_bytes)))


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
        out.append(Candidate(plan, cfg, mb, step, estimate_memory(m, cfg, plan, gpu, mb, all_stages=False)))
    return tuple(out), len(timed)
