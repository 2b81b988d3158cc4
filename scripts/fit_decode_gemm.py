"""Fit the fixed time of a memory-bound GEMM (``[kernel] decode_gemm_latency_us`` of a GPU family's
efficiency file) from the decode GEMMs measured on the family's GPUs, and with --write store it.

    python scripts/fit_decode_gemm.py [--write]

A GEMM over a few token rows streams its weights once: its time is the bytes it moves at the
family's streaming rate (``[memory] hbm``) plus a fixed part that does not shrink with the bytes
(the first loads' DRAM latency before the pipeline fills, the last wave's drain, split-K's
reduction kernel). The fit is the median, over every bf16 GEMM with at most 16 rows that
scripts/measure_decode_gpu.py timed on each GPU of the family (Llama-3.1-8B at TP 1, Llama-3.1-70B
at TP 4 and 8, DeepSeek-V3 at TP 8: 3.7-235 MB of weights), of the measured seconds less the bytes
over the streaming rate; the fit and its data are tests/serve/test_measured_decode.py's.
"""

import json
import re
import statistics
import sys
from pathlib import Path

from gpuplan import catalog

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "src" / "gpuplan" / "catalog" / "efficiency"
# efficiency family: (catalog GPU, its decode.json) for each GPU measured in it
FAMILIES = {
    "h100-sxm": (
        ("h100-sxm", ROOT / "measurements" / "h100-sxm-2026-11-27" / "kernels" / "decode.json"),
        ("h200", ROOT / "measurements" / "h200-2026-11-27" / "kernels" / "decode.json"),
    )
}
MAX_ROWS = 16


def gemms(path: Path) -> list[dict]:
    """The bf16 decode GEMMs of one decode.json with at most MAX_ROWS rows: m, n, k, seconds."""
    doc = json.loads(path.read_text())
    return [
        {"m": r["m"], "n": r["n"], "k": r["k"], "s": r["bf16_s"]}
        for r in doc["skinny"] + doc["block"]
        if r["m"] <= MAX_ROWS and r.get("bf16_s")
    ]


def streamed_bytes(m: int, n: int, k: int) -> float:
    """bf16 weights read once, the rows read and the outputs written (serve/timing.py's GEMM bytes)."""
    return 2.0 * (n * k + m * k + m * n)


def latencies(gpu_id: str, path: Path) -> list[float]:
    """Measured seconds less the bytes at the family's streaming rate, one per GEMM."""
    gpu = catalog.gpu(gpu_id)
    rate = gpu.hbm_bytes_per_s * gpu.efficiency.hbm
    return [g["s"] - streamed_bytes(g["m"], g["n"], g["k"]) / rate for g in gemms(path)]


def fit(family: str) -> float:
    return statistics.median(x for gpu, path in FAMILIES[family] for x in latencies(gpu, path))


def main() -> None:
    for family in FAMILIES:
        value = fit(family)
        print(f"{family}: decode_gemm_latency_us = {value * 1e6:.1f}")
        if "--write" in sys.argv:
            path = CATALOG / f"{family}.toml"
            line = f"decode_gemm_latency_us = {value * 1e6:.1f}"
            path.write_text(re.sub(r"(?m)^decode_gemm_latency_us = [0-9.]+", line, path.read_text()))


if __name__ == "__main__":
    main()
