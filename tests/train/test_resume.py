"""Preempt the example at random points and resume: the result is bit-identical to an
uninterrupted run; a killed checkpoint write never counts; a full disk loses nothing."""

import errno
import json
import random
import signal

import pytest

from tests.train.conftest import checksum, run_forked

STEPS = 120


def _args(ckpt, *extra):
    return ["--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet", *extra]


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("ref")
    assert run_forked(tiny, _args(d / "ckpt"), d / "out") == 0
    ref = checksum(d / "out")
    assert ref and len(ref) == len("final_checksum=") + 64
    return ref


def _finish(tiny, ckpt, out, extra=()):
    for _ in range(5):
        code = run_forked(tiny, _args(ckpt, *extra), out)
        if code == 0:
            return checksum(out)
    raise AssertionError(f"never finished; last exit {code}: {out.read_text()[-500:]}")


def test_sigterm_at_8_random_points_then_resume_gives_the_same_checksum(tiny, tmp_path, reference):
    rng = random.Random(7)
    for i in range(8):  # more in benchmarks/fault_campaign.py
        ckpt, out = tmp_path / f"c{i}", tmp_path / f"o{i}"
        if i % 4 == 3:  # while a checkpoint is being written
            code = run_forked(tiny, _args(ckpt), out, kill_when=lambda c=ckpt: any(c.glob(".tmp-*")))
        else:
            code = run_forked(
                tiny, _args(ckpt, "--sync" if i % 2 else "--quiet"), out, kill_after=rng.uniform(0.01, 0.6)
            )
        # 75: stopped after a checkpoint; -SIGTERM: killed before the runtime installed its handler
        # (nothing trained yet); 0: finished first
        assert code in (0, 75, -signal.SIGTERM), out.read_text()[-800:]
        assert _finish(tiny, ckpt, out) == reference


def test_sigkill_during_saves_never_leaves_a_partial_checkpoint_taken_for_complete(tiny, tmp_path, reference):
    from gpuplan.train import CheckpointManager

    torch = pytest.importorskip("torch")
    rng = random.Random(11)
    ckpt = tmp_path / "ckpt"
    args = ["--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1", "--quiet"]
    model = tiny.TinyGPT()
    opt = torch.optim.AdamW(model.parameters())
    from torch.distributed.checkpoint.state_dict import get_state_dict

    kills = 0
    while kills < 25:  # more in benchmarks/fault_campaign.py
        code = run_forked(tiny, args, tmp_path / "out", kill_after=rng.uniform(0.005, 0.15), sig=signal.SIGKILL)
        if code == 0:  # finished before the kill: start over
            assert checksum(tmp_path / "out") == reference
            for p in ckpt.iterdir():
                __import__("shutil").rmtree(p)
            continue
        assert code == -signal.SIGKILL
        kills += 1
        with CheckpointManager(ckpt) as m:  # also removes the killed run's temporary directory
            done = m.complete()
            if done:
                msd, osd = get_state_dict(model, opt)
                state = {"model": msd, "optim": osd}
                step, extra = m.load_latest(state)
                assert step == done[0][0] == extra["step"]
        assert not list(ckpt.glob(".tmp-*"))
    assert _finish(tiny, ckpt, tmp_path / "out", ("--checkpoint-every", "1")) == reference


@pytest.mark.parametrize("mode", ["--sync", "--quiet"])
def test_a_full_disk_is_reported_keeps_the_previous_checkpoint_and_loses_no_training(
    tiny, tmp_path, reference, monkeypatch, caplog, mode
):
    from torch.distributed.checkpoint import filesystem

    real = filesystem.FileSystemWriter.write_data
    calls = {"n": 0}

    def full_disk(self, plan, planner):
        calls["n"] += 1
        if calls["n"] >= 3:  # the first two checkpoints fit, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, plan, planner)

    monkeypatch.setattr(filesystem.FileSystemWriter, "write_data", full_disk)
    ckpt = tmp_path / "ckpt"
    import contextlib
    import io

    buf = io.StringIO()
    with caplog.at_level("ERROR", logger="gpuplan.train"), contextlib.redirect_stdout(buf):
        assert tiny.main(_args(ckpt, mode)) == 0
    assert "no space left on device" in caplog.text and "previous checkpoint (step 20) is intact" in caplog.text
    assert buf.getvalue().strip().splitlines()[-1] == reference  # training state was not lost
    from gpuplan.train import CheckpointManager

    assert [s for s, _ in CheckpointManager(ckpt).complete()] == [20, 10]


def test_bad_checkpoint_directories_are_refused_or_fall_back_loudly(tiny, tmp_path, caplog):
    import json

    from gpuplan.train import CheckpointError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CheckpointError) as e:  # a path under a file cannot be a directory
        tiny.main(["--steps", "2", "--checkpoint-dir", str(blocker / "ckpt"), "--quiet"])
    assert e.value.field == "checkpoint_dir" and "not writable" in str(e.value)

    ckpt = tmp_path / "ckpt"
    assert tiny.main(["--steps", "20", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet"]) == 0
    with pytest.raises(CheckpointError) as e:  # another run's checkpoints (a different seed: another config)
        tiny.main(["--steps", "20", "--checkpoint-dir", str(ckpt), "--seed", "1", "--quiet"])
    assert "different model or config" in str(e.value) and "`restart`" in str(e.value)
    assert tiny.main(["--steps", "20", "--checkpoint-dir", str(ckpt), "--seed", "1", "--restart", "--quiet"]) == 0

    fresh = tmp_path / "fresh"
    args = ["--steps", "20", "--checkpoint-dir", str(fresh), "--checkpoint-every", "10", "--quiet"]
    assert tiny.main(args) == 0
    (fresh / "step-00000020" / "COMPLETE").write_text("{not json")  # a corrupt marker on the newest
    with caplog.at_level("WARNING", logger="gpuplan.train"):
        assert tiny.main(args) == 0
    assert "corrupt marker" in caplog.text and "resumed from step-00000010" in caplog.text
    assert json.loads((fresh / "step-00000020" / "COMPLETE").read_text())["step"] == 20  # rewritten


def test_a_loop_ending_between_checkpoints_saves_its_last_step_and_a_rerun_trains_no_more(
    tiny, tmp_path, reference_for
):
    # Megatron-LM and torchtitan save the last iteration too: a finished job that runs again (a
    # requeue after it ended) must find the finished state, not redo the steps since the last interval
    ckpt, out, telemetry = tmp_path / "ckpt", tmp_path / "out", tmp_path / "steps.jsonl"
    argv = ["--steps", "25", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet"]
    argv += ["--telemetry", str(telemetry)]
    assert run_forked(tiny, argv, out) == 0
    assert checksum(out) == reference_for(25)
    assert sorted(p.name for p in ckpt.glob("step-*")) == ["step-00000020", "step-00000025"]

    def steps_trained() -> int:
        return sum(1 for line in telemetry.read_text().splitlines() if json.loads(line)["type"] == "step")

    assert steps_trained() == 25
    assert run_forked(tiny, argv, out) == 0
    assert checksum(out) == reference_for(25)
    assert steps_trained() == 25  # the rerun resumed at step 25 and trained nothing
    assert sorted(p.name for p in ckpt.glob("step-*")) == ["step-00000020", "step-00000025"]
