"""TCO: the quoted example (8 H100s at $98/h on demand vs 64 H100s bought for $2.5M)."""

import math

import pytest

from gpuplan.cluster.tco import HOURS_PER_MONTH, TCOInput, tco


def test_owning_breaks_even_when_capex_is_paid_back_by_the_monthly_saving():
    x = TCOInput(gpus=64, on_demand_per_gpu_hour=98 / 8, capex=2.5e6, staff_per_month=20_000, utilisation=0.8)
    r = tco(x)
    rent = 64 * HOURS_PER_MONTH * 0.8 * 98 / 8
    assert r["monthly"]["on_demand"] == pytest.approx(rent)
    saving = rent - r["monthly"]["owned_running"]
    assert r["breakeven_month"]["on_demand"] == math.ceil(2.5e6 / saving)


def test_spot_pays_for_its_preemptions_and_rarely_preempted_spot_wastes_less():
    base = dict(gpus=8, on_demand_per_gpu_hour=12.0, spot_per_gpu_hour=4.0, checkpoint_cost_s=60)
    often, rarely = tco(TCOInput(**base, spot_mtbf_s=3600)), tco(TCOInput(**base, spot_mtbf_s=86400))
    assert often["spot_waste_fraction"] > rarely["spot_waste_fraction"] > 0
    assert often["monthly"]["spot"] > rarely["monthly"]["spot"] > 8 * HOURS_PER_MONTH * 0.8 * 4.0
