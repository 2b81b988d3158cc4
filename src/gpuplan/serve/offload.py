"""Serving past the GPU's memory: where weights and KV cache live (GPU, CPU, disk) and how fast it decodes.

The cost model is FlexGen's (Sheng et al. 2023, "FlexGen: High-Throughput Generative Inference of
Large Language Models with a Single GPU", section 4.3): decoding runs layer by layer over a *block*
of sequences (the zig-zag block schedule of section 4.2); while layer i computes, layer i+1's
weights stream in. The paper writes one layer of one decode step as max(ctog, dtoc, comp); the
authors' own cost model in their repository (experimental/cost_model.py, fitted to their T4 runs)
keeps the CPU->GPU weight load *outside* the overlap,

    T_layer = ctog + max(dtoc, ctod, comp)

(its ``Tgen = ctogg + max(gtocg, dtocg, ctodg, compg)``, the paper's max commented out there), and
so does this model; prefill is its ``Tpre = max(ctog + dtoc, gtoc + ctod, comp)``. Here ``ctog``
is the CPU->GPU transfer (weights kept on CPU *and* on disk cross PCIe), ``dtoc`` the disk->CPU
read of the disk share, ``ctod`` the cache written to disk, and ``comp`` the GPU's compute plus, when the KV cache lives on
the CPU, the attention the CPU runs over it (FlexGen's CPU delegation: moving the cache over PCIe
costs more than computing attention where it lives; the CPU attention sits on the layer's
dependency path, so it adds to the GPU time rather than overlapping it). A block of ``batch``
sequences loads each layer's weights once per step, so the transfer is amortised over the batch:
decode is memory-bound, and the batch where compute catches up with the transfer is where
offloading stops costing throughput.

Generation throughput is FlexGen's: generated tokens / (prefill time + decode time), the prefill
yielding the first token and ``n - 1`` decode steps the rest (cost_model.py ``T = Tpre * l +
Tgen * (n-1) * l``).

A block runs as ``ceil(block / gpu batch)`` GPU batches, one after the other, through each layer
(FlexGen paper Algorithm 1, the loop over GPU batches inside a layer; its ``--gpu-batch-size`` and
``--num-gpu-batches``): each GPU batch's matmuls read the layer's weights from HBM again, so a layer
costs ``max(block x matmul FLOPs / rate, GPU batches x layer bytes / HBM rate)`` on the GPU, and the
prompt's activations on the GPU are one GPU batch's (the authors' cost model,
experimental/cost_model.py ``solve_lp``: the GPU working memory ``interp`` scales with ``gbs``, the
costs with the block ``bls``).

The search (``plan_offload``) keeps, for each block, GPU batch and placement of the cache, the most
weights the GPU holds (the cost falls as weights move onto it, so the best share is where GPU
memory binds, a continuous value as in FlexGen's linear program) and searches the block between
the coarse ladder's points, where the best one sits at a memory cliff.

``--gpu-layers N`` (llama.cpp ``-ngl``) is a different execution: the first N layers run on the
GPU, the rest run *on the CPU* from CPU memory at the CPU's bandwidth and FLOP rate, one after the
other (llama.cpp does not stream weights to the GPU), with each layer's KV cache where it runs.

The KV cache may also spill to disk (FlexGen's 175B runs keep all of it there): every decode step
reads a layer's whole disk-resident cache into CPU memory (``dtoc``, at the disk's read rate) and
writes the new token's K and V back (``ctod``, at its write rate), and the CPU computes attention
over it as over the CPU share. The disk's read and write are separate terms of the max, as in the
authors' cost model (FlexGen repository, experimental/cost_model.py, ``dtocg`` and ``ctodg``).

Not modelled (yet): activations on disk, weight compression (FlexGen's 4-bit group
quantisation: pass ``--weights int4-awq`` for a similar byte count), multi-GPU pipelines, the OS
page cache over disk-resident tensors (FlexGen paper Table 24: the same OPT-175B run gives 0.69
token/s with it on, 0.49 with it off).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError, require
from gpuplan.estimate.params import count_params, embedding_tensors, head_tensors, layer_tensors
from gpuplan.serve.formats import KVFormat, WeightFormat
from gpuplan.serve.kv import kv_bytes_per_token_layer
from gpuplan.serve.weights import local_numel, tensor_bits
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.units import GB

MODES = ("auto", "none", "weights", "kv")
# Defaults when the GPU has no efficiency file (validation hardware such as the T4): the median
# of the catalog's measured fractions (catalog/efficiency/*.toml)
_GEMM_EFF, _HBM_EFF = 0.7, 0.85
# Share of CPU memory an engine can pin: the OS and the process itself keep the rest (assumed)
CPU_USABLE = 0.9
# Sequences whose prefill runs at once when no GPU batch is given: FlexGen's GPU batch (its tables
# use 32-64), which bounds the activation working set on the GPU
PREFILL_GPU_BATCH = 32
# GPU batches the search tries below a block (and the block itself): FlexGen's policy search
# enumerates the GPU batch too (paper section 4.3; its published ones are 1 to 160)
GPU_BATCHES = (4, 8, 16, 32, 64, 128, 256)
BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


@dataclass(frozen=True)
class OffloadRequest:
    model: ModelSpec
    gpu: GPUSpec
    host: HostSpec
    weights: WeightFormat
    kv: KVFormat
    input_len: int = 512
    output_len: int = 32
    offload: str = "auto"
    gpu_layers: int | None = None  # llama.cpp split; None: search FlexGen placements
    batch: int | None = None  # sequences per block; None: search
    gpu_memory_utilization: float = 0.9
    # latency targets (None: throughput alone): a decode step of the block yields one token per
    # sequence, so it is the inter-token latency; the block's prefill precedes its first token
    max_itl_s: float | None = None
    max_ttft_s: float | None = None

    def __post_init__(self) -> None:
        require(self.offload in MODES, "offload", f"unknown mode {self.offload!r}", f"use one of {', '.join(MODES)}")
        require(self.input_len > 0 and self.output_len > 0, "input_len", "prompt and output lengths must be positive")
        require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", "must be in (0, 1]")
        if self.batch is not None:
            require(self.batch >= 1, "batch", f"must be a positive integer, got {self.batch}")
        for name in ("max_itl_s", "max_ttft_s"):
            value = getattr(self, name)
            require(value is None or value > 0, name, f"must be a positive number of seconds, got {value}")
        if self.gpu_layers is not None:
            L = self.model.num_layers
            require(
                0 <= self.gpu_layers <= L,
                "gpu_layers",
                f"must be in 0..{L} (the model's layers), got {self.gpu_layers}",
            )


@dataclass(frozen=True)
class Placement:
    """Fractions of the transformer layers' weights and of the KV cache on each tier."""

    weights_gpu: float
    weights_cpu: float
    weights_disk: float
    kv_gpu: float
    kv_cpu: float
    kv_disk: float = 0.0  # read back every decode step, attention on the CPU (FlexGen)
    gpu_layers: int | None = None  # set for a llama.cpp split (those layers also *run* on the GPU)


