"""Offload as one more dimension of the plan search (issue 24): ZeRO-Offload / ZeRO-Infinity
variants of the data- and tensor-parallel layouts, beside the plans without offload.

``modes`` is what ``search --offload`` asks for: ``none`` adds nothing (the default: a plan that
fits without offload loses nothing by not offloading, the host is often unknown, and the search
stays as fast as it was); ``optimizer`` or ``optimizer+params`` add that variant of every layout
the offload model covers; ``auto`` adds both. The plans without offload are always searched too,
so a plan appears with its offload choice only where it ranks, typically where nothing fits
without it.

A variant is the layout with the partitioning its offload implies: ZeRO-2 for ``optimizer``
(ZeRO-Offload keeps each rank's fp16 parameters and offloads its partition of gradients and
optimizer states: Ren et al. 2021, section 4.2), ZeRO-3 for ``optimizer+params`` (ZeRO-Infinity
streams the parameters too). estimate/offload.py models pipeline depth 1 and Adam only, so
variants exist for ``pp = 1`` layouts; with another optimizer every variant is counted as rejected.

Memory per GPU and per host, and what the offload adds to a step (gradients down and parameters
up over PCIe where the backward does not hide them, the CPU Adam step) come from
estimate/offload.py; the GPU side of the step (kernels, communication) from the same
``step_time`` that times every other plan, its GPU optimizer step replaced by the offload's
exposed time, so that plans with and without offload are ranked on one clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from gpuplan.errors import require
from gpuplan.estimate.offload import (
    CPU_USABLE,
    OffloadTrainEstimate,
    OffloadTrainRequest,
    estimate_offload_training,
    offloaded_step,
)
from gpuplan.estimate.step_time import StepTime
from gpuplan.specs import validity
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.training import TrainingConfig
from gpuplan.specs.validity import Reason

SEARCH_MODES = ("none", "auto", "optimizer", "optimizer+params")
_ZERO = {"optimizer": 2, "optimizer+params": 3}


def modes_for(offload: str) -> tuple[str, ...]:
    """The offload modes a ``--offload`` choice adds to the search."""
    require(
        offload in SEARCH_MODES,
        "offload",
        f"unknown offload choice {offload!r}",
        f"use one of {', '.join(SEARCH_MODES)}",
    )
    if offload == "none":
        return ()
    return tuple(_ZERO) if offload == "auto" else (offload,)


@dataclass(frozen=True)
class OffloadVariant:
    """One plan with offload that fits: what the ranked Candidate needs, and the estimate."""

    layout_index: int
    zero: int
    config: TrainingConfig
    microbatches: int
    step: StepTime
    estimate: OffloadTrainEstimate


def offload_variants(
    m: ModelSpec,
    gpu: GPUSpec,
    host: HostSpec,
    base: TrainingConfig,
    layouts: list,
    modes: tuple[str, ...],
    micro_batches: tuple[int, ...],
    rec_order: list[str],
    rejected: Counter,
) -> tuple[list[OffloadVariant], int]:
    """Every (pp = 1 layout, micro-batch, mode) with the lightest recompute that fits GPU and host
    memory, timed; the others counted in ``rejected`` by reason. Returns (variants, plans considered)."""
    single = [(i, lo) for i, lo in enumerate(layouts) if lo.pp == 1]
    per = len(micro_batches) * len(rec_order)
    considered = len(single) * per * len(modes)
    if base.optimizer != "adamw":
        rejected[f"offload models Adam only (`optimizer={base.optimizer}`)"] += considered
        return [], considered
    room = host.cpu_memory_bytes * CPU_USABLE
    out: list[OffloadVariant] = []
    batch_rule = validity.rules_for(Reason.BATCH)
    for mode in modes:
        for i, lo in single:
            plan = lo.plan(_ZERO[mode])
            for mbs in micro_batches:
                batch = validity.View(dp=lo.dp, micro_batch=mbs, global_batch=base.global_batch)
                if validity.first_violation(batch_rule, batch) is not None:
                    rejected[f"{Reason.BATCH} (offload {mode})"] += len(rec_order)
                    continue
                micro = base.global_batch // (lo.dp * mbs)
                for k, rec in enumerate(rec_order):
                    cfg = replace(
                        base,
                        micro_batch=mbs,
                        recompute=rec,
                        recompute_modules=base.recompute_modules if rec == "selective" else (),
                    )
                    est = estimate_offload_training(
                        OffloadTrainRequest(
                            model=m, gpu=gpu, host=host, plan=plan, config=cfg, offload=mode, microbatches=micro
                        )
                    )
                    if est.gpu_total > gpu.memory_bytes:
                        rejected[f"does not fit GPU memory even with offload {mode}"] += 1
                        continue
                    if est.cpu_bytes > room:
                        rejected[f"CPU memory per node too small for offload {mode} (`host`)"] += 1
                        continue
                    out.append(OffloadVariant(i, plan.zero, cfg, micro, offloaded_step(est), est))
                    rejected[Reason.SLOWER_VARIANT] += len(rec_order) - 1 - k
                    break
    return out, considered
