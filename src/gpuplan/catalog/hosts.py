"""Host catalog: which host (CPU memory, PCIe, NVMe) a GPU platform comes in, from catalog/hosts/*.toml."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from gpuplan.catalog import _read, _unknown
from gpuplan.errors import GpuplanError
from gpuplan.specs.host import HostSpec


def host_ids() -> list[str]:
    return list(_read("hosts"))


@functools.lru_cache(maxsize=64)  # bounded: one entry per host file
def host(host_id: str) -> HostSpec:
    entries = _read("hosts")
    if host_id not in entries:
        raise _unknown("host", host_id, list(entries), "name a file in catalog/hosts/")
    return HostSpec.from_catalog(entries[host_id])


def host_for_gpu(gpu_id: str) -> HostSpec:
    """The host a GPU usually sits in: the file listing it, else the file marked ``default``."""
    entries = _read("hosts")
    for key, data in entries.items():
        if gpu_id in data.get("gpus", ()):
            return host(key)
    return host(next(k for k, d in entries.items() if d.get("default")))


# the numeric keys of a host file and their units
NUMBERS = {
    "cpu_memory_gb": "GB",
    "cpu_memory_gbps": "GB/s",
    "pcie_gbps": "GB/s",
    "cpu_tflops": "TFLOP/s",
    "disk_gb": "GB",
    "disk_read_gbps": "GB/s",
    "disk_write_gbps": "GB/s",
}


def load_host(name: str) -> HostSpec:
    """A catalog host id (``pcie5-server``) or a path to a hardware file in the catalog's TOML
    layout (cpu_memory_gb, cpu_memory_gbps, pcie_gbps, cpu_tflops; optional pcie_shared_by,
    disk_gb, disk_read_gbps, disk_write_gbps, name, source)."""
    if name in _read("hosts"):
        return host(name)
    path = Path(name)
    if not path.is_file():
        raise _unknown("host", name, host_ids(), "name a file in catalog/hosts/ or pass a path to a TOML file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise GpuplanError("host", f"cannot read {name}: {exc}", "fix the TOML syntax") from None
    missing = [k for k in ("cpu_memory_gb", "cpu_memory_gbps", "pcie_gbps", "cpu_tflops") if k not in data]
    if missing:
        raise GpuplanError("host", f"{name} lacks {', '.join(missing)}", "add them (GB, GB/s and TFLOP/s)")
    for key in (*NUMBERS, "pcie_shared_by"):
        value = data.get(key)
        if value is None:
            continue
        zero_ok = key.startswith("disk")  # a host without a disk is fine; without memory not
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not (0 <= value if zero_ok else 0 < value) or not value <= 1e9:
            unit = NUMBERS.get(key, "GPUs sharing a link")
            what = "from 0 up" if zero_ok else "above 0"
            raise GpuplanError(f"{name}: {key}", f"must be a number {what} ({unit}), got {value!r}", "fix the file")
    return HostSpec.from_catalog({"name": path.stem, "source": str(path), **data})
