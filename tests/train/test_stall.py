"""The checkpoint stall is what the training loop waits, measured around the whole save: building
the state dict and waiting for the previous save count, not only DCP's staging."""

import logging
import re
import time

import pytest

torch = pytest.importorskip("torch")


def _train(tmp_path, steps, monkeypatch=None, **kw):
    from gpuplan.train import Resilient

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(model.parameters())
    with Resilient(model, opt, checkpoint_dir=tmp_path / "c", **kw) as run:
        while run.step < steps:
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
            opt.zero_grad()
            run.end_step()
        return run.stall_summary()


def test_building_the_state_dict_counts_as_stall(tmp_path, monkeypatch):
    from gpuplan.train import runtime

    real = runtime.get_state_dict

    def slow(*a, **k):
        time.sleep(0.05)
        return real(*a, **k)

    monkeypatch.setattr(runtime, "get_state_dict", slow)
    s = _train(tmp_path, 20, every_steps=5)
    assert s["saves"] == 4 and s["p50_s"] >= 0.05 and s["max_s"] >= s["p95_s"] >= s["p50_s"]
    assert s["total_s"] >= 4 * 0.05 and 0 < s["fraction"] < 1


def test_waiting_for_the_previous_async_save_counts_as_stall(tmp_path, monkeypatch):
    from torch.distributed.checkpoint import filesystem

    real = filesystem.FileSystemWriter.write_data

    def slow_disk(self, plan, planner):
        time.sleep(0.2)
        return real(self, plan, planner)

    monkeypatch.setattr(filesystem.FileSystemWriter, "write_data", slow_disk)
    s = _train(tmp_path, 6, every_steps=1)  # each save finds the previous one still writing
    assert s["saves"] == 6 and s["p50_s"] >= 0.15


def test_the_run_logs_the_stall_distribution_and_its_share_of_training_time(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="gpuplan.train"):
        _train(tmp_path, 12, every_steps=4)
    line = [r.getMessage() for r in caplog.records if "checkpoint stall" in r.getMessage()]
    assert len(line) == 1
    m = re.search(
        r"3 saves, p50 ([\d.]+) ms, p95 ([\d.]+) ms, max ([\d.]+) ms, mean ([\d.]+) ms; ([\d.]+) s in all = "
        r"([\d.]+)% of ([\d.e+-]+) s of training",
        line[0],
    )
    assert m, line[0]
    p50, p95, mx, mean, total, pct, training = map(float, m.groups())
    assert 0 < p50 <= p95 <= mx and mean <= mx and total > 0
    assert pct == pytest.approx(100 * total / training, rel=0.05, abs=0.01)
