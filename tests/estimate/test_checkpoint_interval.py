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
