"""A preemption signal that arrives while the trainer starts (Python starting, torch importing,
the checkpoint loading) ends the run with exit 75 like one during training: no death by signal,
no KeyboardInterrupt traceback, and the rerun ends with the uninterrupted checksum. One that
arrives after the loop has ended on its own finds the run finished (``finished.marker``)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from gpuplan.train import signals
from tests.train.conftest import EXAMPLE, finish, run_forked

STEPS = 40


def _args(ckpt):
    return ["--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet"]


def _catches(pid: int, sig: int) -> bool:
    """The process has a handler for ``sig`` (its SigCgt mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (sig - 1)))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc to see when handlers are in")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_a_signal_during_start_up_ends_in_exit_75_and_the_rerun_is_exact(tiny, tmp_path, reference_for, sig):
    ckpt = tmp_path / "ckpt"
    # a run to resume: stopped after its checkpoint of step 20 or so
    assert (
        run_forked(
            tiny, _args(ckpt), tmp_path / "first", kill_when=lambda: (ckpt / "step-00000020" / "COMPLETE").exists()
        )
        == 75
    )
    p = subprocess.Popen(
        [sys.executable, str(EXAMPLE), *_args(ckpt)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    t0 = time.monotonic()
    while not _catches(p.pid, signal.SIGTERM) and p.poll() is None and time.monotonic() - t0 < 60:
        time.sleep(0.001)
    time.sleep(random.Random(sig).uniform(0, 0.3))  # somewhere in torch's import
    p.send_signal(sig)
    out, err = p.communicate(timeout=180)
    assert p.returncode == 75, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert f"received {signal.Signals(sig).name} during start-up" in err
    assert "before training (its checkpoint of step" in err
    assert finish(tiny, ckpt, tmp_path / "out", _args(ckpt)) == reference_for(STEPS)


def test_what_runs_before_torchs_import_does_not_import_torch():
    """signals.defer() is the script's first line: it (and the other helpers, and gpuplan.slurm)
    must not pull torch in, or the signal would wait for torch's import after all."""
    code = (
        "import sys, gpuplan.train.signals, gpuplan.train.integrity, gpuplan.train.lock, gpuplan.train.space, "
        "gpuplan.train.requeue, gpuplan.train.validate, gpuplan.train.stall, gpuplan.slurm; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_run_that_ends_on_its_own_leaves_the_finished_marker_and_a_stopped_one_does_not(tiny, tmp_path):
    ckpt = tmp_path / "ckpt"
    stopped = run_forked(
        tiny, _args(ckpt), tmp_path / "first", kill_when=lambda: (ckpt / "step-00000020" / "COMPLETE").exists()
    )
    assert stopped == 75
    assert (ckpt / "requeue.marker").exists() and not (ckpt / "finished.marker").exists()
    assert run_forked(tiny, _args(ckpt), tmp_path / "second") == 0
    assert json.loads((ckpt / "finished.marker").read_text())["step"] == STEPS
    assert not (ckpt / "requeue.marker").exists()  # the rerun removed the stopped run's marker


def test_a_signal_after_the_loop_finished_says_so_not_start_up(capfd):
    signals.clear()
    signals.set_finished(True)
    try:
        signals.record(signal.SIGUSR1, None)
        assert "SIGUSR1 after the training loop finished: nothing left to save" in capfd.readouterr().err
        signals.clear()
        signals.set_finished(False)
        signals.record(signal.SIGUSR1, None)
        assert "SIGUSR1 during start-up" in capfd.readouterr().err
    finally:
        signals.clear()
        signals.set_finished(False)


def test_a_finished_marker_that_cannot_be_written_is_a_warning_not_a_crash(tmp_path, monkeypatch, caplog):
    import torch

    from gpuplan.train import Resilient, requeue

    def refuse(directory, step):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(requeue, "write_finished", refuse)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Resilient(model, opt, checkpoint_dir=tmp_path / "ckpt", every_steps=2, async_save=False) as run:
        while run.step < 3:
            run.end_step()
    assert "could not write finished.marker (Permission denied)" in caplog.text
    assert (tmp_path / "ckpt" / "step-00000003" / "COMPLETE").exists()  # the last step saved all the same
