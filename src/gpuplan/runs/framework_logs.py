"""Reading the logs of Megatron-LM (and NeMo, Megatron-Bridge), torchtitan and the Hugging Face
Trainer into a ``Run``; each format as the readers module describes it, from the project's source."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from gpuplan.estimate.run_record import Run
from gpuplan.runs.parse import ANSI, GIB, MB, err, number, steady

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
                raise err(
                    path,
                    n,
                    "iteration line without 'elapsed time per iteration (ms):'",
                    "pass the log as Megatron-LM printed it",
                )
            times.append(number(m.group(1), path, n, "elapsed time per iteration (ms)", positive=True) / 1e3)
            t = MEG_TFLOPS.search(line)
            if t:
                tflops.append(number(t.group(1), path, n, "throughput per GPU (TFLOP/s/GPU)"))
        elif "memory (MB)" in line and "allocated:" in line:
            m = MEG_MEMORY.search(line)
            if m is None:
                raise err(path, n, "memory report without allocated / max allocated / reserved / max reserved")
            alloc.append(number(m.group(2), path, n, "max allocated (MB)") * MB)
            reserved.append(number(m.group(4), path, n, "max reserved (MB)") * MB)
        elif "train_step_timing in s=" in line:
            m = NEMO_STEP.search(line)
            assert m is not None  # the pattern matches whatever follows the marker
            times.append(number(m.group(1), path, n, "train_step_timing in s", positive=True))
            fmt = "nemo"
    if not times:
        raise err(
            path,
            None,
            "no Megatron-LM iteration lines ('iteration N/ M | ... elapsed time per iteration "
            "(ms): ...') or NeMo 'train_step_timing in s=' values",
        )
    # the first interval holds start-up (Megatron logs iteration 1 on its own to show it)
    step_s, kept = steady(times, 1)
    return Run(
        str(path),
        fmt,
        step_s=step_s,
        steps=kept,
        tflops_per_gpu=steady(tflops, 1)[0] if tflops else None,
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
            raise err(
                path,
                n,
                "step line without 'loss: .. memory: ..GiB(..%) tps: ..'",
                "pass the log as torchtitan printed it",
            )
        reserved.append(number(m.group(3), path, n, "memory (GiB)") * GIB)
        tps.append(number(m.group(6), path, n, m.group(5)))
        if m.group(7):
            tflops.append(number(m.group(7), path, n, "tflops"))
    if not tps:
        raise err(path, None, "no torchtitan step lines ('step: N  loss: ..  memory: ..GiB(..%)  tps: ..')")
    value, kept = steady(tps, 1)
    return Run(
        str(path),
        "torchtitan",
        steps=kept,
        tokens_per_s_per_gpu=value,
        tflops_per_gpu=steady(tflops, 1)[0] if tflops else None,
        peak_reserved_bytes=max(reserved),
    )


# -- Hugging Face Trainer --------------------------------------------------------------------------


def _hf_run(path: str | Path, metrics: dict[str, Any], where: int | None, global_step: int | None = None) -> Run:
    def num(key: str) -> float | None:
        # transformers 5 prints floats as '{v:.4g}' strings; 4.x and the JSON files hold floats
        return number(str(metrics[key]), path, where, key) if key in metrics else None

    steps_per_s, runtime = num("train_steps_per_second"), num("train_runtime")
    if steps_per_s:
        step_s = 1.0 / steps_per_s
    elif runtime and global_step:
        step_s = runtime / global_step
    else:
        raise err(
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
            raise err(path, exc.lineno, f"not JSON ({exc.msg})") from None
        except RecursionError:
            raise err(path, None, "JSON nested too deeply to be read") from None
        if "log_history" in doc:  # trainer_state.json
            ends = [e for e in doc["log_history"] if "train_runtime" in e]
            if not ends:
                raise err(path, None, "log_history has no train_runtime entry", "the run has not finished")
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
            raise err(path, n, "cannot read the Trainer's log dict", "pass the log as the Trainer printed it") from None
        if "train_runtime" in logs:
            final = (logs, n)
        if "step" in logs:
            last_step = int(float(logs["step"]))
    if final is None:
        raise err(
            path,
            None,
            "no Trainer metrics dict with train_runtime ({'train_runtime': ..., 'train_steps_per_second': ...})",
            "the run has not finished",
        )
    return _hf_run(path, final[0], final[1], last_step)
