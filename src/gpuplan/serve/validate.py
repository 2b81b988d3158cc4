"""Predicted serving numbers against published runs (catalog/validation/inference_runs.csv).

How a row becomes a deployment, stated once for all rows:

* TensorRT-LLM rows run under the ``trtllm`` engine profile, the engine they were measured on
  (engines.py: the KV pool is the row's ``kv_cache_free_gpu_mem_fraction`` of the memory free after
  the weights and activations, 0.95 in the v0.17 tables; 8192 batched tokens, its default
  ``max_num_tokens``; 64-token KV blocks; the context FMHA in FP8 over an FP8 KV cache, as
  trtllm-bench builds it), FasterTransformer's under ``generic`` (no scheduler of its own: one
  sequence, no host time). ``engines=False`` (``validate serving --generic``) runs every row under
  ``generic`` with the row's KV fraction as its memory fraction, the engine-neutral comparison;
* ``batch_or_concurrency = max``: offline max-throughput mode (trtllm-bench);
* a number: that many sequences; ``prefill_ms`` is the prompt's prefill (TTFT without queueing),
  ``decode_ms_per_token`` one decode iteration at the prompt's context;
* ``opt-13b-like`` (FasterTransformer's "GPT 13B": 40 layers, hidden 5120, 40 heads) is OPT-13B.
"""

from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpuplan import catalog
from gpuplan.serve.engines import engine_config
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.plan import ServeRequest, estimate_serving
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec

CSV = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "inference_runs.csv"
MODEL_ALIASES = {"opt-13b-like": "opt-13b"}


@dataclass(frozen=True)
class ServeRow:
    id: str
    source: str
    request: ServeRequest
    metric: str
    measured: float


@dataclass(frozen=True)
class ServeCheck:
    row: ServeRow
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.row.measured - 1


def load_rows(path: Path = CSV, engines: bool = True) -> list[ServeRow]:
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            model = catalog.model(MODEL_ALIASES.get(r["model"], r["model"]))
            frac = re.search(r"kv fraction ([0-9.]+)", r["note"] or "")
            source_frac = frac.group(1) if frac else None
            rows.append((r, model, source_frac))
    # a KV fraction stated once for a source applies to all its rows
    fractions = {r["source"]: f for r, _, f in rows if f}
    out = []
    for r, model, _ in rows:
        gpu = catalog.gpu(r["gpu"])
        name = "trtllm" if engines and r["source"].startswith("TensorRT-LLM") else "generic"
        stated = fractions.get(r["source"])
        cfg = engine_config(name, gpu, int(r["tp"]), float(stated) if stated else None)
        # trtllm-bench sets max_batch_size per row by its own heuristic, which the tables do not
        # state: the batch is what the KV pool holds
        cfg = replace(cfg, max_num_seqs=None)
        req = row_request(r, model, gpu, cfg, r["batch_or_concurrency"])
        out.append(ServeRow(r["id"], r["source"], req, r["metric"], float(r["value"])))
    return out


def row_request(r: dict, model: ModelSpec, gpu: GPUSpec, cfg: ServeConfig, load: str) -> ServeRequest:
    """The ``serve`` request of a published row: its TP, formats and lengths, and its load (a
    batch or concurrency, or "max" for the engine's throughput at the batch the KV pool holds)."""
    return ServeRequest(
        model=model,
        gpu=gpu,
        tp=int(r["tp"]),
        weights=r["precision"],
        kv=r["kv_precision"],
        input_len=int(r["input_len"]),
        output_len=int(r["output_len"]),
        concurrency=None if load == "max" else int(load),
        max_throughput=load == "max",
        config=cfg,
    )


def predict(row: ServeRow) -> float:
    e = estimate_serving(row.request)
    if row.metric == "output_tokens_per_s":
        return e.point.output_tokens_per_s
    if row.metric == "prefill_ms":
        return e.prefill.seconds * 1e3
    if row.metric == "decode_ms_per_token":
        return e.decode_step.seconds * 1e3
    raise ValueError(f"unknown metric {row.metric!r} in {row.id}")


def validate_serving(path: Path = CSV, engines: bool = True) -> list[ServeCheck]:
    return [ServeCheck(row, predict(row)) for row in load_rows(path, engines)]


def summary(checks: list[ServeCheck]) -> dict:
    errors = [abs(c.error) for c in checks]
    return {
        "rows": len(checks),
        "median_abs_error": statistics.median(errors),
        "mean_abs_error": statistics.fmean(errors),
        "max_abs_error": max(errors),
        "mean_signed_error": statistics.fmean(c.error for c in checks),
    }


def to_dict(checks: list[ServeCheck]) -> dict[str, Any]:
    """The JSON document of ``gpuplan validate serving``: a row per check and the summary."""
    return {
        "rows": [
            {
                "id": c.row.id,
                "source": c.row.source,
                "metric": c.row.metric,
                "measured": c.row.measured,
                "predicted": c.predicted,
                "error": c.error,
            }
            for c in checks
        ],
        "summary": summary(checks),
    }
