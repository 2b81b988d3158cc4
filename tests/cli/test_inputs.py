"""Inputs checked in one place (gpuplan.inputs, cli/params.py): units, bounds, files and first contact."""

import json

import pytest
from cli_runner import run

from gpuplan import inputs
from gpuplan.errors import GpuplanError


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1GB", 1e9),
        ("1GiB", 2**30),
        ("1G", 2**30),
        ("256M", 256 * 2**20),
        ("1.5KB", 1500),
        ("300B", 300),
        ("4096", 4096),
        ("2TiB", 2 * 2**40),
        ("1gb", 1e9),
    ],
)
def test_sizes_read_decimal_and_binary_units_and_bare_suffixes_as_nccl_tests(text, expected):
    assert inputs.parse_size(text, "size") == expected


@pytest.mark.parametrize("text", ["nan", "inf", "-1G", "0", "1e400", "abc", "1 GiBB", "1iB", "", "1Gi"])
def test_a_size_that_is_not_one_is_refused_naming_the_field(text):
    with pytest.raises(GpuplanError) as exc:
        inputs.parse_size(text, "size")
    assert str(exc.value).startswith("size: ") and "; " in str(exc.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -1.0])
def test_a_price_must_be_finite_and_not_negative(value):
    with pytest.raises(GpuplanError, match="^price: "):
        inputs.price(value)


def test_durations_are_bounded_between_a_microsecond_and_a_century():
    assert inputs.duration("50ms", "d") == pytest.approx(0.05)
    assert inputs.duration("0", "d", zero_ok=True) == 0.0
    for bad in ("1e-30s", "1e30d", "nan", "-1s", "0"):
        with pytest.raises(GpuplanError, match="^d: "):
            inputs.duration(bad, "d")


def test_an_output_path_is_checked_without_leaving_a_file(tmp_path):
    good = tmp_path / "out.png"
    assert inputs.output_path(str(good), "plot", suffixes=inputs.PLOT_SUFFIXES) == str(good)
    assert not good.exists()
    for bad, why in (
        (tmp_path, "is a directory"),
        (tmp_path / "nope" / "x.png", "does not exist"),
        (tmp_path / "out.txt", "cannot write .txt"),
    ):
        with pytest.raises(GpuplanError, match=why):
            inputs.output_path(str(bad), "plot", suffixes=inputs.PLOT_SUFFIXES)


def test_a_text_file_that_is_not_utf8_is_refused_with_its_line_and_column(tmp_path):
    f = tmp_path / "t.csv"
    f.write_bytes("a,b\ncaf\xe9,1\n".encode("latin-1"))
    with pytest.raises(GpuplanError, match=r"line 2, column 4"):
        inputs.read_text(f, "trace")


