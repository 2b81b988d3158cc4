"""What every run reader shares: errors naming the file and line, numbers read from log text, and
the steady-state median that leaves out the warm-up steps."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from gpuplan.errors import GpuplanError

MB = 1024.0 * 1024.0  # Megatron's report_memory: mega_bytes = 1024.0 * 1024.0
GIB = 1024.0**3  # torchtitan's DeviceMemoryMonitor: _gib_in_bytes = 1024 * 1024 * 1024
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def err(path: str | Path, line: int | None, what: str, fix: str | None = None) -> GpuplanError:
    where = f"{path}:{line}" if line is not None else str(path)
    return GpuplanError(where, what, fix)


def number(text: str, path: str | Path, line: int | None, what: str, positive: bool = False) -> float:
    """A number of a log line; ``positive``: a time, which cannot be 0 either."""
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        raise err(path, line, f"cannot read {what} {text.strip()!r} as a number") from None
    # every number read from a log is a time, a rate or a size: nan, inf or a negative value would
    # pass into the median and the fit unnoticed
    if not math.isfinite(value) or value < 0 or (positive and value == 0) or value > 1e18:
        raise err(
            path, line, f"{what} is {text.strip()!r}, not a {'positive' if positive else 'finite, non-negative'} number"
        )
    return value


def steady(values: list[float], skip: int) -> tuple[float, int]:
    """Median of ``values`` after the first ``skip`` (at most half of them)."""
    skip = min(skip, len(values) // 2)
    kept = values[skip:]
    return statistics.median(kept), len(kept)
