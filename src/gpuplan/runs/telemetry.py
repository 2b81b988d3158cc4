"""Reading gpuplan's own telemetry (JSON lines; ``Resilient`` writes it) into a ``Run``.

gpuplan telemetry schema (``gpuplan.telemetry/1``), one JSON object a line:

* ``{"type": "plan", "schema": 1, "plan": {...}}``: once, first; ``plan`` holds the
  ``gpuplan train`` flags snake_case (``model`` a catalog id, a config.json path, or the
  config.json object; ``gpu``, ``gpus``, ``tp``, ``pp``, ``cp``, ``ep``, ``vp``, ``dp``, ``zero``,
  ``sp``, ``schedule``, ``seq_len``, ``micro_batch``, ``global_batch``, ``precision``,
  ``recompute``, ``optimizer``, ``framework``, ``attention``, ``tp_overlap``,
  ``overlap_grad_reduce``).
* a step (``"type": "step"``, or no type as Resilient wrote before the plan record existed):
  ``step`` (int), ``step_s`` (wall seconds of the step, required), ``tokens`` (this rank's),
  ``tokens_per_s``, ``loss``, ``checkpoint_stall_s`` (seconds of the step spent blocked on a
  checkpoint: taken out of the step time), ``peak_memory_bytes`` with ``memory_kind`` (``cuda``:
  torch.cuda.max_memory_allocated; ``rss``: host memory, ignored here), and optionally
  ``peak_allocated_bytes`` and ``peak_reserved_bytes`` (torch.cuda.max_memory_allocated /
  max_memory_reserved).
* ``{"type": "memory", "weights": B, "gradients": B, "optimizer": B, "master_weights": B,
  "activations": B}``: optional, bytes per GPU by component (tensor sizes the runtime can sum;
  ``Resilient`` writes weights, gradients and optimizer once, after the first step).
* ``{"type": "kernels", "per_step_s": {"gemm": s, ...}}``: optional, kernel seconds per step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpuplan.estimate.run_record import Run, RunPlan
from gpuplan.runs.parse import err, steady

TELEMETRY_WARMUP = 2  # steps left out of the median: compilation, allocator and NCCL warm-up


MAX_STEP_S = 1e7  # a step of 116 days: longer is a unit mix-up, not a training step
MAX_BYTES = 1e18  # an exabyte: more is not a GPU's memory


def _amount(v: object, upper: float) -> bool:
    """A number from 0 up to (not including) ``upper``: not a bool, NaN or Infinity (which
    Python's json reads)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < upper


def read_telemetry(path: str | Path, text: str | None = None) -> Run:
    """gpuplan telemetry JSON lines (schema in the module docstring)."""
    text = Path(path).read_text() if text is None else text
    plan: RunPlan | None = None
    steps: list[float] = []
    tps: list[float] = []
    alloc: list[float] = []
    reserved: list[float] = []
    memory: dict[str, float] = {}
    kernels: dict[str, float] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise err(path, n, f"not a JSON object ({exc.msg})", "one JSON object a line") from None
        except RecursionError:
            raise err(path, n, "JSON nested too deeply to be read", "one flat JSON object a line") from None
        if not isinstance(rec, dict):
            raise err(path, n, "not a JSON object", "one JSON object a line")
        kind = rec.get("type", "step")
        if kind == "plan":
            if rec.get("schema", 1) != 1:
                raise err(path, n, f"telemetry schema {rec.get('schema')!r}", "this gpuplan reads schema 1")
            plan = RunPlan.from_dict(rec.get("plan") or {}, f"{path}:{n}")
        elif kind == "step":
            step_s = rec.get("step_s")
            # 0 < step_s <= MAX_STEP_S also refuses the NaN and Infinity that Python's json reads
            if not isinstance(step_s, int | float) or isinstance(step_s, bool) or not 0 < step_s <= MAX_STEP_S:
                raise err(path, n, f"step record needs a positive step_s up to {MAX_STEP_S:g} s, got {step_s!r}")
            stall = rec.get("checkpoint_stall_s", 0.0) or 0.0
            if not _amount(stall, math.inf):
                raise err(path, n, f"checkpoint_stall_s must be seconds >= 0, got {stall!r}")
            # the stall is part of the step: a stall as long as the step leaves no training to time
            if stall >= step_s:
                raise err(
                    path,
                    n,
                    f"checkpoint_stall_s ({stall:g} s) is not less than step_s ({step_s:g} s)",
                    "the stall is the part of step_s spent blocked on a checkpoint",
                )
            for key in ("tokens", "peak_allocated_bytes", "peak_memory_bytes", "peak_reserved_bytes"):
                v = rec.get(key)
                if v is not None and not _amount(v, MAX_BYTES):
                    raise err(path, n, f"{key} must be a count from 0 up, got {v!r}")
            steps.append(step_s - stall)
            if rec.get("tokens"):
                tps.append(float(rec["tokens"]) / (step_s - stall))
            if rec.get("peak_allocated_bytes") is not None:
                alloc.append(float(rec["peak_allocated_bytes"]))
            elif rec.get("memory_kind") == "cuda" and rec.get("peak_memory_bytes") is not None:
                alloc.append(float(rec["peak_memory_bytes"]))  # Resilient: max_memory_allocated
            if rec.get("peak_reserved_bytes") is not None:
                reserved.append(float(rec["peak_reserved_bytes"]))
        elif kind == "memory":
            for k, v in rec.items():
                if k != "type":
                    if not _amount(v, MAX_BYTES):
                        raise err(path, n, f"memory.{k} must be bytes from 0 up, got {v!r}")
                    memory[k] = float(v)
        elif kind == "kernels":
            per = rec.get("per_step_s")
            if not isinstance(per, dict):
                raise err(path, n, "kernels record needs per_step_s: {category: seconds}")
            for k, v in per.items():
                if not _amount(v, MAX_STEP_S):
                    raise err(path, n, f"kernels.per_step_s.{k} must be seconds from 0 up, got {v!r}")
                kernels[k] = float(v)
        else:
            raise err(path, n, f"unknown record type {kind!r}", "use plan, step, memory or kernels")
    if not steps:
        raise err(path, None, "no step records", "a telemetry file has one JSON object per step")
    step_s, kept = steady(steps, TELEMETRY_WARMUP)
    # tokens are this rank's (Resilient.end_step(tokens)): per GPU when every rank sees its own batch
    return Run(
        str(path),
        "telemetry",
        step_s=step_s,
        steps=kept,
        tokens_per_s_per_gpu=steady(tps, TELEMETRY_WARMUP)[0] if tps else None,
        peak_allocated_bytes=max(alloc) if alloc else None,
        peak_reserved_bytes=max(reserved) if reserved else None,
        kernels_s=kernels,
        memory_bytes=memory,
        plan=plan,
    )


# -- Megatron-LM / NeMo ----------------------------------------------------------------------------