@pytest.mark.parametrize(
    "args",
    [
        ["cluster", "sim", "--jobs", "20000", "--plot", "/nonexistent/c.png"],
        ["cluster", "sim", "--jobs", "20000", "--plot", "c.txt"],
        ["cluster", "sim", "--jobs", "20000", "--trace-out", "."],
        ["pipeline", "--stages", "16", "--microbatches", "256", "--plot", "/nonexistent/p.png"],
        ["serve-sim", "llama-3.1-8b", "--rate", "1,2,4,8", "--requests", "100000", "--plot", "/nonexistent/p.svg"],
        ["search", "llama-3.1-70b", "--gpus", "4096", "--plot", "plans.html"],
        ["slurm", "--output", "/nonexistent/job.sh", "--", "train.py"],
    ],
)
def test_a_bad_output_path_is_refused_before_any_work(args, capsys, monkeypatch):
    # the work itself must not start: each command's simulation or search fails the test if called
    def no_work(*a, **k):
        raise AssertionError(f"{args[0]} started its work before checking the output path")

    monkeypatch.setattr("gpuplan.cluster.sim.ClusterSim.run", no_work)
    monkeypatch.setattr("gpuplan.pipeline.simulate.simulate", no_work)
    monkeypatch.setattr("gpuplan.serve.sim_study.study", no_work)
    monkeypatch.setattr("gpuplan.search.plans.search", no_work)
    code, _, err = run(args, capsys)
    assert code == 2 and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "args",
    [
        ["train", "llama-3.1-8b", "--price", "inf", "--json"],
        ["serve", "llama-3.1-8b", "--price", "-2", "--json"],
        ["cluster", "whatif", "--hours", "nan", "--json"],
        ["experts", "--synthetic", "1", "--dispatch-bytes", "-1", "--json"],
        ["serve-sim", "llama-3.1-8b", "--rate", "1", "--seed", "-1"],
        ["cluster", "sim", "--gpus-per-node", "0"],
        ["train", "llama-3.1-8b", "--global-batch", "0"],
        ["experts", "--synthetic", "1", "--top-k", "300"],
        ["serve", "llama-3.1-8b", "--tpot-slo", "50ms"],
        ["serve", "llama-3.1-8b", "--draft-model", "mistral-7b"],
        ["serve-sim", "llama-3.1-8b", "--rate", "1", "--trace", "t.csv"],
        ["slurm", "--gpus", "60", "--", "train.py"],
        ["slurm", "--gpus", "64", "--nodes", "4", "--", "train.py"],
        ["tco", "--gpus", "64"],
        ["tco", "--capex", "1M", "--pue", "0.5"],
    ],
)
def test_the_inputs_the_issue_lists_are_refused_in_one_line(args, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "; " in err  # every refusal names the fix


def _no_simulation(monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("the cluster simulation started")

    monkeypatch.setattr("gpuplan.cluster.sim.ClusterSim.run", no_work)


def test_a_trace_with_nothing_runnable_ends_at_once(tmp_path, capsys, monkeypatch):
    _no_simulation(monkeypatch)
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        "scheduled_time\n"
    )
    cpu_only = tmp_path / "pods.csv"
    cpu_only.write_text(header + "".join(f"p{i},1000,1024,0,0,,BE,Running,{i},{i + 100},{i}\n" for i in range(5)))
    philly = tmp_path / "philly.json"
    philly.write_text("[]")
    for args in (["--trace", str(cpu_only)], ["--trace", str(philly), "--trace-format", "philly"]):
        code, _, err = run(["cluster", "sim", "--gpus", "64"] + args, capsys)
        assert code == 2 and "no job this cluster can run" in err


def test_failures_faster_than_a_restart_are_refused_before_simulating(capsys, monkeypatch):
    _no_simulation(monkeypatch)
    code, _, err = run(["cluster", "sim", "--gpus", "16", "--jobs", "50", "--node-mtbf", "1s", "--json"], capsys)
    assert code == 2 and err.startswith("error: node_mtbf:")


def test_a_cluster_whose_jobs_stop_finishing_ends_with_an_error_naming_the_knobs():
    # The library has no up-front check: its guard ends the run (nodes failing every minute,
    # restarts of an hour: no job ever gets back to work)
    from gpuplan.cluster.sim import ClusterConfig, ClusterSim, Job

    cfg = ClusterConfig(nodes=2, gpus_per_node=8, node_mtbf_s=60.0, repair_s=1.0)
    jobs = [Job(i, 0.0, 8.0, 3600.0, restart_s=3600.0) for i in range(4)]
    with pytest.raises(GpuplanError, match=r"^jobs: .*`node_mtbf`"):  # ends (the guard), never hangs
        ClusterSim(cfg, jobs).run()


def test_a_serve_sim_trace_row_that_is_wrong_is_named_by_line_and_column(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,100,10\n1,-100,10\n")
    code, _, err = run(["serve-sim", "llama-3.1-8b", "--trace", str(trace)], capsys)
    assert code == 2 and "line 3, column input_len" in err


def test_serve_sim_refuses_a_budget_that_would_take_millions_of_iterations(capsys):
    code, _, err = run(
        ["serve-sim", "llama-3.1-8b", "--rate", "1", "--requests", "5000", "--max-batched-tokens", "1"], capsys
    )
    assert code == 2 and err.startswith("error: max_batched_tokens:")


def test_no_arguments_prints_the_help_formatted_and_h_and_version_work(capsys):
    code, out, _ = run([], capsys)
    assert code == 0 and "Usage: gpuplan" in out and "\n  train" in out
    code, out, _ = run(["-h"], capsys)
    assert code == 0 and "Commands" in out
    code, out, _ = run(["train", "-h"], capsys)
    assert code == 0 and "--global-batch" in out
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.startswith("gpuplan ")


def test_ids_are_never_cut_in_an_80_column_pipe(capsys, monkeypatch):
    from rich.console import Console

    from gpuplan import catalog
    from gpuplan.cli import render

    monkeypatch.setattr(render, "console", Console(width=80, force_terminal=False))
    for command, ids in (("models", catalog.model_ids()), ("gpus", catalog.gpu_ids())):
        code, out, _ = run([command], capsys)
        assert code == 0
        for i in ids:
            assert i in out, i


def test_old_flag_names_still_work_with_a_note(capsys):
    code, out, err = run(["checkpoint-interval", "--mtbf", "3h", "--cost", "60s", "--json"], capsys)
    assert code == 0 and json.loads(out)["cost_s"] == 60 and "--checkpoint-cost" in err
    code, out, err = run(["serve", "llama-3.1-8b", "--tpot-slo", "50ms", "--target-rps", "1", "--json"], capsys)
    assert code == 0 and "gpus_needed" in json.loads(out) and "--itl-slo" in err


def test_collective_p2p_bus_bandwidth_is_the_transfer_rate(capsys):
    code, out, _ = run(["collective", "p2p", "--ranks", "2", "--size", "1GB", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["size_bytes"] == 1e9
    assert doc["bus_bandwidth_bytes_per_s"] == pytest.approx(doc["algorithm_bandwidth_bytes_per_s"])


def test_a_count_without_a_real_upper_bound_does_not_quote_the_sanity_cap():
    with pytest.raises(GpuplanError) as err:
        inputs.integer(0, "gpus")
    assert str(err.value) == "gpus: must be positive, got 0; use a whole number from 1 up"
    with pytest.raises(GpuplanError, match="from 1 to 64$"):
        inputs.integer(0, "draft_len", hi=64)


@pytest.mark.parametrize("flag", ["model", "--gpu"])
def test_a_name_too_long_for_the_file_system_is_an_unknown_id_not_an_os_error(flag, capsys):
    name = "a" * 300  # ENAMETOOLONG from the path check before the catalog's "unknown"
    args = ["train", name, "--gpus", "8"] if flag == "model" else ["train", "llama-3.2-1b", "--gpu", name]
    code, out, err = run(args, capsys)
    assert code == 2 and err.startswith(f"error: {flag.lstrip('-')}: unknown") and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "args,field",
    [
        (["cluster", "sim", "--gpus", "16", "--jobs", "5", "--trace"], "trace"),
        (["cluster", "sim", "--gpus", "16", "--jobs", "5", "--trace-out"], "trace_out"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--cluster"], "cluster"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--calibration"], "calibration"),
        (["train", "llama-3.2-1b", "--gpus", "8", "--html"], "html"),
        (["calibrate", "--loo"], "run"),
    ],
)
def test_a_file_name_too_long_for_the_file_system_is_refused_naming_the_field(args, field, capsys):
    code, out, err = run([*args, "b" * 300], capsys)
    assert code == 2 and err.startswith(f"error: {field}: cannot use") and len(err.splitlines()) == 1
