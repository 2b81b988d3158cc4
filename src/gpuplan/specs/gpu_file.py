"""A GPU (with its node and network) described in a TOML file of the catalog's schema.

``gpuplan train MODEL --gpu my-card.toml`` plans on hardware the catalog lacks. Every field is
checked before it is used, so a typo or a wrong unit is named in one line (``my-card.toml:
hbm_gbps: must be a positive number, got '3.35 TB/s'``) instead of surfacing as a KeyError or a
wrong plan. The catalog's own files pass the same check (tests/test_gpu_file.py).
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.specs.hardware import DTYPES

# field -> (type, required, what it means); numbers in the units the catalog uses
FIELDS: dict[str, tuple[type, bool, str]] = {
    "name": (str, True, "display name"),
    "memory_bytes": (float, True, "device memory in bytes, as nvidia-smi/rocm-smi report it"),
    "hbm_gbps": (float, True, "memory bandwidth, GB/s (10^9 B/s)"),
    "interconnect": (str, True, "scale-up link name, e.g. nvlink4, pcie4"),
    "interconnect_gbps": (float, True, "scale-up bandwidth per GPU, GB/s, both directions together"),
    "pcie_gbps": (float, True, "host PCIe bandwidth, GB/s, both directions together"),
    "gpus_per_node": (int, True, "GPUs per node"),
    "tdp_w": (float, True, "board power, W"),
    "tflops": (dict, True, "dense peak TFLOP/s per dtype"),
    "source": (str, False, "where the numbers come from"),
    "date": (str, False, "when they were published"),
    "vendor": (str, False, "nvidia or amd"),
    "sm_count": (int, False, "SMs (NVIDIA) or CUs (AMD)"),
    "compute_capability": (float, False, "NVIDIA compute capability, e.g. 9.0 (Hopper), 10.0 (B200)"),
    "nvlink_domain": (int, False, "GPUs in one NVLink domain when larger than a node"),
    "nics_per_node": (int, False, "scale-out NICs per node"),
    "nic_gbit": (float, False, "per NIC, Gbit/s, one direction"),
    "c2c_gbps": (float, False, "NVLink-C2C to the host CPU, GB/s"),
    "efficiency": (str, False, "name of a catalog/efficiency file (default: default)"),
    # this GPU's own measured maximum achievable matmul rate over its dense peak, per dtype, where
    # it differs from its efficiency family's (a part with another clock or power limit)
    "mamf": (dict, False, "measured matmul rate over the dense peak per dtype, e.g. {bf16 = 0.729}"),
    "memory_note": (str, False, "how memory_bytes was read"),
    "network_source": (str, False, "where the network numbers come from"),
}
VENDORS = ("nvidia", "amd")


# no GPU field comes near these (1e16 bytes is 10 PB of device memory; a million GPUs in a node):
# a value beyond them is a typo that would otherwise overflow later arithmetic
MAX_NUMBER = 1e16
MAX_COUNT = 1_000_000


def _positive(value: Any) -> bool:
    """A positive finite number: TOML also spells nan and inf, which no rate or size can be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_NUMBER


def _check(where: str, key: str, value: Any, kind: type) -> None:
    field = f"{where}: {key}"
    if kind is float:
        if not _positive(value):
            raise GpuplanError(
                field, f"must be a positive number, got {value!r}", f"{FIELDS[key][2]}; at most {MAX_NUMBER:g}"
            )
    elif kind is int:
        low = 0 if key != "gpus_per_node" else 1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
            raise GpuplanError(
                field,
                f"must be a {'positive' if low else 'whole'} number, got {value!r}",
                f"{FIELDS[key][2]}; at most {MAX_COUNT:,}",
            )
    elif not isinstance(value, kind):
        raise GpuplanError(field, f"must be a {'table' if kind is dict else 'string'}, got {value!r}", FIELDS[key][2])


def validate_gpu(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Check a GPU table field by field; returns it with the optional fields defaulted."""
    for key in data:
        if key not in FIELDS:
            close = difflib.get_close_matches(key, list(FIELDS), n=1)
            raise GpuplanError(
                f"{where}: {key}",
                "is not a GPU field",
                f"did you mean {close[0]}?" if close else f"known fields: {', '.join(FIELDS)}",
            )
    for key, (kind, required, what) in FIELDS.items():
        if key not in data:
            if required:
                raise GpuplanError(f"{where}: {key}", "is missing", f"add it ({what})")
            continue
        _check(where, key, data[key], kind)
    for dtype, value in data["tflops"].items():
        if dtype not in DTYPES:
            raise GpuplanError(f"{where}: tflops.{dtype}", "is not a dtype", f"use some of {', '.join(DTYPES)}")
        if not _positive(value):
            raise GpuplanError(
                f"{where}: tflops.{dtype}",
                f"must be a positive number, got {value!r}",
                "dense peak TFLOP/s (not the 'with sparsity' figure)",
            )
    for dtype, value in data.get("mamf", {}).items():
        if dtype == "source":
            continue
        if dtype not in DTYPES or isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise GpuplanError(
                f"{where}: mamf.{dtype}",
                f"must be a dtype's fraction in (0, 1], got {value!r}",
                "measured matmul TFLOP/s over the dense peak",
            )
    if not any(d in data["tflops"] for d in ("bf16", "fp16", "fp32")):
        raise GpuplanError(f"{where}: tflops", "has none of bf16, fp16, fp32", "give at least the 16-bit dense peak")
    if data.get("vendor", "nvidia") not in VENDORS:
        raise GpuplanError(f"{where}: vendor", f"unknown vendor {data['vendor']!r}", f"use one of {VENDORS}")
    if data.get("nics_per_node") and not data.get("nic_gbit"):
        raise GpuplanError(f"{where}: nic_gbit", "is missing while nics_per_node is set", "add the NIC rate in Gbit/s")
    return {"source": f"user file {where}", "date": "", **data}


def read_gpu_file(path: str | Path) -> dict[str, Any]:
    """Parse and validate a GPU TOML file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise GpuplanError(
            "gpu", f"no such file {str(p)!r}", "pass a catalog GPU id (`gpuplan gpus`) or a TOML path"
        ) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise GpuplanError("gpu", f"cannot read {str(p)!r} ({exc})", "pass a TOML file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GpuplanError(str(p), f"is not valid TOML ({exc})", "see catalog/gpus/*.toml for the schema") from None
    return validate_gpu(data, str(p))
