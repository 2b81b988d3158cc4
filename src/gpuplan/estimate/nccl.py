"""NCCL's own cost model: which algorithm and protocol it runs for a collective, and how long it takes.

NCCL picks, for every collective, the (algorithm, protocol) pair its tuning model predicts fastest
(src/enqueue.cc ``topoGetAlgoInfo``: the least ``ncclTopoGetAlgoTime`` over the enabled pairs). This
module evaluates that model: NVIDIA/nccl src/graph/tuning.cc ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime`` (read at commit 5067397c, NCCL 2.30), with the pieces it reads from the
topology search (src/graph/search.cc) and NVLS setup (src/transport/nvls.cc). Line numbers below
are of tuning.cc at that commit.

Time = latency + bytes / bandwidth (``ncclTopoGetAlgoTime``, l. 640), bytes the whole buffer (the
output of an all-gather, the input of a reduce-scatter), bandwidth the *algorithm* bandwidth: the
bus bandwidth times nRanks / nSteps for ring and NVLS (nSteps = 2(n-1) all-reduce, n-1 gathers),
times 0.5 for tree (l. 376-381), the bus bandwidth itself for NVLS all-gather / reduce-scatter.

Bus bandwidths (l. 300-372), from the ring rate ``B`` (nChannels x bwIntra of the ring graph, NCCL's
NVLink rate per GPU: links x ``SM80/SM90/SM100_NVLINK_BW`` of src/graph/topo.h, 12 x 20, 18 x 20.6,
18 x 40.1 GB/s, which the catalog's ``intra_bus`` x link rate reproduces; across nodes the
catalog's min(B, ranks per node x NIC x ``inter_bus``), as estimate/comm.py always had):

* ring: Simple ``B``; LL128 0.92 ``B``; LL ``B``/2 capped at ``llMaxBws`` (one node: per GPU
  generation; across nodes: per host CPU, an Intel/Arm host assumed).
* tree (all-reduce only): 0.92 ``B``; LL / 3.8 (capped as LL); LL128 x 7/9 in a node, x 120/128
  across; the ``treeCorrectionFactor`` table by size (l. 620-628) scales it in ``GetAlgoTime``.
* NVLS (NVLink SHARP, Simple only; the switch reduces multicast loads): per channel
  bwIntra x ``nvlsEfficiency`` (0.85 Hopper, 0.74 Blackwell, l. 139) x (nCh-1)/nCh, x 2 for
  all-reduce (which pipelines its reduce-scatter and all-gather), x (ppn-1)/ppn for the gathers.
  The NVLS graph has one channel per local GPU, at most ``NCCL_MAX_NVLS_ARITY`` = 32
  (search.cc l. 1127), and each channel pulls its head GPU's share twice
  (``ncclTopoSearchTryNvls``), so nCh x bwIntra = B x nCh / (nCh + 1): taken continuous here, not
  rounded down to search.cc's speed steps. In one node its bwInter is raised to twice bwIntra and
  does not bind. Together: 2 B eff (nCh-1)/(nCh+1) for an all-reduce (8 H100s: 489 GB/s bus,
  measured 480: NVIDIA/nccl-tests issue #212, nccl issue #2140).
* NVLS_TREE (all-reduce across nodes): per channel min(the NVLS intra rate, the head's NIC rate
  (x 2 on 2 nodes), ``perChMaxNVLSTreeBws``), one head per GPU with its own NIC.
* PAT (all-gather / reduce-scatter with one GPU per node): 0.75 ``B``.

Latencies: ``baseLatencies`` + per-step ``hwLatencies`` (NVLink in a node, network across;
l. 146-177): ring 2(n-1) steps for an all-reduce of which 2(nNodes-1) cross the network (each at
least the 1 us / 3 us Simple network post overhead, ``getNetOverhead``), x 1.4 for Simple across
nodes (l. 634, the ring's plateau); tree 2((ppn-1) NVLink + log2(nNodes) network) hops; NVLS 25 us;
NVLS_TREE 25 us + 2 log2(nNodes) x 20.9 us; a NIC's own latency (``latencyInter``) is taken as 0,
as NCCL's IB plugin reports it. Disabled as NCCL disables them: NVLS needs NVSwitch and
compute capability 9.0 (search.cc l. 1124: here NVLink4/5 GPUs, every one of which in the
catalog sits on an NVSwitch board) and, across nodes, gives way to NVLS_TREE (no CollNet);
NVLS_TREE runs only across nodes; tree only all-reduces; PAT only with one GPU per node; CollNet
(in-network SHARP) is not modelled. NCCL's per-channel caps (``perChMaxRingLL128Bws``,
``perChMaxTreeBws``) need its channel count and are left out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

US = 1e-6
GB = 1e9

GENERATION = {"nvlink3": "ampere", "nvlink4": "hopper", "nvlink5": "blackwell"}
NVLS_GENERATIONS = ("hopper", "blackwell")  # compute capability >= 9.0 with an NVSwitch
PROTOCOLS = ("LL", "LL128", "Simple")
KINDS = ("all-reduce", "all-gather", "reduce-scatter")

# baseLatencies (us), per algorithm and protocol
BASE_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "pat": {"LL": 8.0, "LL128": 8.0, "Simple": 8.0},
}
# hwLatencies (us): [NVLINK] and [NET]
NVLINK_US = {
    "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 25.0},
    "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 25.0},
    "pat": {"LL": 0.0, "LL128": 0.0, "Simple": 4.0},
}
NET_US = {
    "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
    "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 18.0},
    "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 20.9},
    "pat": {"LL": 0.0, "LL128": 0.0, "Simple": 14.0},
}
NET_OVERHEAD_US = 1.0  # getNetOverhead: Intel x86 (and the default); x 3 for Simple
# llMaxBws (GB/s): one node by GPU generation (N1); across nodes by host CPU (Intel N2 / N4 row)
LL_MAX_ONE_NODE = {"ampere": 87.7 * GB, "hopper": 141.0 * GB, "blackwell": 282.0 * GB}
LL_MAX_NODES = (39.0 * GB, 20.4 * GB)  # 2 nodes, more
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}  # nvlsEfficiency
# perChMaxNVLSTreeBws (GB/s): 2 nodes, more
NVLS_TREE_PER_CHANNEL = {"hopper": (57.7 * GB, 45.5 * GB), "blackwell": (96.0 * GB, 80.0 * GB)}
MAX_NVLS_ARITY = 32  # src/include/device.h NCCL_MAX_NVLS_ARITY
LL128_RING = 0.92  # 120/128 payload
PLATEAU = 1.4  # ring Simple latency across nodes, compute capability >= 8.0
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B - 256 MiB
TREE_CORRECTION = {
    "LL": (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    "LL128": (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
        1.0,
    ),
    "Simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        0.9,
    ),
}


@dataclass(frozen=True)
class Fabric:
    """What NCCL's model reads of the machine: the GPU generation, the ring's bus bandwidth in one
    NVLink domain and across domains (bytes/s), each GPU's NIC rate, and NVSwitch multicast."""

    generation: str  # "ampere", "hopper", "blackwell"
    nvlink_bus: float  # B in a node: nChannels x bwIntra of the ring graph
    network_bus: float  # ring bus bandwidth across nodes: min(B, ppn x NIC x inter_bus)
    nic: float  # one GPU's NIC rate at its measured efficiency, one direction (an NVLS_TREE head's bwInter)
    nvls: bool  # NVSwitch with multicast (NVLink SHARP)


