"""Under torchrun (2 processes, gloo on CPU): the agent gets SIGTERM (forwarded to the workers),
SIGUSR1 (which older agents do not handle: they die) and SIGKILL, one after the other on one run.
Every time both workers stop at the same step after a collective checkpoint, none outlives its
agent, rank 0 leaves ``requeue.marker`` (the agent's own exit code is not 75), and the final rerun
ends with the uninterrupted checksum."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.train.conftest import EXAMPLE, TORCHRUN, TORCHRUN_STEPS

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")
STEPS = TORCHRUN_STEPS


def _launch(ckpt: Path, out: Path) -> subprocess.Popen:
    cmd = [
        TORCHRUN,
        "--nproc-per-node",
        "2",
        "--standalone",
        str(EXAMPLE),
        "--steps",
        str(STEPS),
        "--checkpoint-dir",
        str(ckpt),
        "--checkpoint-every",
        "20",
        "--quiet",
    ]
    return subprocess.Popen(cmd, stdout=open(out, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _newest(ckpt: Path) -> int:
    return max((int(p.parent.name[5:]) for p in ckpt.glob("step-*/COMPLETE")), default=0)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to find the workers")
def test_the_agent_terminated_signalled_or_killed_never_orphans_workers_and_the_run_resumes_exactly(
    tmp_path, torchrun_reference
):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    last = 0
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGKILL):
        p = _launch(ckpt, out)
        try:
            t0 = time.monotonic()
            while _newest(ckpt) <= last or len(_children(p.pid)) < 2:  # a new checkpoint of this run
                assert p.poll() is None, f"ended before the {sig.name}: {out.read_text()[-2000:]}"
                assert time.monotonic() - t0 < 180
                time.sleep(0.02)
            workers = _children(p.pid)
            os.kill(p.pid, sig)
            p.wait(timeout=120)
            t0 = time.monotonic()
            while any(_alive(w) for w in workers):  # no orphan keeps training
                assert time.monotonic() - t0 < 60, f"workers outlived the agent after {sig.name}"
                time.sleep(0.05)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        log = out.read_text()
        stops = {line.split("stopped at step ")[1].split()[0] for line in log.splitlines() if "stopped at step" in line}
        assert len(stops) == 1, log[-3000:]  # both ranks at the same step
        marker = json.loads((ckpt / "requeue.marker").read_text())
        assert marker["checkpointed"] and marker["step"] == int(stops.pop()) > last
        assert _newest(ckpt) == marker["step"]
        last = marker["step"]
    p = _launch(ckpt, out)
    assert p.wait(timeout=300) == 0, out.read_text()[-2000:]
    assert [line for line in out.read_text().splitlines() if line.startswith("final_checksum=")] == [torchrun_reference]
    assert not (ckpt / "requeue.marker").exists()  # a start removes a stale one
