"""A full disk at every stage of a save: the save fails, its temporary directory goes, the log
says what failed and which checkpoint is intact, training goes on and ends with the uninterrupted
checksum. Injected (an OSError(ENOSPC), or torch.save's own error, at each stage) everywhere, and
for real on a small tmpfs when root can mount one."""

import errno
import json
import os
import pathlib
import signal
import subprocess

import pytest

from tests.train.conftest import checksum, finish, run_forked, says

STEPS = 60
torch = pytest.importorskip("torch")


def _args(ckpt, *extra):
    return ["--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet", *extra]


def _enospc():
    return OSError(errno.ENOSPC, "No space left on device")


def inject(monkeypatch, stage: str, failing) -> None:
    """Make ``stage`` of a save fail whenever ``failing()`` says so (called once per save)."""
    from torch.distributed.checkpoint import filesystem

    from gpuplan.train import checkpoint

    def wrap(owner, name, applies=lambda *a, **k: True, error=_enospc):
        real = getattr(owner, name)

        def fake(*a, **k):
            if applies(*a, **k) and failing():
                raise error()
            return real(*a, **k)

        monkeypatch.setattr(owner, name, fake)

    if stage == "directory":
        # the runtime's mkdir (DCP makes it again, with exist_ok)
        wrap(pathlib.Path, "mkdir", lambda self, *a, **k: self.name.startswith(".tmp-") and not k.get("exist_ok"))
    elif stage == "shards":
        wrap(filesystem.FileSystemWriter, "write_data")
    elif stage == "metadata":
        wrap(filesystem.FileSystemWriter, "finish")
    elif stage == "state file":  # what torch.save raises on ENOSPC: not an OSError
        wrap(
            torch,
            "save",
            lambda obj, f, *a, **k: str(f).endswith("extra.pt"),
            lambda: RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4352 vs 4240"),
        )
    elif stage == "fsync":  # ENOSPC from fsync: NFS, thin provisioning
        wrap(checkpoint, "_fsync_tree")
    elif stage == "marker":
        wrap(json, "dump", lambda obj, fp, *a, **k: getattr(fp, "name", "").endswith("COMPLETE"))
    elif stage == "rename":
        wrap(os, "rename", lambda src, dst, *a, **k: pathlib.Path(src).name.startswith(".tmp-step"))
    else:
        raise ValueError(stage)


STAGES = ["directory", "shards", "metadata", "state file", "fsync", "marker", "rename"]


def _saves_fail(numbers):
    calls = {"n": 0}

    def failing():
        calls["n"] += 1
        return calls["n"] in numbers

    return failing


def _verified(ckpt):
    """Steps of the complete checkpoints, each verified against its marker."""
    from gpuplan.train import integrity
    from gpuplan.train.checkpoint import complete

    out = []
    for step, path in complete(ckpt):
        integrity.verify(path, json.loads((path / "COMPLETE").read_text())["files"])
        out.append(step)
    return out


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("stage", STAGES)
def test_a_save_that_fails_at_any_stage_is_reported_cleaned_up_and_training_goes_on(
    tiny, tmp_path, monkeypatch, reference_for, stage, mode
):
    inject(monkeypatch, stage, _saves_fail({2, 3}))  # the saves of steps 20 and 30
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert run_forked(tiny, _args(ckpt, *(["--sync"] if mode == "sync" else [])), out) == 0, out.read_text()[-2000:]
    log = out.read_text()
    assert "Traceback" not in log
    assert "checkpoint of step 20 failed" in log and "checkpoint of step 30 failed" in log, log
    assert "the previous checkpoint (step 10) is intact" in log and "2 failed in a row" in log
    assert ("RuntimeError: [enforce fail" if stage == "state file" else "no space left on device") in log
    assert checksum(out) == reference_for(STEPS)
    assert not list(ckpt.glob(".tmp-*"))
    assert _verified(ckpt) == [60, 50]  # saving came back


def test_a_signal_after_failed_saves_says_the_checkpoint_failed_and_what_a_rerun_loses(
    tiny, tmp_path, monkeypatch, reference_for
):
    inject(monkeypatch, "shards", _saves_fail(set(range(2, 100))))  # every save after the first
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    code = run_forked(tiny, _args(ckpt), out, kill_when=lambda: says(out, "checkpoint of step 20 failed"))
    log = out.read_text()
    assert code == 75, log
    stop = [line for line in log.splitlines() if "stopped at step" in line]
    assert len(stop) == 1 and "after a checkpoint" not in stop[0]
    assert "WITHOUT a checkpoint of this step (checkpoint of step" in stop[0]
    assert "a rerun resumes from step 10" in stop[0]
    marker = json.loads((ckpt / "requeue.marker").read_text())
    assert marker["checkpointed"] is False and marker["signal"] == "SIGTERM"
    monkeypatch.undo()  # the disk has room again
    assert finish(tiny, ckpt, out, _args(ckpt)) == reference_for(STEPS)