@dataclass(frozen=True)
class OffloadPlan:
    request: OffloadRequest
    placement: Placement
    batch: int
    # one decode step of the whole block (every layer), and what it is made of; overlap is what
    # prefetching hides: compute + pcie + disk + cpu - step
    step_s: float
    compute_s: float
    pcie_s: float
    disk_s: float
    cpu_s: float
    overlap_s: float
    prefill_s: float
    throughput: float  # generated tokens/s, prefill included (FlexGen's definition)
    decode_throughput: float  # tokens/s in the decode phase alone
    gpu_bytes: float
    cpu_bytes: float
    disk_bytes: float
    balanced_batch: float  # batch at which GPU compute equals the per-layer weight transfer
    by_batch: tuple[tuple[int, float], ...] = field(default=())  # best throughput at each batch searched
    gpu_batch: int = 0  # sequences per GPU batch; the block runs ceil(batch / gpu_batch) of them

    @property
    def per_token_s(self) -> float:
        return self.step_s / self.batch


@dataclass(frozen=True)
class _Shape:
    """Per-layer bytes and FLOPs the cost model needs, computed once per request."""

    layers: int
    layer_bytes: float  # weights of one transformer layer in the storage format
    edge_bytes: float  # embeddings and LM head (kept on the GPU)
    linear_flops: float  # per token and layer: 2 x matmul weights
    head_flops: float  # per token: the LM head
    kv_layer: float  # KV bytes one token adds to one layer
    attn_flops_per_ctx: float  # per token, layer and context token: QK^T and PV, 2 FLOPs each
    hidden: int
    act_per_token: float  # transient activation bytes of one layer per token (16-bit)


