"""Kernel time by category from a PyTorch profiler Chrome trace (``prof.export_chrome_trace`` or
``tensorboard_trace_handler``: a JSON object with ``traceEvents``, gzip allowed).

The trace format is Kineto's: complete events (``"ph": "X"``) with ``ts`` and ``dur`` in
microseconds; GPU kernels have ``"cat": "kernel"`` (``"Kernel"`` in PyTorch 1.8-1.9), copies and
fills ``gpu_memcpy``/``gpu_memset``; each ``schedule``d profiler step is a ``ProfilerStep#N``
annotation on the CPU (``user_annotation``; ``cpu_op``/``Operator`` in older releases).

Categories, by kernel name (the first that matches):

* ``attention``: FlashAttention 2/3 (``flash_fwd``, ``flash::``), xFormers/cuDNN/TE fused
  attention (``fmha``, ``sdpa``, ``attention``/``attn``).
* ``nccl_all_gather``, ``nccl_reduce_scatter``, ``nccl_all_reduce``, ``nccl_send_recv`` (pipeline
  p2p, and all-to-all, which NCCL runs as grouped send/recv), ``nccl_other``: NCCL's
  ``ncclKernel_<Coll>_...`` (NCCL < 2.19) or ``ncclDevKernel_<Coll>_...`` names.
* ``gemm``: cuBLAS/cuBLASLt and CUTLASS GEMMs (``gemm``, ``cutlass``, ``xmma``, ``nvjet``,
  ``cublas``, ``matmul``).
* ``memcpy``: copies and fills.
* ``elementwise``: every other kernel (elementwise, reductions, norms, softmax, Triton fusions).
* ``idle``: the GPU's busy window (first kernel start to last kernel end) minus the union of all
  its kernels on all streams: time no kernel runs.

Seconds are per profiler step (the trace's total over its ``ProfilerStep#`` count; one step when
there is none) and averaged over the GPUs in the trace; NCCL kernel time includes the time a rank
waits in the collective for the slowest peer.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.estimate.run_record import Run
from gpuplan.inputs import too_deep

CATEGORIES = (
    "gemm",
    "attention",
    "nccl_all_gather",
    "nccl_reduce_scatter",
    "nccl_all_reduce",
    "nccl_send_recv",
    "nccl_other",
    "memcpy",
    "elementwise",
    "idle",
)
ATTENTION = re.compile(r"flash|fmha|sdpa|attention|attn", re.I)
NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
NCCL_NAMES = {
    "AllGather": "nccl_all_gather",
    "ReduceScatter": "nccl_reduce_scatter",
    "AllReduce": "nccl_all_reduce",
    "SendRecv": "nccl_send_recv",
    "Send": "nccl_send_recv",
    "Recv": "nccl_send_recv",
}
GEMM = re.compile(r"gemm|cutlass|xmma|nvjet|cublas|matmul", re.I)
STEP = re.compile(r"^ProfilerStep#\d+$")


def category(name: str) -> str:
    """The category of one GPU kernel, by its name (module docstring)."""
    m = NCCL.match(name)
    if m:
        return NCCL_NAMES.get(m.group(1), "nccl_other")
    if ATTENTION.search(name):
        return "attention"
    if GEMM.search(name):
        return "gemm"
    return "elementwise"


def _load(path: str | Path, text: str | None) -> dict[str, Any]:
    p = Path(path)
    try:
        if text is None:
            raw = gzip.open(p, "rt").read() if p.name.endswith(".gz") else p.read_text()
        else:
            raw = text
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise GpuplanError(
            f"{path}:{exc.lineno}", f"not JSON ({exc.msg})", "pass the trace as the profiler wrote it"
        ) from None
    except RecursionError:
        raise too_deep("trace", path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GpuplanError(str(path), f"cannot read the trace ({exc})") from None
    if isinstance(doc, list):  # the bare-array form of the Trace Event Format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise GpuplanError(str(path), "no traceEvents list", "pass a PyTorch profiler Chrome trace (JSON)")
    return doc


def read_trace(path: str | Path, text: str | None = None) -> Run:
    """Kernel seconds per step by category (``CATEGORIES``) from a profiler trace."""
    doc = _load(path, text)
    kernels: dict[Any, list[tuple[float, float, str]]] = {}
    step_durs: list[float] = []
    for i, ev in enumerate(doc["traceEvents"]):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        name = str(ev.get("name", ""))
        is_kernel = cat in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
        is_step = STEP.match(name) is not None and cat in ("user_annotation", "cpu_op", "operator")
        if not (is_kernel or is_step):
            continue
        ts, dur = ev.get("ts"), ev.get("dur")
        if not isinstance(ts, int | float) or not isinstance(dur, int | float) or dur < 0:
            raise GpuplanError(
                f"{path}: traceEvents[{i}]",
                f"{name!r} has no numeric ts/dur (got {ts!r}, {dur!r})",
                "pass the trace as the profiler wrote it",
            )
        if is_step:
            step_durs.append(dur * 1e-6)
            continue
        args = ev["args"] if isinstance(ev.get("args"), dict) else {}
        device = args.get("device", ev.get("pid"))
        kind = "memcpy" if cat != "kernel" else category(name)
        kernels.setdefault(device, []).append((ts * 1e-6, (ts + dur) * 1e-6, kind))
    if not kernels:
        raise GpuplanError(
            str(path),
            "no GPU kernels in the trace",
            "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]",
        )
    steps = max(1, len(step_durs))
    totals: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
    for events in kernels.values():
        busy, end_seen = 0.0, -1.0
        for start, end, kind in sorted(events):
            totals[kind] += (end - start) / len(kernels)
            # union of intervals over all streams: what is left of the window is idle
            if end > end_seen:
                busy += end - max(start, end_seen)
                end_seen = end
        window = max(e for _, e, _ in events) - min(s for s, _, _ in events)
        totals["idle"] += (window - busy) / len(kernels)
    per_step = {k: v / steps for k, v in totals.items() if v > 0 or k in ("gemm", "attention", "idle")}
    notes = () if step_durs else ("trace has no ProfilerStep# annotations: its whole window counted as one step",)
    return Run(
        str(path),
        "trace",
        step_s=statistics.median(step_durs) if step_durs else None,
        steps=len(step_durs),
        kernels_s=per_step,
        notes=notes,
    )
