"""`serve-sim --ngram/--draft-model/--mtp`: the proposer in the JSON; proposers a model cannot run
refused in one line, exit 2."""

import json

import pytest
from cli_runner import run

BASE = ["serve-sim", "llama-3.1-8b", "--rate", "2", "--requests", "40", "--input-len", "512", "--output-len", "64"]


def test_serve_sim_states_its_proposer_in_json_and_decodes_faster(capsys):
    code, out, _ = run([*BASE, "--ngram", "--draft-len", "3", "--acceptance", "0.8", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["speculative"]["method"] == "ngram" and doc["speculative"]["draft_len"] == 3
    assert doc["speculative"]["expected_tokens"] == pytest.approx((1 - 0.8**4) / 0.2)
    code, plain, _ = run([*BASE, "--json"], capsys)
    assert doc["runs"][0]["tpot_s"]["p50"] < json.loads(plain)["runs"][0]["tpot_s"]["p50"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--mtp",), "mtp"),
        (("--ngram", "--draft-model", "llama-3.2-1b"), "draft"),
        (("--draft-model", "qwen3-0.6b"), "draft-model"),
        (("--ngram", "--acceptance", "1.5"), "acceptance"),
        (("--ngram", "--draft-len", "0"), "draft-len"),
    ],
)
def test_serve_sim_refuses_a_proposer_it_cannot_run_in_one_line(capsys, args, field):
    code, out, err = run([*BASE, *args], capsys)
    assert code == 2 and out == ""
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1 and field in lines[0].replace("_", "-") and "Traceback" not in err
