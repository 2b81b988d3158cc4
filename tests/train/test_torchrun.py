"""Under torchrun (2 processes, gloo on CPU): SIGTERM to the launcher mid-run, every rank stops at
the same step after a collective checkpoint, and the rerun ends with the uninterrupted checksum."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")


def _torchrun(ckpt: Path, steps: int, term: bool = False) -> tuple[int, str]:
    cmd = [TORCHRUN, "--nproc-per-node", "2", "--standalone", str(EXAMPLE), "--steps", str(steps),
           "--checkpoint-dir", str(ckpt), "--checkpoint-every", "20", "--quiet"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    if term:  # mid-run: once the first checkpoint is committed
        t0 = time.monotonic()
        while p.poll() is None and not any(ckpt.glob("step-*/COMPLETE")) and time.monotonic() - t0 < 120:
            time.sleep(0.02)
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)  # what a scheduler sends the launcher
    try:
        out, _ = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise
    return p.returncode, out


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")
def test_torchrun_preempted_and_resumed_gives_the_uninterrupted_checksum(tmp_path):
    steps = 600
    code, ref = _torchrun(tmp_path / "ref", steps)
    assert code == 0, ref[-2000:]
    ref_sum = [l for l in ref.splitlines() if l.startswith("final_checksum=")]
    assert ref_sum
    code, out = _torchrun(tmp_path / "run", steps, term=True)
    assert code != 0, "the run finished before the SIGTERM: lengthen it"
    assert "stopped at step" in out, out[-2000:]
    stops = {l.split("stopped at step ")[1].split()[0] for l in out.splitlines() if "stopped at step" in l}
    assert len(stops) == 1  # both ranks stopped at the same step
    code, out = _torchrun(tmp_path / "run", steps)
    assert code == 0, out[-2000:]
    assert [l for l in out.splitlines() if l.startswith("final_checksum=")] == ref_sum
