"""One placement of a load table, reported: replicas, balance, loads per GPU and node, and the
cross-node dispatch traffic per token (``gpuplan experts``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.experts.placement import cross_node_traffic, place


def placement_report(
    table: np.ndarray,
    *,
    replicas: int,
    gpus: int,
    nodes: int,
    groups: int,
    policy: str,
    top_k: int,
    hidden: int,
    dispatch_bytes: float,
) -> dict[str, Any]:
    """Place ``table`` (layers x experts loads) and report it; ``hidden`` x ``dispatch_bytes`` are
    the bytes one token sends to each remote node."""
    if top_k > table.shape[1]:
        raise GpuplanError(
            "top_k", f"a token cannot reach {top_k} of {table.shape[1]} experts", f"use `top_k` <= {table.shape[1]}"
        )
    p = place(table, replicas, gpus, nodes, groups, policy)
    traffic = cross_node_traffic(p, top_k)
    bal = p.balance
    return {
        "policy": p.policy,
        "layers": int(table.shape[0]),
        "experts": int(table.shape[1]),
        "replicas": replicas,
        "gpus": gpus,
        "nodes": nodes,
        "groups": groups,
        "balance": bal.tolist(),
        "balance_mean": float(bal.mean()),
        "balance_max": float(bal.max()),
        "gpu_load": p.gpu_load.tolist(),
        "node_load": p.node_load.tolist(),
        "replica_counts": p.counts.tolist(),
        "phy2log": p.phy2log.tolist(),
        "log2phy": p.log2phy.tolist(),
        "cross_node": traffic
        | {"dispatch_bytes_per_token": traffic["remote_nodes_per_token"] * hidden * dispatch_bytes, "top_k": top_k},
        "expert_imbalance_for_train": float(bal.mean()),
    }
