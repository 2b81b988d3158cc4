"""Communication: where each parallel group sits on the machine and what its collectives cost.

Placement: ranks are numbered with the innermost dimension first (Megatron-LM's default order
``tp-cp-dp-pp``; expert parallelism is carved out of the cp x dp ranks, innermost first). A
group of dimension X with degree d has stride = product of the degrees inside it; its members
share a scale-up domain (NVLink node or NVL72 rack) when stride x d fits in one. With MoE
parallel folding (``etp`` set) the expert groups regroup a stage's tp x cp x dp ranks instead:
etp innermost, then ep, then edp (``folded``).

Cost: the alpha-beta model (Hockney 1994; Thakur, Rabenseifner & Gropp 2005, "Optimization of
Collective Communication Operations in MPICH"). A ring all-reduce moves 2(n-1)/n of the buffer
through each rank, all-gather and reduce-scatter (n-1)/n (the "bus bandwidth" convention of
NVIDIA's nccl-tests, PERFORMANCE.md). Across nodes, a ring through k ranks per node uses k NICs
in parallel (NCCL builds one ring per NIC rail), so the bus bandwidth is min(scale-up link,
k x per-GPU NIC share), each times its measured efficiency (catalog/efficiency).

On NVIDIA GPUs joined by NVLink, all-reduce, all-gather and reduce-scatter are timed by NCCL's own
cost model instead (estimate/nccl.py: tuning.cc's ring, tree, NVLS and NVLS_TREE algorithms with
their LL / LL128 / Simple protocols, the fastest one as NCCL picks it), on the same bus bandwidths.
Over PCIe and on AMD GPUs (RCCL) the alpha-beta model above remains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError, require
from gpuplan.estimate import nccl
from gpuplan.specs.hardware import Efficiency, GPUSpec
from gpuplan.specs.parallel import ParallelPlan

DEFAULT_ORDER = ("tp", "cp", "dp", "pp")
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")


@dataclass(frozen=True)
class Group:
    """One parallel group as placed on the machine."""

    dim: str
    size: int
    stride: int
    per_domain: int  # members of the group inside one scale-up domain
    domains: int  # scale-up domains (nodes, or NVL72 racks) the group spans

    @property
    def crosses_nodes(self) -> bool:
        return self.domains > 1


def _group(dim: str, size: int, stride: int, domain: int) -> Group:
    if size == 1:
        return Group(dim, 1, stride, 1, 1)
    per_domain = 1 if stride >= domain else max(1, min(size, domain // stride))
    return Group(dim, size, stride, per_domain, math.ceil(size / per_domain))


def place(plan: ParallelPlan, gpu: GPUSpec, order: tuple[str, ...] = DEFAULT_ORDER) -> dict[str, Group]:
    """Groups for tp, cp, dp, pp and ep (ep lies inside the cp x dp ranks, innermost first)."""
    domain = gpu.fast_domain
    groups: dict[str, Group] = {}
    stride = 1
    for dim in order:
        size = getattr(plan, dim)
        groups[dim] = _group(dim, size, stride, domain)
        stride *= size
    inner = min(("cp", "dp"), key=lambda d: groups[d].stride)
    groups["ep"] = _group("ep", plan.ep, groups[inner].stride, domain)
    # ZeRO shards dense states over dp x cp; experts over what is left of it after ep.
    groups["dp_cp"] = _group("dp_cp", plan.dp * plan.cp, groups[inner].stride, domain)
    return groups


def folded(plan: ParallelPlan, gpu: GPUSpec, order: tuple[str, ...] = DEFAULT_ORDER) -> dict[str, Group]:
    """The expert groups of MoE parallel folding: ``etp``, ``ep`` and ``edp`` (the expert data-
    parallel group, which reduces the experts' gradients).

    Megatron builds them from the same ranks as the attention groups (parallel_state.py,
    initialize_model_parallel: ``expert_decoder_rank_generator = RankGenerator(tp=etp, ep=ep,
    dp=edp, pp=pp, cp=1, order)``, its default order tp-cp-ep-dp-pp): within the tp x cp x dp
    ranks of a pipeline stage, numbered in the plan's rank order, expert TP groups are etp
    consecutive ranks, EP groups step by etp and EDP groups by etp x ep. So EP 8 with TP 2 on
    8-GPU nodes is one node. The members of the group holding rank 0 are mapped to global ranks
    (pp may sit inside the rank order) and counted per scale-up domain."""
    domain = gpu.fast_domain
    inner_pp = math.prod(getattr(plan, d) for d in order[: order.index("pp")])  # ranks inside one pp step
    span = inner_pp * plan.pp  # global ranks one step of the dims outside pp covers

    def group(dim: str, size: int, stride: int) -> Group:
        if size == 1:
            return Group(dim, 1, stride, 1, 1)
        ranks = [(v % inner_pp) + (v // inner_pp) * span for v in range(0, size * stride, stride)]
        per: dict[int, int] = {}
        for r in ranks:
            per[r // domain] = per.get(r // domain, 0) + 1
        return Group(dim, size, ranks[1] - ranks[0], max(per.values()), len(per))

    etp, ep = plan.expert_tp, plan.ep
    return {
        "etp": group("etp", etp, 1),
        "ep": group("ep", ep, etp),
        "edp": group("edp", plan.expert_zero_group, etp * ep),
    }


def efficiency(gpu: GPUSpec) -> Efficiency:
    """The GPU's achievable-rate fractions; a spec built without them cannot be timed."""
    if gpu.efficiency is None:
        raise GpuplanError("gpu", f"{gpu.name} has no efficiency data", "pick a GPU from `gpuplan gpus`")
    return gpu.efficiency


def bus_bandwidth(group: Group, gpu: GPUSpec) -> float:
    """Sustained bus bandwidth (bytes/s) of a collective over ``group``."""
    e = efficiency(gpu)
    intra = gpu.intra_bytes_per_s * e.intra_bus
    if not group.crosses_nodes:
        return intra
    inter = group.per_domain * gpu.inter_bytes_per_s * e.inter_bus
    return min(intra, inter) if group.per_domain > 1 else inter


def latency(group: Group, gpu: GPUSpec) -> float:
    e = efficiency(gpu)
    return e.inter_latency_s if group.crosses_nodes else e.intra_latency_s


def bytes_sent_per_rank(kind: str, size: float, n: int) -> float:
    """Bytes each rank sends for a collective on a buffer of ``size`` bytes (the full, unsharded
    buffer for all-gather and reduce-scatter; the data each rank exchanges for all-to-all)."""
    require(kind in COLLECTIVES, "collective", f"unknown collective {kind!r}", f"use one of {', '.join(COLLECTIVES)}")
    if kind == "p2p":
        return size
    if n <= 1:
        return 0.0
    if kind == "all-reduce":
        return 2 * (n - 1) / n * size
    return (n - 1) / n * size


def nccl_fabric(group: Group, gpu: GPUSpec) -> nccl.Fabric | None:
    """What NCCL's cost model reads of ``gpu`` for a collective over ``group``; None where NCCL's
    model does not apply (no NVLink, or not an NVIDIA GPU)."""
    gen = nccl.GENERATION.get(gpu.interconnect)
    if gen is None or gpu.vendor != "nvidia":
        return None
    e = efficiency(gpu)
    nvlink = gpu.intra_bytes_per_s * e.intra_bus
    # the NIC at the same measured efficiency as the ring's (catalog ``inter_bus``): one factor
    # for the network whichever algorithm NCCL picks, so a calibration that fits it moves them all
    nic = gpu.inter_bytes_per_s * e.inter_bus
    return nccl.Fabric(gen, nvlink, bus_bandwidth(group, gpu), nic, gen in nccl.NVLS_GENERATIONS)


def nccl_choice(kind: str, size: float, group: Group, gpu: GPUSpec) -> nccl.Choice | None:
    """NCCL's algorithm, protocol and time for ``kind`` over ``group``, where its model applies."""
    fabric = nccl_fabric(group, gpu) if kind in nccl.KINDS else None
    if fabric is None:
        return None
    return nccl.choose(kind, size, group.size, group.domains, fabric)


def collective_time(kind: str, size: float, group: Group, gpu: GPUSpec) -> float:
    """Seconds for one collective of ``size`` bytes over ``group`` (see ``bytes_sent_per_rank``)."""
    n = group.size
    if kind != "p2p" and (n <= 1 or size <= 0):
        return 0.0
    choice = nccl_choice(kind, size, group, gpu)
    if choice is not None:
        return choice.time_s
    alpha = latency(group, gpu)
    volume = bytes_sent_per_rank(kind, size, n)
    if kind == "all-reduce":
        # NCCL picks ring (2(n-1) latency steps) or double binary tree (2 log2 n) by size
        steps = min(2 * (n - 1), 2 * math.ceil(math.log2(n)))
        return volume / bus_bandwidth(group, gpu) + steps * alpha
    if kind in ("all-gather", "reduce-scatter"):
        return volume / bus_bandwidth(group, gpu) + (n - 1) * alpha
    if kind == "all-to-all":
        # each rank sends (n-1)/n of its data: the part for ranks in its own domain over the
        # scale-up link, the rest through its NIC share; both run at once
        e = efficiency(gpu)
        local = (group.per_domain - 1) / n * size
        remote = (n - group.per_domain) / n * size
        t_local = local / (gpu.intra_bytes_per_s * e.intra_bus)
        t_remote = remote / (gpu.inter_bytes_per_s * e.inter_bus) if remote else 0.0
        return max(t_local, t_remote) + math.ceil(math.log2(n)) * alpha
    # p2p: one message between neighbours of the group
    e = efficiency(gpu)
    bw = gpu.inter_bytes_per_s * e.inter_bus if group.crosses_nodes else gpu.intra_bytes_per_s * e.intra_bus
    return size / bw + alpha


def collective_report(kind: str, size: float, ranks: int, stride: int, gpu: GPUSpec) -> dict[str, Any]:
    """One collective of ``size`` bytes over ``ranks`` ranks ``stride`` apart: its nodes, the bytes
    each rank sends, its time and bandwidths (bytes/s)."""
    # one rank has nothing to send to: a collective of one is free, a send/receive is not a thing
    require(kind != "p2p" or ranks >= 2, "ranks", f"a send/receive needs two ranks, got {ranks}", "use `ranks=2`")
    # a group is as many members on each node as on the others (what parallel groups are): a
    # stride that neither divides the node nor is whole nodes puts 3, 3 and 2 ranks on three nodes
    domain = gpu.fast_domain
    require(
        ranks == 1 or domain % stride == 0 or stride % domain == 0,
        "stride",
        f"ranks {stride} apart do not fall evenly on {gpu.name}'s nodes of {domain} GPUs",
        f"use a `stride` that divides {domain} or is a multiple of it",
    )
    group = _group(kind, ranks, stride, domain)
    sent = bytes_sent_per_rank(kind, size, ranks)
    t = collective_time(kind, size, group, gpu)
    choice = nccl_choice(kind, size, group, gpu) if ranks > 1 and size > 0 else None
    return {
        "collective": kind,
        "algorithm": choice.name if choice else "alpha-beta",
        "size_bytes": size,
        "ranks": ranks,
        "gpu": gpu.id,
        "nodes": group.domains,
        "ranks_per_node": group.per_domain,
        "bytes_sent_per_rank": sent,
        "volume_factor": sent / size if size else 0.0,
        "time_s": t,
        # nccl-tests: busbw = algbw x the collective's factor (2(n-1)/n all-reduce, (n-1)/n gathers, 1 p2p)
        "bus_bandwidth_bytes_per_s": (sent / t if kind != "p2p" else size / t) if t else 0.0,
        "link_bandwidth_bytes_per_s": bus_bandwidth(group, gpu),
        "algorithm_bandwidth_bytes_per_s": size / t if t else 0.0,
    }
