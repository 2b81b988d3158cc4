"""`serve-sim --prefill-instances P --decode-instances D`: disaggregated pools in the JSON; pools it
cannot run refused in one line, exit 2."""

import json

import pytest
from cli_runner import run


def test_serve_sim_states_its_pools_in_json(capsys):
    code, out, _ = run(
        [
            *("serve-sim", "llama-3.1-70b", "--tp", "4", "--rate", "1", "--requests", "40"),
            *("--prefill-instances", "1", "--decode-instances", "2", "--prefill-tp", "8", "--json"),
        ],
        capsys,
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["disaggregated"] == {"prefill_instances": 1, "decode_instances": 2, "prefill_tp": 8, "gpus": 16}
    assert doc["runs"][0]["requests"] == 40


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--rate", "1", "--prefill-instances", "1"), "prefill_instances"),
        (("--rate", "1", "--decode-instances", "2"), "decode_instances"),
        (("--rate", "1", "--prefill-tp", "2"), "prefill_tp"),
        (("--concurrency", "4", "--prefill-instances", "1", "--decode-instances", "1"), "concurrency"),
        (("--rate", "1", "--prefill-instances", "0", "--decode-instances", "1"), "prefill_instances"),
        (("--rate", "1", "--prefill-instances", "1", "--decode-instances", "1", "--prefill-tp", "3"), "prefill_tp"),
    ],
)
def test_serve_sim_refuses_pools_it_cannot_run_in_one_line(capsys, args, field):
    code, out, err = run(["serve-sim", "llama-3.1-8b", *args], capsys)
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1 and field.replace("_", "-") in lines[0].replace("_", "-")
    assert "Traceback" not in err
