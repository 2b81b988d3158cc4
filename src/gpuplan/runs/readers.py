"""Readers for the logs training runs already write, each into a ``Run``.

Formats, each taken from the project's own source:

* **gpuplan telemetry** (JSON lines, schema below).
* **Megatron-LM** ``training_log`` iteration lines (megatron/training.py before the 2024 move,
  megatron/training/training.py after; the timestamp prefix and ``throughput per GPU
  (TFLOP/s/GPU)`` came with core r0.5+) and ``report_memory``'s
  ``[Rank R] (after N iterations) memory (MB) | allocated: .. | max allocated: .. | reserved: .. |
  max reserved: ..`` (unformatted floats in 2021, ``:.2f`` since). NeMo 2 and Megatron-Bridge print
  the same lines; NeMo 1's PyTorch Lightning bar (``train_step_timing in s=5.900``) is read too.
* **torchtitan** step lines: ``step: N  loss: L  memory: X GiB(Y%)  wps: W  mfu: M%`` (train.py,
  2024) and ``step: N  loss: L  [grad_norm: G]  memory: XGiB(Y%)  tps: T  tflops: F  mfu: M%``
  (torchtitan/components/metrics.py, v0.1+; ``mfu: N/A`` under FP8). tps/wps are tokens per
  second per GPU; memory is the peak *reserved* memory; ANSI colours are stripped.
* **Hugging Face Trainer** metrics: the printed log dicts (transformers 4.x prints floats, 5.x
  prints them as ``'{v:.4g}'`` strings), ``trainer_state.json``'s ``log_history`` and
  ``train_results.json``/``all_results.json`` (``speed_metrics``: ``train_runtime``,
  ``train_samples_per_second``, ``train_steps_per_second``). Their step time is the whole
  training loop over its steps, warm-up included.
* **PyTorch profiler Chrome traces** (``gpuplan.runs.trace``).
* **Run files** (TOML): a log, an optional trace of the same run, and the ``[plan]`` it ran::

      log = "megatron.log"        # relative to this file
      trace = "rank0.pt.trace.json"  # optional
      format = "megatron"         # optional: sniffed from the log
      [plan]                      # the ``gpuplan train`` flags, snake_case
      model = "llama-3.1-8b"
      gpus = 16
      tp = 2

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

Every reader takes the median over the steps it reads, leaving out the first ones (compilation,
allocator and NCCL warm-up): the first two telemetry steps, the first log interval of a Megatron or
torchtitan log. A line that a reader recognises but cannot read is an error naming the file and
line; a file with nothing to read is one too.
"""

from __future__ import annotations

import ast
import json
import re
import statistics
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.runs.record import Run, RunPlan

FORMATS = ("telemetry", "megatron", "torchtitan", "hf", "trace", "run-file")
MB = 1024.0 * 1024.0  # Megatron's report_memory: mega_bytes = 1024.0 * 1024.0
GIB = 1024.0**3  # torchtitan's DeviceMemoryMonitor: _gib_in_bytes = 1024 * 1024 * 1024
TELEMETRY_WARMUP = 2
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _err(path: str | Path, line: int | None, what: str, fix: str | None = None) -> GpuplanError:
    where = f"{path}:{line}" if line is not None else str(path)
    return GpuplanError(where, what, fix)


def _number(text: str, path: str | Path, line: int | None, what: str) -> float:
    try:
        return float(text.strip().replace(",", ""))
    except ValueError:
        raise _err(path, line, f"cannot read {what} {text.strip()!r} as a number") from None


