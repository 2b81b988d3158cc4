"""Predicted step time against published training runs (catalog/validation/training_runs*.csv).

The pieces: validation_sources.py (how each source ran, its FLOP formulas, its metric as a step
time), validation_rows.py (CSV rows as ``Row``: model, plan, config, measured step; ``category``);
this module predicts every row, summarises the errors overall and by category, and gives ``train``
its error band. The public names are re-exported here.

The CSVs are copies of the shared calibration set; each row is one published run. How a row
becomes a plan is stated once per source (``SOURCES``), never per row; fields a source did not
state take gpuplan's defaults (micro-batch 1, no interleaving, no recompute).

Rows that give TFLOP/s or MFU are turned into a step time with the FLOP formula the source used
(column ``flop_formula``), so every convention compares on seconds; tokens/s need no formula.
Each result belongs to a category (GPU family x precision x context class x parallel style):
the error band validation measures per category is what ``gpuplan train`` prints beside a
prediction of the same kind (``error_band``). Rows that publish a peak memory (``peak_memory_gib``:
torchtitan's pages) are also checked against gpuplan's peak (``Result.memory_error``,
``memory_summary``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.estimate.validation_rows import Row, category, load_rows
from gpuplan.estimate.validation_sources import (
    CSV,
    CSVS,
    DATA,
    H100_BF16_PEAK,
    HELD_OUT,
    LLAMA3_405B_PARAMS,
    MEGATRON_FORMULA,
    SOURCES,
    Source,
    llama3_flops,
    megatron_flops,
    megatron_model_flops,
    source_for,
)
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

__all__ = [
    "CSV",
    "CSVS",
    "DATA",
    "H100_BF16_PEAK",
    "HELD_OUT",
    "LLAMA3_405B_PARAMS",
    "MEGATRON_FORMULA",
    "SOURCES",
    "Result",
    "Row",
    "Source",
    "by_category",
    "category",
    "error_band",
    "llama3_flops",
    "load_rows",
    "memory_summary",
    "megatron_flops",
    "megatron_model_flops",
    "source_for",
    "summary",
    "to_dict",
    "validate_training",
]


@dataclass(frozen=True)
class Result:
    row: Row
    predicted_step_s: float
    mfu: float
    breakdown: dict[str, float]
    # the memory model's peak on the most loaded GPU and the GPU's capacity: a published run the
    # model says does not fit is a wrong refusal
    peak_bytes: float = 0.0
    capacity_bytes: float = 0.0
    context_bytes: float = 0.0  # the CUDA context in peak_bytes, outside the caching allocator
    reserve_bytes: float = 0.0  # the caching allocator's reserve in peak_bytes (MemoryReport.reserve)
    tight: bool = False  # over only by that reserve (MemoryReport.tight): a warning, not a refusal

    @property
    def refused(self) -> bool:
        """The memory model says the published run cannot fit (over, and not only by the reserve)."""
        return self.peak_bytes > self.capacity_bytes and not self.tight

    @property
    def predicted_memory_bytes(self) -> float:
        """The prediction of what the row's published memory measured: the caching allocator's
        peak reserved (torch.cuda reserved_bytes.all.peak, what torchtitan logs) is gpuplan's peak
        less the CUDA context, as ``gpuplan runs compare`` compares it (runs/compare.py)."""
        if self.row.memory_measure == "reserved":
            return self.peak_bytes - self.context_bytes
        return self.peak_bytes

    @property
    def memory_error(self) -> float | None:
        """Signed relative error of the predicted peak memory; None where none was published."""
        if self.row.measured_peak_bytes is None:
            return None
        return self.predicted_memory_bytes / self.row.measured_peak_bytes - 1

    @property
    def error(self) -> float:
        """Signed relative error of the predicted step time."""
        return self.predicted_step_s / self.row.measured_step_s - 1


def validate_training(paths: tuple[Path, ...] = CSVS) -> list[Result]:
    from gpuplan import catalog
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.estimate.step_time import step_time

    out = []
    for row in load_rows(paths):
        gpu = catalog.gpu(row.gpu)
        st = step_time(row.model, row.config, row.plan, gpu, row.microbatches)
        mem = estimate_memory(row.model, row.config, row.plan, gpu, row.microbatches, all_stages=False)
        peak = mem.per_gpu
        context = peak.other.get("cuda_context", 0.0)
        out.append(
            Result(row, st.step_s, st.mfu, st.breakdown, peak.total, gpu.memory_bytes, context, mem.reserve, mem.tight)
        )
    return out


def summary(results: list[Result]) -> dict[str, float]:
    errs = [abs(r.error) for r in results]
    return {
        "rows": len(errs),
        "mean_abs_error": sum(errs) / len(errs),
        "max_abs_error": max(errs),
        "mean_signed_error": sum(r.error for r in results) / len(errs),
        "refused": sum(r.refused for r in results),  # published runs the memory model says do not fit
        "tight": sum(r.tight for r in results),  # published runs it puts into the allocator's reserve
    }


def memory_summary(results: list[Result]) -> dict[str, float] | None:
    """Peak memory against the rows that published one: rows, mean and max |error|, mean signed
    error; None where no row did."""
    errs = [e for e in (r.memory_error for r in results) if e is not None]
    if not errs:
        return None
    return {
        "rows": len(errs),
        "mean_abs_error": sum(abs(e) for e in errs) / len(errs),
        "max_abs_error": max(abs(e) for e in errs),
        "mean_signed_error": sum(errs) / len(errs),
    }


def by_category(results: list[Result]) -> dict[tuple[str, str, str, str], dict[str, float]]:
    """Validation error per category (see ``category``), with the signed range it spans."""
    groups: dict[tuple[str, str, str, str], list[Result]] = {}
    for r in results:
        groups.setdefault(r.row.category, []).append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        s = summary(rs)
        s["min_error"] = min(r.error for r in rs)
        s["max_error"] = max(r.error for r in rs)
        out[key] = s
    return out


@functools.cache
def _bands() -> dict[tuple[str, str, str, str], dict[str, float]]:
    # every published run, the held-out ones too: a band is what validation measured, not a fit
    return by_category(validate_training(CSVS + HELD_OUT))


def uncalibrated_features(m: ModelSpec) -> list[str]:
    """Parts of ``m`` that no published run in the validation set exercises: the band of its kind
    does not cover them."""
    out = []
    if m.index_heads:
        out.append(
            "DeepSeek Sparse Attention: no published run uses it; its top-k kernel and indexer are "
            "timed at the dense attention kernel's rates"
        )
    if m.linear_layers and m.linear_kind == "mamba2":
        out.append(
            "Mamba-2 layers: no published run or kernel timing calibrates them; their chunked scan is "
            "timed by the bytes its kernels move at the streaming rate"
        )
    elif m.linear_layers and m.linear_kind == "kda":
        out.append(
            "Kimi Delta Attention layers: no published run calibrates them; their chunked kernels are "
            "timed as FLA's Gated DeltaNet kernels (fitted on H200), which do the same products"
        )
    elif m.linear_layers:
        out.append(
            "Gated DeltaNet linear attention: no published training run uses it; its chunked kernels "
            "are fitted to FLA's published H200 timings (the Hopper family; elsewhere their bytes at "
            "the streaming rate)"
        )
    return out


def uncalibrated_options(cfg: TrainingConfig, plan: ParallelPlan) -> list[str]:
    """Training options that no published run in the validation set uses."""
    out = []
    if plan.cp > 1 and cfg.cp_exchange == "a2a":
        out.append(
            "context parallelism by all-to-all (DeepSpeed-Ulysses): no published run uses it; its "
            "all-to-alls are timed by the collective model, all exposed"
        )
    if plan.cp > 1 and not cfg.cp_load_balance:
        out.append(
            "an unbalanced context-parallel split: no published run uses it; timed at the busiest rank's causal work"
        )
    if 0 < cfg.document_len < cfg.seq_len:
        out.append(
            "document-masked attention: no published run states its documents' lengths; the kernel "
            "is timed at the dense kernel's rates over the documents' blocks"
        )
    return out


def error_band(
    gpu: str | GPUSpec, cfg: TrainingConfig, plan: ParallelPlan, step_s: float, model: ModelSpec | None = None
) -> dict[str, Any]:
    """What validation measured for published runs of this kind (``category``), and the step time
    range it implies: a run measured e too slow/fast was predicted (1 + e) x its time, so the true
    step lies in [step / (1 + max error), step / (1 + min error)]. A kind with no published run is
    marked ``calibrated: False`` with no range: its numbers are physics and datasheets only. A
    ``model`` with parts no published run exercises lists them (``uncalibrated_features``)."""
    key = category(gpu, cfg, plan)
    doc: dict[str, Any] = {"category": dict(zip(("gpu_family", "precision", "context", "parallel"), key))}
    features = (uncalibrated_features(model) if model is not None else []) + uncalibrated_options(cfg, plan)
    if features:
        doc["uncalibrated_features"] = features
    band = _bands().get(key)
    if band is None:
        return {
            **doc,
            "calibrated": False,
            "runs": 0,
            "step_s_range": None,
            "note": "no published run of this kind in the validation set: uncalibrated",
        }
    return {
        **doc,
        "calibrated": True,
        "runs": int(band["rows"]),
        "mean_abs_error": band["mean_abs_error"],
        "min_error": band["min_error"],
        "max_error": band["max_error"],
        "step_s_range": [step_s / (1 + band["max_error"]), step_s / (1 + band["min_error"])],
    }


def to_dict(results: list[Result]) -> dict[str, Any]:
    """The JSON document of ``gpuplan validate``: a row per run, the summary, the peak memory
    summary (``memory_summary``, null without published memory) and the error by category (GPU
    family, precision, context, parallelism)."""
    return {
        "rows": [
            {
                "id": r.row.id,
                "source": r.row.source,
                "framework": r.row.framework,
                "gpu": r.row.gpu,
                "category": list(r.row.category),
                "micro_batch": r.row.config.micro_batch,
                # False: the source does not state it; validation_rows.tuned_micro_batch chose it
                "micro_batch_stated": r.row.micro_batch_stated,
                "measured_step_s": r.row.measured_step_s,
                "predicted_step_s": r.predicted_step_s,
                "error": r.error,
                "metric": r.row.metric,
                "value": r.row.value,
                "predicted_mfu": r.mfu,
                "breakdown_s": r.breakdown,
                "predicted_peak_bytes": r.peak_bytes,
                "gpu_memory_bytes": r.capacity_bytes,
                "refused": r.refused,
                "tight": r.tight,
                "measured_peak_bytes": r.row.measured_peak_bytes,
                "memory_measure": r.row.memory_measure or None,
                "predicted_memory_bytes": r.predicted_memory_bytes if r.row.measured_peak_bytes else None,
                "memory_error": r.memory_error,
            }
            for r in results
        ],
        "summary": summary(results),
        "peak_memory": memory_summary(results),
        "categories": [
            {"gpu_family": k[0], "precision": k[1], "context": k[2], "parallel": k[3], **v}
            for k, v in by_category(results).items()
        ],
    }
