"""The JSON document of ``gpuplan search --json``: the ranked plans with ``train --json`` keys."""

from __future__ import annotations

from gpuplan.estimate.offload import as_run
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
        if c.offload:
            as_run(doc, c.offload, c.step)
        else:
            doc["offload"] = {"offload": "none"}
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
