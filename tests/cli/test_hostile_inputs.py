"""Inputs a fuzzing sweep found to crash, hang or answer nonsense: each is now one line, exit 2.

Each case writes its file under tmp_path and runs the CLI in-process; the contract is the README's:
one ``error: <field>: <what>; <fix>`` line on stderr, exit code 2, no traceback.
"""

import json
import os

import pytest
from cli_runner import run


def refused(capsys, args, *expect):
    code, _, err = run(args, capsys)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for text in expect:
        assert text in err, err
    return err


@pytest.fixture
def llama_config(tmp_path):
    def write(**changes):
        config = dict(
            model_type="llama",
            vocab_size=512,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        config.update(changes)
        path = tmp_path / "cfg.json"
        path.write_text(json.dumps(config))
        return str(path)

    return write


def test_json_nested_deeper_than_the_parser_recurses_is_refused(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, ["train", str(deep), "--gpus", "8"], "nested too deeply")
    trace = tmp_path / "deep.pt.trace.json"
    trace.write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, ["compare", str(trace)], "nested too deeply")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_pipe_or_a_device_is_not_read_as_a_config(tmp_path, capsys):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # reading it would block for ever
    refused(capsys, ["train", str(fifo), "--gpus", "8"], "not a regular file")
    if os.path.exists("/dev/zero"):  # reading it would never end
        refused(capsys, ["train", "/dev/zero", "--gpus", "8"], "not a regular file")


def test_a_layer_count_no_model_has_is_refused_naming_the_file(llama_config, capsys):
    path = llama_config(num_hidden_layers=10**9)
    refused(capsys, ["train", path, "--gpus", "8"], f"{path}: num_hidden_layers", "at most 10,000")


def test_a_config_error_names_the_file_that_holds_the_key(llama_config, capsys):
    path = llama_config(num_attention_heads=0)
    refused(capsys, ["train", path, "--gpus", "8"], f"{path}: num_attention_heads")


def test_a_run_file_whose_log_is_a_run_file_is_refused(tmp_path, capsys):
    run_file = tmp_path / "run.toml"
    run_file.write_text('log = "run.toml"\n[plan]\nmodel = "llama-3.1-8b"\ngpus = 8\n')
    refused(capsys, ["compare", str(run_file)], "is a run file")


def test_calibrate_checks_its_output_path_before_the_fit(tmp_path, capsys):
    log = tmp_path / "t.jsonl"
    log.write_text("\n".join(json.dumps({"type": "step", "step_s": 1.0}) for _ in range(5)) + "\n")
    refused(capsys, ["calibrate", str(log), "--out", str(tmp_path)], "is a directory")
    refused(capsys, ["calibrate", str(log), "--out", str(tmp_path / "no" / "x.toml")], "does not exist")


@pytest.mark.parametrize(
    "line, why",
    [("-15234.9", "not a positive number"), ("0.0", "not a positive number")],
)
def test_a_log_step_time_that_is_not_a_time_is_refused(tmp_path, capsys, line, why):
    log = tmp_path / "megatron.log"
    log.write_text(
        f" iteration 1/ 1000 | consumed samples: 128 | elapsed time per iteration (ms): {line} | "
        "global batch size: 128 |\n"
    )
    refused(capsys, ["compare", str(log), "--against", "llama-3.1-8b --gpus 8 --tp 4"], why)


def test_a_telemetry_step_beyond_any_step_is_refused(tmp_path, capsys):
    log = tmp_path / "t.jsonl"
    log.write_text(json.dumps({"type": "step", "step_s": 1e308}) + "\n")
    refused(capsys, ["compare", str(log)], "step_s")
    log.write_text(json.dumps({"type": "step", "step_s": 1.0, "peak_memory_bytes": -1, "memory_kind": "cuda"}) + "\n")
    refused(capsys, ["compare", str(log)], "peak_memory_bytes")
    log.write_text(json.dumps({"type": "step", "step_s": 1.0, "tokens": "abc"}) + "\n")  # checked before use
    refused(capsys, ["compare", str(log)], "tokens must be a count")


