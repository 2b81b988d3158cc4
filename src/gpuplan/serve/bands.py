"""What validation measured for each serving engine: the error band ``serve`` states beside its
numbers, as ``train`` states the band of its runs' kind (estimate/validate.py ``error_band``).

The bands come from every published serving run gpuplan is checked against (the shared rows of
``validate serving`` under the engine they ran on, and the held-out rows of ``validate
serving-held-out``), grouped by engine profile. Running serve-sim over the held-out rows takes
seconds, so the bands are stored (catalog/validation/serving_bands.json, written by
``scripts/serving_bands.py``) and a test checks that the file equals what validation measures now.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

PATH = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "serving_bands.json"
THROUGHPUT = ("output_tokens_per_s", "output_tokens_per_s_per_gpu")
LATENCY = ("ttft_ms", "itl_ms", "mean_itl_ms", "e2e_latency_ms")  # per request, as the benchmarks print them


def compute(held_out: Iterable[Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per engine: rows, median and p90 |error|, and the mean signed error of the throughput rows
    and of the per-request latency rows (``LATENCY``: TTFT, TPOT, end-to-end; positive: predicted
    slower than measured). ``held_out``: ``validate_held_out()``'s checks, when already run."""
    from gpuplan.serve.validate import validate_serving
    from gpuplan.serve.validate_held_out import percentile, validate_held_out

    errors: dict[str, list[tuple[str, float]]] = {}
    for c in validate_serving():
        engine = c.row.request.config.engine
        errors.setdefault(engine, []).append((c.row.metric, c.error))
    for h in validate_held_out() if held_out is None else held_out:
        if h.error is not None:
            errors.setdefault(h.row.engine, []).append((h.row.metric, h.error))
    out = {}
    for engine, rows in sorted(errors.items()):
        absolute = sorted(abs(e) for _, e in rows)
        tput = [e for metric, e in rows if metric in THROUGHPUT]
        latency = [e for metric, e in rows if metric in LATENCY]
        out[engine] = {
            "rows": len(rows),
            "median_abs_error": round(statistics.median(absolute), 4),
            "p90_abs_error": round(percentile(absolute, 0.9), 4),
            "throughput_mean_signed_error": round(statistics.fmean(tput), 4) if tput else None,
            "latency_mean_signed_error": round(statistics.fmean(latency), 4) if latency else None,
        }
    return out


@lru_cache(maxsize=1)
def stored() -> dict[str, dict[str, Any]]:
    return json.loads(PATH.read_text())["engines"]


def engine_band(engine: str) -> dict[str, Any]:
    """The stored band of ``engine`` (``generic``: none of its own), or a mark that no published
    run calibrates it."""
    band = stored().get(engine)
    if band is None:
        return {"engine": engine, "calibrated": False, "rows": 0,
                "note": "no published run of this engine profile in the validation set: uncalibrated"}  # fmt: skip
    return {"engine": engine, "calibrated": True, **band}