def _steady(values: list[float], skip: int) -> tuple[float, int]:
    """Median of ``values`` after the first ``skip`` (at most half of them)."""
    skip = min(skip, len(values) // 2)
    kept = values[skip:]
    return statistics.median(kept), len(kept)


# -- gpuplan telemetry ---------------------------------------------------------------------------


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
            raise _err(path, n, f"not a JSON object ({exc.msg})", "one JSON object a line") from None
        if not isinstance(rec, dict):
            raise _err(path, n, "not a JSON object", "one JSON object a line")
        kind = rec.get("type", "step")
        if kind == "plan":
            if rec.get("schema", 1) != 1:
                raise _err(path, n, f"telemetry schema {rec.get('schema')!r}", "this gpuplan reads schema 1")
            plan = RunPlan.from_dict(rec.get("plan") or {}, f"{path}:{n}")
        elif kind == "step":
            step_s = rec.get("step_s")
            if not isinstance(step_s, int | float) or isinstance(step_s, bool) or step_s <= 0:
                raise _err(path, n, f"step record needs a positive step_s, got {step_s!r}")
            stall = rec.get("checkpoint_stall_s", 0.0) or 0.0
            if not isinstance(stall, int | float) or stall < 0:
                raise _err(path, n, f"checkpoint_stall_s must be seconds >= 0, got {stall!r}")
            steps.append(max(step_s - stall, 0.0))
            if rec.get("tokens") and step_s - stall > 0:
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
                    if not isinstance(v, int | float):
                        raise _err(path, n, f"memory.{k} must be bytes, got {v!r}")
                    memory[k] = float(v)
        elif kind == "kernels":
            per = rec.get("per_step_s")
            if not isinstance(per, dict):
                raise _err(path, n, "kernels record needs per_step_s: {category: seconds}")
            kernels.update({k: float(v) for k, v in per.items()})
        else:
            raise _err(path, n, f"unknown record type {kind!r}", "use plan, step, memory or kernels")
    if not steps:
        raise _err(path, None, "no step records", "a telemetry file has one JSON object per step")
    step_s, kept = _steady(steps, TELEMETRY_WARMUP)
    # tokens are this rank's (Resilient.end_step(tokens)): per GPU when every rank sees its own batch
    return Run(
        str(path),
        "telemetry",
        step_s=step_s,
        steps=kept,
        tokens_per_s_per_gpu=_steady(tps, TELEMETRY_WARMUP)[0] if tps else None,
        peak_allocated_bytes=max(alloc) if alloc else None,
        peak_reserved_bytes=max(reserved) if reserved else None,
        kernels_s=kernels,
        memory_bytes=memory,
        plan=plan,
    )


# -- Megatron-LM / NeMo ----------------------------------------------------------------------------

MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
MEG_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([^|]*)\|?")
MEG_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([^|]*)\|?")
MEG_MEMORY = re.compile(
    r"memory \(MB\)\s*\|\s*allocated:\s*([^|]*)\|\s*max allocated:\s*([^|]*)\|"
    r"\s*reserved:\s*([^|]*)\|\s*max reserved:\s*([^|\s]*)"
)
NEMO_STEP = re.compile(r"train_step_timing in s=([^,\]\s]*)")


def read_megatron(path: str | Path, text: str | None = None) -> Run:
    """Megatron-LM/NeMo ``training_log`` and ``report_memory`` lines (see the module docstring)."""
    text = Path(path).read_text() if text is None else text
    times: list[float] = []
    tflops: list[float] = []
    alloc: list[float] = []
    reserved: list[float] = []
    fmt = "megatron"
    for n, line in enumerate(text.splitlines(), 1):
        if MEG_ITER.search(line):
            m = MEG_ELAPSED.search(line)
            if m is None:
                raise _err(
                    path,
                    n,
                    "iteration line without 'elapsed time per iteration (ms):'",
                    "pass the log as Megatron-LM printed it",
                )
            times.append(_number(m.group(1), path, n, "elapsed time per iteration (ms)") / 1e3)
            t = MEG_TFLOPS.search(line)
            if t:
                tflops.append(_number(t.group(1), path, n, "throughput per GPU (TFLOP/s/GPU)"))
        elif "memory (MB)" in line and "allocated:" in line:
            m = MEG_MEMORY.search(line)
            if m is None:
                raise _err(path, n, "memory report without allocated / max allocated / reserved / max reserved")
            alloc.append(_number(m.group(2), path, n, "max allocated (MB)") * MB)
            reserved.append(_number(m.group(4), path, n, "max reserved (MB)") * MB)
        elif "train_step_timing in s=" in line:
            m = NEMO_STEP.search(line)
            assert m is not None  # the pattern matches whatever follows the marker
            times.append(_number(m.group(1), path, n, "train_step_timing in s"))
            fmt = "nemo"
    if not times:
        raise _err(
            path,
            None,
            "no Megatron-LM iteration lines ('iteration N/ M | ... elapsed time per iteration "
            "(ms): ...') or NeMo 'train_step_timing in s=' values",
        )
    # the first interval holds start-up (Megatron logs iteration 1 on its own to show it)
    step_s, kept = _steady(times, 1)
    return Run(
        str(path),
        fmt,
        step_s=step_s,
        steps=kept,
        tflops_per_gpu=_steady(tflops, 1)[0] if tflops else None,
        peak_allocated_bytes=max(alloc) if alloc else None,
        peak_reserved_bytes=max(reserved) if reserved else None,
    )


# -- torchtitan ----------------------------------------------------------------------------------

TT_STEP = re.compile(r"(?<!validate )\bstep:\s*(\d+)\s")
TT_LINE = re.compile(
    r"\bstep:\s*(\d+)\s+loss:\s*(\S+)\s+(?:grad_norm:\s*\S+\s+)?memory:\s*([0-9.]+)\s*GiB"
    r"\(\s*([0-9.]+)%\)\s+(tps|wps):\s*([0-9,]+)(?:\s+tflops:\s*([0-9.,]+))?"
    r"(?:\s+mfu:\s*([0-9.]+%|N/A))?"
)


def read_torchtitan(path: str | Path, text: str | None = None) -> Run:
    """torchtitan's logged step lines (see the module docstring)."""
    text = Path(path).read_text() if text is None else text
    tps: list[float] = []
    tflops: list[float] = []
    reserved: list[float] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = ANSI.sub("", raw)
        if not TT_STEP.search(line) or "loss:" not in line:
            continue
        m = TT_LINE.search(line)
        if m is None:
            raise _err(
                path,
                n,
                "step line without 'loss: .. memory: ..GiB(..%) tps: ..'",
                "pass the log as torchtitan printed it",
            )
        reserved.append(_number(m.group(3), path, n, "memory (GiB)") * GIB)
        tps.append(_number(m.group(6), path, n, m.group(5)))
        if m.group(7):
            tflops.append(_number(m.group(7), path, n, "tflops"))
    if not tps:
        raise _err(path, None, "no torchtitan step lines ('step: N  loss: ..  memory: ..GiB(..%)  tps: ..')")
    value, kept = _steady(tps, 1)
    return Run(
        str(path),
        "torchtitan",
        steps=kept,
        tokens_per_s_per_gpu=value,
        tflops_per_gpu=_steady(tflops, 1)[0] if tflops else None,
        peak_reserved_bytes=max(reserved),
    )


# -- Hugging Face Trainer --------------------------------------------------------------------------


def _hf_run(path: str | Path, metrics: dict[str, Any], where: int | None, global_step: int | None = None) -> Run:
    def num(key: str) -> float | None:
        # transformers 5 prints floats as '{v:.4g}' strings; 4.x and the JSON files hold floats
        return _number(str(metrics[key]), path, where, key) if key in metrics else None

    steps_per_s, runtime = num("train_steps_per_second"), num("train_runtime")
    if steps_per_s:
        step_s = 1.0 / steps_per_s
    elif runtime and global_step:
        step_s = runtime / global_step
    else:
        raise _err(
            path,
            where,
            "Trainer metrics without train_steps_per_second (or train_runtime and global_step)",
            "pass the final metrics the Trainer logs at the end of training",
        )
    return Run(
        str(path),
        "hf",
        step_s=step_s,
        steps=global_step or 0,
        notes=("Hugging Face Trainer: the whole training loop over its steps, warm-up included",),
    )


def read_hf(path: str | Path, text: str | None = None) -> Run:
    """Hugging Face Trainer metrics: trainer_state.json, *_results.json, or printed log dicts."""
    text = Path(path).read_text() if text is None else text
    if text.lstrip().startswith("{") and "\n{" not in text.strip():
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _err(path, exc.lineno, f"not JSON ({exc.msg})") from None
        if "log_history" in doc:  # trainer_state.json
            ends = [e for e in doc["log_history"] if "train_runtime" in e]
            if not ends:
                raise _err(path, None, "log_history has no train_runtime entry", "the run has not finished")
            return _hf_run(path, ends[-1], None, doc.get("global_step"))
        return _hf_run(path, doc, None, doc.get("global_step"))
    final: tuple[dict[str, Any], int] | None = None
    last_step = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        # the Trainer's dicts: a line that starts like one and names its keys must read as one
        if not (line.startswith("{'") and re.search(r"'(loss|epoch|train_\w+|eval_\w+)':", line)):
            continue
        try:
            logs = ast.literal_eval(line)
        except (ValueError, SyntaxError):
            raise _err(
                path, n, "cannot read the Trainer's log dict", "pass the log as the Trainer printed it"
            ) from None
        if "train_runtime" in logs:
            final = (logs, n)
        if "step" in logs:
            last_step = int(float(logs["step"]))
    if final is None:
        raise _err(
            path,
            None,
            "no Trainer metrics dict with train_runtime ({'train_runtime': ..., 'train_steps_per_second': ...})",
            "the run has not finished",
        )
    return _hf_run(path, final[0], final[1], last_step)


# -- run files and dispatch --------------------------------------------------------------------------


def read_run_file(path: str | Path) -> Run:
    """A run file: a log, an optional trace of the same run, and its plan (module docstring)."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise _err(path, None, f"not TOML ({exc})") from None
    for key in doc:
        if key not in ("log", "trace", "format", "plan"):
            raise _err(path, None, f"unknown key {key!r}", "use log, trace, format and [plan]")
    if "log" not in doc and "trace" not in doc:
        raise _err(path, None, "names no log and no trace", 'add log = "train.log"')
    run: Run | None = None
    if "log" in doc:
        run = read_run(p.parent / doc["log"], doc.get("format"))
    if "trace" in doc:
        from gpuplan.runs.trace import read_trace

        t = read_trace(p.parent / doc["trace"])
        run = t if run is None else run.merged(t)
    assert run is not None
    plan = RunPlan.from_dict(doc["plan"], str(path)) if "plan" in doc else run.plan
    return Run(**{**run.__dict__, "plan": plan, "source": str(path)})


def sniff(path: str | Path, text: str) -> str:
    """The format of a file from its name and first lines."""
    name = str(path).lower()
    head = text[:200_000]
    if name.endswith(".toml"):
        return "run-file"
    if '"traceEvents"' in head:
        return "trace"
    if name.endswith(".jsonl") or head.lstrip().startswith('{"type": "plan"') or '"step_s"' in head:
        return "telemetry"
    if "log_history" in head or '"train_runtime"' in head or "'train_runtime'" in head:
        return "hf"
    if "elapsed time per iteration (ms)" in head or "train_step_timing in s=" in head:
        return "megatron"
    plain = ANSI.sub("", head)
    if re.search(r"\bstep:\s*\d+\s", plain) and re.search(r"\b(tps|wps):", plain):
        return "torchtitan"
    raise _err(path, None, "cannot tell the log's format", f"pass --format ({', '.join(FORMATS)})")


READERS: dict[str, Callable[..., Run]] = {
    "telemetry": read_telemetry,
    "megatron": read_megatron,
    "nemo": read_megatron,
    "torchtitan": read_torchtitan,
    "hf": read_hf,
}


def read_run(path: str | Path, fmt: str | None = None) -> Run:
    """Read one run from ``path`` (format sniffed unless given)."""
    p = Path(path)
    if not p.is_file():
        raise GpuplanError("run", f"no such file: {path}", "give a log, a telemetry .jsonl, a trace or a run .toml")
    if fmt is not None and fmt not in FORMATS and fmt != "nemo":
        raise GpuplanError("format", f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if fmt == "run-file" or (fmt is None and p.suffix.lower() == ".toml"):
        return read_run_file(p)
    if fmt == "trace" or (fmt is None and p.name.endswith((".json.gz", ".pt.trace.json"))):
        from gpuplan.runs.trace import read_trace

        return read_trace(p)
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise _err(path, None, "not a text file", "give a log, a telemetry .jsonl, a trace or a run .toml") from None
    fmt = fmt or sniff(p, text)
    if fmt == "trace":
        from gpuplan.runs.trace import read_trace

        return read_trace(p, text)
    return READERS[fmt](p, text)


def read_runs(paths: list[str], fmt: str | None = None, against: str | None = None) -> list[Run]:
    """Runs read from ``paths``; ``against`` (``gpuplan train`` flags in one string) is the plan of
    each run whose file carries none."""
    from gpuplan.runs.record import plan_from_flags

    runs = [read_run(p, fmt) for p in paths]
    if against:
        plan = plan_from_flags(against)
        runs = [r if r.plan is not None else type(r)(**{**r.__dict__, "plan": plan}) for r in runs]
    return runs
