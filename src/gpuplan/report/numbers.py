"""The numbers table of a report: each row is a value of the command's JSON document, with the key
path it came from, so a test (or a reader) can check the page against ``--json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.units import GiB, fmt_duration


@dataclass(frozen=True)
class Row:
    label: str
    key: str  # dotted path into the JSON document; list items by index: plans.0.time.step_s
    value: Any  # the raw JSON value at ``key``
    text: str  # as printed, unit included

    def raw(self) -> str:
        return json.dumps(self.value)


def lookup(doc: Any, key: str) -> Any:
    """The value at a dotted path (``plans.0.time.step_s``); KeyError/IndexError when absent."""
    for part in key.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _gib(v: float) -> str:
    return f"{v / GiB:,.2f} GiB"


def _s(v: float) -> str:
    return fmt_duration(v) if v >= 60 else f"{v:,.4g} s"


def _ms(v: float) -> str:
    return f"{v * 1e3:,.2f} ms"


def _pct(v: float) -> str:
    return f"{v:.1%}"


def _usd(v: float) -> str:
    return f"${v:,.2f}"


def _num(v: float) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 and abs(v) < 1e15 else f"{v:,.4g}"
    return f"{v:,}"


def _text(v: Any) -> str:
    return str(v)


Format = Callable[[Any], str]
Spec = list[tuple[str, str, Format]]  # (label, key, format)

SPECS: dict[str, Spec] = {
    "train": [
        ("model", "model.name", _text),
        ("GPU", "gpu.name", _text),
        ("GPUs", "gpu.count", _num),
        ("fits", "memory.fits", _text),
        ("tight (over only by the allocator reserve)", "memory.tight", _text),
        ("memory per GPU (most loaded stage)", "memory.per_gpu.total", _gib),
        ("GPU capacity", "memory.gpu_capacity", _gib),
        ("weights", "memory.per_gpu.weights", _gib),
        ("gradients", "memory.per_gpu.gradients", _gib),
        ("optimizer states", "memory.per_gpu.optimizer", _gib),
        ("master weights", "memory.per_gpu.master_weights", _gib),
        ("activations", "memory.per_gpu.activations", _gib),
        ("other", "memory.per_gpu.other", _gib),
        ("FLOPs per token", "flops.per_token", _num),
        ("step time", "time.step_s", _s),
        ("MFU", "mfu", _pct),
        ("HFU", "hfu", _pct),
        ("tokens/s per GPU", "tokens_per_s_per_gpu", _num),
        ("days", "time.days", _num),
        ("GPU-hours (of the tokens given, else of one step)", "gpu_hours", _num),
        ("cost (of the tokens given, else of one step)", "cost_usd", _usd),
    ],
    "search": [
        ("objective", "objective", _text),
        ("plans considered", "considered", _num),
        ("plans that fit", "feasible", _num),
        ("plans timed", "timed", _num),
        ("best: step time", "plans.0.time.step_s", _s),
        ("best: MFU", "plans.0.mfu", _pct),
        ("best: tokens/s", "plans.0.tokens_per_s", _num),
        ("best: memory per GPU", "plans.0.memory.per_gpu.total", _gib),
        ("best: cost per step", "plans.0.cost_usd", _usd),
    ],
    "serve": [
        ("model", "model", _text),
        ("GPU", "gpu", _text),
        ("GPUs", "gpus", _num),
        ("fits", "memory.fits", _text),
        ("memory per GPU", "memory.per_gpu.total", _gib),
        ("GPU capacity", "memory.capacity", _gib),
        ("KV-cache pool", "memory.kv_pool", _gib),
        ("max concurrency", "max_concurrency", _num),
        ("concurrency", "concurrency", _num),
        ("TTFT", "ttft_s", _ms),
        ("TPOT", "tpot_s", _ms),
        ("end to end", "e2e_s", _s),
        ("output tokens/s", "output_tokens_per_s", _num),
        ("$/M output tokens", "cost_per_million_output_tokens", _usd),
        ("$/M input tokens", "cost_per_million_input_tokens", _usd),
    ],
    "pipeline": [
        ("schedule", "schedule", _text),
        ("ranks", "stages", _num),
        ("micro-batches", "microbatches", _num),
        ("makespan", "makespan_s", _s),
        ("bubble fraction", "bubble_fraction", _pct),
        ("bubble ratio (idle / busy)", "bubble_ratio", _num),
    ],
    "cluster sim": [
        ("GPUs", "gpus", _num),
        ("jobs", "jobs", _num),
        ("finished", "finished", _num),
        ("makespan", "makespan_s", _s),
        ("utilisation", "utilisation", _pct),
        ("goodput", "goodput", _pct),
        ("GPU-hours lost", "gpu_hours_lost", _num),
        ("$ lost", "usd_lost", _usd),
        ("preemptions", "preemptions", _num),
        ("failures", "failures", _num),
        ("reclaims", "reclaims", _num),
    ],
    "cluster whatif": [
        ("GPUs", "gpus", _num),
        ("GPU", "gpu", _text),
        ("hours of work", "hours", _num),
        ("preempted at", "preempt_at_s", _s),
        ("$/GPU-hour", "price_per_gpu_hour", _usd),
    ],
    "tco": [
        ("GPUs", "gpus", _num),
        ("useful GPU-hours per month", "useful_gpu_hours_per_month", _num),
        ("on-demand per month", "monthly.on_demand", _usd),
        ("spot per month", "monthly.spot", _usd),
        ("owned: running per month", "monthly.owned_running", _usd),
        ("owned: purchase", "monthly.owned_capex", _usd),
        ("break-even month vs on-demand", "breakeven_month.on_demand", _text),
        ("break-even month vs spot", "breakeven_month.spot", _text),
    ],
    "checkpoint-interval": [
        ("MTBF", "mtbf_s", _s),
        ("checkpoint cost", "cost_s", _s),
        ("restart", "restart_s", _s),
        ("Young's interval", "young_s", _s),
        ("Daly's interval", "daly_s", _s),
        ("expected waste (Daly)", "expected_waste_fraction", _pct),
        ("expected waste (Young)", "expected_waste_fraction_young", _pct),
    ],
}


def _dynamic(command: str, doc: dict) -> Spec:
    """Rows whose count follows the document (a row per run, tier or policy)."""
    spec: Spec = []
    if command == "serve-sim":
        for i, r in enumerate(doc.get("runs", [])):
            at = (
                "burst"
                if r.get("burst")
                else (f"rate {r.get('rate')}/s" if r.get("rate") is not None else f"run {i + 1}")
            )
            spec += [
                (f"{at}: output tokens/s", f"runs.{i}.output_tokens_per_s", _num),
                (f"{at}: TTFT p50", f"runs.{i}.ttft_s.p50", _ms),
                (f"{at}: TTFT p99", f"runs.{i}.ttft_s.p99", _ms),
                (f"{at}: ITL p99", f"runs.{i}.itl_s.p99", _ms),
                (f"{at}: end to end p99", f"runs.{i}.e2e_s.p99", _s),
            ]
        if doc.get("slo"):
            spec.append(("highest rate meeting the SLO (req/s)", "slo.max_rate", _num))
    if command == "cluster sim":
        for t in doc.get("tiers", {}):
            spec += [
                (f"tier {t}: jobs", f"tiers.{t}.jobs", _num),
                (f"tier {t}: mean queueing delay", f"tiers.{t}.mean_wait_s", _s),
                (f"tier {t}: p99 queueing delay", f"tiers.{t}.p99_wait_s", _s),
            ]
    if command == "cluster whatif":
        for i, p in enumerate(doc.get("policies", [])):
            spec += [
                (f"checkpoint {p['checkpoint']}: interval", f"policies.{i}.interval_s", _s),
                (f"checkpoint {p['checkpoint']}: $ lost", f"policies.{i}.lost_usd", _usd),
                (f"checkpoint {p['checkpoint']}: $ checkpointing", f"policies.{i}.overhead_usd", _usd),
                (f"checkpoint {p['checkpoint']}: $ in all", f"policies.{i}.total_usd", _usd),
            ]
    if command == "pipeline":
        idle = doc.get("idle_s", [])
        for r in range(len(idle) if len(idle) <= 16 else 0):  # the timeline shows more ranks better
            spec.append((f"rank {r}: idle", f"idle_s.{r}", _s))
    return spec


def rows(command: str, doc: dict) -> list[Row]:
    """The table for ``command``; keys the document lacks (another mode of the command) are left
    out, and a document with no known spec shows its top-level scalars."""
    out = []
    for label, key, fmt in SPECS.get(command, []) + _dynamic(command, doc):
        try:
            value = lookup(doc, key)
        except (KeyError, IndexError, TypeError):
            continue
        out.append(Row(label, key, value, "-" if value is None else fmt(value)))
    if len(out) < 5:  # another mode's document (offload): its top-level numbers as they are
        shown = {r.key for r in out}
        for k, v in doc.items():
            if k not in shown and (isinstance(v, (int, float, str, bool)) or v is None):
                out.append(
                    Row(k.replace("_", " "), k, v, "-" if v is None else _num(v) if isinstance(v, float) else str(v))
                )
    return out
