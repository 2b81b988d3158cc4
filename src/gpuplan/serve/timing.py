"""Time of one serving iteration: a batch of decode tokens and prefill tokens through the model.

Engines with continuous batching (Orca, Yu et al. 2022; vLLM; TensorRT-LLM in-flight batching)
run one forward pass per iteration over every running sequence's next token plus chunks of new
prompts. Its time on one GPU of the tensor-parallel group, summed over pipeline stages:

* GEMMs on a roofline (estimate/kernels.py): the weights are read once per iteration, so few tokens are
  bandwidth-bound and many are compute-bound; fp8/int8 W8A8 formats run at the 8-bit peak.
  Weight-only formats (AWQ, GPTQ, NF4, GGUF) read fewer bytes but unpack every weight to 16 bits
  on the CUDA cores, once per 64-token tile of rows (Marlin, Frantar et al. 2024; AWQ's GEMM
  kernels): the "unpacking tax" that makes them slower than 16-bit once a batch is compute-bound.
  MoE layers read only the experts the batch's tokens touch: E (1 - (1 - k/E)^T) of E. Fewer
  than 64 rows run as split-K/GEMV kernels padded to 16 rows (TensorRT-LLM's and vLLM's small-M
  kernels) rather than as 64-row tiles. A memory-bound GEMM also pays a fixed time the bytes do
  not explain (pipeline fill, drain, split-K's reduction: ``decode_gemm_latency_s``, measured on
  H100 and H200 decode GEMMs, scripts/fit_decode.py). The routed experts' grouped GEMM reads its
  weights at no more than its own measured rate (``grouped_decode_bytes_per_s``: the bytes its
  kernels keep in flight per SM bound it, so an H200's faster HBM buys it little) and pays its own
  fixed time.
* Attention: decode reads each sequence's KV cache (memory-bound, FlashDecoding/PagedAttention);
  prefill runs FlashAttention over the prompt (kernels.flash_time).
* Norms, residual adds, rotary and activations: bytes over HBM bandwidth.
* Tensor parallelism: two all-reduces of the activations per layer (Megatron-LM, Shoeybi et al.
  2019), one for parallel attention+MLP blocks, timed at their small sizes by allreduce.py (NCCL's
  ring protocols, or the engine's one-/two-shot kernels); pipeline parallelism: one send per stage
  boundary.
* LM head on the sequences that sample this iteration, the logits gathered over TP, and sampling.
* With an engine profile (engines.py): the host time (scheduling, input preparation, output
  processing) the engine does not hide behind the GPU. (Its API server, which streams the tokens
  beside the engine, paces what serve-sim and the steady state see: engines.py
  ``frontend_s_per_token``.)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.errors import require
from gpuplan.estimate.comm import collective_time, efficiency, place
from gpuplan.estimate.compute import _local_gemm, linear_scan_times
from gpuplan.estimate.flops import indexer_flops_per_key, linear_attention_flops_per_token, mla_absorbed_width
from gpuplan.estimate.kernels import flash_time, gemm_compute_time, memory_time, row_tiles
from gpuplan.estimate.params import embedding_tensors, head_tensors, layer_tensors
from gpuplan.serve.allreduce import tp_allreduce
from gpuplan.serve.engines import Engine
from gpuplan.serve.formats import KVFormat, WeightFormat
from gpuplan.serve.kv import (
    attended_tokens,
    attention_bytes_per_token_layer,
    cached_tokens,
    index_bytes_per_token_layer,
    kv_heads_per_gpu,
    state_bytes_per_layer,
)
from gpuplan.serve.weights import tensor_bits, tensor_tp
from gpuplan.specs import validity
from gpuplan.specs.hardware import GPUSpec, for_job
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan

SKINNY_ROWS = 64  # below this many token rows, decode GEMMs run as split-K/GEMV kernels
DEQUANT_ROWS = 64  # token rows per GEMM tile: weights are unpacked again for every 64 rows
DEQUANT_OPS = {True: 4.0, False: 2.0}  # CUDA-core instructions per weight: sub-byte (unpack, convert,
# zero, scale) or 8-bit (convert, scale)


def touched_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts ``tokens`` tokens pick on average when each picks ``top_k`` of ``experts``
    uniformly: E (1 - (1 - k/E)^T), the experts whose weights a routed GEMM reads."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class Deployment:
    """One model replica: a model on tp x pp GPUs in a weight and a KV-cache format."""

    model: ModelSpec
    gpu: GPUSpec
    weights: WeightFormat
    kv: KVFormat
    tp: int = 1
    pp: int = 1
    dp_attention: bool = False  # SGLang --enable-dp-attention: attention data-parallel over the TP ranks

    def __post_init__(self) -> None:
        m = self.model
        # SGLang's DP attention is for MLA models (DeepSeek), whose latent KV TP cannot split
        require(
            not self.dp_attention or m.is_mla,
            "dp_attention",
            f"{m.name} has no multi-head latent attention: TP already splits its KV heads",
            "drop `dp_attention`, or serve an MLA model (DeepSeek-V2/V3, Kimi-K2)",
        )
        require(isinstance(self.tp, int) and self.tp >= 1, "tp", f"must be a positive integer, got {self.tp!r}")
        require(isinstance(self.pp, int) and self.pp >= 1, "pp", f"must be a positive integer, got {self.pp!r}")
        validity.require_serving(m, self.tp, self.pp)  # heads over tp, KV heads split or replicated, pp
        # a replica on one GPU waits for no other: its own clock (specs/hardware.py for_job)
        object.__setattr__(self, "gpu", for_job(self.gpu, self.gpus))

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def kv_groups(self) -> int:
        """Ranks whose KV pools hold different sequences: each DP-attention rank caches only its
        own requests' latent, where TP ranks all hold the same replicated latent."""
        return self.tp if self.dp_attention else 1

    @property
    def dtype16(self) -> str:
        """The 16-bit dtype of what stays unquantised."""
        return (
            self.weights.compute
            if self.weights.compute in ("bf16", "fp16")
            else ("bf16" if "bf16" in self.gpu.peak_flops else "fp16")
        )


