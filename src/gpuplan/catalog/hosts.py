"""Host catalog: which host (CPU memory, PCIe, NVMe) a GPU platform comes in, from catalog/hosts/*.toml."""

from __future__ import annotations

import functools

from gpuplan.catalog import _read, _unknown
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
