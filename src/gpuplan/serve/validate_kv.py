"""Held-out check of the KV pool against engines' own startup logs (``validate serving-kv``).

Kept apart from the shared validation rows (validate.py): these rows were added with the engine
profiles (engines.py) and nothing was fitted to them. Each row is one engine start: model, GPU,
TP x PP, weight format, ``max_model_len``, the token budget where the log states one, and the
memory fraction as logged, and the KV-cache memory the engine reported ("Available KV cache
memory" in vLLM's log, its blocks x block bytes, SGLang's "KV Cache is allocated"), with the URL
it comes from. A negative measured value is an engine that refused to start for want of memory:
the check is then that gpuplan leaves no room for a sequence either.

Where the log also breaks the rest down (vLLM prints its weights, peak activation and non-torch
memory), those are compared term by term (``parts``): a pool can come out right from two wrong
terms that cancel, and the breakdown shows which.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan import catalog
from gpuplan.serve.engines import engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import blocks_per_sequence, serve_memory
from gpuplan.serve.timing import Deployment
from gpuplan.serve.validate_held_out import percentile
from gpuplan.units import GiB

CSV = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "held_out" / "vllm_kv_pools.csv"


# the logged terms a row may carry, and ServeMemory's attribute for each
PARTS = {"weights": "weights", "activation": "activations", "non_torch": "other"}


@dataclass(frozen=True)
class KVCheck:
    id: str
    url: str
    measured_gib: float
    predicted_gib: float
    refused: bool  # gpuplan has no room for one max_model_len sequence
    engine: str = ""
    engine_version: str = ""
    # term -> (logged GiB, predicted GiB), for the terms the log states (PARTS)
    parts: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def error(self) -> float | None:
        """Relative error of the pool; None for an engine that refused to start."""
        return None if self.measured_gib <= 0 else self.predicted_gib / self.measured_gib - 1


def validate_kv_pools(path: Path = CSV) -> list[KVCheck]:
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            gpu = catalog.gpu(r["gpu"])
            tp, pp, length = int(r["tp"]), int(r.get("pp") or 1), int(r["max_model_len"])
            d = Deployment(
                catalog.model(r["model"]), gpu, weight_format(r["precision"], gpu), kv_format(r["kv_precision"]), tp, pp
            )
            budget = int(r["max_num_batched_tokens"]) if r.get("max_num_batched_tokens") else None
            cfg = engine_config(
                r["engine"],
                gpu,
                tp,
                float(r["gpu_memory_utilization"]),
                max_batched_tokens=budget,
                max_model_len=length,
            )
            mem = serve_memory(d, cfg)
            one = blocks_per_sequence(d, cfg, length) * mem.kv_block_bytes
            parts = {
                term: (float(r[f"logged_{term}_gib"]), getattr(mem, attr) / GiB)
                for term, attr in PARTS.items()
                if r.get(f"logged_{term}_gib")
            }
            out.append(
                KVCheck(
                    r["id"],
                    r["url"],
                    float(r["measured_kv_gib"]),
                    mem.kv_pool / GiB,
                    mem.kv_pool < one,
                    r["engine"],
                    r.get("engine_version", ""),
                    parts,
                )
            )
    return out


def _spread(errors: list[float]) -> dict:
    errors = sorted(abs(e) for e in errors)
    return {
        "median_abs_error": statistics.median(errors),
        "p90_abs_error": percentile(errors, 0.9),
        "max_abs_error": errors[-1],
    }


def summary(checks: list[KVCheck]) -> dict:
    """Pool errors over every row, and per engine version; each logged term's mean signed error in GiB."""
    errors = [e for c in checks if (e := c.error) is not None]
    refusals = [c for c in checks if c.measured_gib <= 0]
    versions: dict[str, list[float]] = {}
    for c in checks:
        if c.error is not None:
            versions.setdefault(f"{c.engine} {c.engine_version}", []).append(c.error)
    terms = {}
    for term in PARTS:
        diffs = [c.parts[term][1] - c.parts[term][0] for c in checks if term in c.parts]
        if diffs:
            terms[term] = {
                "rows": len(diffs),
                "mean_gib": statistics.fmean(diffs),
                "mean_abs_gib": statistics.fmean(map(abs, diffs)),
            }
    return {
        "rows": len(checks),
        **_spread(errors),
        "refusals_matched": sum(c.refused for c in refusals),
        "refusals": len(refusals),
        "by_version": {k: {"rows": len(v), **_spread(v)} for k, v in sorted(versions.items())},
        "terms": terms,  # predicted - logged, GiB
    }


def to_dict(checks: list[KVCheck]) -> dict[str, Any]:
    """The JSON document of ``gpuplan validate serving-kv``: a row per check and the summary."""
    return {"rows": [c.__dict__ | {"error": c.error} for c in checks], "summary": summary(checks)}
