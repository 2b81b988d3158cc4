"""`serve-sim --rate inf`: a burst, reported as vllm bench serve reports it; bad combinations refused."""

import json

import pytest
from cli_runner import run

BASE = ["serve-sim", "llama-3.1-8b", "--requests", "200", "--input-len", "512", "--output-len", "64"]


def test_rate_inf_runs_a_burst_and_prints_the_benchmarks_numbers(capsys):
    code, out, _ = run([*BASE, "--rate", "inf", "--json"], capsys)
    assert code == 0
    r = json.loads(out)["runs"][0]
    assert r["rate"] is None and r["burst"] is True
    assert r["output_tokens_per_s"] == pytest.approx(200 * 64 / r["makespan_s"])
    assert r["total_tokens_per_s"] == pytest.approx(200 * (512 + 64) / r["makespan_s"])
    for key in ("ttft_s", "tpot_s", "itl_s"):
        assert {"mean", "p50", "p99"} <= set(r[key])
    code, out, _ = run([*BASE, "--rate", "4,inf"], capsys)
    assert code == 0 and "inf (burst)" in out and "vllm bench serve --request-rate inf" in out and "TPOT mean" in out


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--concurrency", "16"], "--concurrency"),
        (["--ttft-slo", "2s"], "--ttft-slo"),
        (["--itl-slo", "50ms"], "--itl-slo"),
        (["--trace", "t.csv"], "--trace"),
    ],
)
def test_rate_inf_with_a_closed_loop_an_slo_or_a_trace_is_one_line_exit_2(capsys, extra, flag):
    code, out, err = run([*BASE, "--rate", "inf", *extra], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert flag in err and "--rate" in err


def test_a_burst_alone_draws_its_report_and_plot_at_its_completed_rate(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    html, png = tmp_path / "r.html", tmp_path / "p.png"
    code, _, err = run([*BASE, "--rate", "inf", "--html", str(html), "--plot", str(png)], capsys)
    assert code == 0, err
    assert png.stat().st_size > 0 and "burst: output tokens/s" in html.read_text()