def test_a_host_file_with_a_word_for_a_number_names_the_key(tmp_path, capsys):
    host = tmp_path / "box.toml"
    host.write_text(
        'cpu_memory_gb = "128GB"\ncpu_memory_gbps = 65\npcie_gbps = 25\ncpu_tflops = 1.0\n'
        "disk_gb = 2000\ndisk_read_gbps = 7\ndisk_write_gbps = 5\n"
    )
    refused(
        capsys,
        ["serve", "llama-3.2-1b", "--gpu", "rtx-4090", "--offload", "auto", "--host", str(host)],
        "cpu_memory_gb",
    )


def test_a_gpu_file_with_sizes_beyond_any_gpu_is_refused(tmp_path, capsys):
    from gpuplan.catalog import ROOT

    text = (ROOT / "gpus" / "h100-sxm.toml").read_text()
    huge = tmp_path / "huge.toml"
    huge.write_text(text.replace("memory_bytes = ", "memory_bytes = 1e300 #", 1))
    refused(
        capsys, ["serve-sim", "llama-3.2-1b", "--gpu", str(huge), "--rate", "2", "--requests", "50"], "memory_bytes"
    )


@pytest.mark.parametrize(
    "args, field",
    [
        (["search", "llama-3.2-1b", "--gpus", "8", "--micro-batch", "99999999999999999999"], "micro_batch"),
        (["search", "llama-3.2-1b", "--gpus", "8", "--zero", "1,,3"], "empty item"),
        (["serve-sim", "llama-3.2-1b", "--requests", "50", "--rate", "1,,2"], "empty item"),
        (["serve-sim", "llama-3.2-1b", "--requests", "50", "--rate", "1e-30"], "rate"),
        (
            ["train", "llama-3.2-1b", "--gpus", "8", "--pp", "2", "--pipeline-layout", "Et*99999999999999999999|tL"],
            "at most",
        ),
        (["serve", "llama-3.2-1b", "--engine", ""], "--engine: is given an empty value"),
        (["serve", "llama-3.2-1b", "--draft-model="], "--draft-model: is given an empty value"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--calibration", ""], "--calibration"),
        (["experts", "--loads", ""], "empty"),
        (["slurm", "--gpus", "8", "--", ""], "empty name"),
        (["serve", "llama-3.2-1b", "--target-rps", "2", "--target-tokens-per-s", "1000"], "one target"),
        (["search", "llama-3.2-1b", "--gpus", "8", "--tp", "0"], "tp: must be positive"),
        (["search", "llama-3.2-1b", "--gpus", "8", "--tp", "-1"], "tp: must be positive"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--offload-device", "nvme"], "offloaded training only"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--delayed-update"], "offloaded training only"),
        (["serve", "llama-3.2-1b", "--offload", "none", "--gpu-layers", "8"], "would be ignored"),
        (["serve", "llama-3.2-1b", "--itl-slo", "50ms"], "itl_slo"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--global-batch", "1e30"], "1e30 is more than"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--moe-dispatcher", "deepep"], "no experts"),
        (["serve-sim", "llama-3.2-1b", "--requests", "50", "--rate", "2", "--input-len", "2048.5"], "whole number"),
        (
            ["train", "llama-3.2-1b", "--gpus", "8", "--recompute", "none", "--recompute-modules", "mlp"],
            "recomputes nothing",
        ),
    ],
)
def test_huge_empty_and_vanishing_values_are_refused(capsys, args, field):
    refused(capsys, args, field)


def test_a_cluster_file_with_more_nodes_than_any_cluster_is_refused(tmp_path, capsys):
    cluster = tmp_path / "c.toml"
    cluster.write_text(f'gpu = "h100-sxm"\nnodes = {2**63 - 1}\n[inter]\nnics_per_node = 8\nnic_gbit = 400\n')
    refused(capsys, ["train", "llama-3.2-1b", "--cluster", str(cluster)], "nodes")


