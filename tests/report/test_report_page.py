"""HTML reports: every number shown is the JSON document's, and the file needs nothing else."""

import json
import re

import pytest
from cli_runner import run

from gpuplan.report.numbers import lookup, rows
from gpuplan.report.page import report_html

# One small, fast invocation of each command that writes a report
COMMANDS = {
    "train": ["train", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--pp", "2", "--zero", "1", "--tokens", "1B"],
    "search": ["search", "llama-3.1-8b", "--gpus", "8", "--global-batch", "64", "--top", "8", "--objective", "cost"],
    "serve": ["serve", "llama-3.1-8b", "--concurrency", "8", "--itl-slo", "20ms", "--target-rps", "4"],
    "serve-sim": ["serve-sim", "llama-3.1-8b", "--rate", "1,4", "--requests", "100"],
    "pipeline": ["pipeline", "--stages", "4", "--microbatches", "8", "--schedule", "zb-h1"],
    "cluster sim": ["cluster", "sim", "--gpus", "64", "--jobs", "200"],
    "cluster whatif": [
        "cluster",
        "whatif",
        "--gpus",
        "64",
        "--hours",
        "47",
        "--checkpoint",
        "none",
        "--checkpoint",
        "1h",
    ],
    "tco": ["tco", "--gpus", "64", "--capex", "2.5M", "--spot", "4"],
    "checkpoint-interval": ["checkpoint-interval", "--mtbf", "3h", "--checkpoint-cost", "60s", "--restart", "10m"],
}


def _report_and_json(name, tmp_path, capsys):
    html_path = tmp_path / "r.html"
    code, out, err = run([*COMMANDS[name], "--json", "--html", str(html_path)], capsys)
    assert code == 0, err
    return html_path.read_text(), json.loads(out)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_report_shows_the_json_numbers_and_opens_offline(name, tmp_path, capsys):
    page, doc = _report_and_json(name, tmp_path, capsys)
    inline = json.loads(re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page, re.S)[1])
    assert inline["doc"] == doc  # the data inside the file is the --json document itself
    assert inline["figures"], "every reported command draws at least one picture"
    cells = re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', page)
    assert len(cells) >= 5
    for key, raw in cells:
        assert json.loads(raw.replace("&quot;", '"')) == lookup(doc, key), key
    # self-contained: no script, style or picture from anywhere else
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="', page)
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # plotly.js is inline
    assert f'<p class="command">gpuplan {" ".join(COMMANDS[name])}</p>' in page  # how it was made


def test_a_report_path_that_is_not_html_is_refused_before_any_work(tmp_path, capsys):
    code, out, err = run(["train", "llama-3.1-8b", "--html", str(tmp_path / "r.txt")], capsys)
    assert code == 2
    assert err.startswith("error: html: cannot write .txt") and err.count("\n") == 1


def test_a_plan_that_does_not_fit_still_writes_its_report_and_exits_3(tmp_path, capsys):
    code, out, err = run(["train", "llama-3.1-70b", "--gpus", "8", "--html", str(tmp_path / "r.html")], capsys)
    assert code == 3
    assert "Memory per GPU by pipeline stage" in (tmp_path / "r.html").read_text()


def test_rows_skip_keys_another_mode_of_the_command_lacks_and_show_its_own_numbers():
    assert [r.key for r in rows("serve", {"model": "m", "gpu": "g", "speed": 2.0})] == ["model", "gpu", "speed"]
    assert [r.text for r in rows("unknown", {"a": 1.5, "b": [1]})] == ["1.5"]  # scalars only


def test_a_closing_script_tag_in_the_data_cannot_end_the_inline_script():
    page = report_html("unknown", {"name": "</script><script>alert(1)</script>"})
    data = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page, re.S)[1]
    assert json.loads(data)["doc"]["name"].startswith("</script>")
