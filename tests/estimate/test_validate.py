"""The performance model against the published training runs it is calibrated on."""

import pytest

from gpuplan.estimate.validate import load_rows, megatron_flops, summary, validate_training


def test_published_runs_are_predicted_within_the_targets():
    results = validate_training()
    s = summary(results)
    assert s["rows"] == 18
    assert s["mean_abs_error"] <= 0.08, s
    assert s["max_abs_error"] <= 0.15, [(r.row.id, round(r.error, 3)) for r in results]


def test_tflops_rows_become_step_times_with_the_sources_formula():
    row = next(r for r in load_rows() if r.id == "nar21-1008b")
    # 1T: 128 layers, h=25600, 3072 sequences of 2048, 3072 GPUs at 163 TFLOP/s
    flops = megatron_flops(3072, 2048, 128, 25600, 51200)
    assert row.measured_step_s == pytest.approx(flops / (3072 * 163e12))
    assert 100 < row.measured_step_s < 105


def test_unstated_micro_batch_and_interleaving_take_the_defaults():
    row = next(r for r in load_rows() if r.id == "nar21-145.6b")
    assert row.config.micro_batch == 1 and row.plan.vp == 1
    assert row.microbatches == 2304 // 24
