"""Units: everything inside gpuplan is a plain SI number (bytes, FLOP, s, $).

Names carry the unit (``memory_bytes``, ``step_s``). Convert only when reading catalogs and
when printing; these helpers are the only place conversion factors live.
"""

from __future__ import annotations

import math
import re

from gpuplan.errors import GpuplanError

KiB = 2**10
MiB = 2**20
GiB = 2**30
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
TFLOP = 10**12
MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0

_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGTP]?)\s*$", re.IGNORECASE)


def parse_count(text: str | float | int, field: str) -> float:
    """Parse a count such as ``2T``, ``15.6e12``, ``300B`` or ``4096`` into a float."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _COUNT.match(str(text))
        if not match:
            raise GpuplanError(field, f"cannot read {text!r} as a number", "write it like 2T, 15.6e12, 300B or 4096")
        value = float(match.group(1)) * _SUFFIX[match.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise GpuplanError(field, f"must be a positive number, got {text!r}", "write it like 2T, 15.6e12, 300B or 4096")
    return value


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|m|min|h|d)?\s*$")
_DURATION_S = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": MINUTE, "min": MINUTE, "h": HOUR, "d": DAY}


def parse_duration(text: str | float, field: str) -> float:
    """Parse ``3.1h``, ``60s``, ``10m`` or ``2d`` into seconds."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise GpuplanError(field, f"cannot read {text!r} as a duration", "write it like 60s, 10m, 3.1h or 2d")
        value = float(match.group(1)) * _DURATION_S[match.group(2)]
    if not math.isfinite(value) or value <= 0:
        raise GpuplanError(field, f"must be a positive duration, got {text!r}", "write it like 60s, 10m, 3.1h or 2d")
    return value


def gib(n_bytes: float) -> float:
    return n_bytes / GiB


def gb(n_bytes: float) -> float:
    return n_bytes / GB


def fmt_count(n: float) -> str:
    """Human count: 70.55B, 2.00T."""
    for div, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}"
    return f"{n:.0f}"


def fmt_bytes(n_bytes: float) -> str:
    """Both units, explicitly labelled: ``75.20 GiB (80.75 GB)``."""
    return f"{gib(n_bytes):,.2f} GiB ({gb(n_bytes):,.2f} GB)"


def fmt_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 2 * HOUR:
        return f"{seconds / MINUTE:.1f} min"
    if seconds < 2 * DAY:
        return f"{seconds / HOUR:.1f} h"
    return f"{seconds / DAY:.1f} days"
