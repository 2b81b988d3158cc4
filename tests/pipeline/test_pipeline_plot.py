"""The pipeline picture and the timeline the JSON carries for it."""

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402

from gpuplan.pipeline.render import write_plot  # noqa: E402
from gpuplan.pipeline.schedules import build  # noqa: E402
from gpuplan.pipeline.simulate import Costs, simulate  # noqa: E402


def test_the_json_timeline_has_every_action_of_the_simulation():
    t = simulate(build("1f1b", 4, 8, 1), Costs(1.0, 1.0, 1.0, None, 0.0))
    ev = t.to_dict()["events"]
    assert len(ev["rank"]) == len(t.events) and max(ev["end"]) == t.makespan_s


def test_the_plot_at_64_ranks_has_a_time_unit_and_labels_of_readable_size(tmp_path, monkeypatch):
    saved = {}
    real = plt.Figure.savefig
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, *a, **k: (saved.setdefault("fig", fig), real(fig, *a, **k)))
    write_plot(simulate(build("1f1b", 64, 128, 1), Costs(1.0, 1.0, 1.0, None, 0.0)), tmp_path / "p.png", 1e-3)
    ax = saved["fig"].axes[0]
    assert ax.get_xlabel() == "time (ms)"
    labels = ax.get_yticklabels()
    assert 16 <= len(labels) <= 32 and min(lbl.get_fontsize() for lbl in labels) >= 8
    # each labelled row is at least 8 pt tall at the saved size, so labels do not overlap
    height_pt = saved["fig"].get_size_inches()[1] * 72 * ax.get_position().height
    assert height_pt / 64 * (64 / len(labels)) >= 10
