"""The host around the GPUs: CPU memory, its bandwidth, the PCIe link to each GPU, NVMe, CPU compute.

Offload (serving past the GPU's memory, ZeRO-Offload training) is decided by these numbers, not by
the GPU's: a byte that lives in CPU memory reaches the GPU over PCIe, one on NVMe first crosses the
disk's link into CPU memory. All fields are SI (bytes, bytes/s one direction, FLOP/s) and are
*achievable* rates, not link rates: pinned ``cudaMemcpy`` reaches about 80% of a PCIe x16 link's
128b/130b payload rate (NVIDIA, "How to Optimize Data Transfers in CUDA C/C++"; nvbandwidth), so
the catalog (catalog/hosts/*.toml) quotes ~25 GB/s for Gen4 x16 and ~50 GB/s for Gen5 x16.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from gpuplan.errors import GpuplanError, require


@dataclass(frozen=True)
class HostSpec:
    name: str
    cpu_memory_bytes: float  # per node
    cpu_memory_bytes_per_s: float  # achievable (STREAM-like) per node, all sockets
    pcie_bytes_per_s: float  # host<->device, one direction, one GPU transferring alone
    pcie_shared_by: int = 1  # GPUs behind one x16 uplink (a PCIe switch), sharing its bandwidth
    disk_bytes: float = 0.0  # NVMe capacity per node (0: none)
    disk_read_bytes_per_s: float = 0.0  # per node, all drives striped
    disk_write_bytes_per_s: float = 0.0
    cpu_flops: float = 1e12  # achievable fp32 FLOP/s per node for layers or attention run on the CPU
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name in ("cpu_memory_bytes", "cpu_memory_bytes_per_s", "pcie_bytes_per_s", "cpu_flops"):
            value = getattr(self, name)
            require(value > 0, _flag(name), f"must be positive, got {value}")
        for name in ("disk_bytes", "disk_read_bytes_per_s", "disk_write_bytes_per_s"):
            value = getattr(self, name)
            require(value >= 0, _flag(name), f"must not be negative, got {value}")
        require(
            isinstance(self.pcie_shared_by, int) and self.pcie_shared_by >= 1,
            "pcie_shared_by",
            f"must be a positive integer, got {self.pcie_shared_by!r}",
        )
        if self.disk_bytes > 0:
            require(
                self.disk_read_bytes_per_s > 0 and self.disk_write_bytes_per_s > 0,
                "disk_gbps",
                "a disk needs a read and write bandwidth",
                "pass `disk_gbps`",
            )

    def pcie_per_gpu(self, active_gpus: int = 1) -> float:
        """One direction of one GPU's host link when ``active_gpus`` GPUs of the node transfer at
        once: GPUs behind the same switch split its uplink (DGX A100 user guide: two GPUs per PCIe
        switch)."""
        sharing = min(max(active_gpus, 1), self.pcie_shared_by)
        return self.pcie_bytes_per_s / sharing

    def with_overrides(
        self,
        cpu_memory_bytes: float | None = None,
        pcie_bytes_per_s: float | None = None,
        disk_bytes: float | None = None,
        disk_bytes_per_s: float | None = None,
        cpu_memory_bytes_per_s: float | None = None,
        cpu_flops: float | None = None,
    ) -> HostSpec:
        """The same host with the user's numbers (flags or a hardware file) in place of the catalog's.

        ``disk_bytes_per_s`` sets the read rate and, unless the disk had one, the write rate to half
        of it (NVMe drives write at roughly half their read rate; FlexGen section 6 measured about
        2 GB/s read and 1 GB/s write on its SSD)."""
        changes: dict = {}
        if cpu_memory_bytes is not None:
            changes["cpu_memory_bytes"] = cpu_memory_bytes
        if cpu_memory_bytes_per_s is not None:
            changes["cpu_memory_bytes_per_s"] = cpu_memory_bytes_per_s
        if pcie_bytes_per_s is not None:
            changes["pcie_bytes_per_s"] = pcie_bytes_per_s
        if cpu_flops is not None:
            changes["cpu_flops"] = cpu_flops
        if disk_bytes is not None:
            changes["disk_bytes"] = disk_bytes
        if disk_bytes_per_s is not None:
            changes["disk_read_bytes_per_s"] = disk_bytes_per_s
            changes["disk_write_bytes_per_s"] = disk_bytes_per_s / 2
        return replace(self, **changes)

    @classmethod
    def from_catalog(cls, data: dict) -> HostSpec:
        GB = 1e9
        return cls(
            name=data["name"],
            cpu_memory_bytes=data["cpu_memory_gb"] * GB,
            cpu_memory_bytes_per_s=data["cpu_memory_gbps"] * GB,
            pcie_bytes_per_s=data["pcie_gbps"] * GB,
            pcie_shared_by=int(data.get("pcie_shared_by", 1)),
            disk_bytes=data.get("disk_gb", 0) * GB,
            disk_read_bytes_per_s=data.get("disk_read_gbps", 0) * GB,
            disk_write_bytes_per_s=data.get("disk_write_gbps", 0) * GB,
            cpu_flops=data["cpu_tflops"] * 1e12,
            source=data["source"],
        )


def _flag(name: str) -> str:
    """The CLI flag a field comes from, so that an error names what the user typed."""
    return {
        "cpu_memory_bytes": "cpu_memory",
        "pcie_bytes_per_s": "pcie_gbps",
        "disk_bytes": "disk",
        "disk_read_bytes_per_s": "disk_gbps",
        "disk_write_bytes_per_s": "disk_gbps",
        "cpu_memory_bytes_per_s": "cpu_memory_gbps",
        "cpu_flops": "cpu_tflops",
    }.get(name, name)


_BYTES = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTP]?)(i?)B?\s*$", re.IGNORECASE)
_SCALE = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


def parse_bytes(text: str | float, field: str) -> float:
    """``256GB`` (SI, 256e9), ``256GiB`` (binary), ``2TB`` or a plain number of bytes."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _BYTES.match(str(text))
        if not match:
            raise GpuplanError(field, f"cannot read {text!r} as a size", "write it like 256GB, 2TB or 512GiB")
        base = 1024 if match.group(3) else 1000
        value = float(match.group(1)) * base ** _SCALE[match.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise GpuplanError(field, f"must be a positive size, got {text!r}")
    return value
