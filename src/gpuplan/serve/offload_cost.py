"""The cost of one offloaded placement: where weights and KV cache live (GPU, CPU, disk), the
bytes each tier holds and how fast a block of sequences decodes and prefills there.

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

The KV cache may also spill to disk (FlexGen's 175B runs keep all of it there): every decode step
reads a layer's whole disk-resident cache into CPU memory (``dtoc``, at the disk's read rate) and
writes the new token's K and V back (``ctod``, at its write rate), and the CPU computes attention
over it as over the CPU share. The disk's read and write are separate terms of the max, as in the
authors' cost model (FlexGen repository, experimental/cost_model.py, ``dtocg`` and ``ctodg``).

A llama.cpp split (``Placement.gpu_layers``) is timed here too, as llama.cpp runs it: GPU layers at
the GPU's rates, CPU layers at the CPU's, one after the other (offload.py's module doc).
The search over placements and blocks is offload_search.py; offload.py is the entry point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuplan.errors import require
from gpuplan.estimate.params import count_params, embedding_tensors, head_tensors, layer_tensors
from gpuplan.serve.formats import KVFormat, WeightFormat
from gpuplan.serve.kv import kv_bytes_per_token_layer
from gpuplan.serve.weights import local_numel, tensor_bits
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec

MODES = ("auto", "none", "weights", "kv")
# Defaults when the GPU has no efficiency file (validation hardware such as the T4): the median
# of the catalog's measured fractions (catalog/efficiency/*.toml)
_GEMM_EFF, _HBM_EFF = 0.7, 0.85
# Share of CPU memory an engine can pin: the OS and the process itself keep the rest (assumed)
CPU_USABLE = 0.9
# Sequences whose prefill runs at once when no GPU batch is given: FlexGen's GPU batch (its tables
# use 32-64), which bounds the activation working set on the GPU
PREFILL_GPU_BATCH = 32


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
            # the llama.cpp split places weights and KV by layer itself: a placement mode beside it
            # would be silently overridden
            require(
                self.offload == "auto",
                "gpu_layers",
                f"sets the split itself (llama.cpp -ngl), so `offload={self.offload}` would be ignored",
                "give one of `gpu_layers` and `offload`",
            )
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
    layer = sum(n * size(layer_tensors(m, *kind)) for kind, n in m.layer_kinds()) / L
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


def _with_curve(plan: OffloadPlan, curve: tuple[tuple[int, float], ...]) -> OffloadPlan:
    from dataclasses import replace

    return replace(plan, by_batch=curve)