def _shape(m: ModelSpec, wf: WeightFormat, kf: KVFormat) -> _Shape:
    def size(ts) -> float:
        return sum(local_numel(t, 1) * tensor_bits(m, t, wf) / 8 for t in ts)

    L = m.num_layers
    layer = sum(size(layer_tensors(m, m.is_moe_layer(i))) for i in range(L)) / L
    pc = count_params(m)
    head_mm = m.vocab_size * (m.embed_proj_dim or m.hidden_size)
    linear = 2 * (pc.matmul_active - head_mm) / L
    return _Shape(
        layers=L,
        layer_bytes=layer,
        edge_bytes=size(embedding_tensors(m)) + size(head_tensors(m)),
        linear_flops=linear,
        head_flops=2 * head_mm,
        kv_layer=kv_bytes_per_token_layer(m, kf),
        attn_flops_per_ctx=4 * m.num_heads * m.head_dim,
        hidden=m.hidden_size,
        act_per_token=2 * (4 * m.hidden_size + 2 * m.ffn_size),
    )


def _rates(req: OffloadRequest) -> tuple[float, float]:
    """(achievable matmul FLOP/s, achievable HBM bytes/s) of the GPU."""
    g = req.gpu
    dtype = req.weights.compute if req.weights.compute in g.peak_flops else next(iter(g.peak_flops))
    eff = g.efficiency
    gemm = eff.gemm_fraction(dtype) if eff else _GEMM_EFF
    hbm = eff.hbm if eff else _HBM_EFF
    return g.peak(dtype) * gemm, g.hbm_bytes_per_s * hbm


def _gpu_batch(batch: int, gpu_batch: int | None) -> int:
    """Sequences per GPU batch: the one given (at most the block), else the block up to
    ``PREFILL_GPU_BATCH``."""
    return min(batch, gpu_batch) if gpu_batch else min(batch, PREFILL_GPU_BATCH)


def _memory(
    req: OffloadRequest, s: _Shape, p: Placement, batch: int, gpu_batch: int | None = None
) -> tuple[float, float, float]:
    """(GPU, CPU, disk) bytes: weights and KV where placed, plus the GPU's streaming buffers.

    Streaming the offloaded share needs the current and the next layer's offloaded weights on
    the GPU (FlexGen's double buffer, section 4.2); the prompt's activations on the GPU are one
    GPU batch's (module doc)."""
    W = s.layers * s.layer_bytes
    kv = batch * (req.input_len + req.output_len) * s.layers * s.kv_layer
    prefill_act = _gpu_batch(batch, gpu_batch) * req.input_len * s.act_per_token
    streamed = 1 - p.weights_gpu
    gpu = s.edge_bytes + p.weights_gpu * W + p.kv_gpu * kv + 2 * streamed * s.layer_bytes + prefill_act
    if p.gpu_layers is not None:  # llama.cpp: CPU layers never visit the GPU
        gpu -= 2 * streamed * s.layer_bytes
    return gpu, p.weights_cpu * W + p.kv_cpu * kv, p.weights_disk * W + p.kv_disk * kv


