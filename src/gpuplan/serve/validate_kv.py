"""Held-out check of the KV pool against engines' own startup logs (``validate serving-kv``).

Kept apart from the shared validation rows (validate.py): these rows were added with the engine
profiles (engines.py) and nothing was fitted to them. Each row is one engine start: model, GPU,
TP, weight format, ``max_model_len`` and memory fraction as logged, and the KV-cache memory the
engine reported ("Available KV cache memory" in vLLM's log), with the URL it comes from.
A negative measured value is an engine that refused to start for want of memory: the check is
then that gpuplan leaves no room for a sequence either.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan import catalog
from gpuplan.serve.engines import engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import blocks_per_sequence, serve_memory
from gpuplan.serve.timing import Deployment
from gpuplan.units import GiB

CSV = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "held_out" / "vllm_kv_pools.csv"


@dataclass(frozen=True)
class KVCheck:
    id: str
    url: str
    measured_gib: float
    predicted_gib: float
    refused: bool  # gpuplan has no room for one max_model_len sequence

    @property
    def error(self) -> float | None:
        """Relative error of the pool; None for an engine that refused to start."""
        return None if self.measured_gib <= 0 else self.predicted_gib / self.measured_gib - 1


def validate_kv_pools(path: Path = CSV) -> list[KVCheck]:
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            gpu = catalog.gpu(r["gpu"])
            tp, length = int(r["tp"]), int(r["max_model_len"])
            d = Deployment(
                catalog.model(r["model"]), gpu, weight_format(r["precision"], gpu), kv_format(r["kv_precision"]), tp
            )
            cfg = engine_config(r["engine"], gpu, tp, float(r["gpu_memory_utilization"]), max_model_len=length)
            mem = serve_memory(d, cfg)
            one = blocks_per_sequence(d, cfg, length) * mem.kv_block_bytes
            out.append(KVCheck(r["id"], r["url"], float(r["measured_kv_gib"]), mem.kv_pool / GiB, mem.kv_pool < one))
    return out


def summary(checks: list[KVCheck]) -> dict:
    errors = sorted(abs(e) for c in checks if (e := c.error) is not None)
    refusals = [c for c in checks if c.measured_gib <= 0]
    return {
        "rows": len(checks),
        "median_abs_error": statistics.median(errors),
        "p90_abs_error": errors[min(len(errors) - 1, round(0.9 * (len(errors) - 1)))],
        "max_abs_error": errors[-1],
        "refusals_matched": sum(c.refused for c in refusals),
        "refusals": len(refusals),
    }


def to_dict(checks: list[KVCheck]) -> dict[str, Any]:
    """The JSON document of ``gpuplan validate serving-kv``: a row per check and the summary."""
    return {"rows": [c.__dict__ | {"error": c.error} for c in checks], "summary": summary(checks)}
