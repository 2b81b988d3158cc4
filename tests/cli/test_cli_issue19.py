"""gpuplan calibrate / compare / validate --calibrated and --calibration on train, search and serve,
through the CLI's entry point: JSON documents, one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import synthetic_runs

from gpuplan.cli.app import main

DATA = Path(__file__).resolve().parents[1] / "data" / "runs"


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _write_runs(tmp_path: Path) -> list[str]:
    """Synthetic runs as telemetry files (plan record + steps + a kernels record)."""
    paths = []
    for i, run in enumerate(synthetic_runs(0, repeats=1)):
        assert run.plan is not None and run.step_s is not None
        lines = [{"type": "plan", "schema": 1, "plan": run.plan.to_dict()}]
        lines += [{"step": s, "step_s": run.step_s} for s in range(1, 6)]
        lines.append({"type": "kernels", "per_step_s": run.kernels_s})
        p = tmp_path / f"run{i}.jsonl"
        p.write_text("".join(json.dumps(x) + "\n" for x in lines))
        paths.append(str(p))
    return paths


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("cal")
    paths = _write_runs(tmp)
    out = tmp / "profile.toml"
    try:
        main(["calibrate", *paths, "--out", str(out), "--no-loo", "--json"])
    except SystemExit as exc:
        assert not exc.code
    return out


def test_calibrate_writes_a_profile_and_reports_factors(tmp_path, capsys):
    paths = _write_runs(tmp_path)[:4]
    out = tmp_path / "p.toml"
    code, stdout, err = run_cli(capsys, "calibrate", *paths, "--out", str(out), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["gpu_family"] == "H100/H200/H800 SXM" and doc["profile"] == str(out)
    assert {f["name"] for f in doc["factors"]} >= {"gemm_sustained", "inter_bus", "step_overhead_s"}
    assert "inter_bus" in doc["not_identified"]  # four single-node runs
    assert doc["mean_abs_error"]["loo"] is not None
    assert "[efficiency]" in out.read_text()
    code, stdout, _ = run_cli(capsys, "calibrate", *paths)
    assert code == 0 and "not identified" in stdout and "leave-one-out" in stdout


def test_train_and_search_say_they_are_calibrated(profile, capsys):
    path = profile
    code, stdout, err = run_cli(capsys, "train", "llama-3.2-1b", "--gpus", "8", "--calibration", str(path), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["calibration_profile"]["path"] == str(path)
    assert doc["calibration_profile"]["efficiency"]["sustained"] == pytest.approx(0.78, rel=0.05)
    base = json.loads(run_cli(capsys, "train", "llama-3.2-1b", "--gpus", "8", "--json")[1])
    assert doc["performance"]["step_s"] > base["performance"]["step_s"]  # the fitted cluster is slower
    code, stdout, _ = run_cli(capsys, "train", "llama-3.2-1b", "--gpus", "8", "--calibration", str(path))
    assert code == 0 and "calibrated with" in stdout
    code, stdout, err = run_cli(
        capsys, "search", "llama-3.2-1b", "--gpus", "8", "--top", "1", "--calibration", str(path), "--json"
    )
    assert code == 0, err
    assert json.loads(stdout)["calibration_profile"]["gpu_family"] == "H100/H200/H800 SXM"
    code, _, err = run_cli(capsys, "train", "llama-3.2-1b", "--gpu", "a100-sxm-80gb", "--calibration", str(path))
    assert code == 2 and err.startswith("error: calibration:") and err.count("\n") == 1


def test_compare_flags_beyond_band(tmp_path, capsys):
    code, stdout, err = run_cli(capsys, "compare", str(DATA / "telemetry.jsonl"), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    rows = {r["component"]: r for r in doc["rows"]}
    assert rows["step time"]["measured"] == pytest.approx(7.815)
    assert rows["peak allocated"]["error"] == pytest.approx(-0.001, abs=0.01)
    assert rows["activations"]["measured"] == 5.9e9
    # a Megatron log with the plan on the command line; a trace of the same run gives kernel rows
    run = tmp_path / "run.toml"
    run.write_text(f'log = "{DATA / "megatron_core_main.log"}"\ntrace = "{DATA / "trace_kineto.json"}"\n')
    code, stdout, err = run_cli(
        capsys,
        "compare",
        str(run),
        "--json",
        "--against",
        "llama-3.1-8b --gpus 8 --tp 4 --seq-len 4096 --global-batch 128 --framework megatron",
    )
    assert code == 0, err
    doc = json.loads(stdout)
    kernels = {r["component"]: r for r in doc["rows"] if r["group"] == "kernels"}
    assert kernels["gemm"]["measured"] == pytest.approx(5e-3) and kernels["gemm"]["flagged"]  # a toy trace
    assert "gemm" in doc["flagged"]
    code, stdout, _ = run_cli(capsys, "compare", str(DATA / "telemetry.jsonl"))
    assert code == 0 and "step time" in stdout


@pytest.mark.parametrize(
    "args, field",
    [
        (["compare", str(DATA / "megatron_v2.6.log")], "error: against:"),
        (["compare", str(DATA / "nemo1.log"), "--against", "llama-3.1-8b --tpp 2"], "error: against:"),
        (["compare", str(DATA / "hf_v4.log"), "--format", "csv"], "error: format:"),
        (["calibrate", "/nonexistent/run.log"], "error: run:"),
        (["train", "llama-3.2-1b", "--calibration", "/nonexistent.toml"], "error: calibration:"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, args, field):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.startswith(field) and err.count("\n") == 1, err


def test_validate_calibrated_json(capsys):
    code, stdout, err = run_cli(capsys, "validate", "training", "--calibrated", "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    for fam in doc.values():
        assert fam["calibrated_mean_abs_error"] < fam["uncalibrated_mean_abs_error"]


def test_serve_times_with_a_calibration_profile_and_says_so(capsys):
    # the profile committed from the measured H100 runs (measurements/h100-sxm-2026-11-23)
    path = Path(__file__).resolve().parents[2] / "measurements" / "h100-sxm-2026-11-23" / "calibration.toml"
    args = ["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "8", "--json"]
    code, base, _ = run_cli(capsys, *args)
    assert code == 0 and json.loads(base)["calibration_profile"] is None
    code, calibrated, _ = run_cli(capsys, *args, "--calibration", str(path))
    doc = json.loads(calibrated)
    import tomllib

    assert code == 0 and doc["calibration_profile"]["efficiency"] == tomllib.loads(path.read_text())["efficiency"]
    assert doc["tpot_s"] != json.loads(base)["tpot_s"]  # the profile's rates time the decode
    code, text, _ = run_cli(capsys, *args[:-1], "--calibration", str(path))
    assert code == 0 and "calibrated with" in text
    code, _, err = run_cli(capsys, "serve", "llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--calibration", str(path))
    assert code == 2 and err.startswith("error: calibration:") and err.count("\n") == 1
