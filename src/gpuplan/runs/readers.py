"""Readers for the logs training runs already write, each into a ``Run``.

Formats, each taken from the project's own source:

* **gpuplan telemetry** (JSON lines, schema in telemetry.py).
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

Every reader takes the median over the steps it reads, leaving out the first ones (compilation,
allocator and NCCL warm-up): the first two telemetry steps, the first log interval of a Megatron or
torchtitan log. A line that a reader recognises but cannot read is an error naming the file and
line; a file with nothing to read is one too.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

from gpuplan.errors import GpuplanError, field_ref
from gpuplan.estimate.run_record import Run, RunPlan
from gpuplan.inputs import checked_path
from gpuplan.runs.framework_logs import read_hf, read_megatron, read_torchtitan
from gpuplan.runs.parse import ANSI, err
from gpuplan.runs.telemetry import read_telemetry

__all__ = [
    "FORMATS",
    "READERS",
    "read_hf",
    "read_megatron",
    "read_run",
    "read_run_file",
    "read_runs",
    "read_telemetry",
    "read_torchtitan",
    "sniff",
]

FORMATS = ("telemetry", "megatron", "torchtitan", "hf", "trace", "run-file")
# -- run files and dispatch --------------------------------------------------------------------------


def read_run_file(path: str | Path) -> Run:
    """A run file: a log, an optional trace of the same run, and its plan (module docstring)."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise err(path, None, f"not TOML ({exc})") from None
    for key in doc:
        if key not in ("log", "trace", "format", "plan"):
            raise err(path, None, f"unknown key {key!r}", "use log, trace, format and [plan]")
    if "log" not in doc and "trace" not in doc:
        raise err(path, None, "names no log and no trace", 'add log = "train.log"')
    for key in ("log", "trace"):
        if key in doc and not (isinstance(doc[key], str) and doc[key].strip()):
            raise err(path, None, f"{key} must be a file name, got {doc[key]!r}", f'e.g. {key} = "train.log"')
    if "log" in doc and (doc.get("format") == "run-file" or Path(doc["log"]).suffix.lower() == ".toml"):
        # a run file names the run's own log, never another run file (nor itself: no end to it)
        raise err(path, None, f"log = {doc['log']!r} is a run file", "name the training log, a .jsonl or a trace")
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
    raise err(path, None, "cannot tell the log's format", f"pass {field_ref('format')} ({', '.join(FORMATS)})")


READERS: dict[str, Callable[..., Run]] = {
    "telemetry": read_telemetry,
    "megatron": read_megatron,
    "nemo": read_megatron,
    "torchtitan": read_torchtitan,
    "hf": read_hf,
}


def read_run(path: str | Path, fmt: str | None = None) -> Run:
    """Read one run from ``path`` (format sniffed unless given)."""
    p = checked_path(path, "run")
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "is not a regular file" if p.exists() else "does not exist"
        raise GpuplanError("run", f"{path} {what}", "give a log, a telemetry .jsonl, a trace or a run .toml")
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
        raise err(path, None, "not a text file", "give a log, a telemetry .jsonl, a trace or a run .toml") from None
    fmt = fmt or sniff(p, text)
    if fmt == "trace":
        from gpuplan.runs.trace import read_trace

        return read_trace(p, text)
    return READERS[fmt](p, text)


def read_runs(paths: list[str], fmt: str | None = None, against: str | None = None) -> list[Run]:
    """Runs read from ``paths``; ``against`` (``gpuplan train`` flags in one string) is the plan of
    each run whose file carries none."""
    from gpuplan.estimate.run_record import plan_from_flags

    runs = [read_run(p, fmt) for p in paths]
    if against:
        if all(r.plan is not None for r in runs):
            # it would be read and then ignored: say so rather than compare against another plan
            raise GpuplanError(
                "against",
                "every run given carries its own plan, which `against` does not replace",
                "drop `against`, or give a run without a plan (a log, or a run .toml without [plan])",
            )
        plan = plan_from_flags(against)
        runs = [r if r.plan is not None else type(r)(**{**r.__dict__, "plan": plan}) for r in runs]
    return runs
