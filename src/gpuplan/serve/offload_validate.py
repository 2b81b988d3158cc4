"""Offload predictions against published runs (catalog/validation/offload_runs.csv).

Each row carries its machine's numbers (GPU, CPU memory, PCIe, disk, CPU rate) in SI units (GB/s
= 1e9 B/s: FlexGen's fitted constants are in its GB of 2^30 bytes, flexgen/utils.py, and are
converted), so that rows on hardware outside the catalog (FlexGen's T4, ZeRO-Offload's V100) need
no catalog entry; ``url`` and ``tag`` say where the measured value was read (S: the primary source,
S2: a secondary copy, D: derived, with the formula in the note) and the note says where each
machine number comes from.
Kinds (``system``):

* ``flexgen``: the cost model (serve/offload.py) timing FlexGen's own placement (its ``--percent``
  weights/KV/activations on GPU, CPU, the rest disk, the weights' shares as its runtime rounds them
  to whole tensors, and its block, written ``GxK``: GPU batch x GPU batches) on its machine, against FlexGen's
  measured throughput; ``search_margin`` is gpuplan's searched placement and block over that same
  prediction, on the same machine and by the same model (>= 0: the placement chosen is no slower
  than the published system's, the issue's target);
* ``zero-inference``: likewise DeepSpeed ZeRO-Inference's stated placement (every layer streamed from
  CPU memory or NVMe, written as FlexGen's ``--percent``, the KV cache on the CPU with its attention
  there) and batch, one GPU batch (its row-by-row schedule);
* ``flexgen-best``: FlexGen's policy-searched best where the source read does not give the policy:
  the prediction is gpuplan's own searched placement on the same machine, so the error is both a
  throughput check and a placement check (>= 0: the placement chosen is no slower);
* ``baseline``: a published system's throughput on the same machine; the error is gpuplan's best
  placement over it, which should be >= 0 (the placement chosen is no slower than theirs);
* ``zero-offload``: the training model (estimate/offload.py): ``tflops_per_gpu`` or ``max_params``.

A serving row's ``metric`` is ``generation_tokens_per_s`` (FlexGen's generated tokens / (prefill +
decode time)) or ``decode_tokens_per_s`` (the decode phase alone: FlexGen paper Table 3).

The held-out set (catalog/validation/held_out/offload_runs.csv, ``gpuplan validate
offload-held-out``) has the same columns: published runs read after the model was built and never
used to set a constant.

A row whose ``compare`` is ``at_least`` publishes a lower bound (ZeRO-Infinity fits a trillion
parameters; its largest is not stated): like a baseline, the check is predicted / measured >= 1,
and it stays out of the median error.

The models ``gpt-10b``, ``gpt-13b`` and ``gpt-1t`` are GPT-2-shaped stand-ins: the 10B shape is
DeepSpeed's ZeRO-Offload tutorial's; the 13B and 1T shapes are assumed (the notes say so).
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan import catalog
from gpuplan.estimate.offload import OffloadTrainRequest, estimate_offload_training
from gpuplan.serve.formats import KV_FORMATS, WEIGHT_FORMATS
from gpuplan.serve.offload import OffloadRequest, Placement, evaluate_placement, plan_offload
from gpuplan.serve.offload_cost import _HBM_EFF
from gpuplan.specs.hardware import Efficiency, GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

CSV = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "offload_runs.csv"
HELD_OUT = CSV.parent / "held_out" / "offload_runs.csv"
# serving systems whose rows state the placement that ran, timed as it ran (module doc)
TIMED = ("flexgen", "zero-inference")


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


STAND_INS = {
    "gpt-10b": _gpt("gpt-10b", 4096, 50),
    "gpt-13b": _gpt("gpt-13b", 5120, 40),
    "gpt-1t": _gpt("gpt-1t", 25600, 128),
}


@dataclass(frozen=True)
class OffloadCheck:
    id: str
    source: str
    kind: str
    metric: str
    measured: float
    predicted: float
    tag: str = ""
    url: str = ""
    search_margin: float | None = None  # flexgen rows: gpuplan's best over its timing of FlexGen's placement, - 1
    at_least: bool = False  # the published value is a lower bound (module doc)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def _efficiency(r: dict) -> Efficiency | None:
    """A row's achievable matmul fraction where its source gives one (FlexGen's fitted T4 rate);
    the fields the offload models do not read are placeholders."""
    if not r.get("gemm_fraction"):
        return None
    return Efficiency(
        name="row",
        gemm={"fp16": float(r["gemm_fraction"])},
        tiles=((128, 128, 1.0),),
        flash_fwd=0.5,
        flash_bwd=0.5,
        seq_half=512.0,
        hbm=_HBM_EFF,
        intra_bus=0.8,
        inter_bus=0.8,
        intra_latency_s=1e-5,
        inter_latency_s=1e-5,
        kernel_overhead_s=0.0,
        assumed=True,
    )


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
        gpus_per_node=int(r.get("gpus") or 1),
        tdp_w=0.0,
        efficiency=_efficiency(r),
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


def _flexgen_homes(sizes: Sequence[float], w_gpu: float, w_cpu: float) -> list[int]:
    """Where FlexGen's runtime puts each tensor of one weight list (0 disk, 1 CPU, 2 GPU): whole
    tensors, by where the midpoint of each one's bytes falls in the list's cumulative size,
    against the cumulative percentages disk, disk + CPU, 100 (flexgen/flex_opt.py
    ``init_weight_list`` lines 92-101 and ``get_choice`` lines 82-89, verbatim arithmetic)."""
    w_disk = 100 - w_gpu - w_cpu
    bounds = (w_disk, w_disk + w_cpu, w_disk + w_cpu + w_gpu)
    total, seen, homes = sum(sizes), 0.0, []
    for size in sizes:
        seen += size
        mid = (seen - size / 2) / total * 100
        homes.append(next((i for i, b in enumerate(bounds) if mid < b), 2))
    return homes


def flexgen_weight_shares(hidden: int, w_gpu: float, w_cpu: float) -> tuple[float, float, float]:
    """(GPU, CPU, disk) shares of an OPT layer's weight bytes as FlexGen's ``--percent w_gpu
    w_cpu`` (in percent) places them.

    FlexGen places whole tensors ("layer granularity for weights", paper section 4.2), each of a
    layer's two weight lists on its own: SelfAttention (w_q, b_q, w_k, b_k, w_v, b_v, w_out, b_out,
    w_ln, b_ln: flex_opt.py ``SelfAttention.init_weight``) and MLP (wi 4h x h, bi, wo h x 4h, bo,
    w_ln, b_ln: ``MLP.init_weight``), so the shares that run are not the percentages asked for:
    ``20 80`` puts only w_out and the vectors after it on the GPU, 1/12 of the layer."""
    h = hidden
    lists = (
        [h * h, h, h * h, h, h * h, h, h * h, h, h, h],  # SelfAttention
        [4 * h * h, 4 * h, 4 * h * h, h, h, h],  # MLP (OPT's ffn is 4h; FlexGen hard-codes it)
    )
    on = [0.0, 0.0, 0.0]
    for sizes in lists:
        for size, home in zip(sizes, _flexgen_homes(sizes, w_gpu, w_cpu)):
            on[home] += size
    total = sum(on)
    return on[2] / total, on[1] / total, on[0] / total


def flexgen_placement(percent: str, model: ModelSpec) -> Placement:
    """FlexGen's ``--percent`` (weights GPU, CPU; cache GPU, CPU; activations GPU, CPU; each
    tensor's rest on disk) as the Placement that runs: the weights' shares as its runtime rounds
    them to whole tensors (``flexgen_weight_shares``); the cache's as given (FlexGen splits it
    along batch x heads, exact for the 0/100 shares of the published runs); the activations'
    share is not modelled."""
    w_g, w_c, c_g, c_c = (float(x) for x in percent.split()[:4])
    gpu, cpu, disk = flexgen_weight_shares(model.hidden_size, w_g, w_c)
    c_g, c_c = c_g / 100, c_c / 100
    return Placement(
        weights_gpu=gpu,
        weights_cpu=cpu,
        weights_disk=disk,
        kv_gpu=c_g,
        kv_cpu=c_c,
        kv_disk=max(0.0, 1 - c_g - c_c),
    )


def flexgen_block(block: str) -> tuple[int, int]:
    """(block, GPU batch) from a row's ``block``: FlexGen's ``--gpu-batch-size`` x
    ``--num-gpu-batches`` written ``GxK`` (the block is G x K sequences, run as K GPU batches of G),
    or a bare block run as one GPU batch."""
    g, _, k = block.partition("x")
    return int(g) * int(k or 1), int(g)


def _serve_request(r: dict) -> OffloadRequest:
    gpu, host = _machine(r)
    return OffloadRequest(
        model=catalog.model(r["model"]),
        gpu=gpu,
        host=host,
        weights=WEIGHT_FORMATS["fp16"],
        kv=KV_FORMATS["fp16"],
        input_len=int(r["input_len"]),
        output_len=int(r["output_len"]),
    )


def predict(r: dict) -> float:
    """The row's metric as gpuplan predicts it (see the module doc for each kind)."""
    gpu, host = _machine(r)
    if r["kind"] == "serve":
        req = _serve_request(r)
        if r["system"] in TIMED:
            block, gpu_batch = flexgen_block(r["block"])
            plan = evaluate_placement(req, flexgen_placement(r["percent"], req.model), block, gpu_batch)
            return plan.decode_throughput if r["metric"] == "decode_tokens_per_s" else plan.throughput
        return plan_offload(req).throughput  # flexgen-best and baseline: gpuplan's own best placement
    model = STAND_INS.get(r["model"]) or catalog.model(r["model"])
    cfg = TrainingConfig(
        seq_len=int(r["input_len"]),
        micro_batch=int(r["micro_batch"]),
        precision="fp16",
        recompute=r.get("recompute") or "none",
    )
    est = estimate_offload_training(
        OffloadTrainRequest(
            model=model,
            gpu=gpu,
            host=host,
            plan=ParallelPlan(dp=int(r.get("gpus") or 1)),
            config=cfg,
            offload=r.get("offload") or "optimizer",
            device=r.get("offload_device") or "cpu",
        )
    )
    return est.max_params if r["metric"] == "max_params" else est.tflops_per_gpu


