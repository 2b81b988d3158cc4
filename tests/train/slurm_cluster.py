"""A single-node Slurm started by the test itself: munged, slurmctld and slurmd as root in a
temporary directory, partitions ``low`` (PriorityTier=1, PreemptMode=REQUEUE, GraceTime) and
``high`` (PriorityTier=10)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

CONF = """\
ClusterName=gpuplantest
FirstJobId={first_job}
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=5
InactiveLimit=0
MinJobAge=600
NodeName={host} CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=low Nodes={host} Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime={grace} MaxTime=INFINITE State=UP
PartitionName=high Nodes={host} PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
"""


def missing() -> str | None:
    """Why a real Slurm cannot be started here, or None."""
    if os.geteuid() != 0:
        return "not root: slurmctld/slurmd/munged need root"
    for binary in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue"):
        if not shutil.which(binary) and not Path(f"/usr/sbin/{binary}").exists():
            return f"{binary} is not installed (apt-get install slurm-wlm munge)"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key (mungekey --create)"
    return None


def _which(b: str) -> str:
    return shutil.which(b) or f"/usr/sbin/{b}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, d: Path, grace_s: int = 30):
        self.d = d
        self.host = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen] = []
        # Job ids of their own: a step daemon left by an earlier run that was killed (it outlives
        # its slurmd) would otherwise take job 1 of this cluster for its own and the job never ends
        self.first_job = random.randint(1_000, 60_000_000)
        self.jobs: list[int] = []
        for sub in ("state", "spool"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self.conf = d / "slurm.conf"
        self.conf.write_text(
            CONF.format(
                host=self.host,
                d=d,
                ctld_port=_free_port(),
                d_port=_free_port(),
                cpus=os.cpu_count() or 1,
                grace=grace_s,
                first_job=self.first_job,
            )
        )
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def __enter__(self) -> Cluster:
        run = Path("/run/munge")
        run.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
            subprocess.run([_which("munged"), "--force"], check=True, capture_output=True)
        self.procs.append(
            subprocess.Popen(
                [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        )
        time.sleep(1.0)
        self.procs.append(
            subprocess.Popen(
                [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.host],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        )
        self.wait_for(lambda: "idle" in self.sh("sinfo", "-h", "-o", "%t").stdout, 60, "the node to come up")
        return self

    def __exit__(self, *exc) -> None:
        self.sh("scancel", "--full", "-u", "root")
        t0 = time.monotonic()  # let the step daemons finish before the controllers go
        while self.sh("squeue", "-h").stdout.strip() and time.monotonic() - t0 < 15:
            time.sleep(0.5)
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self._kill_step_daemons()

    def _kill_step_daemons(self) -> None:
        """SIGKILL the step daemons of this cluster's jobs that are still there (``slurmstepd:
        [JOB.STEP]``): with their slurmd gone nothing else ends them."""
        mine = tuple(f"slurmstepd: [{job}." for job in self.jobs)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if mine and cmd.startswith(mine):
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                except OSError:
                    pass

    def sh(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([_which(args[0]), *args[1:]], env=self.env, capture_output=True, text=True, check=check)

    def submit(self, *args: str) -> int:
        out = self.sh("sbatch", "--parsable", *args, check=True).stdout.strip()
        job = int(out.split(";")[0])
        self.jobs.append(job)
        return job

    def state(self, job: int) -> str:
        out = self.sh("scontrol", "show", "job", str(job)).stdout
        for tok in out.split():
            if tok.startswith("JobState="):
                return tok.split("=", 1)[1]
        return "UNKNOWN"

    def wait_for(self, cond, timeout: float, what: str) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if cond():
                return
            time.sleep(0.5)
        logs = "".join(f"\n--- {p.name}:\n{p.read_text()[-2000:]}" for p in self.d.glob("*.log") if p.exists())
        raise TimeoutError(f"timed out waiting for {what}{logs}")
