"""--plot: the report's pictures as one static file, each panel drawing the numbers of --json."""

import json
import re
import xml.etree.ElementTree as ET

import pytest
from cli_runner import run

from gpuplan.report import static
from gpuplan.report.figures import pipeline_timeline
from gpuplan.units import GiB

# One small, fast invocation of each command with --plot, and the panels its report has
COMMANDS = {
    "train": (["train", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--pp", "2", "--zero", "1", "--tokens", "1B"], 2),
    "search": (["search", "llama-3.1-8b", "--gpus", "8", "--global-batch", "64", "--top", "8"], 1),
    "serve": (["serve", "llama-3.1-8b", "--concurrency", "8", "--itl-slo", "20ms", "--target-rps", "4"], 2),
    "serve-sim": (["serve-sim", "llama-3.1-8b", "--rate", "1,4", "--requests", "100"], 1),
    "cluster whatif": (["cluster", "whatif", "--gpus", "64", "--hours", "47"], 1),
    "tco": (["tco", "--gpus", "64", "--capex", "2.5M", "--spot", "4"], 1),
    "checkpoint-interval": (["checkpoint-interval", "--mtbf", "3h", "--checkpoint-cost", "60s"], 1),
}
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib Figures the CLI drew, as it saved them."""
    figs = []
    real = static.write_plot

    def spy(*args, **kwargs):
        figs.append(real(*args, **kwargs))
        return figs[-1]

    monkeypatch.setattr(static, "write_plot", spy)
    return figs


def _plot(name, path, capsys, extra=()):
    code, out, err = run([*COMMANDS[name][0], *extra, "--json", "--plot", str(path)], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_plot_writes_an_svg_with_a_panel_per_report_picture(name, tmp_path, capsys):
    path = tmp_path / "p.svg"
    _plot(name, path, capsys)
    root = ET.parse(path).getroot()  # well-formed XML
    assert root.tag == SVG + "svg"
    panels = [g for g in root.iter(SVG + "g") if re.fullmatch(r"axes_\d+", g.get("id", ""))]
    assert len(panels) == COMMANDS[name][1]
    assert all(p.iter(SVG + "text") for p in panels)  # text stays text: titles and labels searchable


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG\r\n\x1a\n"), (".pdf", b"%PDF-")])
def test_plot_writes_the_format_its_suffix_names(suffix, magic, tmp_path, capsys):
    path = tmp_path / f"p{suffix}"
    _plot("checkpoint-interval", path, capsys)
    assert path.read_bytes().startswith(magic)


def test_the_memory_bars_drawn_are_the_json_bytes_per_stage_in_gib(tmp_path, capsys, drawn):
    doc = _plot("train", tmp_path / "p.png", capsys)
    memory = drawn[0].axes[0]
    bars = {c.get_label(): c for c in memory.containers}
    keys = {"weights": "weights", "gradients": "gradients", "optimizer states": "optimizer",
            "master weights": "master_weights", "activations": "activations"}  # fmt: skip
    stages = doc["memory"]["stages"]
    assert len(stages) == 2  # --pp 2
    for label, key in keys.items():
        assert [p.get_height() for p in bars[label]] == pytest.approx([s[key] / GiB for s in stages]), label
    # stacked: the top of each stage's bar is its total
    tops = [max(p.get_y() + p.get_height() for c in memory.containers for p in [c[i]]) for i in range(2)]
    assert tops == pytest.approx([s["total"] / GiB for s in stages])
    capacity = [ln for ln in memory.lines if ln.get_linestyle() == "--"]
    assert [tuple(ln.get_ydata()) for ln in capacity] == [(doc["memory"]["gpu_capacity"] / GiB,) * 2]


def test_the_cost_lines_drawn_are_the_json_cumulative_dollars_by_month(tmp_path, capsys, drawn):
    doc = _plot("tco", tmp_path / "p.svg", capsys)
    lines = {ln.get_label(): ln for ln in drawn[0].axes[0].lines}
    rows = doc["cumulative"]
    for label, key in (("on-demand", "on_demand"), ("spot", "spot"), ("owned", "owned")):
        assert list(lines[label].get_xdata()) == [r["month"] for r in rows]
        assert list(lines[label].get_ydata()) == pytest.approx([r[key] for r in rows])


def test_the_serving_picture_marks_the_itl_target_and_this_plan(tmp_path, capsys, drawn):
    path = tmp_path / "p.svg"
    doc = _plot("serve", path, capsys)
    curve = drawn[0].axes[0]
    target = [ln for ln in curve.lines if ln.get_linestyle() == "--"]
    assert [tuple(ln.get_xdata()) for ln in target] == [(20.0, 20.0)]  # --itl-slo 20ms
    star = next(ln for ln in curve.lines if ln.get_marker() == "*")
    assert (star.get_xdata()[0], star.get_ydata()[0]) == pytest.approx(
        (doc["tpot_s"] * 1e3, doc["output_tokens_per_s"])
    )
    assert "ITL target 20 ms" in path.read_text()


def test_a_plot_path_matplotlib_cannot_write_is_refused_before_any_work(tmp_path, capsys, drawn):
    code, out, err = run(["serve-sim", "llama-3.1-8b", "--rate", "1", "--plot", str(tmp_path / "p.gif")], capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: plot: cannot write .gif") and err.count("\n") == 1
    assert drawn == [] and not (tmp_path / "p.gif").exists()


def test_a_mode_without_pictures_says_so_in_one_line(tmp_path, capsys):
    code, out, err = run(["serve", "llama-3.1-8b", "--offload", "auto", "--plot", str(tmp_path / "p.png")], capsys)
    assert code == 2
    assert err.startswith("error: plot: serve has no picture") and err.count("\n") == 1


def test_a_plan_that_does_not_fit_still_draws_its_picture_and_exits_3(tmp_path, capsys):
    code, out, err = run(["train", "llama-3.1-70b", "--gpus", "8", "--plot", str(tmp_path / "p.svg")], capsys)
    assert code == 3
    assert "Memory per GPU by pipeline stage" in (tmp_path / "p.svg").read_text()


def test_overlaid_horizontal_bars_start_at_their_base_in_the_rank_order_given():
    doc = {"stages": 2, "microbatches": 1, "schedule": "1f1b", "bubble_fraction": 0.5, "costs": {"unit_s": 1e-3},
           "events": {"rank": [1, 0], "kind": ["F", "B"], "start": [2.0, 5.0], "end": [3.0, 9.0],
                      "microbatch": ["0", "0"]}}  # fmt: skip
    ax = static.render([pipeline_timeline(doc)]).axes[0]
    forward, backward = ax.containers
    # rank 1's forward: 2 to 3 ms on row 1; rank 0's backward: 5 to 9 ms on row 0 (ranks top down)
    assert [(p.get_x(), p.get_width(), p.get_y() + p.get_height() / 2) for p in forward] == [(2.0, 1.0, 1.0)]
    assert [(p.get_x(), p.get_width(), p.get_y() + p.get_height() / 2) for p in backward] == [(5.0, 4.0, 0.0)]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert ax.yaxis_inverted()


def test_a_trace_type_it_cannot_draw_is_refused_rather_than_drawn_wrong():
    with pytest.raises(ValueError, match="heatmap"):
        static.render([{"data": [{"type": "heatmap", "z": [[1]]}], "layout": {}}])
