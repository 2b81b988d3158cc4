"""Young's and Daly's intervals, and Daly's expected waste against a simulated job."""

import math

import numpy as np
import pytest

from gpuplan.cluster.montecarlo import simulate_waste
from gpuplan.estimate.checkpoint_interval import daly_interval, expected_waste_fraction, young_interval


def test_young_is_sqrt_2cm_and_daly_corrects_it_downwards_for_costly_checkpoints():
    assert young_interval(60, 3.1 * 3600) == pytest.approx(math.sqrt(2 * 60 * 3.1 * 3600))
    c, m = 600, 3600
    assert daly_interval(c, m) < young_interval(c, m)
    assert daly_interval(2 * m, m) == m  # beyond c = 2M the optimum is M


@pytest.mark.parametrize("cost,mtbf,restart", [(60, 3.1 * 3600, 600), (300, 3600, 0), (30, 1800, 120)])
def test_simulated_waste_agrees_with_daly_within_5_percent(cost, mtbf, restart):
    tau = daly_interval(cost, mtbf)
    sim = simulate_waste(400 * 3600, tau, cost, mtbf, restart, seeds=300, seed=1)
    assert np.mean(sim) == pytest.approx(expected_waste_fraction(tau, cost, mtbf, restart), rel=0.05)


def test_dalys_interval_wastes_less_than_ten_times_longer_or_shorter_ones():
    c, m = 60, 3600
    best = expected_waste_fraction(daly_interval(c, m), c, m)
    for k in (0.1, 10):
        assert expected_waste_fraction(k * daly_interval(c, m), c, m) > best


def test_a_job_that_can_never_finish_is_refused_the_same_way_by_every_command():
    # a checkpoint as long as the time between interruptions never completes, and restarts as long
    # leave no time to work: checkpoint-interval, tco's spot and cluster whatif's optimal policy
    # all refuse them (tco took a 2-day checkpoint under 24 h preemptions for 94.8% waste, whatif
    # a 1 h checkpoint under 30 s preemptions; checkpoint-interval a 1000-day restart at 100%)
    from gpuplan.cluster.tco import TCOInput, tco
    from gpuplan.cluster.whatif import loss
    from gpuplan.errors import GpuplanError
    from gpuplan.estimate.checkpoint_interval import intervals

    with pytest.raises(GpuplanError, match="never finish") as e:
        intervals(1.0, 3600.0, restart_s=1000 * 86400.0)
    assert e.value.field == "restart"
    assert intervals(60.0, 3600.0, restart_s=600.0)["expected_waste_fraction"] < 0.5
    with pytest.raises(GpuplanError, match="never finish") as e:
        tco(
            TCOInput(
                gpus=8, on_demand_per_gpu_hour=3.0, capex=1e6, spot_per_gpu_hour=1.0, checkpoint_cost_s=2 * 86400.0
            )
        )
    assert e.value.field == "checkpoint_cost"
    with pytest.raises(GpuplanError, match="never finish") as e:
        loss("optimal", gpus=8, preempt_at_s=3600.0, cost_s=3600.0, restart_s=0.0, price=1.0, mtbf_s=30.0)
    assert e.value.field == "checkpoint_cost"
