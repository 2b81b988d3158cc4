"""``gpuplan collective``: one collective on the machine (estimate/comm.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import JsonOpt
from gpuplan.cli.output import emit_json
from gpuplan.cli.params import (
    at_least,
    checked,
)


@checked(ranks=at_least(1, 10**7), stride=at_least(1, 10**7))
def collective(
    kind: Annotated[str, typer.Argument(help="all-reduce, all-gather, reduce-scatter, all-to-all or p2p.")],
    size: Annotated[
        str,
        typer.Option(
            help="Buffer bytes: 1GB = 1e9, 1GiB = 2^30; a bare suffix is binary as in "
            "nccl-tests (1G = 2^30, 256M); the full buffer for gathers."
        ),
    ] = "1G",
    ranks: Annotated[int, typer.Option(help="Ranks in the group.")] = 8,
    gpu: Annotated[str, typer.Option(help="GPU id: its node size, links and NICs.")] = "h100-sxm",
    stride: Annotated[int, typer.Option(help="Rank distance between members (1: packed in nodes).")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """One collective on the machine: bytes each rank sends, time and bus bandwidth."""
    from gpuplan import catalog
    from gpuplan.estimate.comm import collective_report
    from gpuplan.units import GB

    hw = catalog.gpu(gpu)
    doc = collective_report(kind, inputs.parse_size(size, "size"), ranks, stride, hw)
    if json_out:
        emit_json(doc)
        return
    from gpuplan.cli.render import console

    nodes, per_node = doc["nodes"], doc["ranks_per_node"]
    console.print(
        f"{kind} of {doc['size_bytes'] / GB:,.3f} GB over {ranks} ranks ({per_node} per node, {nodes} "
        f"node{'s' if nodes > 1 else ''}) on {hw.name}: each rank sends {doc['bytes_sent_per_rank'] / GB:,.3f} GB "
        f"({doc['volume_factor']:.4f} x the buffer), {doc['time_s'] * 1e3:,.3f} ms, bus bandwidth "
        f"{doc['bus_bandwidth_bytes_per_s'] / GB:,.1f} GB/s"
    )
