"""When no plan fits: the smallest change that does (more GPUs, a shorter sequence, an 8-bit
optimizer, offload), and the plan with the fewest GPUs that fits, checked with the full estimate."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace

from gpuplan.errors import DoesNotFit, GpuplanError, field_ref
from gpuplan.estimate.memory import estimate_memory
from gpuplan.search.constraints import Constraints
from gpuplan.search.space import RECOMPUTE_ORDER, SCHEDULE_ORDER, feasible_plans, valid_layouts
from gpuplan.specs import schedules
from gpuplan.specs.framework import get as get_framework
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig
from gpuplan.specs.validity import Reason

# the rejection plans.py counts for ZeRO stages and recompute levels the caller left out
NOT_ASKED = "ZeRO stage or recompute not asked for (`zero`, `recompute`)"


def _fits_somehow(
    m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, constraints: Constraints | None = None
) -> bool:
    """Does any plan fit with every memory saver on (ZeRO-3, full recompute, micro-batch 1)?"""
    return len(feasible_plans(m, gpu, gpus, base, (1,), (3,), ["full"], 1, Counter(), constraints).layout) > 0


def no_plan_error(
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
    constrained = constraints is not None and any("(`" in r for r in rejected)  # a constraint names its field
    if not rejected.get(Reason.MEMORY) and constrained:
        return GpuplanError(
            "gpus",
            f"no parallel plan of {gpus} GPUs for {m.name} meets the constraints ({reasons})",
            "relax "
            + "/".join(map(field_ref, ("tp", "pp", "cp", "ep", "dp")))
            + ", the "
            + "/".join(field_ref(f"max_{d}") for d in ("tp", "pp", "cp", "ep"))
            + f" bounds or {field_ref('schedule')}",
        )
    if not rejected.get(Reason.MEMORY):
        # Suggest a count that really has a plan (the nearest below, then above), never the one that failed
        found = next((n for n in _nearby_counts(gpus, gpu.fast_domain) if _fits_somehow(m, gpu, n, base)), None)
        return GpuplanError(
            "gpus",
            f"no parallel plan uses {gpus} GPUs for {m.name} ({reasons})",
            f"use {found} GPUs" if found else "use a GPU count that tp x cp x pp x dp can make",
        )
    # the caller may have held ZeRO or recompute below what the framework runs (plans.py counts
    # what it left out); then the memory savers it excluded come first among the fixes
    narrowed = bool(rejected.get(NOT_ASKED))
    fixes = []
    if narrowed and _fits_somehow(m, gpu, gpus, base, constraints):
        fixes.append(f"{field_ref('zero', 3)} with {field_ref('recompute', 'full')}")
    for k in (2, 4, 8, 16, 32, 64, 128):
        if _fits_somehow(m, gpu, gpus * k, base, constraints):
            fixes.append(field_ref("gpus", gpus * k))
            break
    seq = base.seq_len // 2
    while seq >= 512 and not fixes[1:]:
        if _fits_somehow(m, gpu, gpus, replace(base, seq_len=seq, global_batch=base.global_batch)):
            fixes.append(field_ref("seq_len", seq))
            break
        seq //= 2
    if base.optimizer == "adamw" and _fits_somehow(m, gpu, gpus, replace(base, optimizer="adamw8bit")):
        fixes.append(field_ref("optimizer", "adamw8bit"))
    if not offload_modes and base.optimizer == "adamw" and _fits_with_offload(m, gpu, gpus, base, constraints):
        fixes.append(field_ref("offload", "auto"))
    fix = "try " + " or ".join(fixes) if fixes else "use a GPU with more memory"
    savers = "with the ZeRO stages and recompute asked for" if narrowed else "even with ZeRO-3 and full recompute"
    return DoesNotFit(
        "gpus", f"no plan of {m.name} fits {gpus} x {gpu.name} ({considered} plans considered, {savers})", fix
    )


def _fits_with_offload(
    m: ModelSpec, gpu: GPUSpec, gpus: int, base: TrainingConfig, constraints: Constraints | None = None
) -> bool:
    """Does a plan fit with ZeRO-Offload or ZeRO-Infinity offload (micro-batch 1, full recompute)
    on the catalog's host for this GPU?"""
    from gpuplan.catalog.hosts import host_for_gpu
    from gpuplan.search.offload import offload_variants

    layouts, _ = valid_layouts(m, gpu, gpus, base, 1, 1, Counter(), constraints)
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


# keyed on every argument: the whole model, the GPU (its memory and efficiency: GPUSpec.__hash__),
# the GPU count, the whole training config (framework, optimizer, sequence, batch) and the factors;
# the result is a pair of frozen dataclasses. Bounded: one entry per distinct request that did not fit.
@functools.lru_cache(maxsize=256)
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
    # only the recompute levels the framework profile has (hf: none or full): a level it lacks
    # would be refused by the config, not counted as an infeasible plan
    recomputes = [r for r in RECOMPUTE_ORDER if r in get_framework(base.framework).recompute]
    for k in factors:
        fit = feasible_plans(m, gpu, gpus * k, base, (1,), (0, 1, 2, 3), recomputes, 1, Counter())
        order = sorted(
            range(len(fit.layout)),
            key=lambda i: (
                int(fit.rec[i]),
                int(fit.zero[i]),
                fit.grid.layouts[fit.layout[i]].tp * fit.grid.layouts[fit.layout[i]].pp,
                SCHEDULE_ORDER.index(schedules.get(fit.grid.layouts[fit.layout[i]].schedule).train_name),
            ),
        )
        for i in order[:20]:
            plan = fit.grid.layouts[fit.layout[i]].plan(int(fit.grid.zero[fit.zero[i]]))
            config = fit.grid.configs[fit.mbs[i]][fit.rec[i]]
            micro = base.global_batch // (config.micro_batch * plan.dp)
            if estimate_memory(m, config, plan, gpu, micro).fits:
                return plan, config
    return None
