"""KV-cache size: bytes per token and per sequence, on the whole model and on one GPU.

Per layer and token a standard attention layer stores K and V for each KV head: 2 x kv_heads x
head_dim values (Vaswani et al. 2017; MQA, Shazeer 2019, has one KV head; GQA, Ainslie et al.
2023, groups queries over fewer KV heads). Multi-head latent attention stores one compressed
latent and the decoupled rotary key instead: (kv_lora_rank + qk_rope_head_dim) values per layer
(DeepSeek-V2 report, section 2.1.2 and Table 1), which serving engines (vLLM, SGLang) cache as is.

Tensor parallelism splits KV heads across GPUs, but a GPU always holds at least one: with more
GPUs than KV heads the heads are replicated (vLLM ``num_kv_heads // tp`` floored at 1). The MLA
latent is not split by heads, so every TP rank holds all of it.

DeepSeek Sparse Attention (DeepSeek-V3.2) adds the indexer's key beside the latent, in FP8 with
an fp32 scale per 128 values whatever the latent's format: 132 bytes per token and layer for its
128-wide key (vLLM model_executor/models/deepseek_v2.py, ``Indexer``: ``DeepseekV32IndexerCache(
head_dim=head_dim + head_dim // quant_block_size * 4, dtype=torch.uint8)``). Its decode reads every
cached index key but only the ``index_topk`` latents the indexer picked (``attended_tokens``).

Linear-attention layers (Gated DeltaNet: Qwen3-Next, Qwen3.5; Mamba-2: Granite 4.0-H, Bamba) cache
nothing per token: each holds a fixed state per sequence, the recurrent state (value heads x key
width x value width; Mamba-2: heads x d_state x head_dim) and the causal conv's last taps - 1
inputs over q, k and v (Mamba-2: x, B and C) (vLLM model_executor/layers/mamba/mamba_utils.py,
``gated_delta_net_state_shape``, ``mamba2_state_shape``), split over TP with the heads
(``state_bytes_per_layer``). The conv's inputs are kept in 16 bits, the recurrent state in the
config's ``mamba_ssm_dtype`` (Qwen3.5's configs: float32, and vLLM's MambaSpec for their GDN layers
reads dtypes=(bfloat16, float32)), else vLLM's "auto", the model's 16-bit type
(``ModelSpec.linear_state_bytes``).

Sliding-window layers (Mistral, and every other layer of Gemma-2) keep only the last
``window - 1`` tokens between steps (the token being decoded is the window's last one), which is
what transformers' ``DynamicSlidingWindowLayer`` holds; full-attention layers keep everything.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpuplan.serve.formats import KVFormat
from gpuplan.specs import validity
from gpuplan.specs.model import ModelSpec


def kv_heads_per_gpu(m: ModelSpec, tp: int) -> int:
    if m.is_mla:
        return 1  # one latent "head", replicated on every TP rank
    validity.require((validity.KV_REPLICAS,), validity.View(tp=tp), m)  # split, or replicated over tp
    return max(1, m.num_kv_heads // tp)


def kv_values_per_head(m: ModelSpec) -> int:
    """Values one head stores per token and layer (K and V, or the MLA latent + rotary key)."""
    if m.is_mla:
        return m.kv_lora_rank + m.qk_rope_head_dim
    return 2 * m.head_dim


def index_bytes_per_token_layer(m: ModelSpec) -> float:
    """Bytes of DSA's indexer key one token adds to one layer's cache (0 without DSA): FP8 values
    and an fp32 scale per 128 of them, in any cache format; replicated over TP like the latent."""
    if not m.index_heads:
        return 0.0
    return m.index_head_dim + 4 * math.ceil(m.index_head_dim / 128)


def attention_bytes_per_token_layer(m: ModelSpec, fmt: KVFormat, tp: int = 1) -> float:
    """Bytes of K and V (or the MLA latent) one token adds to one layer's cache on one GPU: what
    attention reads back, without DSA's indexer key."""
    heads = kv_heads_per_gpu(m, tp)
    per_head = kv_values_per_head(m) * fmt.bytes + (2 if not m.is_mla else 1) * fmt.meta_bytes_per_head
    return heads * per_head


def kv_bytes_per_token_layer(m: ModelSpec, fmt: KVFormat, tp: int = 1) -> float:
    """Bytes one token adds to one layer's cache on one GPU (with DSA's indexer key)."""
    return attention_bytes_per_token_layer(m, fmt, tp) + index_bytes_per_token_layer(m)


def kv_bytes_per_token(m: ModelSpec, fmt: KVFormat, tp: int = 1) -> float:
    """Bytes one token adds to the cache of all layers (when the context is inside every window)."""
    return m.num_attention_layers * kv_bytes_per_token_layer(m, fmt, tp)


CONV_STATE_BYTES = 2  # the conv's inputs, in the model's 16-bit type (above)


def state_bytes_per_layer(m: ModelSpec, tp: int = 1) -> float:
    """Bytes of one sequence's fixed state in one linear-attention layer on one GPU (0 without
    linear attention): the recurrent state and the conv's last linear_conv - 1 inputs."""
    if not m.linear_layers:
        return 0.0
    recurrent = m.linear_v_heads * m.linear_k_dim * m.linear_v_dim
    conv = (2 * m.linear_k_heads * m.linear_k_dim + m.linear_v_heads * m.linear_v_dim) * (m.linear_conv - 1)
    return (m.linear_state_bytes * recurrent + CONV_STATE_BYTES * conv) / tp


def cached_tokens(m: ModelSpec, context: Any) -> Any:
    """Token-layers held for a sequence of ``context`` tokens (a number or a numpy array), summed
    over the softmax-attention layers."""
    full = m.num_attention_layers - m.num_sliding_layers
    if not m.num_sliding_layers:
        return full * context
    window = m.sliding_window
    held = _smaller(context, window - 1) if window else context
    return full * context + m.num_sliding_layers * held


def _smaller(context: Any, bound: float) -> Any:
    """min(context, bound) for a number (Python's, faster on scalars) or a numpy array."""
    return np.minimum(context, bound) if isinstance(context, np.ndarray) else min(context, bound)


def attended_tokens(m: ModelSpec, context: Any) -> Any:
    """Token-layers a decode step's attention reads at ``context`` tokens: what is cached, or under
    DSA the ``index_topk`` entries its indexer picked in each layer."""
    if m.index_topk:
        return m.num_layers * _smaller(context, m.index_topk)
    return cached_tokens(m, context)


def kv_bytes_per_sequence(m: ModelSpec, fmt: KVFormat, context: float, tp: int = 1) -> float:
    """Bytes of one sequence's cache at ``context`` tokens on one GPU of the TP group, with the
    linear-attention layers' fixed states."""
    return cached_tokens(m, context) * kv_bytes_per_token_layer(
        m, fmt, tp
    ) + m.num_linear_layers * state_bytes_per_layer(m, tp)
