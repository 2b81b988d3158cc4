"""A GPU as the planner sees it: capacity, bandwidths and dense peak rates, in SI units."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError, require
from gpuplan.units import GB, TFLOP

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class GPUSpec:
    id: str
    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_flops: dict[str, float]  # dense peak FLOP/s per dtype
    interconnect: str
    interconnect_bytes_per_s: float  # per GPU, both directions together (as datasheets quote it)
    pcie_bytes_per_s: float
    gpus_per_node: int
    tdp_w: float
    sm_count: int = 0
    nvlink_domain: int = 0  # GPUs in one NVLink domain when larger than a node (GB200 NVL72)
    vendor: str = "nvidia"
    source: str = field(default="", compare=False)
    date: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        require(self.memory_bytes > 0, "memory_bytes", "must be positive")
        require(self.hbm_bytes_per_s > 0, "hbm_gbps", "must be positive")
        require(self.gpus_per_node > 0, "gpus_per_node", "must be positive")
        for dtype, flops in self.peak_flops.items():
            require(dtype in DTYPES, "tflops", f"unknown dtype {dtype!r}", f"use one of {DTYPES}")
            require(flops > 0, f"tflops.{dtype}", "must be positive")

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype."""
        if dtype not in self.peak_flops:
            have = ", ".join(sorted(self.peak_flops))
            raise GpuplanError("precision", f"{self.name} has no {dtype} tensor cores",
                               f"choose one of: {have}")
        return self.peak_flops[dtype]

    @classmethod
    def from_catalog(cls, gpu_id: str, data: dict) -> "GPUSpec":
        return cls(
            id=gpu_id, name=data["name"], memory_bytes=float(data["memory_bytes"]),
            hbm_bytes_per_s=data["hbm_gbps"] * GB,
            peak_flops={k: v * TFLOP for k, v in data["tflops"].items()},
            interconnect=data["interconnect"], interconnect_bytes_per_s=data["interconnect_gbps"] * GB,
            pcie_bytes_per_s=data["pcie_gbps"] * GB, gpus_per_node=data["gpus_per_node"],
            tdp_w=data["tdp_w"], sm_count=data.get("sm_count", 0), nvlink_domain=data.get("nvlink_domain", 0),
            vendor=data.get("vendor", "nvidia"), source=data["source"], date=data["date"])
