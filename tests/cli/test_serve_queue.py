"""`serve` and `serve-sim` with more clients than the engine seats: they run, and say how many wait."""

import json

import pytest
from cli_runner import run

OVER = ["llama-2-7b", "--gpu", "a10g", "--weights", "fp16", "--kv", "fp16", "--input-len", "4000"]


def test_serve_over_capacity_runs_and_reports_the_queue(capsys):
    code, out, _ = run(["serve", *OVER, "--output-len", "96", "--concurrency", "64", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["concurrency"] == 64 and doc["running"] == doc["max_concurrency"] < 64
    assert doc["queued"] == 64 - doc["running"] and doc["queue_wait_s"] > 0
    assert doc["memory"]["fits"] is True
    code, out, _ = run(["serve", *OVER, "--output-len", "96", "--concurrency", "64"], capsys)
    assert code == 0 and f"{doc['queued']} wait in the queue" in out


def test_serve_sim_closed_loop_reports_the_clients_and_the_wait(capsys):
    args = ["serve-sim", "llama-3.1-8b", "--concurrency", "32", "--max-num-seqs", "8", "--requests", "64"]
    code, out, _ = run([*args, "--input-len", "512", "--output-len", "32", "--json"], capsys)
    assert code == 0
    r = json.loads(out)["runs"][0]
    assert r["clients"] == 32 and r["queued_mean"] > 0 and r["requests"] == 64


def test_serve_sim_closed_loop_and_a_rate_are_exclusive(capsys):
    code, _, err = run(["serve-sim", "llama-3.1-8b", "--concurrency", "4", "--rate", "2"], capsys)
    assert code == 2 and "concurrency" in err and "Traceback" not in err


def test_serve_engine_profile_sets_the_pool_rule_and_defaults(capsys):
    base = ["serve", "llama-3.1-70b", "--weights", "fp8", "--kv", "fp8", "--max-throughput", "--json"]
    code, out, _ = run([*base, "--engine", "trtllm"], capsys)
    assert code == 0
    trt = json.loads(out)
    code, out, _ = run(base, capsys)
    generic = json.loads(out)
    assert trt["engine"]["name"] == "trtllm" and trt["engine"]["memory_rule"] == "free"
    assert trt["memory"]["kv_pool"] > 4 * generic["memory"]["kv_pool"]
    code, out, _ = run(["serve", "llama-3.1-8b", "--engine", "sglang"], capsys)
    assert code == 0 and "engine sglang" in out
    code, _, err = run(["serve", "llama-3.1-8b", "--engine", "tgi"], capsys)
    assert code == 2 and "engine" in err and "vllm" in err


def test_serve_says_when_vllms_api_server_sets_the_pace(capsys):
    args = ["serve", "qwen3-0.6b", "--engine", "vllm-async", "--input-len", "512", "--output-len", "128"]
    code, out, _ = run([*args, "--concurrency", "512", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    pace = doc["engine"]["api_server_tokens_per_s"]
    assert doc["output_tokens_per_s"] <= pace * 1.001
    code, out, _ = run([*args, "--concurrency", "512"], capsys)
    assert code == 0 and "API server sets the pace" in out
    # one client: the GPU's pace, no note
    code, out, _ = run([*args, "--concurrency", "1"], capsys)
    assert code == 0 and "API server" not in out
    code, out, _ = run(["serve", "qwen3-0.6b", "--engine", "trtllm", "--json"], capsys)
    assert code == 0 and json.loads(out)["engine"]["api_server_tokens_per_s"] is None


def test_serve_and_serve_sim_seat_the_same_sequences_without_an_engine(capsys):
    # no --engine: both let the KV pool decide how many run (serve-sim capped them at 256 before)
    base = ["llama-3.2-1b", "--input-len", "256", "--output-len", "128-384", "--concurrency", "512"]
    code, out, _ = run(["serve-sim", *base, "--requests", "3000", "--json"], capsys)
    assert code == 0
    sim = json.loads(out)["runs"][0]
    code, out, _ = run(["serve", *base[:3], "--output-len", "256", "--concurrency", "512", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["running"] == 512
    assert sim["output_tokens_per_s"] == pytest.approx(doc["output_tokens_per_s"], rel=0.15)