@dataclass(frozen=True)
class Choice:
    algorithm: str  # "ring", "tree", "nvls", "nvls_tree", "pat"
    protocol: str  # "LL", "LL128", "Simple"
    time_s: float
    algorithm_bytes_per_s: float
    latency_s: float
    model_s: float = 0.0  # what NCCL's own model predicts (it picks on this)

    @property
    def name(self) -> str:
        return f"nccl {self.algorithm} {self.protocol}"


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


def _correction(algo: str, proto: str, size: float) -> float:
    """``treeCorrectionFactor`` at ``size``: NCCL's measured ramp of tree bandwidth at 64 B - 256 MiB
    (l. 620-628; logSize < 23), which NCCL also applies to NVLS_TREE on Blackwell (logSize < 24).
    gpuplan applies it to NVLS in one node as well: nccl-tests on 8 H100s (the NVLS rows of
    tests/data/collectives/nccl_tests_h100_8gpu.csv) ramp to NVLS's rate the same way, 0.6-0.9 of
    it at 2-256 MiB. ``choose`` picks on the corrected times: where NCCL's uncorrected model
    would take NVLS but the ring is faster (4 H100s at 3-4 MiB: vLLM's pynccl timings) the
    ring's time is the one measured."""
    if algo not in ("tree", "nvls", "nvls_tree"):
        return 1.0
    chunks = int(size) >> 6
    log_size = _log2i(chunks)
    limit = 23 if algo == "tree" else 24
    return TREE_CORRECTION[proto][log_size] if chunks and log_size < limit else 1.0


