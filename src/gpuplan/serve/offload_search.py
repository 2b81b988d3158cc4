"""The offload search: the placement, GPU batch and block that maximise generation throughput
(FlexGen section 4.3's objective) under GPU, CPU and disk memory and the request's latency targets,
and the one-line error naming the tier that is short when nothing fits.

The search (``plan_offload``) keeps, for each block, GPU batch and placement of the cache, the most
weights the GPU holds (the cost falls as weights move onto it, so the best share is where GPU
memory binds, a continuous value as in FlexGen's linear program) and searches the block between
the coarse ladder's points, where the best one sits at a memory cliff. Each candidate is timed by the cost model
(offload_cost.py).
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuplan.errors import GpuplanError
from gpuplan.serve.offload_cost import (
    CPU_USABLE,
    OffloadPlan,
    OffloadRequest,
    Placement,
    _evaluate,
    _fits,
    _gpu_batch,
    _memory,
    _Shape,
    _shape,
    _with_curve,
)
from gpuplan.units import GB

# GPU batches the search tries below a block (and the block itself): FlexGen's policy search
# enumerates the GPU batch too (paper section 4.3; its published ones are 1 to 160)
GPU_BATCHES = (4, 8, 16, 32, 64, 128, 256)
BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
_KV_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)  # splits of the off-GPU cache between CPU and disk
_KV_GPU_SHARES = tuple(i / 20 for i in range(21))


def _most_weights_on_gpu(
    req: OffloadRequest, s: _Shape, batch: int, kv_gpu: float, gpu_batch: int | None = None
) -> float:
    """The largest share of the layers' weights the GPU holds beside ``kv_gpu`` of the cache.

    With the cache's placement and the block fixed, every term of the cost model falls (or stays)
    as weights move onto the GPU (``ctog``, the disk read, the prefill's loads), so the best weight
    placement is the most that fits: the share solving ``_memory``'s GPU line, which is linear in
    it, ``edge + act + kv_gpu * kv + w * W + 2 * (1 - w) * layer = room``. This is what FlexGen's
    linear program finds for the weights when GPU memory binds (paper section 4.3, appendix A.3:
    ``gpu_home + gpu_w <= gmem`` with ``wg`` continuous), not a grid point below it."""
    W = s.layers * s.layer_bytes
    kv = batch * (req.input_len + req.output_len) * s.layers * s.kv_layer
    act = _gpu_batch(batch, gpu_batch) * req.input_len * s.act_per_token
    room = req.gpu.memory_bytes * req.gpu_memory_utilization - s.edge_bytes - act - kv_gpu * kv
    slope = W - 2 * s.layer_bytes  # a share on the GPU no longer needs its streaming buffers
    if slope <= 0:  # a model of one or two layers: all of it on the GPU needs the least memory
        return 1.0
    share = (room - 2 * s.layer_bytes) / slope
    # rounded down to a millionth so that the fit check, in floating point, agrees
    return min(1.0, max(0.0, math.floor(share * 1e6) / 1e6))


def _placements(req: OffloadRequest, s: _Shape, batch: int, gpu_batch: int | None = None):
    """Candidate placements: for each GPU share of the KV cache (steps of 5%) and each split of
    the off-GPU cache between CPU and disk (disk only when the host has one), the most weights the
    GPU holds beside that cache (``_most_weights_on_gpu``), the rest on the CPU as far as it holds
    them (it is faster than disk) and the remainder on disk. A split whose CPU share of the cache
    alone overflows CPU memory is skipped (the fit check would refuse it), and so is every GPU share
    of the cache from the first that leaves no room on the GPU even with the weights' least there
    (GPU memory only grows with the cache's share)."""
    W = s.layers * s.layer_bytes
    kv = batch * (req.input_len + req.output_len) * s.layers * s.kv_layer
    cpu_room = req.host.cpu_memory_bytes * CPU_USABLE
    kv_options = (1.0,) if req.offload in ("none", "weights") else _KV_GPU_SHARES
    disk_options = _KV_SHARES if req.host.disk_bytes > 0 else (0.0,)
    gpu_room = req.gpu.memory_bytes * req.gpu_memory_utilization
    for cg in kv_options:
        wg = 1.0 if req.offload in ("none", "kv") else _most_weights_on_gpu(req, s, batch, cg, gpu_batch)
        probe = Placement(weights_gpu=wg, weights_cpu=1 - wg, weights_disk=0.0, kv_gpu=cg, kv_cpu=1 - cg)
        if _memory(req, s, probe, batch, gpu_batch)[0] > gpu_room:
            break
        for share in disk_options if cg < 1 else (0.0,):
            kd = (1 - cg) * share
            kc = 1 - cg - kd
            if kc * kv > cpu_room:
                continue
            rest = (1 - wg) * W
            room = cpu_room - kc * kv
            wc = min(rest, room) / W
            yield Placement(
                weights_gpu=wg,
                weights_cpu=wc,
                weights_disk=max(0.0, 1 - wg - wc),
                kv_gpu=cg,
                kv_cpu=kc,
                kv_disk=kd,
            )


def _no_fit(req: OffloadRequest, s: _Shape) -> GpuplanError:
    """Why nothing fits, naming the tier that is short and by how much (at the batch asked for,
    else a batch of one)."""
    W = s.layers * s.layer_bytes
    kv1 = (req.batch or 1) * (req.input_len + req.output_len) * s.layers * s.kv_layer
    gpu_room = req.gpu.memory_bytes * req.gpu_memory_utilization
    cpu_room = req.host.cpu_memory_bytes * CPU_USABLE
    if req.offload == "none" or (req.offload == "kv" and W + s.edge_bytes > gpu_room):
        return GpuplanError(
            "offload",
            f"weights ({W / GB:.1f} GB) do not fit the GPU's {gpu_room / GB:.1f} GB with `offload={req.offload}`",
            "use `offload=auto` or weights",
        )
    need_host = W + s.edge_bytes + kv1 - gpu_room
    if need_host > cpu_room + req.host.disk_bytes and req.host.disk_bytes > 0:
        return GpuplanError(
            "disk",
            f"{need_host / GB:.1f} GB must live off the GPU; CPU memory holds "
            f"{cpu_room / GB:.1f} GB and the disk only {req.host.disk_bytes / GB:.1f} GB",
            f"use `disk={(need_host - cpu_room) / 1e12 * 1.05:.2f}TB` or more, or raise `cpu_memory`",
        )
    if need_host > cpu_room + req.host.disk_bytes:
        short = need_host - req.host.disk_bytes
        return GpuplanError(
            "cpu_memory",
            f"{need_host / GB:.1f} GB must live off the GPU but CPU memory holds "
            f"{cpu_room / GB:.1f} GB and the disk {req.host.disk_bytes / GB:.1f} GB",
            f"raise `cpu_memory` to at least {short / CPU_USABLE / GB:.0f}GB or add "
            f"`disk={(need_host - cpu_room) / 1e12:.2f}TB`",
        )
    return GpuplanError(
        "gpu_memory",
        f"no placement fits {req.gpu.name}: embeddings, LM head and the streaming buffers alone exceed it",
        "use a larger GPU or a smaller `weights` format",
    )


def search_offload(req: OffloadRequest, s: _Shape) -> OffloadPlan:
    """The placement and block batch that maximise generation throughput (FlexGen section 4.3's
    objective); ``s`` is the request's shape (offload_cost._shape).

    The block is searched in passes: the coarse ``BATCHES`` (carried on past 1,024 while the
    largest is the best and fits), then the blocks between the best one's neighbours (``_FINE`` of them, evenly spaced), then every block within a step of the best
    of those. Throughput climbs with the
    block while the weight transfer is amortised and falls once the cache crowds the weights off
    the GPU or onto slower tiers, so the best block sits at such a cliff, anywhere between two
    coarse points (FlexGen's own OPT-30B block is 144 = 48 x 3: its policy search enumerates GPU
    batch and count, section 4.3)."""
    tops: dict[int, OffloadPlan] = {}

    def search(batches) -> None:
        for b in batches:
            if b in tops:
                continue
            top = None
            for g in _gpu_batches(b):
                at_g = None
                for p in _placements(req, s, b, g):
                    if not _fits(req, s, p, b, g):
                        continue
                    plan = _evaluate(req, s, p, b, g)
                    if not _meets_targets(req, plan):
                        continue
                    if at_g is None or _better(plan, at_g):
                        at_g = plan
                if at_g is None:
                    continue
                if top is not None and not _better(at_g, top):
                    break  # a smaller GPU batch freed memory that bought less than its HBM re-reads cost
                top = at_g
            if top is not None:
                tops[b] = top

    if req.batch:
        search((req.batch,))
    else:
        coarse = list(BATCHES)
        search(coarse)
        # the largest block still the best: keep growing it (x1.5, x4/3: the same ladder) while it fits
        while tops and _best(tops).batch == coarse[-1] and coarse[-1] < _MAX_BATCH:
            c = coarse[-1]
            coarse.append(c * 3 // 2 if c & (c - 1) == 0 else c * 4 // 3)
            search(coarse[-1:])
        if tops:
            best_b = _best(tops).batch
            i = coarse.index(best_b)
            lo, hi = coarse[max(i - 1, 0)], coarse[min(i + 1, len(coarse) - 1)]
            step = max(1, (hi - lo) // _FINE)
            search(range(lo + 1, hi, step))
            if step > 1:  # then every block within a step of the best of those
                best_b = _best(tops).batch
                search(range(max(lo + 1, best_b - step + 1), min(hi, best_b + step)))
    if not tops:
        if req.max_itl_s is not None or req.max_ttft_s is not None:
            raise _no_target(req)
        raise _no_fit(req, s)
    by_batch = tuple((b, tops[b].throughput) for b in sorted(tops))
    return _with_curve(_best(tops), by_batch)


def _meets_targets(req: OffloadRequest, plan: OffloadPlan) -> bool:
    """Whether a plan keeps the request's latency targets: its decode step (every sequence of
    the block gets one token per step) within ``max_itl_s``, its prefill within ``max_ttft_s``."""
    if req.max_itl_s is not None and plan.step_s > req.max_itl_s:
        return False
    return req.max_ttft_s is None or plan.prefill_s <= req.max_ttft_s


def _no_target(req: OffloadRequest) -> GpuplanError:
    """No placement meets the latency targets: name the fastest one of a single sequence (the
    search runs for FlexGen placements only, so no ``--gpu-layers`` split is in ``req``)."""
    fastest = search_offload(
        replace(req, batch=1, max_itl_s=None, max_ttft_s=None), _shape(req.model, req.weights, req.kv)
    )
    if req.max_itl_s is not None and fastest.step_s > req.max_itl_s:
        return GpuplanError(
            "itl_slo",
            f"no placement decodes a token within {req.max_itl_s * 1e3:.0f} ms: the fastest, one sequence "
            f"({fastest.placement.weights_gpu:.0%} of the weights on the GPU), takes {fastest.step_s * 1e3:.0f} ms",
            "relax the inter-token target, or add GPU memory (more GPUs, a larger card)",
        )
    return GpuplanError(
        "ttft_slo",
        f"no placement meets the targets together: one sequence alone takes {fastest.prefill_s * 1e3:.0f} ms "
        f"to its first token and {fastest.step_s * 1e3:.0f} ms per token",
        "relax the time-to-first-token or inter-token target",
    )


def _gpu_batches(batch: int) -> list[int]:
    """GPU batches tried for a block: the whole block (one GPU batch), then the ``GPU_BATCHES``
    below it, largest first (a smaller one frees GPU memory for weights and re-reads them more)."""
    return [batch] + [g for g in reversed(GPU_BATCHES) if g < batch]


_FINE = 32  # blocks tried between the coarse best's neighbours
_MAX_BATCH = 1 << 16  # sequences per block: beyond any host's memory for a model that needs offload


def _best(tops: dict[int, OffloadPlan]) -> OffloadPlan:
    """The fastest block; on a tie the smaller (same speed, less memory and latency)."""
    best: OffloadPlan | None = None
    for b in sorted(tops):
        if best is None or tops[b].throughput > best.throughput * (1 + _TIE):
            best = tops[b]
    assert best is not None
    return best


_TIE = 1e-9


def _better(a: OffloadPlan, b: OffloadPlan) -> bool:
    """Faster wins; on a tie (transfer hidden behind compute) the placement with more on the GPU,
    which moves fewer bytes and leaves PCIe free."""
    if abs(a.throughput - b.throughput) > _TIE * max(a.throughput, b.throughput):
        return a.throughput > b.throughput
    pa, pb = a.placement, b.placement
    return (pa.weights_gpu, pa.kv_gpu, -pa.kv_disk) > (pb.weights_gpu, pb.kv_gpu, -pb.kv_disk)
