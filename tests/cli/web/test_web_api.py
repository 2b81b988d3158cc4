"""The page's server without a browser: each form runs its command once, and answers with the
document ``--json`` prints and the CLI's own one-line errors, beside the field they name."""

import json
import socket
import threading
import urllib.request

import pytest
from cli_runner import run

from gpuplan.cli.web import forms
from gpuplan.cli.web.server import answer, make_server

CASES = {
    "train": {"model": "llama-3.1-8b", "gpus": "8", "tp": "2", "zero": "1", "tokens": "1B"},
    "serve": {"model": "llama-3.1-8b", "concurrency": "8", "itl_slo": "20ms", "target_rps": "4"},
    "pipeline": {"schedule": "zb-h1", "stages": "4", "microbatches": "8"},
    "whatif": {"gpus": "64", "checkpoint": "none,1h,optimal", "cost": "60s"},
    "checkpoint": {"mtbf": "3.1h", "cost": "60s", "restart": "10m"},
    "tco": {"gpus": "64", "capex": "2.5M"},
}


@pytest.mark.parametrize("key", list(CASES))
def test_a_form_answers_with_the_document_the_cli_prints(key, capsys):
    res = answer(key, CASES[key])
    assert res["error"] is None and res["code"] == 0
    code, out, err = run([*res["argv"], "--json"], capsys)
    assert code == 0, err
    assert res["doc"] == json.loads(out)
    assert res["figures"] and "data-key" in res["numbers_html"]


def test_the_command_line_holds_only_what_differs_from_the_defaults():
    args = forms.argv("train", {"model": "llama-3.1-8b", "gpus": "16", "tp": "", "pp": "1", "zero": "1"})
    assert args == ["train", "llama-3.1-8b", "--gpus", "16", "--zero", "1"]
    assert forms.argv("whatif", {"checkpoint": "none, 1h"}) == ["cluster", "whatif", "--checkpoint", "none",
                                                               "--checkpoint", "1h"]  # fmt: skip
    assert forms.argv("serve", {"model": "m", "max_throughput": "on"})[-1] == "--max-throughput"


@pytest.mark.parametrize(
    ("key", "query", "field"),
    [
        ("train", {"model": "llama-3.1-8b", "gpus": "0"}, "gpus"),  # the library's check
        ("train", {"model": "llama-3.1-8b", "gpus": "eight"}, "gpus"),  # click's type check
        ("whatif", {"cost": "soon"}, "cost"),  # named checkpoint_cost, given as --checkpoint-cost
        ("serve", {"model": "no-such-model"}, "model"),
        ("train", {"model": "llama-3.1-8b", "global_batch": "7T"}, "global_batch"),
    ],
)
def test_a_bad_value_gets_the_cli_message_beside_its_field(key, query, field, capsys):
    res = answer(key, query)
    code, out, err = run(res["argv"], capsys)
    assert res["code"] == code == 2
    assert res["error"] == {"field": field, "message": err.strip()}


@pytest.mark.parametrize(
    ("key", "query"), [("serve", {"model": "llama-3.1-405b"}), ("train", {"model": "llama-3.1-405b"})]
)
def test_a_plan_that_does_not_fit_shows_the_clis_error_and_whatever_report_it_has(key, query, capsys):
    res = answer(key, query)
    code, _, err = run(res["argv"], capsys)
    assert res["code"] == code == 3 and res["error"]["message"] == err.strip()
    # serve has no report of a model that does not fit; train shows its memory beside the error
    assert (res["doc"] is None) == (key == "serve")


def test_the_forms_take_their_defaults_and_help_from_the_cli_options():
    seq = next(f for f in forms.fields("train") if f.name == "seq_len")
    assert seq.default == "4096" and seq.flag == "--seq-len"
    # no default in the CLI (8, or the whole --cluster): the field is left blank, its help says so
    gpus = next(f for f in forms.fields("train") if f.name == "gpus")
    assert gpus.default == "" and gpus.flag == "--gpus" and "GPUs" in gpus.help
    model = next(f for f in forms.fields("serve") if f.name == "model")
    assert "llama-3.1-70b" in model.choices and model.flag is None


@pytest.fixture(scope="module")
def server():
    srv = make_server(0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_the_server_serves_the_page_its_scripts_and_answers(server):
    page = urllib.request.urlopen(server + "/").read().decode()
    assert 'data-cmd="train"' in page and "/static/plotly.min.js" in page
    assert len(urllib.request.urlopen(server + "/static/plotly.min.js").read()) > 1_000_000
    res = json.loads(urllib.request.urlopen(server + "/api/checkpoint?mtbf=3.1h&cost=60s").read())
    assert res["doc"]["daly_s"] > 0
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(server + "/api/nothing")


def test_ui_on_a_port_in_use_is_one_line_naming_the_port(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        code, out, err = run(["ui", "--port", str(s.getsockname()[1])], capsys)
    assert code == 2 and err.startswith("error: port: cannot listen on 127.0.0.1:") and err.count("\n") == 1
