"""Offload predictions against published runs (catalog/validation/offload_runs.csv).

Each row carries its machine's numbers (GPU, CPU memory, PCIe, disk, CPU rate), so that rows on
hardware outside the catalog (FlexGen's T4, ZeRO-Offload's V100) need no catalog entry; the note
says which of them the paper states and which are assumed. Kinds:

* ``flexgen``: gpuplan's best placement (serve/offload.py) against FlexGen's measured throughput;
* ``baseline``: a published system's throughput on the same machine; the error is gpuplan's best
  placement over it, which should be >= 0 (the placement chosen is no slower than theirs);
* ``zero-offload``: the training model (estimate/offload.py): ``tflops_per_gpu`` or ``max_params``.

The models ``gpt-10b`` and ``gpt-13b`` are GPT-2-shaped stand-ins for ZeRO-Offload's models
(their exact shapes are not recorded here).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan import catalog
from gpuplan.estimate.offload import OffloadTrainRequest, estimate_offload_training
from gpuplan.serve.formats import KV_FORMATS, WEIGHT_FORMATS
from gpuplan.serve.offload import OffloadRequest, plan_offload
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

CSV = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "offload_runs.csv"


def _gpt(name: str, hidden: int, layers: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        model_type="gpt2",
        vocab_size=50257,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=hidden // 128,
        num_kv_heads=hidden // 128,
        head_dim=128,
        ffn_size=4 * hidden,
        gated_mlp=False,
        activation="gelu_new",
        norm="layernorm",
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        tied_embeddings=True,
        position_embeddings=1024,
        rotary=False,
        max_position_embeddings=1024,
    )


STAND_INS = {"gpt-10b": _gpt("gpt-10b", 4096, 50), "gpt-13b": _gpt("gpt-13b", 5120, 40)}


@dataclass(frozen=True)
class OffloadCheck:
    id: str
    source: str
    kind: str
    metric: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def _machine(r: dict) -> tuple[GPUSpec, HostSpec]:
    GB = 1e9
    gpu = GPUSpec(
        id=r["id"],
        name=f"{r['gpu_memory_gb']} GB GPU",
        memory_bytes=float(r["gpu_memory_gb"]) * GB,
        hbm_bytes_per_s=float(r["hbm_gbps"]) * GB,
        peak_flops={"fp16": float(r["gpu_tflops16"]) * 1e12},
        interconnect="pcie",
        interconnect_bytes_per_s=2 * float(r["pcie_gbps"]) * GB,
        pcie_bytes_per_s=2 * float(r["pcie_gbps"]) * GB,
        gpus_per_node=1,
        tdp_w=0.0,
    )
    disk = float(r["disk_gb"] or 0)
    host = HostSpec(
        name="row",
        cpu_memory_bytes=float(r["cpu_memory_gb"]) * GB,
        cpu_memory_bytes_per_s=float(r["cpu_memory_gbps"]) * GB,
        pcie_bytes_per_s=float(r["pcie_gbps"]) * GB,
        disk_bytes=disk * GB,
        disk_read_bytes_per_s=float(r["disk_read_gbps"] or 0) * GB,
        disk_write_bytes_per_s=float(r["disk_write_gbps"] or 0) * GB,
        cpu_flops=float(r["cpu_tflops"]) * 1e12,
    )
    return gpu, host


def predict(r: dict) -> float:
    gpu, host = _machine(r)
    if r["kind"] == "serve":
        req = OffloadRequest(
            model=catalog.model(r["model"]),
            gpu=gpu,
            host=host,
            weights=WEIGHT_FORMATS["fp16"],
            kv=KV_FORMATS["fp16"],
            input_len=int(r["input_len"]),
            output_len=int(r["output_len"]),
        )
        return plan_offload(req).throughput
    model = STAND_INS.get(r["model"]) or catalog.model(r["model"])
    cfg = TrainingConfig(seq_len=int(r["input_len"]), micro_batch=int(r["micro_batch"]), precision="fp16")
    est = estimate_offload_training(
        OffloadTrainRequest(model=model, gpu=gpu, host=host, plan=ParallelPlan(dp=1), config=cfg, offload="optimizer")
    )
    return est.max_params if r["metric"] == "max_params" else est.tflops_per_gpu


def validate_offload(path: Path = CSV) -> list[OffloadCheck]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [OffloadCheck(r["id"], r["source"], r["system"], r["metric"], float(r["value"]), predict(r)) for r in rows]


def summary(checks: list[OffloadCheck]) -> dict:
    """Median and max |error| over the rows that predict a system's own number (not baselines),
    and the least margin over the baselines (>= 0: gpuplan's placement is no slower)."""
    own = [abs(c.error) for c in checks if c.kind != "baseline"]
    margins = [c.error for c in checks if c.kind == "baseline"]
    return {
        "rows": len(checks),
        "median_abs_error": statistics.median(own) if own else None,
        "max_abs_error": max(own) if own else None,
        "min_baseline_margin": min(margins) if margins else None,
    }


def to_dict(checks: list[OffloadCheck]) -> dict[str, Any]:
    """The JSON document of ``gpuplan validate offload``: a row per check and the summary."""
    return {
        "rows": [
            {
                "id": c.id,
                "source": c.source,
                "metric": c.metric,
                "measured": c.measured,
                "predicted": c.predicted,
                "error": c.error,
            }
            for c in checks
        ],
        "summary": summary(checks),
    }
