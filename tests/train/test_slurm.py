"""The sbatch script ``gpuplan slurm`` writes, run for real.

Under a real Slurm (started by the test when root and Slurm is installed), for each launcher
(python: one process; torchrun: 2 ranks): the job in partition ``low`` is preempted by a job in
``high`` (PreemptMode=REQUEUE, GraceTime), checkpoints on SIGTERM and is requeued by Slurm; once
running again it gets the time-limit warning (SIGUSR1 to the batch shell), checkpoints, and the
script requeues it (exit 75, or torchrun's requeue.marker); the third start ends with the checksum
of an uninterrupted run.

Without Slurm, the script's own logic runs with stand-ins for srun and scontrol: it requeues on 75
or on the marker, never on an old marker, and forwards the time-limit SIGUSR1; a warning that
lands after the training finished ends the job as done, not failed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplan.slurm import SlurmJob, sbatch_script
from tests.train.conftest import TORCHRUN, TORCHRUN_STEPS
from tests.train.slurm_cluster import Cluster, missing

ROOT = Path(__file__).resolve().parents[2]

# -- the script's logic, with stand-ins -----------------------------------------------------------------
FAKE_SRUN = """#!/bin/bash
# stand-in for srun + trainer: records the signal it gets, then behaves as $FAKE_MODE says
got=0
trap 'echo TERM >> "$FAKE_LOG"; got=1' TERM
trap 'echo USR1 >> "$FAKE_LOG"; got=1' USR1
touch "$FAKE_LOG.started"  # the test signals from now on
case "$FAKE_MODE" in
  exit75) exit 75 ;;
  marker1) echo '{}' > "$CKPT_DIR/requeue.marker"; exit 1 ;;
  crash) exit 1 ;;
  wait) while [ $got = 0 ]; do sleep 0.05; done; echo '{}' > "$CKPT_DIR/requeue.marker"; exit 1 ;;
  # the loop ended on its own; the signal lands during shutdown and torchrun's agent exits 1 on it
  finished) echo '{}' > "$CKPT_DIR/finished.marker"; while [ $got = 0 ]; do sleep 0.05; done; exit 1 ;;
  # a crash after a signal, with no finished loop (an old finished.marker is removed before the start)
  crash_on_signal) while [ $got = 0 ]; do sleep 0.05; done; exit 1 ;;