def test_a_ragged_or_empty_loads_table_says_what_a_table_is(tmp_path, capsys):
    ragged = tmp_path / "loads.csv"
    ragged.write_text("1,2,3\n4,5\n")
    err = refused(capsys, ["experts", "--loads", str(ragged)], "one row per layer")
    assert "inhomogeneous" not in err
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    refused(capsys, ["experts", "--loads", str(empty)], "holds no loads")


def test_a_calibration_profile_with_a_bad_gpu_list_or_value_names_the_file(tmp_path, capsys):
    from gpuplan.estimate.profile import SCHEMA

    prof = tmp_path / "p.toml"
    head = f'[profile]\nschema = {SCHEMA}\ngpu_family = "H100/H200/H800 SXM"\n'
    prof.write_text(head + 'gpus = "h100-sxm"\n')
    refused(capsys, ["train", "llama-3.2-1b", "--gpus", "8", "--calibration", str(prof)], "profile.gpus")
    prof.write_text(head + "[efficiency]\nsustained = nan\n")
    refused(
        capsys, ["train", "llama-3.2-1b", "--gpus", "8", "--calibration", str(prof)], f"{prof}: efficiency.sustained"
    )


def test_the_default_replicas_for_a_small_loads_table_are_refused_in_the_users_totals(tmp_path, capsys):
    loads = tmp_path / "loads.csv"
    loads.write_text("\n".join(",".join(str(i + j) for j in range(8)) for i in range(4)) + "\n")
    # the defaults are DeepSeek-V3's (288 slots on 32 GPUs of 4 nodes); 8 experts allow 8 per node
    refused(capsys, ["experts", "--loads", str(loads)], "288 replicas of 8 experts", "at most 64 replicas")


def test_a_trace_of_another_format_names_the_format_flag(tmp_path, capsys):
    philly = tmp_path / "philly.json"
    philly.write_text('[{"jobid": "a", "user": "u"}]')
    refused(capsys, ["cluster", "sim", "--trace", str(philly)], "no column", "--trace-format")


def test_a_config_value_of_the_wrong_type_says_how_to_write_it(llama_config, capsys):
    path = llama_config(hidden_size="64")
    refused(capsys, ["train", path, "--gpus", "8"], "hidden_size: must be int", "no quotes")


def test_a_host_file_and_a_gpu_file_name_themselves_in_their_errors(tmp_path, capsys):
    from gpuplan.catalog import ROOT

    host = tmp_path / "h.toml"
    host.write_text("cpu_memory_gb = 0\ncpu_memory_gbps = 65\npcie_gbps = 25\ncpu_tflops = 1.0\n")
    args = ["serve", "llama-3.2-1b", "--gpu", "rtx-4090", "--offload", "auto", "--host", str(host)]
    refused(capsys, args, f"{host}: cpu_memory_gb")
    gpu = tmp_path / "g.toml"
    text = (ROOT / "gpus" / "h100-sxm.toml").read_text()
    gpu.write_text(text.replace('efficiency = "h100-sxm"', 'efficiency = "nope"'))
    refused(capsys, ["train", "llama-3.2-1b", "--gpus", "8", "--gpu", str(gpu)], f"{gpu}: efficiency")


@pytest.mark.parametrize(
    "args, fix",
    [
        # the fix search offered fp8 weights, which an A100 cannot run, and failed on it (exit 2)
        (["serve", "llama-3.1-70b", "--gpu", "a100-sxm-80gb", "--tp", "1"], "--weights int8"),
        # the smallest fitting plan tried selective recompute, which the hf profile lacks
        (["train", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8", "--framework", "hf"], "checked: it fits"),
    ],
)
def test_a_plan_that_does_not_fit_gets_a_fix_the_gpu_and_framework_can_run(capsys, args, fix):
    code, _, err = run(args, capsys)
    assert code == 3, err
    assert fix in err and "Traceback" not in err, err
