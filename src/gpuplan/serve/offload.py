"""Serving past the GPU's memory: where weights and KV cache live (GPU, CPU, disk) and how fast it decodes.

The pieces: offload_cost.py (the request, a placement's bytes on each tier and its decode and
prefill times: FlexGen's cost model, Sheng et al. 2023 section 4.3, as the authors' repository
writes it in experimental/cost_model.py), offload_search.py (the placement, GPU batch and block
that maximise throughput, and what is short when nothing fits); this module dispatches between
the search and a llama.cpp split, and writes the JSON. The public names are re-exported here.

``--gpu-layers N`` (llama.cpp ``-ngl``) is a different execution: the first N layers run on the
GPU, the rest run *on the CPU* from CPU memory at the CPU's bandwidth and FLOP rate, one after the
other (llama.cpp does not stream weights to the GPU), with each layer's KV cache where it runs.

Not modelled (yet): activations on disk, weight compression (FlexGen's 4-bit group
quantisation: pass ``--weights int4-awq`` for a similar byte count), multi-GPU pipelines, the OS
page cache over disk-resident tensors (FlexGen paper Table 24: the same OPT-175B run gives 0.69
token/s with it on, 0.49 with it off).
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError
from gpuplan.serve.offload_cost import (
    CPU_USABLE,
    MODES,
    PREFILL_GPU_BATCH,
    OffloadPlan,
    OffloadRequest,
    Placement,
    _evaluate,
    _memory,
    _Shape,
    _shape,
    _with_curve,
    evaluate_placement,
)
from gpuplan.serve.offload_search import BATCHES, GPU_BATCHES, search_offload
from gpuplan.units import GB

__all__ = [
    "BATCHES",
    "CPU_USABLE",
    "GPU_BATCHES",
    "MODES",
    "PREFILL_GPU_BATCH",
    "OffloadPlan",
    "OffloadRequest",
    "Placement",
    "evaluate_placement",
    "plan_offload",
    "to_dict",
]


def plan_offload(req: OffloadRequest) -> OffloadPlan:
    """The placement and block batch that maximise generation throughput (offload_search.py), or
    the given ``--gpu-layers`` split evaluated (llama.cpp)."""
    s = _shape(req.model, req.weights, req.kv)
    if req.gpu_layers is not None:
        return _split(req, s)
    return search_offload(req, s)


def _split(req: OffloadRequest, s: _Shape) -> OffloadPlan:
    n = req.gpu_layers or 0
    frac = n / s.layers
    p = Placement(weights_gpu=frac, weights_cpu=1 - frac, weights_disk=0.0, kv_gpu=frac, kv_cpu=1 - frac, gpu_layers=n)
    batch = req.batch or 1
    g, c, _ = _memory(req, s, p, batch)
    gpu_room = req.gpu.memory_bytes * req.gpu_memory_utilization
    if g > gpu_room:
        per_layer = s.layer_bytes + batch * (req.input_len + req.output_len) * s.kv_layer
        most = int(max(0.0, gpu_room - (g - n * per_layer)) // per_layer)
        raise GpuplanError(
            "gpu_layers",
            f"{n} layers need {g / GB:.1f} GB on a GPU with {gpu_room / GB:.1f} GB usable",
            f"use `gpu_layers={most}` or fewer",
        )
    cpu_room = req.host.cpu_memory_bytes * CPU_USABLE
    if c > cpu_room:
        raise GpuplanError(
            "cpu_memory",
            f"the {s.layers - n} CPU layers need {c / GB:.1f} GB, CPU memory holds {cpu_room / GB:.1f} GB usable",
            f"raise `cpu_memory` to at least {c / CPU_USABLE / GB:.0f}GB or raise `gpu_layers`",
        )
    plan = _evaluate(req, s, p, batch)
    return _with_curve(plan, ((batch, plan.throughput),))


def to_dict(plan: OffloadPlan) -> dict:
    p = plan.placement
    return {
        "model": plan.request.model.name,
        "gpu": plan.request.gpu.name,
        "host": plan.request.host.name,
        "placement": {
            "weights": {"gpu": p.weights_gpu, "cpu": p.weights_cpu, "disk": p.weights_disk},
            "kv_cache": {"gpu": p.kv_gpu, "cpu": p.kv_cpu, "disk": p.kv_disk},
            "gpu_layers": p.gpu_layers,
            "attention_on_cpu": p.kv_cpu + p.kv_disk > 0,
        },
        "batch": plan.batch,
        "gpu_batch": plan.gpu_batch,
        "throughput_tokens_per_s": plan.throughput,
        "decode_tokens_per_s": plan.decode_throughput,
        "per_token_s": plan.per_token_s,
        "decode_step_s": {
            "total": plan.step_s,
            "compute": plan.compute_s,
            "pcie": plan.pcie_s,
            "disk": plan.disk_s,
            "cpu": plan.cpu_s,
            "overlap": plan.overlap_s,
        },
        "prefill_s": plan.prefill_s,
        "memory_bytes": {"gpu": plan.gpu_bytes, "cpu": plan.cpu_bytes, "disk": plan.disk_bytes},
        "balanced_batch": plan.balanced_batch,
        "throughput_by_batch": [{"batch": b, "tokens_per_s": t} for b, t in plan.by_batch],
    }
