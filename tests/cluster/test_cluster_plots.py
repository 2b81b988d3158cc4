"""What the cluster pictures read: the wait distribution with its tail, utilisation over time."""

import numpy as np
import pytest

from gpuplan.cluster.sim import ClusterConfig, ClusterSim, Job


def _sim():
    rng = np.random.default_rng(3)
    jobs = [Job(i, float(i * 20), float(rng.choice([1, 4, 8])), float(rng.exponential(3600)), tier=i % 2)
            for i in range(200)]  # fmt: skip
    return ClusterSim(ClusterConfig(nodes=2, gpus_per_node=8, policy="fifo"), jobs).run()


def test_the_report_carries_every_percentile_of_the_wait_so_the_tail_can_be_drawn():
    sim = _sim()
    report = sim.report()
    for tier, v in report.tiers.items():
        q = v.wait_quantiles_s
        waits = [r.wait_s for r in sim.runs.values() if str(r.tier) == tier and r.state == "done"]
        assert len(q) == 101 and q == sorted(q)
        assert q[-1] == pytest.approx(max(waits)) and q[99] == pytest.approx(v.p99_wait_s)


def test_the_utilisation_series_integrates_to_the_busy_gpu_time():
    sim = _sim()
    u = sim.report().utilisation_over_time
    t = np.array(u["t_s"])
    width = t[1] - t[0]
    assert (np.array(u["busy_fraction"]) * width * 16).sum() == pytest.approx(sim.busy_gpu_s, rel=1e-9)


def test_the_plot_draws_the_wait_tail_on_a_log_axis(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from gpuplan.cluster.render import write_plot

    saved = {}
    real = plt.Figure.savefig

    def keep(fig, *a, **k):
        saved["fig"] = fig
        return real(fig, *a, **k)

    plt.Figure.savefig = keep
    try:
        write_plot(_sim(), tmp_path / "c.png")
    finally:
        plt.Figure.savefig = real
    waits_ax = saved["fig"].axes[1]
    assert waits_ax.get_xscale() == "log"
    p99 = max(v.p99_wait_s for v in _sim().report().tiers.values())
    assert waits_ax.get_xlim()[1] >= p99  # the tail is inside the picture, not cut at a whisker
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
