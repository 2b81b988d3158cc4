"""Per-layer expert loads: read from CSV or JSON, or drawn from a seeded skewed distribution."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from gpuplan.errors import GpuplanError, require


def read_loads(path: str | Path) -> np.ndarray:
    """A (layers x experts) table: CSV with one row per layer (a header row of names is skipped),
    or JSON as a list of rows or {"loads": [...]}."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise GpuplanError("loads", f"cannot read {p}: {exc.strerror}", "pass an existing CSV or JSON file") from None
    try:
        if p.suffix.lower() == ".json":
            doc = json.loads(text)
            rows = doc["loads"] if isinstance(doc, dict) else doc
        else:
            rows = [r for r in csv.reader(text.splitlines()) if r and any(c.strip() for c in r)]
            if rows and not _numeric(rows[0]):
                rows = rows[1:]
        table = np.array([[float(x) for x in row] for row in rows], dtype=np.float64)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise GpuplanError("loads", f"{p} is not a table of numbers ({exc})",
                           "one row per layer, one number per expert") from None
    require(table.ndim == 2 and table.shape[0] >= 1 and table.shape[1] >= 1, "loads",
            f"{p} must have the same number of experts on every row")
    require(np.isfinite(table).all() and (table >= 0).all(), "loads", f"{p} has negative or non-finite loads",
            "loads are token counts: use numbers >= 0")
    return table


def _numeric(row: list[str]) -> bool:
    try:
        [float(x) for x in row]
        return True
    except ValueError:
        return False


def synthetic_loads(layers: int, experts: int, skew: float, seed: int = 0, tokens: float = 1e6) -> np.ndarray:
    """Zipf-like loads: expert of rank i gets tokens proportional to 1/i^skew, ranks shuffled per layer."""
    require(layers >= 1 and experts >= 1, "experts", "layers and experts must be positive")
    require(skew >= 0, "skew", f"must be >= 0, got {skew}")
    rng = np.random.default_rng(seed)
    base = 1.0 / np.arange(1, experts + 1) ** skew
    out = np.stack([rng.permutation(base) for _ in range(layers)])
    return out / out.sum(axis=1, keepdims=True) * tokens
