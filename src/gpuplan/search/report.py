"""The JSON document of ``gpuplan search --json``: the ranked plans with ``train --json`` keys."""

from __future__ import annotations

from gpuplan.estimate.offload import to_dict as offload_dict
from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict as train_dict
from gpuplan.search.plans import SearchResult
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec


def plan_request(c, m: ModelSpec, gpu: GPUSpec, price: float | None) -> TrainRequest:
    return TrainRequest(
        model=m,
        gpu=gpu,
        plan=c.plan,
        config=c.config,
        price_per_gpu_hour=price,
        price_source="catalog" if price is not None else "",
    )


def to_dict(result: SearchResult, m: ModelSpec, gpu: GPUSpec) -> dict:
    plans = []
    for rank, c in enumerate(result.ranked, 1):
        doc = train_dict(estimate_training(plan_request(c, m, gpu, result.price_per_gpu_hour)))
        doc["rank"] = rank
        doc["tokens_per_s"] = c.tokens_per_s
        doc["step_s"] = c.step.step_s
        # the offload of each plan: "none", or the ZeRO-Offload estimate (memory per GPU and per
        # node, step parts), which then decides the document's memory and clock
        doc["offload"] = offload_dict(c.offload) if c.offload else {"offload": "none"}
        if c.offload:
            _with_offload(doc, c, gpu)
        plans.append(doc)
    return {
        "framework": result.framework,
        "objective": result.objective,
        "considered": result.considered,
        "feasible": result.feasible,
        "timed": result.timed,
        "rejected": result.rejected,
        "offload": result.offload,
        "host": result.host,
        "plans": plans,
    }


def _with_offload(doc: dict, c, gpu: GPUSpec) -> None:
    """``doc`` (``train --json`` of the plan without offload) as the offloaded plan runs: memory per
    GPU and its verdict from the offload estimate (the plan without it kept under
    ``memory.without_offload``), and every figure of the clock (step, days, GPU-hours, cost, MFU,
    tokens/s) on the offloaded step, which the search ranked."""
    memory = doc["memory"]
    memory["without_offload"] = {k: memory[k] for k in ("fits", "headroom", "per_gpu")}
    zeros = dict.fromkeys(("weights", "gradients", "optimizer", "master_weights", "activations", "other"), 0.0)
    memory["per_gpu"] = {**zeros, **c.offload.gpu_bytes, "total": c.offload.gpu_total}
    memory["fits"] = doc["fits"] = c.offload.gpu_total <= gpu.memory_bytes
    memory["headroom"] = gpu.memory_bytes - c.offload.gpu_total
    perf, t = doc["performance"], doc["time"]
    slower = c.step.step_s / perf["step_s"]  # the offloaded step over the step without offload
    for k in ("step_s", "total_s", "days"):
        t[k] *= slower
    if t.get("step_s_range"):
        t["step_s_range"] = [x * slower for x in t["step_s_range"]]
    for k in ("gpu_hours", "cost_usd"):
        if doc.get(k) is not None:
            doc[k] *= slower
    for k in ("mfu", "hfu", "tokens_per_s_per_gpu"):
        if doc.get(k) is not None:
            doc[k] /= slower
    perf["step_s"], perf["mfu"], perf["hfu"] = c.step.step_s, perf["mfu"] / slower, perf["hfu"] / slower
    perf["breakdown_s"] = dict(c.step.breakdown)