def candidates(kind: str, size: float, ranks: int, nodes: int, f: Fabric) -> list[Choice]:
    """Every (algorithm, protocol) NCCL would consider for ``kind`` of ``size`` bytes over ``ranks``
    GPUs on ``nodes`` nodes (NVLink domains) of fabric ``f``, with its predicted time."""
    n, nn = ranks, nodes
    ppn = n / nn
    one_node = nn == 1
    nsteps = 2 * (n - 1) if kind == "all-reduce" else n - 1
    ring_bus = f.nvlink_bus if one_node else f.network_bus
    ll_max = LL_MAX_ONE_NODE[f.generation] if one_node else LL_MAX_NODES[0 if nn <= 2 else 1]
    out: list[Choice] = []

    def add(algo: str, proto: str, bus: float, ratio: float, latency_us: float) -> None:
        bw = bus * ratio
        if bw <= 0:
            return
        factor = _correction(algo, proto, size)
        lat = latency_us * US
        if algo == "ring" and proto == "Simple" and not one_node and kind == "all-reduce":
            lat *= PLATEAU
        if algo == "tree" or (algo == "nvls_tree" and f.generation == "blackwell"):
            model_bw = bw * factor  # NCCL corrects these in its own model (ncclTopoGetAlgoTime)
        else:
            model_bw = bw
        out.append(Choice(algo, proto, lat + size / (bw * factor), bw * factor, lat, lat + size / model_bw))

    ring_ratio = n / nsteps
    for p in PROTOCOLS:
        # ring
        bus = {"LL": min(ll_max, ring_bus / 2), "LL128": LL128_RING * ring_bus, "Simple": ring_bus}[p]
        intra = NVLINK_US["ring"][p]
        inter = NET_US["tree"][p] if ppn == 1 else NET_US["ring"][p]
        if not one_node:
            intra = max(intra, NET_OVERHEAD_US * (3 if p == "Simple" else 1))
        inter_steps = 0 if one_node else (2 * (nn - 1) if kind == "all-reduce" else nn - 1)
        add("ring", p, bus, ring_ratio, BASE_US["ring"][p] + (nsteps - inter_steps) * intra + inter_steps * inter)
        # tree: all-reduce only
        if kind == "all-reduce":
            tb = 0.92 * ring_bus
            tb = {"LL": min(tb / 3.8, ll_max), "LL128": tb * (7 / 9 if one_node else 120 / 128), "Simple": tb}[p]
            t_inter = NET_US["tree"][p]
            lat = 2 * ((n // nn - 1) * NVLINK_US["tree"][p] + _log2i(nn) * t_inter)
            add("tree", p, tb, 0.5, BASE_US["tree"][p] + lat)
    # PAT: all-gather / reduce-scatter, one GPU per node
    if kind != "all-reduce" and not one_node and ppn == 1:
        lat = BASE_US["pat"]["Simple"] + _log2i(nn) * NET_US["pat"]["Simple"] / 3.5 + n * 2.8
        add("pat", "Simple", 0.75 * ring_bus, 1.0, lat)
    # NVLS in one node; NVLS_TREE across nodes (all-reduce)
    local = int(ppn)
    if f.nvls and local >= 2:
        ch = min(local, MAX_NVLS_ARITY)
        eff = NVLS_EFFICIENCY[f.generation]
        per_ch = f.nvlink_bus / (ch + 1) * eff * (ch - 1) / ch
        per_ch *= 2 if kind == "all-reduce" else (ppn - 1) / ppn
        if one_node:
            ratio = n / nsteps if kind == "all-reduce" else 1.0
            add("nvls", "Simple", ch * per_ch, ratio, NVLINK_US["nvls"]["Simple"])
        elif kind == "all-reduce":
            cap = NVLS_TREE_PER_CHANNEL[f.generation][0 if nn <= 2 else 1]
            per_ch = min(per_ch, f.nic * (2 if nn <= 2 else 1), cap)
            lat = NVLINK_US["nvls_tree"]["Simple"] + 2 * _log2i(nn) * NET_US["nvls_tree"]["Simple"]
            add("nvls_tree", "Simple", ch * per_ch, n / nsteps, lat)
    return out


@functools.lru_cache(maxsize=65536)  # a pure function of numbers: the search asks the same sizes again
def choose(kind: str, size: float, ranks: int, nodes: int, f: Fabric) -> Choice:
    """NCCL's pick for ``kind`` of ``size`` bytes over ``ranks`` GPUs on ``nodes`` nodes: the
    candidate with the least predicted time (enqueue.cc ``topoGetAlgoInfo``; NVLS's times with the
    size correction of ``_correction``)."""
    if kind not in KINDS:
        raise ValueError(f"NCCL's model times {KINDS}, not {kind!r}")
    if ranks <= 1 or size <= 0:
        return Choice("none", "none", 0.0, 0.0, 0.0, 0.0)
    return min(candidates(kind, size, ranks, nodes, f), key=lambda c: c.time_s)
