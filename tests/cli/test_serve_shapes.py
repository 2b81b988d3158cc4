"""`serve` for today's serving shapes: DP attention for MLA models, disaggregated prefill/decode."""

import json

from cli_runner import run

V3 = ["serve", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--weights", "fp8", "--max-throughput", "--json"]


def test_dp_attention_holds_more_sequences_of_an_mla_model(capsys):
    code, out, _ = run(V3, capsys)
    assert code == 0
    tp = json.loads(out)
    code, out, _ = run([*V3, "--dp-attention"], capsys)
    assert code == 0
    dp = json.loads(out)
    assert dp["dp_attention"] is True and dp["max_concurrency"] > 4 * tp["max_concurrency"]
    assert dp["memory"]["per_gpu"]["weights"] > tp["memory"]["per_gpu"]["weights"]


def test_dp_attention_on_a_model_without_mla_is_refused_in_one_line(capsys):
    code, _, err = run(["serve", "llama-3.1-8b", "--dp-attention"], capsys)
    assert code == 2 and "dp_attention" in err and "Traceback" not in err


def test_disaggregated_pools_report_the_ratio_and_cost(capsys):
    args = ["serve", "llama-3.1-70b", "--tp", "4", "--weights", "fp8", "--kv", "fp8", "--disaggregate"]
    code, out, _ = run([*args, "--ttft-slo", "1s", "--itl-slo", "50ms", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    n_p, n_d = map(int, doc["ratio_p_to_d"].split(":"))
    assert doc["gpus"] == (n_p + n_d) * 4 and doc["cost_per_million_output_tokens"] > 0
    assert doc["decode"]["itl_s"] <= 0.05 and doc["prefill"]["ttft_s"] <= 1.0 + 1e-9
    code, out, _ = run([*args, "--ttft-slo", "1s", "--itl-slo", "50ms"], capsys)
    assert code == 0 and "P:D" in out
    code, _, err = run([*args, "--ttft-slo", "1s"], capsys)
    assert code == 2 and "--itl-slo" in err


def test_validate_serving_kv_reports_the_held_out_rows(capsys):
    code, out, _ = run(["validate", "serving-kv", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["summary"]["rows"] == len(doc["rows"]) >= 7


def test_disaggregate_refuses_flags_it_would_drop(capsys):
    args = ["serve", "llama-3.1-8b", "--disaggregate", "--ttft-slo", "1s", "--itl-slo", "50ms", "--concurrency", "8"]
    code, _, err = run(args, capsys)
    assert code == 2 and "--concurrency" in err


def test_disaggregate_refuses_a_proposer_it_would_ignore(capsys):
    r1 = ["serve", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--weights", "fp8"]
    llama = ["serve", "llama-3.1-70b", "--tp", "4", "--weights", "fp8"]
    for args, flag in ((r1, ["--mtp"]), (llama, ["--ngram"]), (llama, ["--draft-model", "llama-3.2-1b"])):
        code, out, err = run([*args, "--disaggregate", "--ttft-slo", "1s", "--itl-slo", "50ms", *flag], capsys)
        assert code == 2 and flag[0] in err and "Traceback" not in err and out == ""


def test_prefill_tp_without_disaggregate_is_refused(capsys):
    code, _, err = run(["serve", "llama-3.1-8b", "--prefill-tp", "2"], capsys)
    assert code == 2 and "--disaggregate" in err


def test_the_activation_peak_says_which_profiling_phase_sets_it(capsys):
    # a 32B model's 8,192-token forward holds less than vLLM's sampler over 1,024 rows of Qwen3's
    # 151,936-token vocabulary: the table names the sampler, the JSON gives both phases
    args = ["serve", "qwen3-32b", "--engine", "vllm", "--input-len", "2000", "--output-len", "100"]
    code, out, _ = run([*args, "--json"], capsys)
    assert code == 0
    mem = json.loads(out)["memory"]
    phases = mem["activation_phases"]
    assert mem["sampled_rows"] == 1024 and phases["sampler"] > phases["forward"]
    assert mem["per_gpu"]["activations"] == max(phases.values())
    code, out, _ = run(args, capsys)
    assert code == 0 and "sampler over 1,024 rows x 151,936 logits" in out
    # the pool's seats are counted at the whole length, the running sequences at what they hold
    assert "sequences of 2,100 tokens" in out and "x 2050 tokens" in out
    # a long forward budget on a small vocabulary: the forward is the peak
    code, out, _ = run(["serve", "llama-3.1-8b", "--max-batched-tokens", "65536", "--json"], capsys)
    assert code == 0
    phases = json.loads(out)["memory"]["activation_phases"]
    assert phases["forward"] > phases["sampler"]
