"""One writer per checkpoint directory, and runs that do not mix: a second trainer on a directory
in use exits 2 naming the holder (the first ends exactly as alone); a killed holder's lock goes
with it; --restart moves the old run aside so that its checkpoints never outrank the new run's."""

import json
import signal
import time

import pytest

from tests.train.conftest import checksum, finish, run_forked, says, spawn_forked, wait_forked

STEPS = 60


def _args(ckpt, *extra):
    return ["--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet", *extra]


def test_a_second_trainer_on_the_same_directory_exits_2_naming_the_holder(tiny, tmp_path, reference_for):
    ckpt = tmp_path / "ckpt"
    first = spawn_forked(tiny, _args(ckpt), tmp_path / "first")
    try:
        t0 = time.monotonic()
        while not says(ckpt / ".lock", f'"pid": {first}'):  # it holds the directory
            assert time.monotonic() - t0 < 60, (tmp_path / "first").read_text()
            time.sleep(0.01)
        code = run_forked(tiny, _args(ckpt), tmp_path / "second")
    finally:
        assert wait_forked(first) == 0
    second = (tmp_path / "second").read_text()
    assert code == 2, second
    lines = [line for line in second.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: checkpoint_dir:")
    assert "in use by another trainer" in lines[0] and f"pid {first} on " in lines[0]
    assert checksum(tmp_path / "first") == reference_for(STEPS)
    kept = sorted(p.name for p in ckpt.iterdir() if not p.name.startswith("."))
    assert kept == ["finished.marker", "step-00000050", "step-00000060"]  # the refused one left nothing


def test_the_lock_of_a_killed_trainer_is_gone_and_the_next_one_resumes(tiny, tmp_path, reference_for):
    ckpt = tmp_path / "ckpt"
    code = run_forked(
        tiny,
        _args(ckpt),
        tmp_path / "out",
        sig=signal.SIGKILL,
        kill_when=lambda: (ckpt / "step-00000020" / "COMPLETE").exists(),
    )
    assert code == -signal.SIGKILL
    assert json.loads((ckpt / ".lock").read_text())["pid"]  # the file stays; the kernel dropped the lock
    assert finish(tiny, ckpt, tmp_path / "out", _args(ckpt)) == reference_for(STEPS)


def test_restart_moves_the_old_run_aside_so_the_new_runs_checkpoints_are_kept(tiny, tmp_path, reference_for):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert run_forked(tiny, _args(ckpt), out) == 0  # an old run, finished: its steps (50, 60) outrank the new
    new = ["--steps", "30", "--seed", "1", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet"]
    code = run_forked(tiny, [*new, "--restart"], out, kill_when=lambda: (ckpt / "step-00000020" / "COMPLETE").exists())
    assert code == 75 and "moved the previous run's 2 checkpoint(s)" in out.read_text()
    old = list(ckpt.glob("old-runs/*"))
    assert len(old) == 1 and sorted(p.name for p in old[0].iterdir()) == ["step-00000050", "step-00000060"]
    assert [p.name for p in sorted(ckpt.glob("step-*"))][-1] >= "step-00000020"
    assert finish(tiny, ckpt, out, new) == reference_for(30, seed=1)  # resumes the new run, not the old


def test_a_trainer_locked_without_room_for_its_lock_file_still_excludes_the_next(tmp_path, monkeypatch):
    # the first finds the disk too full to create .lock and holds the directory alone; space comes
    # back (it removed a stale partial checkpoint), the second creates .lock: it must still be refused
    import errno
    import os

    from gpuplan.train.lock import LOCK, DirectoryLock, LockHeld

    real = os.open

    def full(path, flags, *a):
        if str(path).endswith(LOCK) and flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, flags, *a)

    monkeypatch.setattr(os, "open", full)
    first = DirectoryLock(tmp_path).acquire()
    monkeypatch.setattr(os, "open", real)
    with pytest.raises(LockHeld):
        DirectoryLock(tmp_path).acquire()
    first.release()
    DirectoryLock(tmp_path).acquire().release()
