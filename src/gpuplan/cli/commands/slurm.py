"""``gpuplan slurm``: an sbatch script that checkpoints and requeues itself (slurm.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuplan.cli.options import JsonOpt
from gpuplan.cli.output import emit_json
from gpuplan.cli.params import (
    anything,
    at_least,
    checked,
    out_file,
)


@checked(
    command=anything,
    gpus=at_least(1, 10**7),
    nodes=at_least(1, 10**5),
    gpus_per_node=at_least(0, 72),
    signal_before=at_least(0, 86400),
    output=out_file,
)
def slurm(
    command: Annotated[list[str], typer.Argument(help="The training script and its arguments (after --).")],
    gpus: Annotated[int | None, typer.Option(help="GPUs of the plan (nodes follow from --gpu's node size).")] = None,
    gpu: Annotated[str, typer.Option(help="GPU id: its GPUs per node.")] = "h100-sxm",
    nodes: Annotated[int | None, typer.Option(help="Nodes (instead of --gpus).")] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs per node (default: the GPU's node; 0: a CPU job, no --gres).")
    ] = None,
    partition: Annotated[str | None, typer.Option(help="Partition: the priority tier.")] = None,
    qos: Annotated[str | None, typer.Option(help="QoS (another way to set the tier).")] = None,
    time: Annotated[str, typer.Option("--time", help="Time limit, e.g. 48:00:00 or 2-00:00:00.")] = "24:00:00",
    job_name: Annotated[str, typer.Option(help="Job name.")] = "gpuplan-train",
    checkpoint_dir: Annotated[
        str, typer.Option(help="Checkpoint directory (passed as --checkpoint-dir).")
    ] = "checkpoints",
    signal_before: Annotated[int, typer.Option(help="Seconds before the time limit to send SIGUSR1.")] = 120,
    launcher: Annotated[
        str, typer.Option(help="torchrun (srun + torchrun per node) or python (one process).")
    ] = "torchrun",
    procs_per_node: Annotated[
        int | None, typer.Option(help="torchrun workers per node (default: one per GPU).")
    ] = None,
    output: Annotated[str | None, typer.Option(help="Write the script here (default: stdout).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write an sbatch script that checkpoints on SIGTERM/SIGUSR1 and requeues itself."""
    from gpuplan import catalog
    from gpuplan.slurm import SlurmJob, job_nodes, sbatch_script

    per_node = gpus_per_node if gpus_per_node is not None else catalog.gpu(gpu).gpus_per_node
    job = SlurmJob(
        command=tuple(command),
        nodes=job_nodes(gpus, nodes, per_node),
        gpus_per_node=per_node,
        partition=partition,
        qos=qos,
        time_limit=time,
        job_name=job_name,
        checkpoint_dir=checkpoint_dir,
        signal_before_s=signal_before,
        launcher=launcher,
        procs_per_node=procs_per_node,
    )
    script = sbatch_script(job)
    if output:
        with open(output, "w") as f:
            f.write(script)
    if json_out:
        emit_json(
            {
                "nodes": job.nodes,
                "gpus_per_node": job.gpus_per_node,
                "partition": partition,
                "qos": qos,
                "time": time,
                "signal": f"B:USR1@{signal_before}",
                "requeue": True,
                "output": output,
                "script": script,
            }
        )
    elif not output:
        sys.stdout.write(script)
