"""The pictures: what each draws from the document, in the units it says."""

import pytest

from gpuplan.report.figures import figures, pareto, pipeline_timeline
from gpuplan.units import GiB


def test_the_pareto_front_keeps_only_plans_no_other_beats_on_both_time_and_cost():
    pts = [(1.0, 5.0), (2.0, 3.0), (2.5, 4.0), (3.0, 1.0), (4.0, 1.0)]
    assert pareto(pts) == [0, 1, 3]


def test_memory_bars_stack_per_stage_to_the_stage_total_in_gib():
    stage = {
        "stage": 0,
        "layers": 4,
        "weights": 2 * GiB,
        "gradients": 1 * GiB,
        "optimizer": 0.0,
        "master_weights": 0.0,
        "activations": 3 * GiB,
        "other": 1 * GiB,
        "total": 7 * GiB,
    }
    doc = {"memory": {"stages": [stage, {**stage, "stage": 1}], "gpu_capacity": 80 * GiB,
                      "per_gpu": stage}}  # fmt: skip
    (fig,) = [f for f in figures("train", doc) if "Memory" in f["layout"]["title"]["text"]]
    assert sum(t["y"][1] for t in fig["data"]) == pytest.approx(7.0)
    assert fig["layout"]["shapes"][0]["y0"] == pytest.approx(80.0)  # capacity line


def test_a_pipeline_timeline_grows_with_its_ranks_and_names_its_time_unit():
    ranks = 64
    doc = {"stages": ranks, "microbatches": 1, "schedule": "1f1b", "bubble_fraction": 0.5,
           "costs": {"unit_s": 1e-3},
           "events": {"rank": list(range(ranks)), "kind": ["F"] * ranks, "start": [float(r) for r in range(ranks)],
                      "end": [r + 1.0 for r in range(ranks)], "microbatch": ["0"] * ranks}}  # fmt: skip
    fig = pipeline_timeline(doc)
    assert fig["layout"]["height"] >= 16 * ranks  # a readable row per rank
    assert fig["layout"]["xaxis"]["title"]["text"] == "time (ms)"
    assert len(fig["layout"]["yaxis"]["categoryarray"]) == ranks


def test_a_figure_whose_keys_are_missing_is_left_out_rather_than_failing():
    assert figures("train", {"memory": {}}) == []


def test_a_figure_with_a_nan_is_left_out_so_the_page_json_stays_valid():
    doc = {"mtbf_s": float("nan"), "cost_s": 60.0, "restart_s": 0.0, "daly_s": 1.0, "young_s": 1.0,
           "expected_waste_fraction": 0.1, "expected_waste_fraction_young": 0.1}  # fmt: skip
    assert figures("checkpoint-interval", doc) == []


def test_closed_loop_serve_sim_runs_are_placed_at_the_rate_they_achieved():
    # --concurrency and trace runs offer no rate (0): they sit at their completed requests/s
    pct = {"p50": 0.01, "p90": 0.02, "p99": 0.03, "mean": 0.015}
    runs = [
        {"rate": 0.0, "requests_per_s": 5.7, "ttft_s": pct, "itl_s": pct, "e2e_s": pct},
        {"rate": 2.0, "requests_per_s": 2.0, "ttft_s": pct, "itl_s": pct, "e2e_s": pct},
    ]
    (fig,) = [f for f in figures("serve-sim", {"runs": runs}) if "percentiles" in f["layout"]["title"]["text"]]
    assert fig["data"][0]["x"] == [2.0, 5.7]
