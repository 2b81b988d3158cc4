"""Fit a GPU family's decode-kernel terms from the decode kernels measured on its GPUs
(scripts/measure_decode_gpu.py) and, with --write, store them in catalog/efficiency/FAMILY.toml:

    python scripts/fit_decode.py [--write]

* ``[kernel] decode_gemm_latency_us``: a GEMM over a few token rows streams its weights once; its
  time is the bytes it moves at the family's streaming rate (``[memory] hbm``) plus a fixed part
  that does not shrink with the bytes (the first loads' DRAM latency before the pipeline fills, the
  last wave's drain, split-K's reduction kernel). The fit is the median, over every bf16 GEMM with
  at most 16 rows timed on each GPU of the family (Llama-3.1-8B at TP 1, Llama-3.1-70B at TP 4 and
  8, DeepSeek-V3 at TP 8: 3.7-235 MB of weights), of the measured seconds less the bytes at the
  streaming rate.
* ``[kernel] grouped_decode_gbps`` and ``grouped_decode_latency_us``: a grouped GEMM over the routed
  experts at decode sizes (one kernel over every expert some token picked) reads their weights at
  no more than a fixed rate whatever the GPU's HBM, plus a fixed time per kernel: the bytes a
  kernel keeps in flight per SM over the memory latency bound its rate (Little's law), and the
  H100 and H200 share SMs and latency. The fit minimises the squared relative error of
  ``bytes / min(hbm x peak, rate) + latency`` over every grouped GEMM timed (fc1 and fc2 of
  Mixtral-8x7B at TP 1 and 2, Qwen3-30B-A3B, DeepSeek-V3's 32 experts at EP 8; 1-256 tokens;
  bf16 and FP8) on each GPU of the family.
* For a family with no measured grouped GEMM (``PUBLISHED``: B200), the same two terms from
  published Triton fused-MoE kernel times (measurements/published/sglang-fused-moe): each call is
  two grouped GEMMs (gate+up, down), so ``weight bytes / min(hbm x peak, rate) + 2 x latency``,
  fitted over the rows whose touched experts outgrow the L2 (the harnesses replay one routing
  about ten times, so smaller ones are read from the cache).

tests/serve/test_measured_decode.py checks the fits and what they predict.
"""

import csv
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

from gpuplan import catalog
from gpuplan.serve.timing import touched_experts

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
# efficiency family: (catalog GPU, published fused-MoE times on it, its L2 in bytes) where no
# grouped GEMM was measured here. B200's L2: 126.5 MB (pytorch/ao PR #4002's B200 properties).
PUBLISHED = {
    "b200": (("b200", ROOT / "measurements" / "published" / "sglang-fused-moe" / "fused_moe_b200.csv", 126.5e6),),
}
BYTES_PER_WEIGHT = {"bf16": 2.0, "fp8_w8a8": 1.0}


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


def grouped(gpu_id: str, path: Path) -> list[dict]:
    """The grouped expert GEMMs of one decode.json: the touched experts' weight bytes (FP8: half the
    bf16 bytes), seconds, and the GPU's streaming rate."""
    gpu = catalog.gpu(gpu_id)
    stream = gpu.hbm_bytes_per_s * gpu.efficiency.hbm
    out = []
    for r in json.loads(path.read_text())["moe"]:
        for key, scale in (("bf16_s", 1.0), ("fp8_s", 0.5)):
            if r.get(key):
                out.append({"bytes": r["weight_bytes"] * scale, "s": r[key], "stream": stream, "tokens": r["tokens"]})
    return out


def grouped_seconds(g: dict, rate: float, latency: float) -> float:
    return g["bytes"] / min(g["stream"], rate) + latency


def fit_grouped(family: str) -> tuple[float, float]:
    """(rate in bytes/s, latency in s) minimising the squared relative error, on a grid of 10 GB/s
    and 0.1 us."""
    rows = [g for gpu, path in FAMILIES[family] for g in grouped(gpu, path)]
    nbytes, seconds, stream = (np.array([g[k] for g in rows]) for k in ("bytes", "s", "stream"))
    rates = np.arange(150, 451)[:, None, None] * 1e10  # 1.5-4.5 TB/s
    fixed = np.arange(0, 301)[None, :, None] * 1e-7  # 0-30 us
    loss = (((nbytes / np.minimum(stream, rates) + fixed) / seconds - 1) ** 2).sum(axis=-1)
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(rates[i, 0, 0]), float(fixed[0, j, 0])


def published_calls(gpu_id: str, path: Path, l2_bytes: float) -> list[dict]:
    """The published fused-MoE calls whose touched experts' weights outgrow the L2: their weight
    bytes (the experts some token picked, as serve/timing.py expects them, plus any shared expert
    fused in), seconds, and the GPU's streaming rate."""
    gpu = catalog.gpu(gpu_id)
    stream = gpu.hbm_bytes_per_s * gpu.efficiency.hbm
    out = []
    for r in csv.DictReader(path.open()):
        experts, k, tokens = int(r["experts"]), int(r["top_k"]), int(r["batch"])
        touched = touched_experts(experts, k, tokens) + int(r["shared"])
        per_expert = 3 * int(r["hidden"]) * int(r["shard_intermediate"]) * BYTES_PER_WEIGHT[r["dtype"]]
        nbytes = touched * per_expert
        if nbytes > l2_bytes:
            out.append({"bytes": nbytes, "s": float(r["kernel_us"]) * 1e-6, "stream": stream, "tokens": tokens})
    return out


def fit_grouped_published(family: str) -> tuple[float, float]:
    """(rate in bytes/s, latency per GEMM in s) minimising the squared relative error of two GEMMs
    per call, on a grid of 10 GB/s and 0.1 us."""
    rows = [g for gpu, path, l2 in PUBLISHED[family] for g in published_calls(gpu, path, l2)]
    nbytes, seconds, stream = (np.array([g[k] for g in rows]) for k in ("bytes", "s", "stream"))
    rates = np.arange(150, 801)[:, None, None] * 1e10  # 1.5-8 TB/s
    fixed = np.arange(0, 401)[None, :, None] * 1e-7  # 0-40 us
    loss = (((nbytes / np.minimum(stream, rates) + 2 * fixed) / seconds - 1) ** 2).sum(axis=-1)
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(rates[i, 0, 0]), float(fixed[0, j, 0])


def _write(family: str, lines: dict[str, str]) -> None:
    path = CATALOG / f"{family}.toml"
    text = path.read_text()
    for key, value in lines.items():
        text = re.sub(rf"(?m)^{key} = [0-9.]+", f"{key} = {value}", text)
    path.write_text(text)


def main() -> None:
    for family in PUBLISHED:
        rate, fixed = fit_grouped_published(family)
        lines = {"grouped_decode_gbps": f"{rate / 1e9:.0f}", "grouped_decode_latency_us": f"{fixed * 1e6:.1f}"}
        print(f"{family} (published fused-MoE times): " + ", ".join(f"{k} = {v}" for k, v in lines.items()))
        if "--write" in sys.argv:
            _write(family, lines)
    for family in FAMILIES:
        latency = fit(family)
        rate, fixed = fit_grouped(family)
        lines = {
            "decode_gemm_latency_us": f"{latency * 1e6:.1f}",
            "grouped_decode_gbps": f"{rate / 1e9:.0f}",
            "grouped_decode_latency_us": f"{fixed * 1e6:.1f}",
        }
        print(f"{family}: " + ", ".join(f"{k} = {v}" for k, v in lines.items()))
        if "--write" in sys.argv:
            _write(family, lines)


if __name__ == "__main__":
    main()
