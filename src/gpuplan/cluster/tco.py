"""Total cost of ownership: renting on demand, renting spot, or buying the GPUs.

Per month, for ``gpus`` GPUs doing ``useful_hours`` of work (utilisation x hours in a month):

* on demand: you pay the hours you use at the on-demand price;
* spot: the spot price, for the useful hours plus what preemptions waste (Daly's expected waste
  for the spot MTBF and the checkpoint cost at Daly's interval, estimate/checkpoint_interval.py);
* owned: the purchase (capex) up front, then power (GPU TDP x a node-overhead factor x PUE x
  $/kWh, all hours: an owned cluster draws power whether busy or not, at ``idle_power`` when
  idle), staff and colocation per month.

The break-even month is the first month where the owned cluster's cumulative cost falls below
renting's. The commonly quoted example: 8 H100s on demand at $98/h (12.25 per GPU-hour) against
64 H100s bought for $2.5M.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import field_ref, require
from gpuplan.estimate.checkpoint_interval import (
    NO_PROGRESS,
    daly_interval,
    expected_waste_fraction,
    require_checkpoint_fits,
)

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class TCOInput:
    gpus: int
    on_demand_per_gpu_hour: float
    spot_per_gpu_hour: float | None = None
    spot_mtbf_s: float = 24 * 3600.0
    checkpoint_cost_s: float = 60.0
    restart_s: float = 600.0
    capex: float = 0.0  # purchase of the owned cluster
    tdp_w: float = 700.0  # per GPU
    node_overhead: float = 1.5  # CPUs, NICs, fans, storage on top of the GPUs' power
    idle_power: float = 0.3  # share of busy power drawn when idle
    pue: float = 1.3
    usd_per_kwh: float = 0.10
    staff_per_month: float = 0.0
    colo_per_month: float = 0.0
    utilisation: float = 0.8
    months: int = 36

    def __post_init__(self) -> None:
        require(self.gpus >= 1, "gpus", f"must be at least 1, got {self.gpus}")
        require(0 < self.utilisation <= 1, "utilisation", f"must be in (0, 1], got {self.utilisation}")
        require(self.months >= 1, "months", "must be at least 1")
        for name in (
            "on_demand_per_gpu_hour",
            "capex",
            "tdp_w",
            "pue",
            "usd_per_kwh",
            "staff_per_month",
            "colo_per_month",
        ):
            require(getattr(self, name) >= 0, name, "must not be negative")


def tco(x: TCOInput) -> dict:
    useful_h = x.gpus * HOURS_PER_MONTH * x.utilisation
    on_demand = useful_h * x.on_demand_per_gpu_hour
    spot = waste = None
    if x.spot_per_gpu_hour is not None:
        require_checkpoint_fits(x.checkpoint_cost_s, x.spot_mtbf_s, "preemptions")
        tau = daly_interval(x.checkpoint_cost_s, x.spot_mtbf_s)
        waste = expected_waste_fraction(tau, x.checkpoint_cost_s, x.spot_mtbf_s, x.restart_s)
        require(
            waste < NO_PROGRESS,
            "spot_mtbf",
            f"with a preemption every {x.spot_mtbf_s:g} s, checkpoints of "
            f"{x.checkpoint_cost_s:g} s and restarts of {x.restart_s:g} s, spot capacity does no work",
            f"use a longer {field_ref('spot_mtbf')} or a faster {field_ref('checkpoint_cost')}",
        )
        spot = useful_h / (1 - waste) * x.spot_per_gpu_hour
    busy_kw = x.gpus * x.tdp_w * x.node_overhead / 1000 * x.pue
    kwh = busy_kw * HOURS_PER_MONTH * (x.utilisation + (1 - x.utilisation) * x.idle_power)
    owned_monthly = kwh * x.usd_per_kwh + x.staff_per_month + x.colo_per_month
    rows, cum = [], {"on_demand": 0.0, "spot": 0.0, "owned": x.capex}
    breakeven: dict[str, int | None] = {"on_demand": None, "spot": None}
    for month in range(1, x.months + 1):
        cum["on_demand"] += on_demand
        cum["owned"] += owned_monthly
        if spot is not None:
            cum["spot"] += spot
        for k in ("on_demand", "spot"):
            if breakeven[k] is None and (k == "on_demand" or spot is not None) and cum["owned"] <= cum[k]:
                breakeven[k] = month
        rows.append({"month": month, **{k: v for k, v in cum.items() if k != "spot" or spot is not None}})
    return {
        "gpus": x.gpus,
        "useful_gpu_hours_per_month": useful_h,
        "monthly": {"on_demand": on_demand, "spot": spot, "owned_running": owned_monthly, "owned_capex": x.capex},
        "spot_waste_fraction": waste,
        "breakeven_month": breakeven,
        "cumulative": rows,
    }
