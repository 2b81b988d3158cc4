"""An sbatch script for a preemptible, requeueable training job.

What it gets right (the traps are in the comments it writes):
* ``--requeue`` so a preempted or failed job goes back to the queue, ``--open-mode=append`` so
  its log survives the requeue;
* ``--signal=B:USR1@<s>``: the batch shell gets SIGUSR1 that many seconds before the time limit
  (torchrun kills workers 30 s after it forwards SIGTERM, and Slurm's KillWait is 30 s by
  default: both too short for a large checkpoint), and forwards it to the trainer;
* on preemption with PreemptMode=REQUEUE Slurm sends SIGTERM to the job's *steps* (not to the
  batch shell: seen with Slurm 22.05, "No steps in jobid to send signal 15"), waits the
  partition's GraceTime, then kills: so the trainer runs as a step under ``srun``, gets the
  SIGTERM and checkpoints within the grace time;
* the trainer exits 75 (EX_TEMPFAIL) after such a checkpoint; the script then asks Slurm to
  requeue it (needed for the time-limit case; a preempted job is requeued by Slurm itself);
* under torchrun the trainer's 75 never reaches the script (the agent exits 1 after its workers
  exit 75): rank 0 also writes ``requeue.marker`` in the checkpoint directory, and the script
  requeues on 75 *or* that file, and removes it;
* torchrun's agent forwards only SIGTERM by default and dies on SIGUSR1; srun, sent SIGTERM,
  terminates the step rather than forwarding it. So the script forwards SIGUSR1 (srun passes it on)
  and sets ``PET_SIGNALS_TO_HANDLE`` (the agent then forwards SIGUSR1 to the workers) and
  ``PET_SHUTDOWN_TIMEOUT`` (it waits ``--signal`` seconds, not 30, before killing workers still
  checkpointing): torchrun versions with ``--signals-to-handle``; with older ones the agent dies
  on SIGUSR1 and Slurm ends the step (outside Slurm, workers whose agent died stop on their own:
  gpuplan.train.signals.watch_parent);
* a signal that comes before srun's pid is known is kept and forwarded once it is;
* a time-limit warning that lands after the last step, while the workers shut down, fails
  torchrun's agent (exit 1 on the signal it forwards): with the trainer's ``finished.marker``
  there, the script ends the job as done (exit 0), not failed and not requeued.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError, require
from gpuplan.train.requeue import FINISHED as FINISHED_MARKER, NAME as REQUEUE_MARKER

LAUNCHERS = ("torchrun", "python")


@dataclass(frozen=True)
class SlurmJob:
    command: tuple[str, ...]  # the training script and its arguments
    nodes: int = 1
    gpus_per_node: int = 8
    partition: str | None = None
    qos: str | None = None
    time_limit: str = "24:00:00"
    job_name: str = "gpuplan-train"
    checkpoint_dir: str = "checkpoints"
    signal_before_s: int = 120
    launcher: str = "torchrun"
    cpus_per_task: int | None = None
    procs_per_node: int | None = None  # torchrun workers per node (default: one per GPU)
    extra_sbatch: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        require(len(self.command) > 0, "command", "give the training script to run", "e.g. -- train.py --steps 1000")
        require(bool(self.command[0].strip()), "command", "the training script is an empty name", "e.g. -- train.py")
        require(bool(self.checkpoint_dir.strip()), "checkpoint_dir", "is empty", "e.g. `checkpoint_dir=checkpoints`")
        require(self.nodes >= 1, "nodes", f"must be at least 1, got {self.nodes}")
        require(self.gpus_per_node >= 0, "gpus_per_node", "must not be negative")
        require(
            self.launcher in LAUNCHERS,
            "launcher",
            f"unknown launcher {self.launcher!r}",
            f"use one of {', '.join(LAUNCHERS)}",
        )
        require(
            self.launcher == "torchrun" or self.nodes == 1,
            "launcher",
            "the python launcher runs one process on one node",
            "use `launcher=torchrun` for several nodes",
        )
        require(
            bool(re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}", self.time_limit)),
            "time",
            f"{self.time_limit!r} is not a Slurm time limit",
            "write it like 48:00:00 or 2-00:00:00",
        )
        limit = time_limit_s(self.time_limit)
        require(limit > 0, "time", f"{self.time_limit!r} is no time at all", "write it like 48:00:00 or 2-00:00:00")
        require(self.signal_before_s >= 0, "signal_before", "must not be negative")
        require(
            self.procs_per_node is None or self.procs_per_node >= 1,
            "procs_per_node",
            f"must be at least 1, got {self.procs_per_node}",
        )
        require(
            self.signal_before_s < limit,
            "signal_before",
            f"SIGUSR1 {self.signal_before_s} s before a {self.time_limit} limit would come before the job starts",
            "use a `signal_before` shorter than `time`",
        )
        # These land in #SBATCH lines: a newline or a space would end the directive and run the rest
        for name in ("job_name", "partition", "qos"):
            value = getattr(self, name)
            require(
                value is None or bool(re.fullmatch(r"[A-Za-z0-9_.+%@=:,-]+", value)),
                name,
                f"{value!r} has characters an #SBATCH line cannot hold",
                "use letters, digits, - _ . only",
            )

    @property
    def workers_per_node(self) -> int:
        return self.procs_per_node or max(1, self.gpus_per_node)


def time_limit_s(text: str) -> int:
    """Seconds of a Slurm time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS
    (sbatch(1)); minutes and seconds above 59 are refused, as Slurm refuses them."""
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    elif len(parts) == 1:
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts
    require(
        (m < 60 or not (days or len(parts) == 3)) and s < 60,
        "time",
        f"{text!r}: minutes and seconds run to 59",
        "write it like 48:00:00 or 2-00:00:00",
    )
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def nodes_for(gpus: int, gpus_per_node: int) -> int:
    require(gpus >= 1, "gpus", f"must be at least 1, got {gpus}")
    return math.ceil(gpus / max(1, gpus_per_node))


def job_nodes(gpus: int | None, nodes: int | None, gpus_per_node: int) -> int:
    """Nodes of a job asked for as ``gpus`` GPUs or as ``nodes`` nodes (or both, if they agree;
    neither: one node). Slurm allocates whole nodes, so a GPU count that is not one is refused
    rather than silently becoming another."""
    per_node = gpus_per_node
    if gpus is not None:
        if per_node == 0:  # --gpus-per-node 0 is a CPU-only job (e.g. the python launcher's test runs)
            raise GpuplanError(
                "gpus",
                f"`gpus={gpus}` with `gpus_per_node=0` asks for GPUs on nodes without any",
                "drop `gpus_per_node=0`, or `gpus` for a CPU-only job",
            )
        if gpus % per_node:
            # the whole-node counts either side; fewer than a node has only one above
            down, up = gpus // per_node * per_node, -(-gpus // per_node) * per_node
            raise GpuplanError(
                "gpus",
                f"{gpus} GPUs are not whole nodes of {per_node}",
                f"use `gpus={up}`, or set `gpus_per_node` (e.g. `gpus_per_node={gpus}` for a single node)"
                if down == 0
                else f"use `gpus={down}` or {up}, or set `gpus_per_node`",
            )
        if nodes is not None and nodes * per_node != gpus:
            raise GpuplanError(
                "nodes",
                f"`nodes={nodes}` x {per_node} GPUs per node is {nodes * per_node} GPUs, not `gpus={gpus}`",
                "give `gpus` or `nodes`, not both",
            )
    if nodes is None:
        nodes = nodes_for(gpus, per_node) if gpus is not None else 1
    return nodes


def sbatch_script(job: SlurmJob) -> str:
    q = shlex.quote
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job.job_name}"]
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}  # the partition (or QoS) sets the priority tier")
    if job.qos:
        lines.append(f"#SBATCH --qos={job.qos}")
    lines += [f"#SBATCH --nodes={job.nodes}", "#SBATCH --ntasks-per-node=1"]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    if job.cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={job.cpus_per_task}")
    lines += [
        f"#SBATCH --time={job.time_limit}",
        "#SBATCH --requeue  # back to the queue when preempted or when it exits 75",
        f"#SBATCH --signal=B:USR1@{job.signal_before_s}  # SIGUSR1 to this script {job.signal_before_s} s before "
        "the time limit",
        "#SBATCH --open-mode=append  # keep the log across requeues",
        "#SBATCH --output=%x-%j.out",
    ]
    lines += [f"#SBATCH {x}" for x in job.extra_sbatch]
    lines += [
        "",
        "set -u",
        f"export CKPT_DIR={q(job.checkpoint_dir)}",
        'echo "job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST"',
        "",
        "# Forward SIGUSR1 (time limit near, sent to this shell) and SIGTERM to the trainer, which finishes",
        "# its step, checkpoints and exits 75. Preemption signals the srun step directly.",
    ]
    if job.launcher == "torchrun":
        lines += [
            "# torchrun's agent handles SIGTERM only, by default: on SIGUSR1 it dies and Slurm ends the step,",
            "# killing the workers before they checkpoint. Have it forward SIGUSR1 too, and wait for the",
            "# workers' checkpoint as long as the warning gives (not 30 s). (Read by torchrun versions with",
            "# --signals-to-handle/--shutdown-timeout; not srun: it terminates the step on SIGTERM.)",
            "export PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
            f"export PET_SHUTDOWN_TIMEOUT={max(30, job.signal_before_s)}",
        ]
    lines += [
        'child=""',
        'pending=""',
        'forwarded=""',
        "forward() {",
        '  echo "got SIG$1: forwarding it to the trainer"',
        '  forwarded="$1"',
        "  # before srun's pid is known: keep it for then (a lost time-limit warning loses the run)",
        '  if [ -n "$child" ]; then kill -s "$1" "$child" 2>/dev/null; else pending="$1"; fi',
        "}",
        "trap 'forward USR1' USR1",
        "trap 'forward TERM' TERM",
        f'marker="$CKPT_DIR/{REQUEUE_MARKER}"  # rank 0 writes it when it stops on a signal (exit 75)',
        f'finished="$CKPT_DIR/{FINISHED_MARKER}"  # rank 0 writes it when the training loop ends on its own',
        'rm -f "$marker" "$finished"',
        "",
    ]
    cmd = " ".join(q(c) for c in job.command)
    if job.launcher == "torchrun":
        lines += [
            'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            'srun --kill-on-bad-exit=1 "${TORCHRUN:-torchrun}" --nnodes "$SLURM_NNODES" '
            f'--nproc-per-node {job.workers_per_node} --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:${{MASTER_PORT:-29500}}" '
            '--rdzv-id "$SLURM_JOB_ID" \\',
            f'    {cmd} --checkpoint-dir "$CKPT_DIR" &',
        ]
    else:
        lines.append(f'srun --kill-on-bad-exit=1 "${{PYTHON:-python3}}" {cmd} --checkpoint-dir "$CKPT_DIR" &')
    lines += [
        "child=$!",
        '[ -n "$pending" ] && kill -s "$pending" "$child" 2>/dev/null',
        "# wait returns early when a trapped signal arrives: wait until the trainer really exits",
        'while true; do wait "$child"; status=$?; kill -0 "$child" 2>/dev/null || break; done',
        "# 75: the trainer stopped on a signal; torchrun reports its own code, so the marker says it too",
        'if [ "$status" -eq 75 ] || [ -e "$marker" ]; then',
        '  echo "trainer stopped on a signal (exit $status, marker $([ -e "$marker" ] && echo yes || echo no)): '
        'requeueing"',
        '  rm -f "$marker"',
        "  status=75",
        '  scontrol requeue "$SLURM_JOB_ID" || true  # a preempted job is already being requeued',
        "# a signal after the last step: torchrun's agent exits 1 on it, but the training is done",
        'elif [ "$status" -ne 0 ] && [ -n "$forwarded" ] && [ -e "$finished" ]; then',
        '  echo "the trainer had finished when SIG$forwarded came (launcher exit $status): done"',
        "  status=0",
        "fi",
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)
