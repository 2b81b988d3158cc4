"""The held-out serving set (catalog/validation/held_out/serving_runs.csv): published engine benchmarks
with their full configurations, never fitted to. Every row names its source, none repeats a shared
row, none is refused, and the errors stay no worse than when the rows were added (a regression
guard, NOT the issue's target of median 8% / p90 20%, which this set misses: see the CSV notes)."""

import csv

from gpuplan.serve.validate import CSV as SHARED
from gpuplan.serve.validate_held_out import CSV, METRICS, load_rows, summary, validate_held_out


def _raw():
    with open(CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_every_row_names_its_source_and_tag():
    rows = _raw()
    assert len(rows) >= 40
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source"] and r["url"].startswith("https://"), r["id"]
        assert r["tag"] in ("S", "S2", "D"), r["id"]
        # a derived value says how it was derived; a repository file is cited at a commit
        assert r["tag"] != "D" or "derived" in r["note"], r["id"]
        assert (
            "github.com" not in r["url"]
            or "/blob/" not in r["url"]
            or len(r["url"].split("/blob/")[1].split("/")[0]) == 40
        )
        assert r["metric"] in METRICS and float(r["value"]) > 0, r["id"]


def test_every_row_loads_as_a_serving_request():
    rows = load_rows()
    assert len(rows) == len(_raw())
    assert {r.engine for r in rows} >= {"trtllm", "vllm", "vllm-v0"}
    assert len({r.gpu for r in rows}) >= 5 and {r.tp for r in rows} >= {1, 2, 4, 8}


def test_no_row_repeats_the_shared_validation_set():
    with open(SHARED, newline="") as f:
        shared = {
            (r["model"], r["gpu"], r["tp"], r["input_len"], r["output_len"], float(r["value"]))
            for r in csv.DictReader(f)
        }
    for r in _raw():
        assert (r["model"], r["gpu"], r["tp"], r["input_len"], r["output_len"], float(r["value"])) not in shared, r[
            "id"
        ]


def test_no_configuration_an_engine_ran_is_refused():
    refused = [c.row.id for c in validate_held_out() if c.predicted is None]
    assert refused == []


def test_errors_stay_within_what_was_last_measured():
    # regression guard, not the target: 10.8% median, 51.3% p90, 110% max when added (54 rows);
    # 8.1%, 42.9%, 159% once the all-reduce and NVFP4 fixes landed (issue 18); 7.4%, 34.6%, 65%
    # once the TensorRT-LLM v0.5/v0.6.1 rows ran under the trtllm-0.6 profile (their Llama-2-70B
    # GQA KV read once per query head by the masked MHA kernel before XQA: +107%/+159% -> -13%/-6%);
    # 8.1%, 34.6%, 65% with NCCL's NVLink SHARP on 8 Hopper GPUs (estimate/nccl.py): TP8 rows faster;
    # 7.9% with the H200's own measured FP8 matmul rate (catalog/gpus/h200.toml [mamf])
    # (the kvcached burst row through serve-sim, issue 18: +41.3% -> +40.8%, median and p90 unchanged)
    s = summary(validate_held_out())
    assert s["median_abs_error"] <= 0.08  # the target, met at 7.9%
    assert s["p90_abs_error"] <= 0.36
    assert s["max_abs_error"] <= 0.70
    assert s["by_engine"]["trtllm-0.6"]["max_abs_error"] <= 0.15


def test_a_burst_row_is_predicted_by_serve_sims_burst_not_the_steady_state():
    import math

    from gpuplan.serve.formats import kv_format, weight_format
    from gpuplan.serve.plan import estimate_serving
    from gpuplan.serve.sim import Lengths, Workload, simulate
    from gpuplan.serve.timing import Deployment
    from gpuplan.serve.validate_held_out import predict

    row = next(r for r in load_rows() if r.id == "kvcached-vllm019-qwen3-0.6b-h100-512-128")
    q = row.request
    # vllm bench serve sets no --max-num-seqs: the engine's default holds (1024 on an H100)
    assert row.num_prompts == 500 and q.config.max_num_seqs == 1024
    d = Deployment(q.model, q.gpu, weight_format(q.weights, q.gpu), kv_format(q.kv, q.gpu), q.tp)
    w = Workload.burst(500, Lengths.parse("512", "i"), Lengths.parse("128", "o"))
    burst = simulate(d, q.config, w, math.inf)
    assert predict(row) == burst.output_tokens / burst.makespan_s
    assert predict(row) != estimate_serving(q).point.output_tokens_per_s
    assert all(r.num_prompts is None for r in load_rows() if r.id != row.id)


def test_the_num_prompts_column_is_optional_and_required_only_by_burst_rows(tmp_path):
    import pytest

    rows = _raw()
    cols = [c for c in rows[0] if c != "num_prompts"]
    old = tmp_path / "old.csv"
    with open(old, "w", newline="") as f:  # a file from before the column
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(r for r in rows if r["concurrency"] != "burst")
    assert len(load_rows(old)) == len(rows) - 1
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerow(next(r for r in rows if r["concurrency"] == "burst") | {"num_prompts": ""})
    with pytest.raises(ValueError, match="num_prompts"):
        load_rows(bad)