def _evaluate(req: OffloadRequest, s: _Shape, p: Placement, batch: int, gpu_batch: int | None = None) -> OffloadPlan:
    flops, hbm = _rates(req)
    gbs = _gpu_batch(batch, gpu_batch)
    reads = math.ceil(batch / gbs)  # GPU batches a layer runs, each reading its weights from HBM
    h = req.host
    pcie = h.pcie_per_gpu(1)
    cpu_bw, cpu_flops = h.cpu_memory_bytes_per_s, h.cpu_flops
    ctx = req.input_len + req.output_len / 2  # mean context over the decode phase
    L = s.layers
    head = max(batch * s.head_flops / flops, s.edge_bytes / 2 / hbm)
    if p.gpu_layers is not None:
        # llama.cpp: GPU layers at GPU rates, CPU layers at CPU rates, in sequence (no overlap)
        def layer_on(rate_f: float, rate_b: float) -> float:
            attn = batch * max(ctx * s.kv_layer / rate_b, ctx * s.attn_flops_per_ctx / rate_f)
            return max(batch * s.linear_flops / rate_f, s.layer_bytes / rate_b) + attn

        n = p.gpu_layers
        gpu_t, cpu_t = n * layer_on(flops, hbm), (L - n) * layer_on(cpu_flops, cpu_bw)
        hop = (2 * batch * s.hidden * 2 / pcie) if 0 < n < L else 0.0  # activations cross PCIe twice
        step = gpu_t + cpu_t + head + hop
        pf_gpu = n * max(batch * req.input_len * s.linear_flops / flops, s.layer_bytes / hbm)
        pf_cpu = (L - n) * max(batch * req.input_len * s.linear_flops / cpu_flops, s.layer_bytes / cpu_bw)
        prefill = pf_gpu + pf_cpu
        compute, pcie_t, disk_t, cpu_part, overlap = gpu_t + head, hop, 0.0, cpu_t, 0.0
    else:
        load = (p.weights_cpu + p.weights_disk) * s.layer_bytes
        ctog = load / pcie
        kv_off = p.kv_cpu + p.kv_disk  # the share whose attention the CPU computes
        # the disk share of the weights, and of the cache (all of it, every step), read into CPU memory
        disk_read = p.weights_disk * s.layer_bytes + p.kv_disk * batch * ctx * s.kv_layer
        dtoc = disk_read / h.disk_read_bytes_per_s if disk_read else 0.0
        ctod = p.kv_disk * batch * s.kv_layer / h.disk_write_bytes_per_s if p.kv_disk else 0.0
        # with CPU attention only q and the new k, v go down and the attention output comes back
        hop = (batch * 4 * s.hidden * 2 / pcie) if kv_off else 0.0
        gpu_c = max(batch * s.linear_flops / flops, reads * s.layer_bytes / hbm)
        gpu_c += p.kv_gpu * batch * max(ctx * s.kv_layer / hbm, ctx * s.attn_flops_per_ctx / flops)
        cpu_c = kv_off * batch * max(ctx * s.kv_layer / cpu_bw, ctx * s.attn_flops_per_ctx / cpu_flops)
        layer = ctog + hop + max(dtoc, ctod, gpu_c + cpu_c)  # cost_model.py's Tgen (module doc)
        step = L * layer + head
        compute, pcie_t, disk_t, cpu_part = L * gpu_c + head, L * (ctog + hop), L * (dtoc + ctod), L * cpu_c
        overlap = compute + pcie_t + disk_t + cpu_part - step
        # prefill: the same streaming, the prompt's tokens as the compute. The prompt's attention
        # runs on the GPU wherever its cache will live: q, k and v are all there when the layer
        # computes them (FlexGen's prefill cost ``compp`` is GPU matmul + GPU bmm only, CPU
        # delegation being a decode-phase choice: repository experimental/cost_model.py). The KV
        # written to the CPU goes up over PCIe (device-to-host, the other direction: it overlaps
        # the weight loads).
        tokens = batch * req.input_len
        pf_c = max(tokens * s.linear_flops / flops, reads * s.layer_bytes / hbm)
        pf_c += batch * req.input_len * req.input_len / 2 * s.attn_flops_per_ctx / flops
        pf_cpu = 0.0
        gtoc = kv_off * tokens * s.kv_layer / pcie
        # the prompt's cache for the disk share goes on to the disk; only the weights are read
        pf_dtoc = p.weights_disk * s.layer_bytes / h.disk_read_bytes_per_s if p.weights_disk else 0.0
        pf_ctod = p.kv_disk * tokens * s.kv_layer / h.disk_write_bytes_per_s if p.kv_disk else 0.0
        # cost_model.py's Tpre: a layer's disk share reaches the CPU before it crosses PCIe, and the
        # cache goes down before it goes on to disk
        prefill = L * max(ctog + pf_dtoc, gtoc + pf_ctod, pf_c + pf_cpu) + batch * s.head_flops / flops
    # the prefill yields the first token; the other n - 1 come from decode steps (FlexGen cost_model.py
    # ``T == Tpre * l + Tgen * (n-1) * l``, paper appendix A.3; flex_opt.py's decode loop i = 1..n-1)
    total = prefill + (req.output_len - 1) * step
    gpu_b, cpu_b, disk_b = _memory(req, s, p, batch, gbs)
    per_seq = s.linear_flops / flops
    transfer = max(
        (p.weights_cpu + p.weights_disk) * s.layer_bytes / pcie,
        p.weights_disk * s.layer_bytes / h.disk_read_bytes_per_s if p.weights_disk else 0.0,
    )
    return OffloadPlan(
        request=req,
        placement=p,
        batch=batch,
        step_s=step,
        compute_s=compute,
        pcie_s=pcie_t,
        disk_s=disk_t,
        cpu_s=cpu_part,
        overlap_s=overlap,
        prefill_s=prefill,
        throughput=batch * req.output_len / total,
        decode_throughput=batch / step,
        gpu_bytes=gpu_b,
        cpu_bytes=cpu_b,
        disk_bytes=disk_b,
        balanced_batch=transfer / per_seq,
        gpu_batch=gbs,
    )


