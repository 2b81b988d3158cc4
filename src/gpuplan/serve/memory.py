"""Serving memory on one GPU: weights, the paged KV pool, peak activations, and what is left over.

The budget follows vLLM (``gpu_memory_utilization``, vllm/v1/worker/gpu_worker.py
``determine_available_memory``): the engine may use ``total x utilization``; from it go the
weights, the peak activations of a profiling forward pass over the batched-token budget
(``max_num_batched_tokens``), and memory outside PyTorch's allocator (CUDA context, NCCL buffers,
CUDA graphs); what remains is the KV cache, cut into blocks of ``block_size`` tokens
(PagedAttention, Kwon et al. 2023). A sequence holds ceil(tokens / block_size) blocks per layer
group, so paging wastes less than one block per sequence, where contiguous pre-allocation
(FasterTransformer, Hugging Face static caches) reserves the maximum length for every sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuplan.errors import require
from gpuplan.estimate.memory import layers_per_stage
from gpuplan.serve.engines import engine
from gpuplan.serve.kv import kv_bytes_per_token_layer, state_bytes_per_layer
from gpuplan.serve.timing import Deployment
from gpuplan.serve.weights import weight_bytes_per_gpu
from gpuplan.specs.model import ModelSpec
from gpuplan.units import GiB

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class ServeConfig:
    """Engine settings (vLLM names)."""

    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    max_batched_tokens: int = 8192  # tokens per iteration (chunked prefill budget)
    max_num_seqs: int | None = None  # sequences per iteration; None: as many as memory allows
    max_model_len: int | None = None  # longest context; default the model's maximum
    context_bytes: float = 0.5 * GiB  # CUDA context, cuBLAS workspaces
    cuda_graph_bytes: float = 0.5 * GiB  # captured decode graphs (vLLM logs 0.3-1 GiB for 7-70B models)
    nccl_bytes: float = 0.25 * GiB  # NCCL and custom all-reduce buffers, with tp or pp > 1
    engine: str = "generic"  # engines.py: memory accounting and host time per iteration

    def __post_init__(self) -> None:
        require(
            0 < self.gpu_memory_utilization <= 1,
            "gpu_memory_utilization",
            f"must be in (0, 1], got {self.gpu_memory_utilization}",
        )
        require(
            isinstance(self.block_size, int) and self.block_size >= 1,
            "block_size",
            f"must be a positive integer, got {self.block_size!r}",
        )
        # the block sizes vLLM's paged attention kernels take (CacheConfig.block_size)
        require(
            self.block_size in BLOCK_SIZES,
            "block_size",
            f"paged KV caches take blocks of {', '.join(map(str, BLOCK_SIZES))} tokens, not {self.block_size}",
            "use one of those (vLLM's default is 16, TensorRT-LLM's 64, SGLang's 1)",
        )
        require(self.max_batched_tokens >= 1, "max_batched_tokens", "must be positive")
        require(self.max_num_seqs is None or self.max_num_seqs >= 1, "max_num_seqs", "must be positive")
        # vLLM refuses this too (SchedulerConfig): a budget below the sequences it may run starves decoders
        require(
            self.max_num_seqs is None or self.max_batched_tokens >= self.max_num_seqs,
            "max_batched_tokens",
            f"{self.max_batched_tokens} tokens per iteration is fewer than `max_num_seqs={self.max_num_seqs}`",
            f"use `max_batched_tokens` >= {self.max_num_seqs} (vLLM's default is 8192) or a smaller `max_num_seqs`",
        )
        for name in ("context_bytes", "cuda_graph_bytes", "nccl_bytes"):
            require(getattr(self, name) >= 0, name, "must not be negative")
        engine(self.engine)  # a known profile, or a one-line error naming the choices


@dataclass(frozen=True)
class ServeMemory:
    """Bytes on the most loaded GPU of the group."""

    capacity: float
    budget: float  # capacity x utilization
    weights: float
    activations: float
    other: float
    kv_pool: float  # what is left for the KV cache (negative: does not fit)
    kv_block_bytes: float  # one block of block_size tokens over this GPU's layers
    layers: int  # layers on this GPU
    kv_groups: int = 1  # GPUs whose pools hold different sequences (DP attention: the TP ranks)

    @property
    def total(self) -> float:
        return self.weights + self.activations + self.other + max(0.0, self.kv_pool)

    @property
    def fits(self) -> bool:
        return self.kv_pool > 0


def activation_peak(d: Deployment, cfg: ServeConfig) -> float:
    """Peak activations of the engine's profiling pass on one GPU: the larger of its two phases
    (``activation_phases``), which never hold memory at the same time."""
    return max(activation_phases(d, cfg))


def sampled_rows(cfg: ServeConfig) -> int:
    """Rows the profiling pass samples: max_num_seqs (vLLM's default 256), at most the batch."""
    return min(cfg.max_num_seqs or 256, cfg.max_batched_tokens)


def activation_phases(d: Deployment, cfg: ServeConfig) -> tuple[float, float]:
    """(forward, sampler) bytes of the engine's profiling pass on one GPU.

    * The forward over ``max_batched_tokens`` tokens: the residual stream and its normed copy, plus
      the widest intermediate (fused QKV and attention output, or gate+up and the activated MLP).
    * The sampler over the sampled sequences: their logits and what the engine's sampler holds per
      logit (fp32 logits and one working copy, or the engine's: engines.py), beside the forward's
      output hidden states, which are all that survive the forward.

    The engines run them one after the other: vLLM's ``profile_run`` runs the model
    (``_dummy_run``) and then the sampler (``_dummy_sampler_run``) on its output
    (vllm/v1/worker/gpu_model_runner.py; V0's ``execute_model`` computes the logits and samples
    after the forward too), and the forward's intermediates are freed layer by layer under
    inference mode, so the measured peak is the larger phase, not their sum. vLLM 0.6.4's log shows
    it (issue #10517, Llama-3.1-8B on an RTX 3090): the peak grew by 0.92 GiB from 20,000 to 29,000
    profiled tokens, exactly the forward term's 102,400 B a token, and stood only 0.16 GiB above
    that term, where the sampler's own 0.7 GiB would have shown in a sum."""
    m = d.model
    t = cfg.max_batched_tokens
    a = 2.0
    h = m.hidden_size
    q = 2 * m.q_size if m.attn_output_gate else m.q_size  # Qwen3-Next's q_proj projects the gate too
    attn = (q + 2 * m.num_kv_heads * m.head_dim + m.num_heads * m.v_dim) / d.tp
    if m.linear_layers:  # a linear-attention layer's input projection and its output
        attn = max(attn, (m.linear_in_proj_width + m.linear_v_heads * m.linear_v_dim) / d.tp)
    mlp = (3 if m.gated_mlp else 2) * m.ffn_size / d.tp
    if m.is_moe:  # each token's routed copies through its experts' MLPs
        mlp = max(mlp, m.experts_per_token * (h + (3 if m.gated_mlp else 2) * m.moe_ffn_size / d.tp))
    forward = t * a * (2 * h + max(attn, mlp))
    sampler = t * a * h + sampled_rows(cfg) * m.vocab_size * engine(cfg.engine).sampler_bytes_per_logit
    return forward, sampler


def kv_pool_bytes(
    rule: str, total: float, fraction: float, weights: float, act: float, other: float, context: float
) -> float:
    """The KV pool under an engine's memory rule (engines.py, each rule's source there)."""
    if rule == "free":  # TensorRT-LLM: a fraction of what is free after the profiled peak
        return fraction * (total - weights - act - other)
    if rule == "static":  # SGLang: weights and pool in the fraction; activations and graphs outside it
        return total * fraction - weights - context
    return total * fraction - weights - act - other  # vLLM: a fraction of the total, less the peak


def serve_memory(d: Deployment, cfg: ServeConfig) -> ServeMemory:
    layers = max(layers_per_stage(d.model.num_layers, d.pp))
    weights = weight_bytes_per_gpu(d.model, d.weights, d.tp, d.pp, d.dp_attention)
    other = cfg.context_bytes + cfg.cuda_graph_bytes + (cfg.nccl_bytes if d.gpus > 1 else 0.0)
    act = activation_peak(d, cfg)
    total = d.gpu.memory_bytes
    rule = engine(cfg.engine).memory_rule
    pool = kv_pool_bytes(rule, total, cfg.gpu_memory_utilization, weights, act, other, cfg.context_bytes)
    # a block spans the stage's softmax layers (a hybrid's linear layers hold states, not blocks)
    attention_layers = layers * d.model.num_attention_layers / d.model.num_layers
    block = block_tokens(d, cfg) * attention_layers * kv_bytes_per_token_layer(d.model, d.kv, d.tp)
    return ServeMemory(
        capacity=total,
        budget=weights + act + other + pool if rule != "total" else total * cfg.gpu_memory_utilization,
        weights=weights,
        activations=act,
        other=other,
        kv_pool=pool,
        kv_block_bytes=block,
        layers=layers,
        kv_groups=d.kv_groups,
    )


def context_limit(m: ModelSpec, cfg: ServeConfig) -> int:
    """The longest request the engine serves: ``max_model_len``, or the model's maximum context.
    A ``max_model_len`` beyond the model's is refused as vLLM refuses it (vllm/config ModelConfig
    ``get_and_verify_max_len``: "User-specified max_model_len is greater than the derived
    max_model_len" unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set; the config's
    max_position_embeddings already counts its rope scaling, as Llama 3.1's 131072 does)."""
    most = m.max_position_embeddings
    require(
        cfg.max_model_len is None or cfg.max_model_len <= most,
        "max_model_len",
        f"{cfg.max_model_len} tokens is longer than {m.name}'s maximum context of {most}",
        f"use `max_model_len` <= {most}",
    )
    return cfg.max_model_len or most


def kv_blocks(m: ModelSpec, bs: int) -> Callable[[Any], Any]:
    """Blocks (all-layer units) a sequence of ``tokens`` cached tokens holds, for numbers or arrays:
    ceil(tokens / bs), and on a model with sliding-window layers those layers' share at most the
    window's blocks (vLLM's hybrid KV cache manager frees a sliding layer's blocks that fall out of
    the window). Integers stay integers on a model without sliding layers (serve-sim's blocks)."""

    def full(tokens):
        return -(-tokens // bs)

    if not m.num_sliding_layers:
        return full
    assert m.sliding_window is not None  # ModelSpec: sliding layers come with a window
    window = math.ceil((m.sliding_window - 1) / bs) + 1
    frac = m.num_sliding_layers / m.num_attention_layers

    def hybrid(tokens):
        f = full(tokens)
        return (1 - frac) * f + frac * np.minimum(f, window)

    return hybrid


def blocks_per_sequence(d: Deployment, cfg: ServeConfig, context: float) -> float:
    """Blocks one sequence of ``context`` tokens holds, in units of all-layer blocks (``kv_blocks``):
    full layers hold ceil(context / block) blocks, sliding-window layers at most the window's; a
    hybrid's linear-attention states count as the blocks of their bytes."""
    return float(kv_blocks(d.model, block_tokens(d, cfg))(context)) + state_blocks(d, cfg)


def block_tokens(d: Deployment, cfg: ServeConfig) -> int:
    """Tokens per KV block: ``block_size``, or on a hybrid model under an engine that pages its
    linear-attention states with the KV (``Engine.state_pages``: vLLM V1) the attention block
    enlarged until one layer's page holds one layer's state: 16 x cdiv(state, 16 x the layer's
    KV bytes per token) (vllm/model_executor/models/config.py, HybridAttentionMambaModelConfig:
    "Setting attention block size to %d tokens to ensure that attention page size is >= mamba
    page size"). Qwen3-Next on 4 GPUs in 16 bits: 272 tokens."""
    m = d.model
    if not m.linear_layers or not engine(cfg.engine).state_pages:
        return cfg.block_size
    per_token = kv_bytes_per_token_layer(m, d.kv, d.tp)
    aligned = 16 * math.ceil(state_bytes_per_layer(m, d.tp) / (16 * per_token))
    return max(cfg.block_size, aligned)


def state_blocks(d: Deployment, cfg: ServeConfig) -> float:
    """A sequence's linear-attention states (kv.state_bytes_per_layer) in all-layer KV blocks: their
    bytes, or where the engine pages them (``block_tokens``) one padded page per linear layer, which
    is num_linear / num_attention all-layer blocks (vLLM pads the state's page to the attention
    page: "Padding mamba page size by %.2f%%")."""
    m = d.model
    if not m.linear_layers:
        return 0.0
    if engine(cfg.engine).state_pages:
        return m.num_linear_layers / m.num_attention_layers
    block = block_tokens(d, cfg) * m.num_attention_layers * kv_bytes_per_token_layer(m, d.kv, d.tp)
    return m.num_linear_layers * state_bytes_per_layer(m, d.tp) / block


def max_concurrency(mem: ServeMemory, d: Deployment, cfg: ServeConfig, context: float) -> int:
    """Sequences of ``context`` tokens whose blocks fit in the pool at once."""
    if mem.kv_pool <= 0:
        return 0
    return int(mem.kv_pool // (blocks_per_sequence(d, cfg, context) * mem.kv_block_bytes)) * mem.kv_groups


def max_context(mem: ServeMemory, d: Deployment, cfg: ServeConfig, concurrency: int, limit: int) -> int:
    """The longest context (up to ``limit``) that ``concurrency`` sequences can each hold."""
    if mem.kv_pool <= 0 or concurrency < 1:
        return 0
    lo, hi = 0, limit
    while lo < hi:  # blocks grow with the context: bisect
        mid = (lo + hi + 1) // 2
        per_rank = math.ceil(concurrency / mem.kv_groups)
        if per_rank * blocks_per_sequence(d, cfg, mid) * mem.kv_block_bytes <= mem.kv_pool:
            lo = mid
        else:
            hi = mid - 1
    return lo
