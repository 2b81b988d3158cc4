"""How often to checkpoint: Young's and Daly's optimal intervals and the expected waste.

* Young 1974, "A first order approximation to the optimum checkpoint interval": tau = sqrt(2 c M)
  for checkpoint cost c and mean time between failures M.
* Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps"
  (eq. 37): tau = sqrt(2 c M) [1 + sqrt(c / 2M) / 3 + (c / 2M) / 9] - c for c < 2M, else M.
* Expected waste (Daly 2006, eq. 13, exponential failures, restart time R): the wall time to
  finish T_s of work in segments of tau with checkpoints of c is
      T_w = M e^(R/M) (e^((tau + c)/M) - 1) T_s / tau,
  so the waste fraction is 1 - T_s / T_w.
"""

from __future__ import annotations

import math

from gpuplan.errors import GpuplanError, require

# A job that wastes this share of its wall time or more on checkpoints, restarts and lost work is
# counted as never finishing
NO_PROGRESS = 0.99


def require_checkpoint_fits(cost_s: float, mtbf_s: float, between: str = "failures") -> None:
    """Refuse a checkpoint that takes as long as the mean time between interruptions: no interval
    of work and its checkpoint ever completes, so the job would never finish."""
    from gpuplan.units import fmt_duration

    if cost_s >= mtbf_s:
        raise GpuplanError(
            "checkpoint_cost",
            f"a checkpoint ({fmt_duration(cost_s)}) takes longer than the mean time between "
            f"{between} ({fmt_duration(mtbf_s)}): the job would never finish",
            "write checkpoints faster (async, sharded) or find a more reliable machine",
        )


def young_interval(cost_s: float, mtbf_s: float) -> float:
    _check(cost_s, mtbf_s)
    return math.sqrt(2 * cost_s * mtbf_s)


def daly_interval(cost_s: float, mtbf_s: float) -> float:
    _check(cost_s, mtbf_s)
    if cost_s >= 2 * mtbf_s:
        return mtbf_s
    x = cost_s / (2 * mtbf_s)
    return math.sqrt(2 * cost_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - cost_s


def expected_waste_fraction(interval_s: float, cost_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Share of wall time not spent on useful work (checkpoints, lost work, restarts). A cost of 0
    with ``interval_s`` the whole job is a job that never checkpoints: it restarts from scratch."""
    require(cost_s >= 0, "cost", f"checkpoint cost must not be negative, got {cost_s}")
    require(mtbf_s > 0, "mtbf", f"mean time between failures must be positive, got {mtbf_s}")
    require(interval_s > 0, "interval", f"must be positive, got {interval_s}")
    require(restart_s >= 0, "restart", f"must not be negative, got {restart_s}")
    if (restart_s + interval_s + cost_s) / mtbf_s > 700:  # exp would overflow: no interval ever completes
        return 1.0
    wall_per_work = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + cost_s) / mtbf_s) / interval_s
    return 1 - 1 / wall_per_work


def _check(cost_s: float, mtbf_s: float) -> None:
    require(cost_s > 0, "cost", f"checkpoint cost must be positive, got {cost_s}")
    require(mtbf_s > 0, "mtbf", f"mean time between failures must be positive, got {mtbf_s}")


def intervals(cost_s: float, mtbf_s: float, restart_s: float = 0.0) -> dict[str, float]:
    """Young's and Daly's intervals and the share of wall time each wastes; a checkpoint that takes
    longer than the mean time between failures is refused (the job would never finish)."""
    from gpuplan.units import fmt_duration

    require_checkpoint_fits(cost_s, mtbf_s)
    young, daly = young_interval(cost_s, mtbf_s), daly_interval(cost_s, mtbf_s)
    waste = expected_waste_fraction(daly, cost_s, mtbf_s, restart_s)
    # restarts as long as the time between failures leave no time to work at any interval
    require(
        waste < NO_PROGRESS,
        "restart",
        f"restarts of {fmt_duration(restart_s)} after failures every {fmt_duration(mtbf_s)} waste "
        f"{waste:.1%} of the wall time even at Daly's interval: the job would never finish",
        "restart faster (warm spares, a cached container and checkpoint) or find a more reliable machine",
    )
    return {
        "mtbf_s": mtbf_s,
        "cost_s": cost_s,
        "restart_s": restart_s,
        "young_s": young,
        "daly_s": daly,
        "expected_waste_fraction": waste,
        "expected_waste_fraction_young": expected_waste_fraction(young, cost_s, mtbf_s, restart_s),
    }
