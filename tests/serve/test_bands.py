"""serve states what validation measured for its engine profile; the stored bands are current."""

import json

from cli_runner import run

from gpuplan.serve.bands import PATH, compute, engine_band


def test_the_stored_bands_are_what_validation_measures_now(held_out_checks):
    # scripts/serving_bands.py writes them; a change to the model or the rows must rewrite them
    assert json.loads(PATH.read_text())["engines"] == compute(held_out_checks), "run python scripts/serving_bands.py"


def test_an_engine_no_published_run_used_is_marked_uncalibrated():
    band = engine_band("no-such-engine")
    assert band["calibrated"] is False and band["rows"] == 0 and "uncalibrated" in band["note"]
    vllm = engine_band("vllm")
    assert vllm["calibrated"] and vllm["rows"] > 0 and 0 < vllm["median_abs_error"] <= vllm["p90_abs_error"]


def test_serve_prints_and_emits_its_engines_band(capsys):
    code, out, _ = run(["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["validation"] == engine_band("sglang")
    code, out, _ = run(["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang"], capsys)
    assert code == 0 and "published runs under sglang" in out
