"""``gpuplan experts``: MoE expert placement (experts/)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan.cli.options import JsonOpt
from gpuplan.cli.output import show
from gpuplan.cli.params import (
    at_least,
    between,
    checked,
    seed as seed_rule,
)


@checked(
    synthetic=between(0, 100),
    layers=at_least(1, 10_000),
    num_experts=at_least(1, 100_000),
    seed=seed_rule,
    replicas=at_least(1, 10**6),
    groups=at_least(1, 100_000),
    nodes=at_least(1, 100_000),
    gpus=at_least(1, 10**6),
    top_k=at_least(1, 100_000),
    hidden=at_least(1, 10**6),
    dispatch_bytes=between(0, 64, lo_open=True),
)
def experts(
    loads: Annotated[str | None, typer.Option(help="Per-layer expert loads: CSV (a row per layer) or JSON.")] = None,
    synthetic: Annotated[float | None, typer.Option(help="Instead of --loads: Zipf skew of synthetic loads.")] = None,
    layers: Annotated[int, typer.Option(help="Layers of synthetic loads.")] = 61,
    num_experts: Annotated[int, typer.Option("--experts", help="Experts per layer of synthetic loads.")] = 256,
    seed: Annotated[int, typer.Option(help="Seed of synthetic loads.")] = 0,
    replicas: Annotated[int, typer.Option(help="Physical expert slots in all (a multiple of --gpus).")] = 288,
    groups: Annotated[int, typer.Option(help="Expert groups (group-limited routing).")] = 8,
    nodes: Annotated[int, typer.Option(help="Nodes.")] = 4,
    gpus: Annotated[int, typer.Option(help="GPUs in the expert-parallel group.")] = 32,
    policy: Annotated[str, typer.Option(help="hierarchical (groups to nodes first) or global.")] = "hierarchical",
    top_k: Annotated[int, typer.Option(help="Experts per token, for the cross-node traffic estimate.")] = 8,
    hidden: Annotated[int, typer.Option(help="Hidden size, for bytes per token.")] = 7168,
    dispatch_bytes: Annotated[float, typer.Option(help="Bytes per hidden element sent (1: fp8 dispatch).")] = 1.0,
    json_out: JsonOpt = False,
) -> None:
    """MoE expert placement: replicas per expert and the GPU of each, balance and cross-node traffic."""
    from gpuplan.experts.loads import load_table
    from gpuplan.experts.report import placement_report

    table = load_table(loads, synthetic, layers, num_experts, seed)
    doc = placement_report(
        table,
        replicas=replicas,
        gpus=gpus,
        nodes=nodes,
        groups=groups,
        policy=policy,
        top_k=top_k,
        hidden=hidden,
        dispatch_bytes=dispatch_bytes,
    )
    show(doc, json_out, "render_sims.render_experts")