def validate_offload(path: Path = CSV) -> list[OffloadCheck]:
    """Every row of ``path`` predicted (``predict``) beside its published value."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        predicted = predict(r)
        margin = None
        if r["system"] in TIMED and r["metric"] == "generation_tokens_per_s":
            margin = plan_offload(_serve_request(r)).throughput / predicted - 1
        out.append(
            OffloadCheck(
                r["id"],
                r["source"],
                r["system"],
                r["metric"],
                float(r["value"]),
                predicted,
                r["tag"],
                r["url"],
                margin,
                r.get("compare") == "at_least",
            )
        )
    return out


def summary(checks: list[OffloadCheck]) -> dict:
    """Median and max |error| over the rows that predict a system's own number (not baselines),
    and the least margin over the baselines (>= 0: gpuplan's placement is no slower); ``flexgen-best``
    rows count in both (gpuplan's best placement against FlexGen's best)."""
    own = [abs(c.error) for c in checks if c.kind != "baseline" and not c.at_least]
    best = [c.error for c in checks if c.kind == "flexgen-best"]
    margins = [c.error for c in checks if c.kind == "baseline"]
    bounds = [c.error for c in checks if c.at_least]
    searched = [c.search_margin for c in checks if c.search_margin is not None]
    return {
        "rows": len(checks),
        "median_abs_error": statistics.median(own) if own else None,
        "max_abs_error": max(own) if own else None,
        "min_baseline_margin": min(margins) if margins else None,
        "min_search_margin": min(searched) if searched else None,
        "min_bound_margin": min(bounds) if bounds else None,
        "min_best_margin": min(best) if best else None,
    }


def to_dict(checks: list[OffloadCheck]) -> dict[str, Any]:
    """The JSON document of ``gpuplan validate offload``: a row per check and the summary."""
    return {
        "rows": [
            {
                "id": c.id,
                "source": c.source,
                "system": c.kind,
                "metric": c.metric,
                "measured": c.measured,
                "predicted": c.predicted,
                "error": c.error,
                "tag": c.tag,
                "url": c.url,
                "search_margin": c.search_margin,
                "at_least": c.at_least,
            }
            for c in checks
        ],
        "summary": summary(checks),
    }
