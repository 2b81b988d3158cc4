"""CLI: serving and training offload flags, the offload validation set, bad input as one line."""

import json

import pytest
from cli_runner import run


def test_serve_with_cpu_memory_reports_a_placement_and_its_time_breakdown(capsys):
    code, out, _ = run(
        ["serve", "llama-3.1-70b", "--gpu", "rtx-4090", "--cpu-memory", "256GB", "--disk", "2TB", "--json"], capsys
    )
    assert code == 0
    doc = json.loads(out)
    w = doc["placement"]["weights"]
    assert abs(w["gpu"] + w["cpu"] + w["disk"] - 1) < 1e-9
    assert doc["memory_bytes"]["cpu"] <= 256e9
    assert set(doc["decode_step_s"]) == {"total", "compute", "pcie", "disk", "cpu", "overlap"}


def test_serve_gpu_layers_evaluates_the_given_split(capsys):
    code, out, _ = run(["serve", "llama-3.1-8b", "--gpu", "rtx-4090", "--gpu-layers", "16", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["placement"]["gpu_layers"] == 16


def test_serve_offload_with_too_small_a_disk_is_one_line_naming_disk(capsys):
    # 405B in bf16 is ~810 GB: 64 GB of CPU memory and a 100 GB disk cannot hold what the GPU does not
    code, out, err = run(
        ["serve", "llama-3.1-405b", "--gpu", "rtx-4090", "--cpu-memory", "64GB", "--disk", "100GB"], capsys
    )
    assert code == 2 and err.strip().count("\n") == 0 and "disk:" in err


def test_train_offload_reports_host_memory_and_the_cpu_step(capsys):
    code, out, _ = run(
        [
            "train",
            "llama-3.1-8b",
            "--gpu",
            "a100-sxm-80gb",
            "--gpus",
            "1",
            "--seq-len",
            "2048",
            "--offload",
            "optimizer",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    doc = json.loads(out)
    off = doc["offload"]
    assert off["memory_bytes"]["cpu_per_node"] > 0 and off["step_s"]["cpu_optimizer"] > 0
    # train's document as the offloaded plan runs: one step, memory and verdict throughout
    assert doc["fits"] and doc["time"]["step_s"] == doc["performance"]["step_s"] == off["step_s"]["total"]
    assert doc["memory"]["per_gpu"]["total"] == off["memory_bytes"]["per_gpu"]["total"]
    assert sum(doc["performance"]["breakdown_s"].values()) == pytest.approx(off["step_s"]["total"])


def test_train_offload_too_little_cpu_memory_is_one_line(capsys):
    code, _, err = run(
        [
            "train",
            "llama-3.1-8b",
            "--gpu",
            "a100-sxm-80gb",
            "--gpus",
            "1",
            "--seq-len",
            "2048",
            "--offload",
            "optimizer",
            "--cpu-memory",
            "32GB",
        ],
        capsys,
    )
    assert code == 2 and "cpu_memory" in err and err.strip().count("\n") == 0


def test_validate_offload_prints_the_errors(capsys):
    code, out, _ = run(["validate", "offload", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["rows"] and all("error" in r for r in doc["rows"])


def test_a_hardware_file_sets_the_host(tmp_path, capsys):
    f = tmp_path / "box.toml"
    f.write_text("cpu_memory_gb = 512\ncpu_memory_gbps = 100\npcie_gbps = 12\ncpu_tflops = 1\n")
    code, out, _ = run(["serve", "llama-3.1-70b", "--gpu", "rtx-4090", "--host", str(f), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["host"] == "box"


def test_a_hardware_file_missing_a_field_is_one_line(tmp_path, capsys):
    f = tmp_path / "box.toml"
    f.write_text("cpu_memory_gb = 512\n")
    code, _, err = run(["serve", "llama-3.1-70b", "--gpu", "rtx-4090", "--host", str(f)], capsys)
    assert code == 2 and "host:" in err and "pcie_gbps" in err and err.strip().count("\n") == 0


def test_search_offload_json_says_the_offload_of_each_plan(capsys):
    args = ["search", "llama-3.1-8b", "--gpu", "rtx-4090", "--gpus", "1", "--seq-len", "2048", "--global-batch", "16"]
    code, out, _ = run([*args, "--offload", "auto", "--host", "pcie4-workstation", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["offload"] == "auto" and doc["host"]
    plan = doc["plans"][0]
    assert plan["offload"]["offload"] in ("optimizer", "optimizer+params")
    assert plan["offload"]["memory_bytes"]["per_gpu"]["total"] <= 24e9
    assert plan["offload"]["memory_bytes"]["cpu_per_node"] > 0


def test_search_without_offload_names_offload_as_the_fix(capsys):
    args = ["search", "llama-3.1-8b", "--gpu", "rtx-4090", "--gpus", "1", "--seq-len", "2048", "--global-batch", "16"]
    code, _, err = run(args, capsys)
    assert code == 3 and "--offload auto" in err and err.strip().count("\n") == 0  # 3: does not fit


def test_validate_offload_held_out_prints_every_held_out_row_with_its_error(capsys):
    code, out, _ = run(["validate", "offload-held-out", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert len(doc["rows"]) == 46 and all("error" in r and r["system"] for r in doc["rows"])
    assert doc["summary"]["median_abs_error"] is not None
