"""The CLI: the JSON contract, the worked example, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest
from cli_runner import run
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuplan.units import DAY

EXAMPLE = [
    "train",
    "llama-3.1-70b",
    "--gpu",
    "h100-sxm",
    "--gpus",
    "64",
    "--tp",
    "8",
    "--pp",
    "2",
    "--zero",
    "1",
    "--seq-len",
    "8192",
    "--global-batch",
    "512",
    "--tokens",
    "2T",
    "--recompute",
    "selective",
    "--price",
    "3.0",
    "--mfu",
    "0.4",
]


def test_train_json_has_the_contract_keys(capsys):
    code, out, _ = run(EXAMPLE + ["--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    for key in ("params_total", "params_active"):
        assert doc["model"][key] > 0
    per_gpu = doc["memory"]["per_gpu"]
    parts = ("weights", "gradients", "optimizer", "master_weights", "activations", "other")
    assert per_gpu["total"] == pytest.approx(sum(per_gpu[k] for k in parts))
    for key in ("model_states_total", "gpu_capacity", "fits"):
        assert key in doc["memory"]
    for key in ("per_token", "total"):
        assert doc["flops"][key] > 0
    for key in ("step_s", "total_s", "days"):
        assert doc["time"][key] > 0
    for key in ("gpu_hours", "cost_usd", "mfu", "tokens_per_s_per_gpu"):
        assert doc[key] > 0


def test_worked_example_fits_and_its_time_follows_from_its_flops(capsys):
    _, out, _ = run(EXAMPLE + ["--json"], capsys)
    doc = json.loads(out)
    assert doc["memory"]["fits"]
    assert doc["plan"]["dp"] == 4
    # time = total model FLOPs / (GPUs x bf16 peak x MFU); cost = GPU-hours x $3
    expected_s = doc["flops"]["total"] / (64 * 989.4e12 * 0.4)
    assert doc["time"]["total_s"] == pytest.approx(expected_s)
    assert doc["cost_usd"] == pytest.approx(64 * expected_s / 3600 * 3.0)


def test_3_8e25_flops_on_16000_h100_at_400_tflops_takes_69_days_not_61():
    from gpuplan.estimate.time import training_days

    assert training_days(3.8e25, 16_000, 400e12) == pytest.approx(68.7, abs=0.1)
    assert training_days(3.8e25, 16_000, 400e12) * DAY > 61 * DAY


def test_plan_that_does_not_fit_says_by_how_much_and_what_fixes_it(capsys):
    args = ["train", "llama-3.1-70b", "--gpus", "8", "--tp", "8", "--seq-len", "8192", "--mfu", "0.4", "--json"]
    _, out, _ = run(args, capsys)
    doc = json.loads(out)
    assert not doc["memory"]["fits"]
    assert doc["memory"]["headroom"] < 0
    assert doc["suggestions"], "a plan over capacity must come with suggestions"
    fitting = [s for s in doc["suggestions"] if s["fits"]]
    assert all(s["total_bytes"] <= doc["memory"]["gpu_capacity"] for s in fitting)
    _, text, _ = run(args[:-1], capsys)
    assert "does not fit" in text and "over by" in text and "try --" in text


def test_models_and_gpus_list_the_catalogs_as_json(capsys):
    _, out, _ = run(["models", "--json"], capsys)
    ids = {m["id"] for m in json.loads(out)}
    assert {"llama-3.1-405b", "deepseek-v3", "mixtral-8x7b", "bloom-176b"} <= ids
    _, out, _ = run(["gpus", "--json"], capsys)
    gpus = {g["id"]: g for g in json.loads(out)}
    assert {"h100-sxm", "h200", "b200", "gb200", "mi300x", "mi325x", "rtx-4090", "a10g"} <= set(gpus)
    assert gpus["h100-sxm"]["peak_flops"]["bf16"] == pytest.approx(989.4e12)  # dense, not sparse


def test_config_json_path_is_accepted(tmp_path, capsys):
    from gpuplan import catalog

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(catalog.model_entry("qwen2.5-7b")["config"]))
    code, out, _ = run(["train", str(cfg), "--gpus", "8", "--zero", "1", "--mfu", "0.4", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["model"]["params_total"] == 7_615_616_512


@pytest.mark.parametrize(
    "args,field",
    [
        (["train", "llama-3.1-70bb", "--mfu", "0.4"], "model"),
        (["train", "llama-3.1-70b", "--gpu", "h1000", "--mfu", "0.4"], "gpu"),
        (["train", "llama-3.1-70b", "--gpus", "3", "--tp", "3", "--mfu", "0.4"], "tp"),
        (["train", "llama-3.1-70b", "--gpus", "80", "--tp", "10", "--mfu", "0.4"], "tp"),
        (["train", "llama-3.1-70b", "--gpus", "96", "--pp", "96", "--mfu", "0.4"], "pp"),
        (["train", "llama-3.1-70b", "--gpus", "64", "--tp", "8", "--dp", "3", "--mfu", "0.4"], "dp"),
        (["train", "llama-3.1-70b", "--seq-len", "0", "--mfu", "0.4"], "seq_len"),
        (["train", "llama-3.1-70b", "--tokens", "-2T", "--mfu", "0.4"], "tokens"),
        (["train", "llama-3.1-70b", "--mfu", "1.5"], "mfu"),
        (["train", "llama-3.1-70b", "--gpus", "24", "--pp", "3", "--schedule", "dualpipe"], "pp"),
        (["train", "llama-3.1-70b", "--rank-order", "tp-dp-pp"], "order"),
        (["train", "llama-3.1-70b", "--gpus", "8", "--ep", "2", "--mfu", "0.4"], "ep"),
        (["train", "llama-3.1-70b", "--precision", "fp8", "--gpu", "a100-sxm-80gb", "--mfu", "0.4"], "precision"),
    ],
)
def test_bad_input_is_one_line_naming_the_field_with_exit_code_2(args, field, capsys):
    code, out, err = run(args, capsys)
    assert code == 2
    assert err.startswith(f"error: {field}") and err.count("\n") == 1
    assert "Traceback" not in err


def test_malformed_and_unsupported_config_json(tmp_path, capsys):
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"model_type": "llama", "hidden_size": 64')
    code, _, err = run(["train", str(truncated), "--mfu", "0.4"], capsys)
    assert code == 2 and "not valid JSON" in err
    missing = tmp_path / "missing.json"
    missing.write_text('{"model_type": "llama", "hidden_size": 64}')
    code, _, err = run(["train", str(missing), "--mfu", "0.4"], capsys)
    assert code == 2 and "num_attention_heads" in err and "missing" in err
    t5 = tmp_path / "t5.json"
    t5.write_text('{"model_type": "t5"}')
    code, _, err = run(["train", str(t5), "--mfu", "0.4"], capsys)
    assert code == 2 and "llama" in err and "deepseek_v3" in err  # lists the supported ones


def test_unknown_flag_is_one_line_not_a_usage_box(capsys):
    code, _, err = run(["train", "llama-3.1-70b", "--bogus"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--bogus" in err


@pytest.mark.parametrize(
    "args, help",
    [
        (["cluster", "bogus"], "gpuplan cluster --help"),
        (["cluster", "sim", "--bogus"], "gpuplan cluster sim --help"),
        (["train", "llama-3.1-70b", "--bogus"], "gpuplan train --help"),
        (["bogus"], "gpuplan --help"),
    ],
)
def test_a_usage_error_points_at_the_help_of_a_command_that_exists(capsys, args, help):
    code, _, err = run(args, capsys)
    assert code == 2 and err.rstrip().endswith(f"see `{help}`")


ints = st.one_of(st.integers(-3, 300), st.sampled_from([0, 1, 2, 4, 8, 16, 64]))
texts = st.one_of(st.sampled_from(["2T", "15.6e12", "300B", "-1", "abc", "0", "1e400", "nan"]), st.text(max_size=6))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    gpus=ints,
    tp=ints,
    pp=ints,
    cp=ints,
    zero=st.integers(-1, 4),
    seq=ints,
    mb=ints,
    gb=ints,
    tokens=texts,
    mfu=st.one_of(st.floats(-1, 2), st.just(float("nan"))),
    model=st.sampled_from(["llama-3.1-8b", "mixtral-8x7b", "nope", "gpt2"]),
    recompute=st.sampled_from(["none", "selective", "full", "bogus"]),
)
def test_cli_never_crashes_on_any_input(capsys, gpus, tp, pp, cp, zero, seq, mb, gb, tokens, mfu, model, recompute):
    args = [
        "train",
        model,
        "--gpus",
        str(gpus),
        "--tp",
        str(tp),
        "--pp",
        str(pp),
        "--cp",
        str(cp),
        "--zero",
        str(zero),
        "--seq-len",
        str(seq),
        "--micro-batch",
        str(mb),
        "--global-batch",
        str(gb),
        "--tokens",
        tokens,
        "--mfu",
        str(mfu),
        "--recompute",
        recompute,
        "--json",
    ]
    code, out, err = run(args, capsys)
    assert code in (0, 2, 3), err
    if code in (2, 3):
        assert err.startswith("error: ") and err.count("\n") == 1
    else:
        json.loads(out)


def test_import_gpuplan_does_not_import_torch_or_the_cli():
    code = (
        "import sys, gpuplan, gpuplan.estimate.train; assert 'torch' not in sys.modules; "
        "assert 'gpuplan.cli' not in sys.modules; assert 'typer' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_train_without_mfu_predicts_step_time_and_shows_where_it_goes(capsys):
    code, out, err = run(
        [
            "train",
            "llama-3.1-70b",
            "--gpus",
            "64",
            "--tp",
            "8",
            "--pp",
            "2",
            "--zero",
            "1",
            "--seq-len",
            "8192",
            "--global-batch",
            "512",
            "--recompute",
            "selective",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    perf = doc["performance"]
    assert doc["mfu_source"] == "predicted"
    assert doc["time"]["step_s"] == pytest.approx(perf["step_s"])
    assert sum(perf["breakdown_s"].values()) == pytest.approx(perf["step_s"])
    assert perf["comm"]["tp"]["bytes_per_gpu"] > 0 and perf["comm"]["dp"]["hidden_s"] > 0
    assert 0.2 < doc["mfu"] < 0.8


def test_search_json_ranks_plans_with_train_keys(capsys):
    code, out, err = run(
        [
            "search",
            "llama-3.1-8b",
            "--gpus",
            "16",
            "--seq-len",
            "4096",
            "--global-batch",
            "256K",
            "--top",
            "3",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["plans"]) == 3
    assert doc["plans"][0]["training"]["global_batch"] == 64  # 256K tokens = 64 x 4096 (binary suffix)
    steps = [p["time"]["step_s"] for p in doc["plans"]]
    assert steps == sorted(steps)
    assert doc["feasible"] + sum(doc["rejected"].values()) == doc["considered"]


def test_validate_json_reports_every_published_row(capsys):
    code, out, err = run(["validate", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["rows"]) == doc["summary"]["rows"] >= 33 and doc["summary"]["mean_abs_error"] <= 0.08
    assert sum(c["rows"] for c in doc["categories"]) == len(doc["rows"])


def test_validate_training_held_out_reports_the_runs_never_fitted_to(capsys):
    code, out, err = run(["validate", "training-held-out", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert {r["source"].split()[0] for r in doc["rows"]} == {
        "NeMo",
        "Megatron-Bridge",
        "torchtitan",
        "dgxc-benchmarking",
    }
    assert not {r["id"] for r in doc["rows"]} & {
        r["id"] for r in json.loads(run(["validate", "--json"], capsys)[1])["rows"]
    }


def test_validate_training_held_out_reports_peak_memory_in_both_outputs(capsys):
    # torchtitan's pages publish each run's peak reserved memory: the rows carry it, the summary
    # line and the JSON summarise its error
    code, out, err = run(["validate", "training-held-out", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    mem = [r for r in doc["rows"] if r["measured_peak_bytes"]]
    assert doc["peak_memory"]["rows"] == len(mem) == 20
    assert all(r["memory_measure"] == "reserved" and r["memory_error"] is not None for r in mem)
    code, out, err = run(["validate", "training-held-out"], capsys)
    assert code == 0, err
    pct = doc["peak_memory"]["mean_abs_error"]
    assert f"peak memory: 20 rows, mean |error| {pct:.1%}, max {doc['peak_memory']['max_abs_error']:.1%}" in out


def test_collective_reports_the_ring_volume(capsys):
    code, out, err = run(["collective", "all-reduce", "--size", "1G", "--ranks", "8", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["volume_factor"] == pytest.approx(2 * 7 / 8)


@pytest.mark.parametrize(
    "args,field",
    [
        (["search", "llama-3.1-8b", "--gpus", "16", "--seq-len", "4096", "--global-batch", "0"], "global_batch"),
        (["collective", "all-sum", "--ranks", "8"], "collective"),
    ],
)
def test_search_and_collective_bad_input_exit_2(args, field, capsys):
    code, out, err = run(args, capsys)
    assert code == 2
    assert err.count("\n") == 1 and field in err


SERVE = [
    "serve",
    "llama-3.1-8b",
    "--gpu",
    "h100-sxm",
    "--tp",
    "1",
    "--weights",
    "fp8",
    "--kv",
    "fp8",
    "--input-len",
    "2048",
    "--output-len",
    "256",
    "--price",
    "3.0",
]


def test_serve_json_has_the_contract_keys(capsys):
    code, out, _ = run(SERVE + ["--concurrency", "16", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    per = doc["memory"]["per_gpu"]
    assert per["total"] == pytest.approx(sum(per[k] for k in ("weights", "kv_cache", "activations", "other")))
    assert doc["memory"]["fits"] is True
    assert doc["kv_bytes_per_token"] == 32 * 8 * 128 * 2  # fp8: 32 layers x 8 KV heads x (K+V) x 128
    for key in (
        "max_concurrency",
        "ttft_s",
        "tpot_s",
        "output_tokens_per_s",
        "cost_per_million_input_tokens",
        "cost_per_million_output_tokens",
    ):
        assert doc[key] > 0


def test_serve_max_throughput_and_human_output(capsys):
    code, out, _ = run(SERVE + ["--max-throughput", "--ngram"], capsys)
    assert code == 0
    assert "Throughput vs concurrency" in out and "speculative" in out


def test_serve_sim_json_and_slo_search(capsys):
    code, out, _ = run(
        [
            "serve-sim",
            "llama-3.1-8b",
            "--weights",
            "fp8",
            "--kv",
            "fp8",
            "--rate",
            "2",
            "--requests",
            "100",
            "--ttft-slo",
            "1s",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["runs"][0]["requests"] == 100 and doc["slo"]["max_rate"] > 2


def test_validate_serving_prints_the_median_error(capsys):
    code, out, _ = run(["validate", "serving", "--json"], capsys)
    assert code == 0 and json.loads(out)["summary"]["median_abs_error"] <= 0.15


@pytest.mark.parametrize(
    "args,field",
    [
        (["serve", "llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--weights", "fp8"], "weights"),
        (["serve", "llama-3.1-8b", "--tp", "3"], "tp"),
        (["serve", "llama-2-7b", "--input-len", "8000"], "input_len"),
        (["serve", "llama-3.1-8b", "--weights", "int3"], "weights"),
        (["serve-sim", "llama-3.1-8b", "--rate", "fast"], "rate"),
        (["serve-sim", "llama-3.1-8b", "--rate", "1", "--input-len", "0"], "input_len"),
    ],
)
def test_bad_serving_input_is_one_line_naming_the_field(args, field, capsys):
    code, _, err = run(args, capsys)
    assert code == 2
    assert err.startswith(f"error: {field}:") and err.count("\n") == 1


def test_serve_sim_replays_a_trace(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_len,output_len\n0.0,512,32\n0.05,1024,16\n0.5,128,64\n")
    code, out, _ = run(["serve-sim", "llama-3.1-8b", "--trace", str(trace), "--json"], capsys)
    assert code == 0
    run_ = json.loads(out)["runs"][0]
    assert run_["requests"] == 3 and run_["ttft_s"]["p50"] > 0
    code, _, err = run(["serve-sim", "llama-3.1-8b", "--trace", str(tmp_path / "missing.csv")], capsys)
    assert code == 2 and err.startswith("error: trace:")


def test_pipeline_json_trace_and_plot(tmp_path, capsys):
    trace, png = tmp_path / "out.json", tmp_path / "out.png"
    code, out, _ = run(
        [
            "pipeline",
            "--schedule",
            "dualpipev",
            "--stages",
            "8",
            "--microbatches",
            "32",
            "--f",
            "1",
            "--b",
            "2",
            "--w",
            "1",
            "--overlap",
            "3",
            "--p2p",
            "0.05",
            "--trace",
            str(trace),
            "--plot",
            str(png),
            "--json",
        ],
        capsys,
    )
    assert code == 0
    doc = json.loads(out)
    assert len(doc["idle_s"]) == 8 and len(doc["peak_activations"]) == 8
    assert doc["makespan_s"] > 0 and 0 < doc["bubble_fraction"] < 1
    events = json.loads(trace.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in complete} == set(range(8)) and {e["tid"] for e in complete} == {0, 1}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    assert sum(e["ph"] == "s" for e in events) == sum(e["ph"] == "f" for e in events) > 0
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in events)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pipeline_accepts_the_full_backward_convention(capsys):
    _, a, _ = run(["pipeline", "--schedule", "zb-h1", "--b", "2", "--w", "1", "--json"], capsys)
    _, b, _ = run(["pipeline", "--schedule", "zb-h1", "--b-full", "3", "--w", "1", "--json"], capsys)
    assert json.loads(a)["makespan_s"] == json.loads(b)["makespan_s"]


@pytest.mark.parametrize(
    "args,field",
    [
        (["pipeline", "--schedule", "dualpipe", "--stages", "5", "--microbatches", "20"], "stages"),
        (["pipeline", "--schedule", "dualpipev", "--stages", "8", "--microbatches", "8"], "microbatches"),
        (["pipeline", "--b", "1", "--b-full", "2"], "b"),
        (["pipeline", "--f", "-1"], "f"),
    ],
)
def test_pipeline_bad_input_exit_2(args, field, capsys):
    code, _, err = run(args, capsys)
    assert code == 2 and err.startswith(f"error: {field}:") and err.count("\n") == 1


def test_experts_json_from_a_loads_file(tmp_path, capsys):
    loads = tmp_path / "loads.csv"
    loads.write_text(
        "e0,e1,e2,e3,e4,e5,e6,e7\n" + "\n".join(",".join(str(10 * (i + 1) ** 2) for i in range(8)) for _ in range(3))
    )
    code, out, _ = run(
        [
            "experts",
            "--loads",
            str(loads),
            "--replicas",
            "12",
            "--gpus",
            "4",
            "--nodes",
            "2",
            "--groups",
            "4",
            "--top-k",
            "2",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    doc = json.loads(out)
    assert len(doc["balance"]) == 3 and doc["balance_mean"] >= 1
    assert all(sum(c) == 12 for c in doc["replica_counts"])
    assert len(doc["phy2log"][0]) == 12 and doc["cross_node"]["remote_nodes_per_token"] > 0


@pytest.mark.parametrize(
    "args,field",
    [
        (["experts"], "loads"),
        (["experts", "--synthetic", "1", "--replicas", "100", "--gpus", "32"], "replicas"),
        (
            ["experts", "--synthetic", "1", "--experts", "64", "--replicas", "64", "--gpus", "8", "--groups", "6"],
            "groups",
        ),
    ],
)
def test_experts_bad_input_exit_2(args, field, capsys):
    code, _, err = run(args, capsys)
    assert code == 2 and err.startswith(f"error: {field}:") and err.count("\n") == 1


def test_whatif_prices_the_motivating_story(capsys):
    code, out, _ = run(
        [
            "cluster",
            "whatif",
            "--gpus",
            "64",
            "--gpu",
            "h100-sxm",
            "--hours",
            "47",
            "--spot",
            "--preempt-at",
            "47h",
            "--checkpoint",
            "none",
            "--checkpoint",
            "1h",
            "--checkpoint",
            "optimal",
            "--price",
            "3.0",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    by = {p["checkpoint"]: p for p in json.loads(out)["policies"]}
    assert by["none"]["lost_usd"] == pytest.approx(64 * (47 + 10 / 60) * 3.0)  # about $9,000 (+ the 10 min restart)
    assert by["1h"]["lost_gpu_hours"] <= 64 * (1 + 600 / 3600) + 1e-9  # at most an interval and the restart
    assert by["optimal"]["lost_usd"] < by["none"]["lost_usd"]


def test_checkpoint_interval_json_and_bad_input(capsys):
    code, out, _ = run(["checkpoint-interval", "--mtbf", "3.1h", "--cost", "60s", "--restart", "10m", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["young_s"] == pytest.approx((2 * 60 * 3.1 * 3600) ** 0.5)
    assert doc["daly_s"] < doc["young_s"] and 0 < doc["expected_waste_fraction"] < 1
    code, _, err = run(["checkpoint-interval", "--mtbf", "-3h", "--cost", "60s"], capsys)
    assert code == 2 and err.startswith("error: mtbf:")


def test_cluster_sim_json(capsys):
    code, out, _ = run(["cluster", "sim", "--gpus", "256", "--jobs", "2000", "--load", "0.9", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["finished"] == 2000 and 0 < doc["utilisation"] <= 1 and doc["goodput"] <= doc["utilisation"]
    assert set(doc["gpu_hours"]) >= {"useful", "checkpoint", "lost_failure", "lost_preemption", "lost_reclaim"}
    code, _, err = run(["cluster", "sim", "--policy", "lottery"], capsys)
    assert code == 2 and err.startswith("error: policy:")
    code, _, err = run(["cluster", "sim", "--node-mtbf", "often"], capsys)
    assert code == 2 and err.startswith("error: node_mtbf:") and "rsc1" in err


def test_cluster_sim_reads_node_models_and_a_reclaim_trace_and_skips_jobs_it_can_never_run(capsys, tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,8,A100\nn1,1,1,2,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1,1,2,1000,T4,LS,Running,0,100,0\n"
        "p1,1,1,1,1000,H100,LS,Running,0,100,0\n"
        "p2,1,1,4,1000,T4,LS,Running,0,100,0\n"
    )
    reclaims = tmp_path / "reclaims.csv"
    reclaims.write_text("time_s,gpus\n50,1\n")
    code, out, _ = run(
        [
            "cluster",
            "sim",
            "--trace",
            str(pods),
            "--nodes-file",
            str(nodes),
            "--reclaims",
            str(reclaims),
            "--node-mtbf",
            "none",
            "--json",
        ],
        capsys,
    )
    doc = json.loads(out)
    assert code == 0 and doc["finished"] == 1 and doc["reclaims"] == 0  # trace jobs are on-demand
    assert doc["skipped"] == {"needs GPU model H100, which no node has": 1, "needs more GPUs than the cluster has": 1}
    reclaims.write_text("time_s,gpus\n3600,64\n")
    code, out, _ = run(
        [
            "cluster",
            "sim",
            "--gpus",
            "256",
            "--jobs",
            "500",
            "--spot-reclaim-per-hour",
            "0",
            "--reclaims",
            str(reclaims),
            "--node-mtbf",
            "rsc1",
            "--json",
        ],
        capsys,
    )
    doc = json.loads(out)
    assert code == 0 and doc["reclaims"] >= 1 and doc["gpu_hours"]["lost_reclaim"] > 0


@pytest.mark.parametrize(
    "args",
    [
        ["train", "llama-3.1-405b", "--gpus", "1"],
        ["serve", "llama-3.1-405b", "--gpu", "h100-sxm"],
        ["search", "llama-3.1-405b", "--gpus", "8", "--seq-len", "8192", "--global-batch", "64"],
    ],
)
def test_a_plan_that_does_not_fit_exits_3_in_train_serve_and_search_alike(args, capsys):
    code, _, err = run(args, capsys)
    assert code == 3
    assert err.startswith("error: ") and err.count("\n") == 1 and "try" in err or "use" in err
    # under --json stdout holds one document saying so, for a script sweeping configurations
    code, out, err = run([*args, "--json"], capsys)
    doc = json.loads(out)
    assert code == 3 and doc["fits"] is False and err.count("\n") == 1
    if "error" in doc:  # serve and search: no report, the error's parts (train prints its report)
        assert doc["error"]["fix"] and doc["error"]["fix"] in err and doc["error"]["message"] in err


def test_a_plan_over_only_by_the_allocator_reserve_is_a_warning_not_a_refusal(capsys):
    # dgxc-benchmarking's Llama 3.1 405B BF16 layout on 512 H100s ran (19.81 s a step); its
    # allocated peak fits the 80 GB part, the usual allocator reserve does not
    args = ["train", "llama-3.1-405b", "--gpu", "h100-sxm", "--gpus", "512", "--tp", "8", "--pp", "8", "--cp", "2"]
    args += ["--vp", "8", "--first-stage-layers", "15", "--last-stage-layers", "15", "--seq-len", "8192"]
    args += ["--global-batch", "256", "--framework", "nemo", "--zero", "1"]
    code, out, _ = run([*args, "--json"], capsys)
    mem = json.loads(out)["memory"]
    assert code == 0 and not mem["fits"] and mem["tight"]
    reserve = mem["per_gpu"]["other_breakdown"]["allocator_reserve"]
    assert 0 < -mem["headroom"] <= reserve
    code, text, _ = run(args, capsys)
    assert code == 0 and "tight" in text and "expandable" in text and "does not fit" not in text
    # with expandable segments there is no reserve, and it fits
    code, out, _ = run([*args, "--expandable-segments", "--json"], capsys)
    assert code == 0 and json.loads(out)["memory"]["fits"]


def test_the_fix_train_suggests_for_a_plan_that_does_not_fit_really_fits(capsys):
    code, _, err = run(["train", "llama-3.1-405b", "--gpus", "1", "--mfu", "0.4"], capsys)
    assert code == 3 and "(checked: it fits)" in err
    fix = err.split("try ", 1)[1].split(" (checked")[0].split()
    code, out, _ = run(["train", "llama-3.1-405b", "--mfu", "0.4", "--json"] + fix, capsys)
    assert code == 0 and json.loads(out)["memory"]["fits"]


def test_the_suggested_fix_applied_to_the_users_own_command_is_the_plan_that_was_checked(capsys):
    # the found plan drops cp 2 -> 1: the fix must say --cp 1, or the user's --cp 2 stays and the
    # command refuses 8 GPUs as tp x pp x cp = 16
    args = ["train", "llama-3.1-70b", "--gpu", "gb200", "--gpus", "8", "--tp", "2", "--pp", "2", "--cp", "2"]
    args += ["--precision", "nvfp4", "--seq-len", "32768"]
    code, _, err = run(args, capsys)
    assert code == 3 and "(checked: it fits)" in err
    fix = err.split("try ", 1)[1].split(" (checked")[0].split()
    assert "--cp" in fix
    code, out, _ = run([*args, "--json", *fix], capsys)
    assert code == 0 and json.loads(out)["memory"]["fits"]


def test_suggestions_that_save_no_memory_are_not_offered(capsys):
    # ZeRO shards over dp: with one GPU it saves nothing, so it must not be suggested
    _, out, _ = run(["train", "llama-3.1-405b", "--gpus", "1", "--mfu", "0.4", "--json"], capsys)
    doc = json.loads(out)
    assert doc["suggestions"], "a plan over capacity must come with suggestions"
    assert all("zero" not in s["changes"] for s in doc["suggestions"])
    assert all(s["total_bytes"] < doc["memory"]["per_gpu"]["total"] for s in doc["suggestions"])


@pytest.mark.parametrize("kind", ["training-held-out", "serving", "serving-kv", "offload"])
def test_validate_calibrated_is_refused_where_it_would_be_ignored(kind, capsys):
    code, _, err = run(["validate", kind, "--calibrated"], capsys)
    assert code == 2 and "calibrated" in err and len(err.strip().splitlines()) == 1


def test_train_states_the_moe_dispatcher_and_its_host_time(capsys):
    args = ["train", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "8", "--ep", "8", "--precision", "mxfp8"]
    code, out, _ = run([*args, "--moe-dispatcher", "alltoall", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["training"]["moe_dispatcher"] == "alltoall" and doc["framework"] == "generic"
    assert doc["performance"]["breakdown_s"]["moe_host_sync"] > 0
    code, _, err = run([*args, "--moe-dispatcher", "nccl"], capsys)
    assert code == 2 and "moe_dispatcher" in err and "hybridep" in err and "Traceback" not in err
    code, out, _ = run([*args, "--moe-dispatcher", "hybridep", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["training"]["moe_dispatcher"] == "hybridep"


def test_pipeline_json_times_named_in_seconds_are_seconds_whatever_the_unit(capsys):
    # --f/--b/--w are in --unit; makespan_s read 33.0 for 33 ms and for 33 s alike
    docs = {}
    for unit in ("1ms", "1s"):
        code, out, _ = run(["pipeline", "--unit", unit, "--json"], capsys)
        assert code == 0
        docs[unit] = json.loads(out)
    ms, s = docs["1ms"], docs["1s"]
    assert ms["makespan_s"] == pytest.approx(0.033) and s["makespan_s"] == pytest.approx(33.0)
    assert ms["busy_s"][0] + ms["idle_s"][0] == pytest.approx(ms["makespan_s"])
    assert ms["costs"]["unit_s"] == 0.001 and ms["events"]["start"] == s["events"]["start"]  # events in units