# -- a real full disk ---------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """mount(bytes) -> a directory on a tmpfs of that size; skips when this is not root or the
    kernel refuses the mount (a container without CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected ENOSPC tests cover every stage")
    mounted = []

    def mount(size: int) -> pathlib.Path:
        d = tmp_path / f"disk{len(mounted)}"
        d.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True
        )
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(d)
        return d

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


@pytest.fixture(scope="module")
def checkpoint_bytes(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("size")
    assert (
        run_forked(
            tiny, ["--steps", "10", "--checkpoint-every", "10", "--checkpoint-dir", str(d / "c"), "--quiet"], d / "out"
        )
        == 0
    )
    return json.loads((d / "c" / "step-00000010" / "COMPLETE").read_text())["bytes"]


def _fill(disk: pathlib.Path, name: str = "filler") -> None:
    """Fill the disk to the last byte. A run killed mid-save may have filled it already, so even
    creating the file can hit ENOSPC: that is the full disk asked for, not a failure."""
    try:
        with open(disk / name, "wb") as f:
            while True:
                f.write(b"\xff" * 65536)
                f.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC


# sizes in checkpoints: none fits; one, but not with its extra file; one; exactly two (the kept
# ones: room is made before each write); plenty
@pytest.mark.parametrize("size", [0.5, 1.0, 1.5, 2.05, 3.5])
def test_on_a_small_disk_training_ends_exactly_and_saves_go_on_once_two_fit(
    tiny, tmp_path, small_disk, checkpoint_bytes, reference_for, size
):
    disk = small_disk(int(size * checkpoint_bytes) + 16384)
    out = tmp_path / "out"
    assert run_forked(tiny, _args(disk / "ckpt"), out) == 0, out.read_text()[-2000:]
    log = out.read_text()
    assert "Traceback" not in log and checksum(out) == reference_for(STEPS)
    assert not list((disk / "ckpt").glob(".tmp-*"))
    steps = _verified(disk / "ckpt")
    if size >= 2:  # protection never freezes: the last save is the final step's
        assert steps[0] == STEPS, log
    else:
        assert len(steps) <= 1 and "failed" in log
        if steps:
            assert "not enough for one more checkpoint" in log


def test_a_restart_on_a_full_disk_resumes_and_trains(tiny, tmp_path, small_disk, checkpoint_bytes, reference_for):
    disk = small_disk(int(3.5 * checkpoint_bytes))
    ckpt, out = disk / "ckpt", tmp_path / "out"
    code = run_forked(tiny, _args(ckpt), out, kill_when=lambda: (ckpt / "step-00000030" / "COMPLETE").exists())
    assert code == 75
    _fill(disk)
    code = run_forked(tiny, _args(ckpt), out)
    log = out.read_text()
    assert code == 0 and "not writable" not in log and "resumed from step-" in log, log
    assert checksum(out) == reference_for(STEPS)
    assert _verified(ckpt)  # room made by removing the older checkpoint, never the newest


def test_a_crashed_runs_temporary_directory_is_removed_at_start_and_gives_the_space_back(
    tiny, tmp_path, small_disk, checkpoint_bytes, reference_for
):
    disk = small_disk(int(3.5 * checkpoint_bytes))
    ckpt, out = disk / "ckpt", tmp_path / "out"
    code = run_forked(
        tiny, _args(ckpt), out, kill_when=lambda: (ckpt / "step-00000030" / "COMPLETE").exists(), sig=signal.SIGKILL
    )
    assert code == -signal.SIGKILL
    (ckpt / ".tmp-step-00000035").mkdir(exist_ok=True)
    _fill(ckpt / ".tmp-step-00000035", "__0_0.distcp")  # a save killed while it filled the disk
    assert run_forked(tiny, _args(ckpt), out) == 0
    log = out.read_text()
    assert "failed" not in log and checksum(out) == reference_for(STEPS)
    assert not list(ckpt.glob(".tmp-*")) and _verified(ckpt)[0] == STEPS


def test_a_failure_after_the_rename_leaves_the_checkpoint_committed_and_says_so(tmp_path, monkeypatch, caplog):
    # the rename is the commit: syncing the directory or pruning older checkpoints failing after it
    # was logged as "checkpoint of step N failed ... the previous checkpoint (step N) is intact"
    from gpuplan.train import checkpoint
    from gpuplan.train.checkpoint import CheckpointManager

    def full(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(CheckpointManager, "_prune", full)
    t = torch.nn.Linear(2, 2)
    with caplog.at_level("WARNING", logger="gpuplan.train"):
        with CheckpointManager(tmp_path / "c", async_save=False) as m:
            m.save(10, {"model": t.state_dict()}, {"step": 10})
    assert m.committed == 10 and m.last_error is None
    assert "checkpoint of step 10 committed, but" in caplog.text and "failed:" not in caplog.text
    assert [s for s, _ in checkpoint.complete(tmp_path / "c")] == [10]
