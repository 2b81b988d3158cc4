"""The cluster the simulator runs: nodes, racks, policies, failures, spot reclaims and prices,
with the published node failure rates to take them from."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.cluster.policies import PLACEMENTS, POLICIES, Placement, Policy
from gpuplan.errors import require

# Llama 3 (Dubey et al. 2024, section 3.3.4): 419 unexpected interruptions in 54 days on 16,384
# H100s (2,048 nodes of 8): one per 264 node-days.
LLAMA3_NODE_MTBF_S = 54 * 86400 * 2048 / 419
# Meta's research clusters (Kokolis et al. 2024, "Revisiting Reliability in Large-Scale Machine
# Learning Research Clusters", arXiv 2410.21680): 6.50 (RSC-1) and 2.34 (RSC-2) failures per
# 1,000 node-days of A100 nodes.
RSC1_NODE_MTBF_S = 1000 / 6.50 * 86400
RSC2_NODE_MTBF_S = 1000 / 2.34 * 86400
NODE_MTBF_PRESETS = {"llama3": LLAMA3_NODE_MTBF_S, "rsc1": RSC1_NODE_MTBF_S, "rsc2": RSC2_NODE_MTBF_S}


@dataclass
class ClusterConfig:
    nodes: int
    gpus_per_node: int = 8
    node_gpus: tuple[int, ...] | None = None  # GPUs of each node when they differ (overrides the two above)
    node_models: tuple[str, ...] | None = None  # GPU model of each node (None: all the same)
    nodes_per_rack: int = 32
    policy: str | Policy = "priority"
    preempt: bool = True
    placement: str | Placement = "pack"
    grace_s: float = 120.0  # SIGTERM to SIGKILL for preempted jobs and spot reclaims
    node_mtbf_s: float | None = None  # None: no failures; e.g. LLAMA3_NODE_MTBF_S
    weibull_shape: float | None = None  # per-node Weibull inter-failure times (None: exponential)
    repair_s: float = 3600.0
    spot_reclaim_per_hour: float = 0.0  # per running spot job
    reclaims: tuple[tuple[float, float], ...] = ()  # (time_s, GPUs) spot reclaim events, e.g. read_reclaims()
    price_per_gpu_hour: float = 0.0
    queue_depth: int = 100  # jobs the backfill pass looks at (Slurm's default_queue_depth)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.node_gpus is not None:
            require(len(self.node_gpus) >= 1 and min(self.node_gpus) >= 1, "nodes", "every node needs at least one GPU")
            self.nodes = len(self.node_gpus)
            self.gpus_per_node = max(self.node_gpus)
        require(self.nodes >= 1 and self.gpus_per_node >= 1, "nodes", "the cluster needs nodes with GPUs")
        require(
            self.node_models is None or len(self.node_models) == self.nodes,
            "node_models",
            f"needs one GPU model per node ({self.nodes}), got {len(self.node_models or ())}",
        )
        require(
            isinstance(self.policy, Policy) or self.policy in POLICIES,
            "policy",
            f"unknown policy {self.policy!r}",
            f"use one of {', '.join(POLICIES)}, or pass a Policy",
        )
        require(
            isinstance(self.placement, Placement) or self.placement in PLACEMENTS,
            "placement",
            f"unknown placement {self.placement!r}",
            f"use one of {', '.join(PLACEMENTS)}, or pass a Placement",
        )
        require(
            all(t >= 0 and g > 0 for t, g in self.reclaims),
            "reclaims",
            "reclaim events need a non-negative time and a positive GPU count",
        )
        for name in ("grace_s", "repair_s", "spot_reclaim_per_hour"):
            require(getattr(self, name) >= 0, name, "must not be negative")
        require(self.node_mtbf_s is None or self.node_mtbf_s > 0, "node_mtbf", "must be positive")
