"""The offload validation set is read, predicted and its errors computed (not tuned)."""

import csv
import statistics

from gpuplan.estimate.offload_validate import CSV, summary, validate_offload


def test_every_row_is_predicted_and_its_error_is_predicted_over_measured_minus_one():
    with open(CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    checks = validate_offload()
    assert [c.id for c in checks] == [r["id"] for r in rows]
    for c, r in zip(checks, rows):
        assert r["source"] and c.measured == float(r["value"])
        assert c.predicted > 0
        assert c.error == c.predicted / float(r["value"]) - 1
    own = [abs(c.predicted / c.measured - 1) for c in checks if c.kind != "baseline"]
    s = summary(checks)
    assert s["median_abs_error"] == statistics.median(own)
    assert s["min_baseline_margin"] >= 0  # the placement chosen is no slower than the baselines'