esac
"""
FAKE_SCONTROL = """#!/bin/bash
echo "$@" >> "$FAKE_LOG.scontrol"
[ "$1" = show ] && echo localhost
exit 0
"""


def _script_env(tmp_path: Path, mode: str) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        SLURM_JOB_ID="7",
        SLURM_NNODES="1",
        SLURM_JOB_NODELIST="localhost",
        FAKE_MODE=mode,
        FAKE_LOG=str(tmp_path / "log"),
    )


def _script(tmp_path: Path, launcher: str) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    job = SlurmJob(command=("train.py",), launcher=launcher, gpus_per_node=0, checkpoint_dir=str(ckpt))
    path = tmp_path / "job.sbatch"
    path.write_text(sbatch_script(job))
    return path


def _requeued(tmp_path: Path) -> bool:
    log = tmp_path / "log.scontrol"
    return log.exists() and "requeue 7" in log.read_text()


@pytest.mark.parametrize("mode, code, requeue", [("exit75", 75, True), ("marker1", 75, True), ("crash", 1, False)])
def test_the_script_requeues_on_exit_75_or_the_marker_and_not_on_a_crash(tmp_path, mode, code, requeue):
    script = _script(tmp_path, "torchrun")
    (tmp_path / "ckpt" / "requeue.marker").write_text("{}")  # an old one: removed before the trainer starts
    r = subprocess.run(
        ["bash", str(script)], env=_script_env(tmp_path, mode), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == code, r.stdout + r.stderr
    assert _requeued(tmp_path) == requeue
    assert not (tmp_path / "ckpt" / "requeue.marker").exists()


def _warned(tmp_path: Path, script: Path, mode: str) -> tuple[int, str]:
    """Run the script with the stand-in trainer in ``mode``, send it the time-limit SIGUSR1 (what
    --signal=B:USR1@120 does) once the trainer has started; (exit code, output)."""
    p = subprocess.Popen(
        ["bash", str(script)],
        env=_script_env(tmp_path, mode),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    t0 = time.monotonic()
    while not (tmp_path / "log.started").exists():
        assert time.monotonic() - t0 < 30 and p.poll() is None
        time.sleep(0.02)
    p.send_signal(signal.SIGUSR1)
    out, _ = p.communicate(timeout=60)
    return p.returncode, out


@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_the_time_limit_warning_is_forwarded_and_the_marker_requeues(tmp_path, launcher):
    code, out = _warned(tmp_path, _script(tmp_path, launcher), "wait")
    assert code == 75, out
    assert (tmp_path / "log").read_text().split() == ["USR1"]
    assert _requeued(tmp_path)


@pytest.mark.parametrize("mode, code", [("finished", 0), ("crash_on_signal", 1)])
def test_a_warning_after_the_training_finished_ends_the_job_as_done_and_a_crash_still_fails(tmp_path, mode, code):
    script = _script(tmp_path, "torchrun")
    (tmp_path / "ckpt" / "finished.marker").write_text("{}")  # an old one: removed before the trainer starts
    got, out = _warned(tmp_path, script, mode)
    assert got == code, out
    assert not _requeued(tmp_path)
    assert ("had finished when SIGUSR1 came" in out) == (code == 0)


# -- a real Slurm ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(missing() is not None, reason=f"no real Slurm here: {missing()}")
@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_preempted_then_warned_of_the_time_limit_requeued_twice_resumes_to_the_same_checksum(
    tmp_path, launcher, reference_for, request
):
    if launcher == "torchrun":
        if TORCHRUN is None:
            pytest.skip("torchrun is not installed")
        steps, seed, every = TORCHRUN_STEPS, 0, 20
        expected = request.getfixturevalue("torchrun_reference")
        shape = ["--launcher", "torchrun", "--gpus-per-node", "0", "--procs-per-node", "2"]
    else:
        steps, seed, every = 400, 3, 50
        expected = reference_for(steps, seed=seed)
        shape = ["--launcher", "python", "--gpus-per-node", "0"]
    example = [
        "examples/train_tiny.py",
        "--steps",
        str(steps),
        "--checkpoint-every",
        str(every),
        "--seed",
        str(seed),
        "--quiet",
    ]
    ckpt = tmp_path / "ckpt"
    script = tmp_path / "low.sbatch"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan.cli",
            "slurm",
            *shape,
            "--partition",
            "low",
            "--job-name",
            "tiny",
            "--checkpoint-dir",
            str(ckpt),
            "--output",
            str(script),
            "--",
            *example,
        ],
        cwd=ROOT,
        check=True,
    )

    def newest() -> int:
        return max((int(p.parent.name[5:]) for p in ckpt.glob("step-*/COMPLETE")), default=0)

    def back_to_running(c, job, what):
        c.wait_for(lambda: c.state(job) == "PENDING", 120, f"the job to wait in the queue after {what}")
        requeued_at = time.time()
        # the last run must be cleaned up (the node idle, not completing), or the next start's
        # credential is refused ("Job 1 already killed, do not launch batch job")
        c.wait_for(
            lambda: (
                c.sh("sinfo", "-h", "-o", "%t").stdout.strip() == "idle"
                and subprocess.run(["pgrep", "-f", rf"slurmstepd: \[{job}\."]).returncode != 0
            ),
            60,
            f"the job's last run to end after {what}",
        )
        # slurmd refuses a launch credential made in the same second the job's last run was revoked
        # (slurm_cred.c: a credential is revoked when its ctime <= the job's revoke time, both in
        # whole seconds): "Job ... already killed, do not launch batch job", and slurmctld then
        # ends the job as failed. Under load the update below came within that second
        time.sleep(max(0.0, requeued_at + 2.0 - time.time()))
        upd = c.sh("scontrol", "update", f"JobId={job}", "StartTime=now")  # BeginTime: skip the requeue delay
        assert upd.returncode == 0 or c.state(job) != "PENDING", upd.stderr

    with Cluster(tmp_path / "slurm", grace_s=30) as c:
        c.env.update(PYTHON=sys.executable, TORCHRUN=TORCHRUN or "torchrun", MASTER_PORT=str(_free_port()))
        cpus = str(os.cpu_count() or 1)  # each job takes the whole node: the high one must preempt
        low = c.submit("-c", cpus, "--chdir", str(ROOT), "--output", str(tmp_path / "low.out"), str(script))
        c.wait_for(lambda: newest() > 0, 180, "the low job's first checkpoint")
        high = c.submit("-p", "high", "-c", cpus, "--output", str(tmp_path / "high.out"), "--wrap", "sleep 3")
        c.wait_for(
            lambda: c.state(low) in ("PENDING", "REQUEUED") and c.state(high) in ("RUNNING", "COMPLETED"),
            120,
            "the low job to be preempted and requeued",
        )
        first_stop = newest()
        c.wait_for(lambda: c.state(high) == "COMPLETED", 120, "the high job")
        back_to_running(c, low, "the preemption")
        c.wait_for(
            lambda: c.state(low) == "RUNNING" and newest() > first_stop,
            180,
            "the low job to resume and checkpoint again",
        )
        sig = c.sh("scancel", "--batch", "--signal=USR1", str(low))  # the time-limit warning
        assert sig.returncode == 0, sig.stderr
        c.wait_for(lambda: c.state(low) in ("PENDING", "REQUEUED", "COMPLETED"), 120, "the script to requeue the job")
        # a finished run is not requeued (the script ends it as done): the test needs steps left
        assert c.state(low) != "COMPLETED", "the run finished before the time-limit warning: give it more steps"
        back_to_running(c, low, "the time-limit warning")
        c.wait_for(lambda: c.state(low) == "COMPLETED", 300, "the low job to resume and finish")
        restarts = c.sh("scontrol", "show", "job", str(low)).stdout
    log = (tmp_path / "low.out").read_text()
    assert "on SIGTERM after a checkpoint" in log, log[-3000:]  # the preemption
    assert "got SIGUSR1" in log and "requeueing" in log, log[-3000:]  # the script's requeue
    assert log.count("resumed from step-") >= 2, log[-3000:]
    assert "Restarts=2" in restarts
    assert log.strip().splitlines()[-1] == expected
    assert not (ckpt / "requeue.marker").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