@dataclass(frozen=True)
class Iteration:
    seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # seconds by kind, summing to ``seconds``


class StepModel:
    """Iteration times of one deployment under one engine (None: GPU time alone); GEMM times are
    cached by the number of token rows."""

    def __init__(self, d: Deployment, engine: Engine | None = None):
        self.d = d
        self.engine = engine
        m, gpu = d.model, d.gpu
        self.eff = e = efficiency(gpu)
        self.hbm = gpu.hbm_bytes_per_s * e.hbm
        self.overhead = e.kernel_overhead_s
        # a memory-bound GEMM's fixed time (pipeline fill, drain, split-K reduction), where measured
        self.gemm_latency = e.decode_gemm_latency_s if e.decode_gemm_latency_s is not None else e.kernel_overhead_s
        # the routed experts' grouped GEMMs: their own most bytes/s and fixed time, where measured
        self.grouped_hbm = min(self.hbm, e.grouped_decode_bytes_per_s or self.hbm)
        self.grouped_latency = (
            e.grouped_decode_latency_s if e.grouped_decode_latency_s is not None else self.gemm_latency
        )
        # activations quantised for the GEMM: 1 byte (fp8/int8), 4 bits + an FP8 scale per 16 (fp4)
        self.act_bytes = {"fp8": 1.0, "int8": 1.0, "fp4": 0.5 + 1 / 16}.get(d.weights.compute, 2.0)
        self.kinds = m.layer_kinds()  # (kind, layers): dense or MoE MLP, softmax or linear attention
        self.state_layer = state_bytes_per_layer(m, d.tp)  # a linear layer's state per sequence
        groups = place(ParallelPlan(tp=d.tp, pp=d.pp), gpu)
        self.tp_group, self.pp_group = groups["tp"], groups["pp"]
        # DSA: the latent a decode step reads for its top-k, and the indexer key it reads for all
        self.index_token_layer = index_bytes_per_token_layer(m)
        self.kv_token_layer = attention_bytes_per_token_layer(m, d.kv, d.tp)
        self.heads = m.num_heads // (1 if d.dp_attention else d.tp)  # query heads this GPU attends with
        self.kv_heads = kv_heads_per_gpu(m, d.tp)
        # a decode step's attention FLOPs run at the fused kernel's forward rate
        self.decode_rate = gpu.peak(d.dtype16) * e.attention_fractions("fa3")[0]
        # times a decode step reads each cached KV head (engines.py Engine.kv_reads_per_kv_head):
        # more than once only in the engines whose decode kernel runs a block per query head
        self.kv_reads = 1.0 if engine is None or m.is_mla else engine.kv_reads_per_kv_head(self.heads, self.kv_heads)
        # per-head query/key and value widths of the attention kernels. Prefill runs MLA
        # unabsorbed, as multi-head attention over keys and values up-projected from the latent
        # (192 + 128 for DeepSeek-V3): vLLM's "compute friendly approach" for prefill
        # (vllm/v1/attention/backends/mla/common.py), SGLang's forward_normal, TensorRT-LLM's
        # context-phase FMHA. Decode runs it absorbed: scores over the latent + rotary key, values
        # from the latent (512 + 64 + 512), reading only the latent. DeepSeek Sparse Attention runs
        # absorbed in prefill too: "we instantiate DSA based on the MQA mode of MLA" (DeepSeek-V3.2-Exp
        # report, section 2.1; FlashMLA's sparse prefill kernel attends over the latent)
        unabsorbed = m.qk_head_dim + m.v_dim
        self.attn_dims = mla_absorbed_width(m) if m.is_mla else unabsorbed
        self.prefill_attn_dims = self.attn_dims if m.index_heads else unabsorbed
        # CUDA-core instruction rate for dequantisation (FMA = 2 FLOPs)
        self.alu = gpu.peak_flops.get("fp32", gpu.peak(d.dtype16) / 16) / 2
        # the dtype the prefill attention's GEMMs run in: FP8 under an engine that runs its context
        # FMHA in FP8 over an FP8 KV cache (engines.py Engine.prefill_attention_dtype), else 16 bits
        self.prefill_attention_dtype = (
            d.dtype16 if engine is None else engine.prefill_attention_dtype(d.kv.name, d.dtype16, gpu)
        )
        self._gemm_cache: dict[tuple[int, bool, bool], tuple[float, float]] = {}
        self._head_cache: dict[int, float] = {}
        self._decode_rest: dict[float, float] = {}  # a decode step's time but its attention, by batch

    # -- GEMMs ----------------------------------------------------------------------------------
    def _matmul(self, t, rows: float) -> tuple[float, float]:
        """(seconds, of which exposed unpacking) of one weight's GEMM over ``rows`` tokens."""
        d, m, gpu = self.d, self.d.model, self.d.gpu
        experts, n_out, n_in = _local_gemm(t, tensor_tp(t, d.tp, d.dp_attention), 1)
        bits = tensor_bits(m, t, d.weights)
        quantised = bits < 16
        dtype = d.weights.compute if quantised else d.dtype16
        if t.expert:  # routed experts: only the ones some token picked are read
            k, n_e = m.experts_per_token, m.num_experts
            touched = touched_experts(n_e, k, rows)
            per_rows = rows * k / touched
        else:
            touched, per_rows = float(experts), rows
        # routed experts' row counts differ expert to expert around ``per_rows``: each pays its own
        # last part-filled tile (kernels.row_tiles, measured on an H100's grouped GEMMs)
        ragged = bool(t.expert)
        if per_rows < SKINNY_ROWS:
            # few rows: split-K / GEMV kernels keep every SM busy and pad rows only to the 16-row
            # MMA shape (mma.m16n8k16), not to a 64-row tile
            rate = gpu.peak(dtype) * self.eff.gemm_fraction(dtype) * self.eff.sustained
            compute = 2.0 * 16 * row_tiles(per_rows, 16, ragged) * n_out * n_in * touched / rate
        else:
            compute = gemm_compute_time(gpu, dtype, per_rows, n_out, n_in, touched, ragged)
        unpack = 0.0
        if quantised and d.weights.weight_only:
            # each 64-row tile unpacks the weights again; routed experts' counts differ around the
            # mean, each paying its own last tile (row_tiles), as their MMAs do
            passes = (
                row_tiles(per_rows, DEQUANT_ROWS, ragged)
                if per_rows >= SKINNY_ROWS
                else math.ceil(per_rows / DEQUANT_ROWS)
            )
            unpack = passes * touched * n_out * n_in * DEQUANT_OPS[bits < 8] / self.alu
        act = self.act_bytes if quantised else 2.0
        rows_in = rows * (m.experts_per_token if t.expert else 1)  # each routed copy is read and written
        io = touched * n_out * n_in * bits / 8 + act * rows_in * n_in + 2.0 * rows_in * n_out
        memory = io / (self.grouped_hbm if t.expert else self.hbm)
        total = max(compute + unpack, memory)
        latency = self.grouped_latency if t.expert else self.gemm_latency
        fixed = latency if memory >= compute + unpack else self.overhead
        return total + fixed, total - max(compute, memory)  # the unpacking that shows

    def gemms(self, rows: int, moe: bool, linear: bool = False) -> tuple[float, float]:
        """(seconds, exposed unpacking seconds) of one layer's weight GEMMs over ``rows`` tokens."""
        key = (rows, moe, linear)
        if key not in self._gemm_cache:
            total = unpack = 0.0
            own = math.ceil(rows / self.d.kv_groups)  # with DP attention, this rank's own tokens
            for t in layer_tensors(self.d.model, moe, linear):
                if t.matmul and len(t.shape) >= 2:
                    s, u = self._matmul(t, own if self.d.dp_attention and t.name.startswith("attn.") else rows)
                    total += s
                    unpack += u
            self._gemm_cache[key] = (total, unpack)
        return self._gemm_cache[key]

    def _head_gemm(self, sampled: int) -> float:
        """Seconds of the LM head's GEMM over the ``sampled`` rows (cached by rows)."""
        if sampled not in self._head_cache:
            m = self.d.model
            self._head_cache[sampled] = sum(
                self._matmul(t, sampled)[0]
                for t in head_tensors(m) + tuple(embedding_tensors(m))
                if t.name == "lm_head" or (t.name == "embed.tokens" and m.tied_embeddings)
            )
        return self._head_cache[sampled]

    # -- one iteration --------------------------------------------------------------------------
    def iteration(
        self,
        decode: float,
        prefill: float = 0.0,
        decode_context: float = 0.0,
        prefill_context: float = 0.0,
        prefill_seqs: float = 0.0,
    ) -> Iteration:
        """``decode`` sequences each add one token at ``decode_context`` tokens of context;
        ``prefill`` prompt tokens (of ``prefill_seqs`` prompts that finish here) attend to
        ``prefill_context`` tokens on average (half the prompt for whole prompts)."""
        d, m, gpu = self.d, self.d.model, self.d.gpu
        rows = max(1, math.ceil(decode + prefill))
        h = m.hidden_size
        parts: dict[str, float] = {}
        gemm = unpack = 0.0
        for (moe, linear), n in self.kinds:
            s, u = self.gemms(rows, moe, linear)
            gemm += n * s
            unpack += n * u
        parts["gemm"] = gemm - unpack
        parts["unpack"] = unpack

        # attention: decode reads the cache; prefill is a flash kernel over the prompt
        attn = 0.0
        if decode:
            attn += float(self.decode_attention(decode, decode_context))
        if prefill:
            ctx = attended_tokens(m, prefill_context) / m.num_layers
            flops = self.prefill_attention_flops(prefill, ctx)
            fwd, _ = flash_time(gpu, self.prefill_attention_dtype, flops, max(1.0, 2 * prefill_context))
            attn += m.num_layers * fwd
            if m.index_heads:  # DSA's indexer over every earlier key of the prompt
                held = cached_tokens(m, prefill_context) / m.num_layers
                flops = prefill / d.kv_groups * indexer_flops_per_key(m) * held
                fwd, _ = flash_time(gpu, self.prefill_attention_dtype, flops, max(1.0, 2 * prefill_context))
                attn += m.num_layers * fwd
            if m.linear_layers:  # the linear layers' chunked scan over the prompt tokens
                heads = m.linear_v_heads / d.tp
                longest = max(1, math.ceil(2 * prefill_context))  # a whole prompt's chunks, one after another
                fwd, _ = linear_scan_times(m, gpu, prefill * heads, longest, 2, d.dtype16)
                attn += m.num_linear_layers * fwd
        parts["attention"] = attn

        # elementwise: norms, residual adds, rotary, MLP activation (per layer, on all rows)
        a = 2.0
        norms = m.pre_norms_per_layer + m.post_norms_per_layer
        adds = 1 if m.parallel_attn else 2
        width = (m.moe_ffn_size * m.experts_per_token + m.shared_expert_ffn_size) if m.is_moe else m.ffn_size
        per_row = (norms * 2 + adds * 3) * a * h + (3 if m.gated_mlp else 2) * a * width / d.tp
        if m.rotary:
            per_row += 2 * a * (self.heads + self.kv_heads) * m.qk_head_dim
        parts["elementwise"] = m.num_layers * memory_time(gpu, rows * per_row, norms + adds + 2)

        # communication: TP all-reduces per layer; PP sends between stages
        comm = 0.0
        if d.tp > 1:  # latency-bound at decode sizes: NCCL's ring or the engine's custom kernel
            # DP attention: no all-reduce after attention; the MLP/MoE's tokens are gathered from
            # and scattered back to their ranks, the bytes and steps of about one all-reduce
            per_layer = 1 if m.parallel_attn or d.dp_attention else 2
            policy = self.engine.allreduce if self.engine is not None else "nccl"
            t_ar, _ = tp_allreduce(rows * h * a, self.tp_group, gpu, policy, rows)
            comm += m.num_layers * per_layer * t_ar
        if d.pp > 1:
            comm += (d.pp - 1) * collective_time("p2p", rows * h * a, self.pp_group, gpu)
        parts["communication"] = comm

        # embedding lookup, LM head on the sampled rows, logits gathered over TP, sampling
        sampled = max(1, math.ceil(decode + prefill_seqs))
        head = memory_time(gpu, 2 * rows * h * a) + self._head_gemm(sampled)
        vocab = m.vocab_size
        if d.tp > 1:
            head += collective_time("all-gather", sampled * vocab * a, self.tp_group, gpu)
        head += memory_time(gpu, sampled * vocab * 4 * 3, 3)  # fp32 logits: softmax, top-k/p, sample
        parts["head_and_sampling"] = head
        gpu_s = sum(parts.values())
        if self.engine is not None:
            parts["host"] = self.engine.exposed_host_s(gpu_s, decode + prefill_seqs)
        return Iteration(sum(parts.values()), parts)

    def prefill_attention_flops(self, prefill: float, context: float) -> float:
        """FLOPs of one softmax-attention layer's prefill kernel on one GPU: ``prefill`` query
        tokens each scoring ``context`` keys and summing as many values (QK^T and PV, 2 FLOPs per
        multiply-add; FlashAttention, Dao et al. 2022), over this GPU's query heads (DP attention:
        its own tokens only) at the prefill's per-head widths."""
        return 2.0 * prefill / self.d.kv_groups * self.heads * self.prefill_attn_dims * context

    def decode_attention(self, decode: float, context: Any) -> Any:
        """Seconds of one decode step's attention for ``decode`` sequences at ``context`` tokens (a
        number or a numpy array of them): the cache it reads (all of it, or DSA's top-k latents
        and every indexer key) at HBM speed, or its FLOPs at the attention kernel's rate."""
        d, m = self.d, self.d.model
        mine = decode / d.kv_groups  # DP attention: each rank attends for its own sequences
        read = attended_tokens(m, context)
        kv_bytes = mine * read * self.kv_token_layer * self.kv_reads
        flops = 2.0 * mine * self.heads * self.attn_dims * read
        if m.index_heads:  # the indexer scores every cached key (flops.indexer_flops_per_token)
            held = cached_tokens(m, context)
            kv_bytes = kv_bytes + mine * held * self.index_token_layer
            flops = flops + mine * indexer_flops_per_key(m) * held
        if m.linear_layers:  # each linear layer reads and writes its sequences' states (a recurrent step)
            kv_bytes = kv_bytes + mine * m.num_linear_layers * 2 * self.state_layer
            flops = flops + mine * m.num_linear_layers * linear_attention_flops_per_token(m, decode=True) / d.tp
        seconds = np.maximum(kv_bytes / self.hbm, flops / self.decode_rate) + m.num_layers * self.overhead
        return seconds if isinstance(context, np.ndarray) else float(seconds)

    def decode_step(self, batch: float, context: float) -> Iteration:
        return self.iteration(decode=batch, decode_context=context)

    def decode_times(self, batch: float, context: float, steps: int) -> np.ndarray:
        """Seconds of ``steps`` consecutive decode-only iterations of ``batch`` sequences, the
        first at ``context`` tokens, each one token longer: what ``decode_step`` gives for each,
        computed at once. Only the attention term reads the context: the step is the rest, from
        one call at no context, plus ``decode_attention`` over the contexts as an array; the
        engine's host time is added per step as ``iteration`` does."""
        if batch not in self._decode_rest:
            at0 = self.iteration(decode=batch, decode_context=0.0)
            rest = at0.seconds - at0.parts.get("host", 0.0) - float(self.decode_attention(batch, 0.0))
            self._decode_rest[batch] = rest
        rest = self._decode_rest[batch]
        ctx = context + np.arange(steps, dtype=float)
        t = rest + self.decode_attention(batch, ctx)
        if self.engine is not None:
            host = self.engine.host_s(batch)
            t = t + (np.maximum(0.0, host - t) if self.engine.overlap else host)
        return t

    def prefill(self, tokens: float, chunk: int) -> Iteration:
        """One prompt of ``tokens`` prefilled alone in chunks of at most ``chunk`` tokens."""
        total, done = 0.0, 0.0
        parts: dict[str, float] = {}
        while done < tokens:
            n = min(chunk, tokens - done)
            it = self.iteration(
                decode=0, prefill=n, prefill_context=done + n / 2, prefill_seqs=1 if done + n >= tokens else 0
            )
            total += it.seconds
            for k, v in it.parts.items():
                parts[k] = parts.get(k, 0.0) + v
            done += n
        return Iteration(total, parts)


@functools.lru_cache(maxsize=64)  # keyed on the whole deployment (model, GPU with its efficiency, formats, tp, pp)
def step_model(d: Deployment, engine: Engine | None = None) -> StepModel:
    return StepModel(d, engine if engine is not None and engine.name != "generic" else None)
