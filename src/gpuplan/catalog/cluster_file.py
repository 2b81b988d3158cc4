"""A cluster described in a TOML file: which GPU, how many nodes, and the two networks between them.

``gpuplan train MODEL --cluster my-cluster.toml`` (and ``search``) plans on the user's own
machines. The file names a GPU (a catalog id or a GPU TOML file, specs/gpu_file.py) and overrides
the node and network facts the catalog entry carries, in the catalog's units and meanings
(catalog/gpus/*.toml: ``gpus_per_node``, ``interconnect_gbps``, ``nvlink_domain``,
``nics_per_node``, ``nic_gbit``; catalog/efficiency/*.toml: ``intra_latency_us``,
``inter_latency_us``)::

    name = "4 x DGX H100"
    gpu = "h100-sxm"          # catalog id, or a GPU TOML path (relative to this file)
    nodes = 4
    gpus_per_node = 8         # default: the GPU entry's

    [intra]                   # scale-up: NVLink / xGMI inside a node (or an NVL72 rack)
    interconnect = "nvlink4"  # a name, shown in reports
    gbps = 900                # per GPU, GB/s, both directions together (datasheet figure)
    latency_us = 3.0          # one step of a p2p or all-to-all (NCCL's tables time the rest on NVLink)
    domain = 8                # GPUs in one scale-up domain when larger than a node (NVL72: 72)

    [inter]                   # scale-out: the NICs between nodes
    nics_per_node = 8
    nic_gbit = 400            # per NIC, Gbit/s, one direction
    latency_us = 8.0

Every field is checked before use; an error names the file, line and field and the fix in one
line (``my-cluster.toml:9: inter.nic_gbit: must be a positive number, got '400G'``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError, require
from gpuplan.inputs import checked_path
from gpuplan.specs.hardware import GPUSpec

# section -> field -> (type, what it means); "" is the top level
FIELDS: dict[str, dict[str, tuple[type, str]]] = {
    "": {
        "name": (str, "a display name"),
        "gpu": (str, "a catalog GPU id (`gpuplan gpus`) or a GPU TOML file"),
        "nodes": (int, "number of nodes"),
        "gpus_per_node": (int, "GPUs per node"),
        "source": (str, "where the numbers come from"),
        "date": (str, "when they were measured or published"),
    },
    "intra": {
        "interconnect": (str, "scale-up link name, e.g. nvlink4, xgmi, pcie4"),
        "gbps": (float, "scale-up bandwidth per GPU, GB/s, both directions together"),
        "latency_us": (
            float,
            "latency of one collective step inside the domain, microseconds (point-to-point and "
            "all-to-all; on NVLink GPUs NCCL's own tables time all-reduce, all-gather and reduce-scatter)",
        ),
        "domain": (int, "GPUs in one scale-up domain when larger than a node (GB200 NVL72: 72)"),
    },
    "inter": {
        "nics_per_node": (int, "scale-out NICs per node"),
        "nic_gbit": (float, "per NIC, Gbit/s, one direction"),
        "latency_us": (
            float,
            "latency of one collective step across nodes, microseconds (point-to-point and all-to-all; "
            "on NVLink GPUs NCCL's own tables time all-reduce, all-gather and reduce-scatter)",
        ),
    },
}
REQUIRED = ("gpu", "nodes")


@dataclass(frozen=True)
class ClusterSpec:
    """``nodes`` x ``gpus_per_node`` of ``gpu``, whose node and network fields the file set."""

    name: str
    nodes: int
    gpu: GPUSpec
    source: str = ""

    def __post_init__(self) -> None:
        require(self.nodes >= 1, "nodes", f"must be at least 1, got {self.nodes}")
        # the largest clusters hold ~10^5 GPUs; beyond 10^6 nodes the plan search never ends
        require(
            self.nodes <= 1_000_000, "nodes", f"{self.nodes:,} nodes is more than any cluster has", "at most 1,000,000"
        )

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpu.gpus_per_node

    def check_gpus(self, gpus: int) -> None:
        """A plan may use part of the cluster, never more than it has."""
        require(
            gpus <= self.gpus,
            "gpus",
            f"{gpus} GPUs but the cluster has {self.nodes} nodes x {self.gpu.gpus_per_node} = {self.gpus}",
            f"use `gpus={self.gpus}` or fewer, or add nodes to the cluster file",
        )


def _line(text: str, section: str, key: str) -> int | None:
    """Line (1-based) of ``key =`` inside ``[section]`` (the top level for ""), or None."""
    current = ""
    for i, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[([^\]]+)\]", line)
        if header:
            current = header[1].strip()
        elif current == section and re.match(rf"\s*{re.escape(key)}\s*=", line):
            return i
    return None


class _Reader:
    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def fail(self, section: str, key: str, message: str, fix: str | None = None) -> GpuplanError:
        line = _line(self.text, section, key)
        if line is None and section:  # a field the table lacks: point at the table's header
            line = next((i for i, t in enumerate(self.text.splitlines(), 1) if t.strip() == f"[{section}]"), None)
        where = f"{self.path}:{line}" if line else str(self.path)
        return GpuplanError(f"{where}: {section + '.' if section else ''}{key}", message, fix)

    def check(self, section: str, table: dict[str, Any]) -> dict[str, Any]:
        fields = FIELDS[section]
        for key, value in table.items():
            if section == "" and key in ("intra", "inter"):
                if not isinstance(value, dict):
                    raise self.fail("", key, f"must be a table [{key}], got {value!r}", f"write [{key}] and its fields")
                continue
            if key not in fields:
                close = difflib.get_close_matches(key, list(fields), n=1)
                raise self.fail(
                    section,
                    key,
                    "is not a cluster field",
                    f"did you mean {close[0]}?" if close else f"known fields: {', '.join(fields)}",
                )
            kind, what = fields[key]
            if kind is str:
                ok = isinstance(value, str) and bool(value)
                wrong = "a non-empty string"
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
                wrong = "a positive whole number"
            else:
                # 0 < value < inf: TOML also spells nan and inf, which no bandwidth or latency is
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf
                wrong = "a positive number"
            if not ok:
                raise self.fail(section, key, f"must be {wrong}, got {value!r}", what)
        return table


def read_cluster_file(path: str | Path) -> ClusterSpec:
    """Parse and validate a cluster TOML file, and apply it to its GPU."""
    from gpuplan import catalog  # the GPU it names is a catalog id or a GPU file

    p = checked_path(path, "cluster")
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise GpuplanError("cluster", f"no such file {str(p)!r}", "pass a cluster TOML file (see the README)") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise GpuplanError("cluster", f"cannot read {str(p)!r} ({exc})", "pass a TOML file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message carries the line and column
        raise GpuplanError(str(p), f"is not valid TOML ({exc})", "see the cluster schema in the README") from None
    r = _Reader(p, text)
    r.check("", data)
    for key in REQUIRED:
        if key not in data:
            raise GpuplanError(f"{p}: {key}", "is missing", f"add it ({FIELDS[''][key][1]})")
    intra = r.check("intra", data.get("intra", {}))
    inter = r.check("inter", data.get("inter", {}))

    gpu_name = data["gpu"]
    local = p.parent / gpu_name
    gpu = catalog.gpu(str(local) if gpu_name.endswith(".toml") and local.is_file() else gpu_name)
    per_node = data.get("gpus_per_node", gpu.gpus_per_node)
    nics = inter.get("nics_per_node", gpu.nics_per_node)
    nic_bytes = inter["nic_gbit"] * 1e9 / 8 if "nic_gbit" in inter else gpu.nic_bytes_per_s
    nodes = data["nodes"]
    if nodes > 1 and not (nics and nic_bytes):
        raise r.fail(
            "inter",
            "nics_per_node",
            f"{nodes} nodes need a scale-out network",
            "set [inter] nics_per_node and nic_gbit",
        )
    domain = intra.get("domain", 0)
    if domain:
        if domain % per_node or domain > nodes * per_node:
            raise r.fail(
                "intra",
                "domain",
                f"{domain} GPUs is not a whole number of nodes of {per_node} within the cluster's {nodes * per_node}",
                "give the GPUs of one NVLink domain (a multiple of gpus_per_node)",
            )
    eff = gpu.efficiency
    if eff is not None:
        eff = dataclasses.replace(
            eff,
            intra_latency_s=intra.get("latency_us", eff.intra_latency_s * 1e6) * 1e-6,
            inter_latency_s=inter.get("latency_us", eff.inter_latency_s * 1e6) * 1e-6,
        )
    elif "latency_us" in intra or "latency_us" in inter:
        raise r.fail("intra", "latency_us", "needs a GPU with an efficiency file", "name a catalog GPU")
    gpu = dataclasses.replace(
        gpu,
        gpus_per_node=per_node,
        interconnect=intra.get("interconnect", gpu.interconnect),
        interconnect_bytes_per_s=intra["gbps"] * 1e9 if "gbps" in intra else gpu.interconnect_bytes_per_s,
        # a rack-scale domain (NVL72) is as large as the part of it the cluster has
        nvlink_domain=domain or min(gpu.nvlink_domain, nodes * per_node),
        nics_per_node=nics,
        nic_bytes_per_s=nic_bytes,
        efficiency=eff,
    )
    return ClusterSpec(name=data.get("name", p.stem), nodes=nodes, gpu=gpu, source=data.get("source", f"user file {p}"))
