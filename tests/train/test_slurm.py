"""Under a real Slurm: the example job in partition ``low`` is preempted by a job in ``high``
(PreemptMode=REQUEUE, GraceTime), receives SIGTERM, checkpoints, is requeued, resumes and ends with
the checksum of an uninterrupted run. The sbatch script is the one ``gpuplan slurm`` writes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.slurm_cluster import Cluster, missing

ROOT = Path(__file__).resolve().parents[2]
STEPS = "1500"


@pytest.mark.skipif(missing() is not None, reason=f"no real Slurm here: {missing()}")
def test_preempted_by_a_higher_tier_then_requeued_resumes_to_the_same_checksum(tmp_path):
    example = ["examples/train_tiny.py", "--steps", STEPS, "--checkpoint-every", "100", "--seed", "3", "--quiet"]
    ref = subprocess.run([sys.executable, *example, "--checkpoint-dir", str(tmp_path / "ref")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    expected = ref.stdout.strip().splitlines()[-1]
    assert expected.startswith("final_checksum=")

    script = tmp_path / "low.sbatch"
    subprocess.run([sys.executable, "-m", "gpuplan.cli", "slurm", "--launcher", "python", "--gpus-per-node", "0",
                    "--partition", "low", "--job-name", "tiny", "--checkpoint-dir", str(tmp_path / "ckpt"),
                    "--output", str(script), "--", *example], cwd=ROOT, check=True)
    with Cluster(tmp_path / "slurm", grace_s=30) as c:
        c.env["PYTHON"] = sys.executable
        cpus = str(os.cpu_count() or 1)  # each job takes the whole node: the high one must preempt
        low = c.submit("-c", cpus, "--chdir", str(ROOT), "--output", str(tmp_path / "low.out"), str(script))
        c.wait_for(lambda: any((tmp_path / "ckpt").glob("step-*/COMPLETE")), 120, "the low job's first checkpoint")
        high = c.submit("-p", "high", "-c", cpus, "--output", str(tmp_path / "high.out"), "--wrap", "sleep 3")
        c.wait_for(lambda: c.state(low) in ("PENDING", "REQUEUED") and c.state(high) in ("RUNNING", "COMPLETED"),
                   120, "the low job to be preempted and requeued")
        c.wait_for(lambda: c.state(low) == "PENDING", 60, "the low job to wait in the queue")
        upd = c.sh("scontrol", "update", f"JobId={low}", "StartTime=now")  # BeginTime: skip the requeue delay
        assert upd.returncode == 0 or c.state(low) != "PENDING", upd.stderr
        c.wait_for(lambda: c.state(high) == "COMPLETED", 120, "the high job")
        c.wait_for(lambda: c.state(low) == "COMPLETED", 300, "the low job to resume and finish")
        restarts = c.sh("scontrol", "show", "job", str(low)).stdout
    log = (tmp_path / "low.out").read_text()
    assert "stopped at step" in log and "on SIGTERM" in log, log[-3000:]
    assert "resumed from step-" in log, log[-3000:]
    assert "Restarts=1" in restarts
    assert log.strip().splitlines()[-1] == expected
