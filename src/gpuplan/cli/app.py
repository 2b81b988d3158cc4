"""``gpuplan``: the typer app and its commands, one module each under cli/commands/. Each command
checks its flags (cli/params.py), calls the library once and renders the result (cli/output.py);
cli/entry.py runs the app and maps errors to one line and an exit code (0, 2 bad input, 3 does not fit).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuplan.cli.commands import (
    catalog,
    checkpoint,
    cluster,
    collective,
    experts,
    pipeline,
    runs,
    search,
    serve,
    serve_sim,
    slurm,
    tco,
    train,
    ui,
    validate,
)
from gpuplan.cli.entry import DEPRECATED, click_command, main

__all__ = ["DEPRECATED", "app", "click_command", "main"]

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP,
    help="Plan LLM training and serving: memory, FLOPs, time and cost per GPU.\n\n"
    "Exit codes: 0 answered, 2 bad input (one line naming the field and the fix), "
    "3 the plan does not fit (with the smallest change that does).",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("gpuplan")
        except PackageNotFoundError:  # run from a source tree without installing
            v = "unknown"
        sys.stdout.write(f"gpuplan {v}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Plan LLM training and serving: memory, FLOPs, time and cost per GPU."""


# Registered in the order `gpuplan --help` lists them
app.command()(train.train)
app.command()(search.search)
app.command()(serve.serve)
app.command("serve-sim")(serve_sim.serve_sim)
app.command()(pipeline.pipeline)
app.command()(experts.experts)
app.command(context_settings={"allow_interspersed_args": False})(slurm.slurm)
app.command("checkpoint-interval")(checkpoint.checkpoint_interval)

cluster_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Cluster questions: what preemption costs, a cluster simulated."
)
app.add_typer(cluster_app, name="cluster")
cluster_app.command()(cluster.whatif)
cluster_app.command("sim")(cluster.cluster_sim)

app.command()(tco.tco)
app.command()(validate.validate)
app.command()(collective.collective)
app.command()(catalog.models)
app.command()(catalog.gpus)
app.command()(runs.calibrate)
app.command()(runs.compare)
app.command()(ui.ui)