def _fits(req: OffloadRequest, s: _Shape, p: Placement, batch: int, gpu_batch: int | None = None) -> bool:
    g, c, d = _memory(req, s, p, batch, gpu_batch)
    return (
        g <= req.gpu.memory_bytes * req.gpu_memory_utilization
        and c <= req.host.cpu_memory_bytes * CPU_USABLE
        and d <= req.host.disk_bytes
    )


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
            f"weights ({W / GB:.1f} GB) do not fit the GPU's {gpu_room / GB:.1f} GB with --offload {req.offload}",
            "use --offload auto or weights",
        )
    need_host = W + s.edge_bytes + kv1 - gpu_room
    if need_host > cpu_room + req.host.disk_bytes and req.host.disk_bytes > 0:
        return GpuplanError(
            "disk",
            f"{need_host / GB:.1f} GB must live off the GPU; CPU memory holds "
            f"{cpu_room / GB:.1f} GB and the disk only {req.host.disk_bytes / GB:.1f} GB",
            f"use --disk {(need_host - cpu_room) / 1e12 * 1.05:.2f}TB or more, or raise --cpu-memory",
        )
    if need_host > cpu_room + req.host.disk_bytes:
        short = need_host - req.host.disk_bytes
        return GpuplanError(
            "cpu_memory",
            f"{need_host / GB:.1f} GB must live off the GPU but CPU memory holds "
            f"{cpu_room / GB:.1f} GB and the disk {req.host.disk_bytes / GB:.1f} GB",
            f"raise --cpu-memory to at least {short / CPU_USABLE / GB:.0f}GB or add --disk "
            f"{(need_host - cpu_room) / 1e12:.2f}TB",
        )
    return GpuplanError(
        "gpu_memory",
        f"no placement fits {req.gpu.name}: embeddings, LM head and the streaming buffers alone exceed it",
        "use a larger GPU or a smaller --weights format",
    )


def evaluate_placement(
    req: OffloadRequest, placement: Placement, batch: int, gpu_batch: int | None = None
) -> OffloadPlan:
    """One given placement, block batch and GPU batch timed by the cost model, without the memory
    check: a published run's placement (FlexGen's ``--percent``, block and ``--gpu-batch-size``)
    fitted its machine whatever this model's memory estimate says, so validation times it as it
    ran."""
    for name in ("weights", "kv"):
        parts = [v for k, v in vars(placement).items() if k.startswith(name + "_")]
        require(
            all(x >= 0 for x in parts) and abs(sum(parts) - 1) < 1e-6,
            "placement",
            f"the {name} shares must be >= 0 and sum to 1, got {parts}",
        )
    require(batch >= 1, "batch", f"must be a positive integer, got {batch}")
    require(gpu_batch is None or gpu_batch >= 1, "gpu_batch", f"must be a positive integer, got {gpu_batch}")
    s = _shape(req.model, req.weights, req.kv)
    plan = _evaluate(req, s, placement, batch, gpu_batch)
    return _with_curve(plan, ((batch, plan.throughput),))


def plan_offload(req: OffloadRequest) -> OffloadPlan:
    """The placement and block batch that maximise generation throughput (FlexGen section 4.3's
    objective), or the given ``--gpu-layers`` split evaluated (llama.cpp).

    The block is searched in passes: the coarse ``BATCHES`` (carried on past 1,024 while the
    largest is the best and fits), then the blocks between the best one's neighbours (``_FINE`` of them, evenly spaced), then every block within a step of the best
    of those. Throughput climbs with the
    block while the weight transfer is amortised and falls once the cache crowds the weights off
    the GPU or onto slower tiers, so the best block sits at such a cliff, anywhere between two
    coarse points (FlexGen's own OPT-30B block is 144 = 48 x 3: its policy search enumerates GPU
    batch and count, section 4.3)."""
    s = _shape(req.model, req.weights, req.kv)
    if req.gpu_layers is not None:
        return _split(req, s)
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
    """No placement meets the latency targets: name the fastest one of a single sequence."""
    from dataclasses import replace

    fastest = plan_offload(replace(req, batch=1, max_itl_s=None, max_ttft_s=None))
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


def _with_curve(plan: OffloadPlan, curve: tuple[tuple[int, float], ...]) -> OffloadPlan:
    from dataclasses import replace

    return replace(plan, by_batch=curve)


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
            f"use --gpu-layers {most} or fewer",
        )
    cpu_room = req.host.cpu_memory_bytes * CPU_USABLE
    if c > cpu_room:
        raise GpuplanError(
            "cpu_memory",
            f"the {s.layers - n} CPU layers need {c / GB:.1f} GB, CPU memory holds {cpu_room / GB:.1f} GB usable",
            f"raise --cpu-memory to at least {c / CPU_USABLE / GB:.0f}GB or raise --gpu-layers",
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
