"""Expert-parallel dispatch and combine through DeepEP or HybridEP (Megatron-Core's ``flex``
token dispatcher), which send a token once per destination, not once per routed copy.

Megatron-Core's ``alltoall`` dispatcher permutes a token's k routed copies and all-to-alls every
copy (``layer_comm._moe_dispatch_comm``). DeepEP and HybridEP deduplicate: a token crosses the
network once per node that holds any of its experts and is forwarded over NVLink inside that node
("kernels optimized for asymmetric-domain bandwidth forwarding, such as forwarding data from
NVLink domain to RDMA domain", DeepEP README; HybridEP's "hierarchical communication design",
DeepEP hybrid-ep docs/README_Hybrid-EP.md), and inside one NVLink domain once per rank. Their
benchmarks count bytes the same way (tests/test_hybrid_ep.py, ``count_rdma_send_from_routing_map``:
tokens x distinct nodes, the local node included; the dispatched tokens per rank on NVLink) and
call the rate "logical" bandwidth.

The bytes: with E experts spread evenly over G destination units (nodes, or ranks) and a token's
k experts distinct and, under a balanced router, uniformly placed, a unit holds none of them with
probability C(E - E/G, k) / C(E, k), so a token reaches ``distinct_units`` = G (1 - that) units.

The rate: the kernel's published achieved logical bandwidth (catalog/kernels/ep_dispatch.toml,
measured by DeepEP's and HybridEP's authors) where one exists for the backend, GPU and scope,
from the row with the nearest EP size. Elsewhere the link bound: inside one NVLink domain the
logical bytes over NVLink at the catalog's bus efficiency; across nodes the bytes bound for other
nodes through the NIC (the local node's share moves over NVLink at the same time). This bound
reproduces DeepEP V2's published rates (90 and 61 GB/s logical on EP 8 x 2 and 8 x 4 over CX7:
DeepEP README at dd758ca), which run at the NIC's limit.
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gpuplan.estimate.comm import Group, efficiency, latency
from gpuplan.specs.hardware import GPUSpec

TABLE = Path(__file__).resolve().parent.parent / "catalog" / "kernels" / "ep_dispatch.toml"
# the flex dispatcher's backends (specs/training.py MOE_DISPATCHERS); "flex" alone does not say
# which, so it takes the link bound
BACKENDS = ("deepep", "hybridep")
DEDUPLICATING = ("flex", *BACKENDS)


@dataclass(frozen=True)
class Rate:
    backend: str
    gpus: tuple[str, ...]
    scope: str  # "rdma": the group spans nodes (bytes per node); "nvlink": one domain (per rank)
    ranks: int
    dispatch_fp8: float  # bytes/s, logical
    dispatch_bf16: float
    combine: float


@functools.lru_cache(maxsize=1)  # one table, read once
def rates() -> tuple[Rate, ...]:
    """The published rates (catalog/kernels/ep_dispatch.toml). A DeepEP row measured with FP8
    dispatch only gives BF16 dispatch the same rate: the kernel is bandwidth bound, so bytes/s
    hold whichever dtype the bytes are."""
    out = []
    for r in tomllib.loads(TABLE.read_text())["rate"]:
        fp8 = r["dispatch_fp8_gbps"] * 1e9
        out.append(
            Rate(
                r["backend"],
                tuple(r["gpus"]),
                r["scope"],
                int(r["ranks"]),
                fp8,
                r.get("dispatch_bf16_gbps", r["dispatch_fp8_gbps"]) * 1e9,
                r["combine_gbps"] * 1e9,
            )
        )
    return tuple(out)


def distinct_units(experts: int, top_k: int, units: int, groups: int = 1, groups_per_token: int = 1) -> float:
    """Expected destination units (nodes or ranks) a token's ``top_k`` distinct experts reach,
    with ``experts`` spread evenly over ``units`` in order and placed uniformly (a balanced router).

    Group-limited routing (DeepSeek-V2/V3 ``n_group`` / ``topk_group``: the experts in ``groups``
    contiguous groups, a token's experts inside ``groups_per_token`` of them, picked by their best
    scores, so each picked group holds at least one): where units hold whole groups, a unit is
    reached when one of its groups is picked (at most ``groups_per_token`` units: the V3 report's
    "each token will be sent to at most M nodes"); where a group spans several units, the group's
    one expert plus its binomial share of the rest spread uniformly over them."""
    if units <= 1:
        return 1.0
    if groups <= 1 or groups_per_token >= groups or (groups % units and units % groups):
        # no limit, or groups straddling units (then treated as no limit)
        return units * (1.0 - _none_of(experts, experts / units, top_k))
    if groups % units == 0:  # each unit holds groups / units whole groups
        return units * (1.0 - _none_of(groups, groups / units, groups_per_token))
    # each group spans units / groups units: a picked group holds one expert, plus each of the
    # other top_k - groups_per_token with probability 1 / groups_per_token
    size, rest, p = experts / groups, max(0, top_k - groups_per_token), 1.0 / groups_per_token
    miss = sum(
        math.comb(rest, j) * p**j * (1 - p) ** (rest - j) * _none_of(size, size * groups / units, 1 + j)
        for j in range(rest + 1)
    )
    return units * groups_per_token / groups * (1.0 - miss)


def _none_of(population: float, marked: float, draws: int) -> float:
    """Probability that ``draws`` distinct picks from ``population`` miss all ``marked`` ones:
    C(N - m, k) / C(N, k) as a product."""
    miss = 1.0
    for i in range(min(draws, int(population))):
        miss *= max(0.0, (population - marked - i) / (population - i))
    return miss


def published_rate(backend: str, gpu: GPUSpec, scope: str, ranks: int) -> Rate | None:
    """The measured row for ``backend`` on ``gpu`` in ``scope`` with the EP size nearest
    ``ranks`` (ties to the smaller); None where none was published."""
    rows = [r for r in rates() if r.backend == backend and gpu.id in r.gpus and r.scope == scope]
    if not rows:
        return None
    return min(rows, key=lambda r: (abs(r.ranks - ranks), r.ranks))


@dataclass(frozen=True)
class Dispatch:
    """One dispatch or combine of one micro-batch on one rank."""

    logical_bytes: float  # tokens x distinct destinations x hidden x bytes
    seconds: float
    source: str  # "published <backend> EP<n>" or "link bound"


def flex_time(
    backend: str,
    gpu: GPUSpec,
    group: Group,
    tokens: float,
    hidden: int,
    experts: int,
    top_k: int,
    elem_bytes: float,
    combine: bool,
    groups: int = 1,
    groups_per_token: int = 1,
) -> Dispatch:
    """Seconds of one DeepEP/HybridEP dispatch (or combine) of ``tokens`` over ``group``.

    ``elem_bytes``: bytes per element sent (2 for BF16, 1 for an FP8 dispatch; the combine is
    BF16)."""
    if group.size <= 1 or tokens <= 0:
        return Dispatch(0.0, 0.0, "")
    rdma = group.crosses_nodes
    units = group.domains if rdma else group.size
    reach = distinct_units(experts, top_k, units, groups, groups_per_token)
    logical = tokens * reach * hidden * elem_bytes
    row = published_rate(backend, gpu, "rdma" if rdma else "nvlink", group.size) if backend in BACKENDS else None
    if row is not None:
        rate = row.combine if combine else (row.dispatch_fp8 if elem_bytes < 2 else row.dispatch_bf16)
        return Dispatch(logical, logical / rate, f"published {backend} EP{row.ranks}")
    e = efficiency(gpu)
    if rdma:
        # the local node's share of the reach goes over NVLink meanwhile: only the rest crosses
        local_hit = reach / units  # by symmetry, the share of tokens that reach their own node
        remote = tokens * (reach - local_hit) * hidden * elem_bytes
        t = remote / (gpu.inter_bytes_per_s * e.inter_bus)
    else:
        t = logical / (gpu.intra_bytes_per_s * e.intra_bus)
    return Dispatch(logical, t + math.ceil(math.log2(group.size)) * latency(group, gpu), "link bound")
