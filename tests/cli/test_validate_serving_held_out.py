"""`validate serving-held-out` reports every held-out serving row, and predicts each as `serve` would."""

import json

from cli_runner import run

from gpuplan.serve.validate_held_out import load_rows


def test_validate_serving_held_out_reports_every_row(capsys, held_out_once):
    code, out, _ = run(["validate", "serving-held-out", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert len(doc["rows"]) == len(load_rows()) == doc["summary"]["rows"]
    assert all(r["url"].startswith("https://") for r in doc["rows"])
    assert set(doc["summary"]["by_engine"]) >= {"trtllm", "vllm", "vllm-v0", "sglang"}
    curve = [r for r in doc["rows"] if r["load"] == "poisson"]
    assert curve and all(r["rate"] > 0 and r["num_prompts"] >= 1 for r in curve)
    assert set(doc["summary"]["by_load"]) == {"steady", "burst", "poisson"}
    metrics = {"ttft_ms", "itl_ms", "mean_itl_ms", "output_tokens_per_s", "e2e_latency_ms"}
    assert set(doc["summary"]["poisson_by_metric"]) == metrics
    code, out, _ = run(["validate", "serving-held-out"], capsys)
    assert code == 0 and "median |error|" in out and "poisson ttft_ms" in out


def test_a_row_is_predicted_as_serve_prints_it(capsys, held_out_once):
    code, out, _ = run(["validate", "serving-held-out", "--json"], capsys)
    row = next(r for r in json.loads(out)["rows"] if r["id"] == "nim18-70b-h100-tp2-5000-500-c250-ttft")
    args = [
        "serve",
        "llama-3.1-70b",
        "--gpu",
        "h100-sxm",
        "--tp",
        "2",
        "--weights",
        "fp8",
        "--kv",
        "fp8",
        "--engine",
        "trtllm",
    ]
    args += ["--input-len", "5000", "--output-len", "500", "--concurrency", "250", "--json"]
    code, out, _ = run(args, capsys)
    assert code == 0
    assert abs(json.loads(out)["ttft_s"] * 1e3 / row["predicted"] - 1) < 1e-9


def test_validate_serving_runs_rows_under_their_engine_and_generic_on_request(capsys):
    code, out, _ = run(["validate", "serving", "--json"], capsys)
    profiled = json.loads(out)
    code2, out, _ = run(["validate", "serving", "--generic", "--json"], capsys)
    generic = json.loads(out)
    assert code == code2 == 0 and len(profiled["rows"]) == len(generic["rows"]) == 16
    trt = [i for i, r in enumerate(profiled["rows"]) if r["source"].startswith("TensorRT-LLM")]
    assert any(profiled["rows"][i]["predicted"] != generic["rows"][i]["predicted"] for i in trt)
    code, _, err = run(["validate", "training", "--generic"], capsys)
    assert code == 2 and "generic" in err and len(err.strip().splitlines()) == 1
