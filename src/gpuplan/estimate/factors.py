"""The named factors a calibration fits (``FACTORS``: GEMM sustained fraction, attention rate,
HBM fraction, intra- and inter-node bus efficiency, per-step overhead), their physical bounds, and
the kernel categories a profiler trace measures that the model predicts (``KERNEL_KINDS``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.specs.hardware import Efficiency

if TYPE_CHECKING:
    from gpuplan.estimate.step_time import StepTime


@dataclass(frozen=True)
class Factor:
    """One fitted number: its name, physical bounds and what it scales."""

    name: str
    lo: float
    hi: float
    doc: str
    additive: bool = False  # seconds (fitted on a linear scale), not a fraction (log scale)


FACTORS = (
    Factor(
        "gemm_sustained",
        0.30,
        1.00,
        "tensor-core rate held over the measured MAMF (Efficiency.sustained); scales GEMMs and attention",
    ),
    Factor(
        "attention_scale",
        0.30,
        1.00,
        "attention kernels' rate relative to the catalog's, whichever kernel runs (Efficiency.attention_scale; "
        "upper bound: flash_fwd/flash_bwd reach 1)",
    ),
    Factor("hbm", 0.30, 1.00, "streaming kernels' bandwidth over the HBM peak (Efficiency.hbm)"),
    Factor("intra_bus", 0.20, 1.00, "NCCL bus bandwidth over the scale-up link (Efficiency.intra_bus)"),
    Factor("inter_bus", 0.10, 1.00, "NCCL bus bandwidth over the NIC rate (Efficiency.inter_bus)"),
    Factor(
        "step_overhead_s",
        0.0,
        60.0,
        "seconds per step outside the modelled kernels (Efficiency.step_overhead_s)",
        additive=True,
    ),
)
FACTOR_NAMES = tuple(f.name for f in FACTORS)
# What a profiler trace measures (gpuplan.runs.trace categories) that the model predicts: GEMM and
# attention kernels, the other kernels (elementwise, norms, the optimizer step: memory-bound), and
# the NCCL all-reduce/all-gather/reduce-scatter kernels (send/recv also carries pipeline waits)
KERNEL_KINDS = ("gemm", "attention", "elementwise", "nccl")
NCCL_MEASURED = ("nccl_all_gather", "nccl_reduce_scatter", "nccl_all_reduce")
NCCL_MODELLED = ("all-reduce", "all-gather", "reduce-scatter")


def measured_kernel(kernels_s: dict[str, float], kind: str) -> float:
    """A trace's seconds per step for one of ``KERNEL_KINDS``."""
    if kind == "nccl":
        return sum(kernels_s.get(k, 0.0) for k in NCCL_MEASURED)
    return kernels_s.get(kind, 0.0)


def predicted_kernel(st: StepTime, kind: str) -> float:
    """The model's seconds per step for one of ``KERNEL_KINDS`` on the critical stage (kernels as
    run once: recompute is not in ``StepTime.ops``, so runs with recompute give no kernel terms)."""
    if kind in ("gemm", "attention"):
        return st.ops.get(kind, 0.0)
    if kind == "elementwise":
        return sum(v for k, v in st.ops.items() if k not in ("gemm", "attention")) + st.breakdown.get("optimizer", 0.0)
    # NCCL kernels run for the whole collective, hidden or not; a dimension's time is split over its
    # collective kinds by the bytes each sends
    total = 0.0
    for line in st.comm.values():
        sent = sum(line.collectives.values())
        if sent:
            total += line.time * sum(line.collectives.get(k, 0.0) for k in NCCL_MODELLED) / sent
    return total


def factor_values(eff: Efficiency) -> dict[str, float]:
    """The factors' values in an efficiency."""
    return {
        "gemm_sustained": eff.sustained,
        "attention_scale": eff.attention_scale,
        "hbm": eff.hbm,
        "intra_bus": eff.intra_bus,
        "inter_bus": eff.inter_bus,
        "step_overhead_s": eff.step_overhead_s,
    }


def factor_bounds(base: Efficiency) -> dict[str, tuple[float, float]]:
    """Physical bounds; attention's upper bound keeps both flash fractions at most 1."""
    out = {f.name: (f.lo, f.hi) for f in FACTORS}
    out["attention_scale"] = (0.30, 1.0 / max(base.flash_fwd, base.flash_bwd))
    return out


def apply_factors(base: Efficiency, values: dict[str, float]) -> Efficiency:
    """``base`` with the given factors (missing ones unchanged)."""
    v = {**factor_values(base), **values}
    return dataclasses.replace(
        base,
        sustained=v["gemm_sustained"],
        # a rate fitted to the user's runs stands for one GPU too: the catalog's measured
        # single-GPU rate (for_job) would otherwise override it on one-GPU plans
        solo_sustained=None if "gemm_sustained" in values else base.solo_sustained,
        attention_scale=v["attention_scale"],  # every kernel's rate (Efficiency.attention_fractions)
        hbm=v["hbm"],
        intra_bus=v["intra_bus"],
        inter_bus=v["inter_bus"],
        step_overhead_s=v["step_overhead_s"],
    )
