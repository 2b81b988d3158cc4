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
    from gpuplan.inputs import read_text, too_deep

    p = Path(path)
    text = read_text(p, "loads")
    try:
        if p.suffix.lower() == ".json":
            doc = json.loads(text)
            rows = doc["loads"] if isinstance(doc, dict) else doc
        else:
            rows = [r for r in csv.reader(text.splitlines()) if r and any(c.strip() for c in r)]
            if rows and not _numeric(rows[0]):
                rows = rows[1:]
        if any(isinstance(x, bool) for row in rows for x in row):  # JSON true/false are not counts
            raise TypeError("a boolean load")
        table = np.array([[float(x) for x in row] for row in rows], dtype=np.float64)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        raise GpuplanError(
            "loads",
            f"{p} is not a table of numbers: one row per layer, one number per expert, every row as long",
            'a CSV, or JSON as [[...], ...] or {"loads": [[...], ...]}',
        ) from None
    except RecursionError:
        raise too_deep("loads", p) from None
    require(table.size > 0, "loads", f"{p} holds no loads", "one row per layer, one number per expert")
    require(
        table.ndim == 2 and table.shape[0] >= 1 and table.shape[1] >= 1,
        "loads",
        f"{p} must have the same number of experts on every row",
    )
    bad = np.argwhere(~np.isfinite(table) | (table < 0) | (table > 1e15))
    if len(bad):
        layer, expert = (int(x) for x in bad[0])
        raise GpuplanError(
            "loads",
            f"{p} row {layer + 1}, expert {expert + 1}: {float(table[layer, expert])!r} is not a load",
            "loads are token counts: use numbers from 0 to 1e15",
        )
    empty = np.flatnonzero(table.sum(axis=1) <= 0)
    require(
        not len(empty),
        "loads",
        f"{p} row {int(empty[0]) + 1 if len(empty) else 0} has no load at all",
        "give each layer's token counts (at least one above 0), or drop the row",
    )
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


def load_table(path: str | None, skew: float | None, layers: int, experts: int, seed: int = 0) -> np.ndarray:
    """The loads of ``path`` (a file) or synthetic loads of Zipf ``skew``: exactly one of them."""
    if path is not None and not path.strip():
        raise GpuplanError("loads", "the path is empty", "give a CSV or JSON file of token counts per expert")
    if (path is None) == (skew is None):
        raise GpuplanError("loads", "give `loads=FILE` or `synthetic=SKEW`", "e.g. `synthetic=1.0` `layers=61`")
    if skew is not None and layers * experts > 10**7:
        raise GpuplanError(
            "layers",
            f"{layers:,} layers x {experts:,} experts is too large a table",
            "use the model's real sizes, e.g. `layers=61` `experts=256`",
        )
    if path is not None:
        return read_loads(path)
    assert skew is not None  # one of the two is given (checked above)
    return synthetic_loads(layers, experts, skew, seed)
