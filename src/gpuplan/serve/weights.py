"""Serving weights: bits of every tensor in a storage format, and bytes on each GPU of a TP x PP group."""

from __future__ import annotations

import functools
import math

from gpuplan.estimate.memory import layers_per_stage
from gpuplan.estimate.params import (
    Tensor,
    embedding_tensors,
    head_tensors,
    layer_tensors,
    mtp_tensors,
    vision_tensors,
)
from gpuplan.estimate.stage_params import _local_shape
from gpuplan.serve.formats import WeightFormat
from gpuplan.specs.model import ModelSpec

_Q6_K = 6.5625


def tensor_bits(m: ModelSpec, t: Tensor, fmt: WeightFormat) -> float:
    """Bits per element of ``t`` stored in ``fmt`` (see formats.py for what stays 16-bit)."""
    if t.name == "embed.tokens":
        return fmt.embed_bits
    if t.name == "lm_head":
        return fmt.head_bits
    if not t.matmul or len(t.shape) < 2 or t.name == "moe.router":
        return 16.0
    if fmt.experts_only and not t.expert:
        return 16.0
    if fmt.block:  # block scales along each row's input dimension (shape: [experts,] out, in)
        # params.py fuses q, k, v (and gate, up); checkpoints keep them apart, each with its own scale
        fused = 3 if t.name == "attn.qkv.weight" else 2 if t.name.endswith("up.weight") and m.gated_mlp else 1
        return fmt.matrix_bits(t.shape[-1], t.shape[-2], fused)
    if fmt.q6_share:
        share = 0.0  # of this tensor's elements that a K-quant mix keeps at Q6_K
        if t.name.endswith("down.weight"):
            share = 1.0
        elif t.name == "attn.qkv.weight":
            share = m.num_kv_heads * m.head_dim / (m.q_size + 2 * m.num_kv_heads * m.head_dim)
        elif t.name == "attn.kv_b_proj.weight":
            share = m.v_head_dim / (m.head_dim + m.v_head_dim)
        share *= fmt.q6_share
        return share * _Q6_K + (1 - share) * fmt.bits
    return fmt.bits


def local_numel(t: Tensor, tp: int) -> int:
    return math.prod(_local_shape(t, tp))


def tensor_tp(t: Tensor, tp: int, dp_attention: bool) -> int:
    """The TP degree a tensor is sharded over: with DP attention (SGLang ``--enable-dp-attention``)
    every rank holds the whole attention block and runs it on its own requests, and the token
    embedding too (python/sglang/srt/models/deepseek_v2.py: ``VocabParallelEmbedding(...,
    enable_tp=not enable_dp_attention)``); the MLP/MoE and the LM head stay sharded."""
    return 1 if dp_attention and (t.name.startswith("attn.") or t.name == "embed.tokens") else tp


@functools.lru_cache(maxsize=4096)
def stage_weight_bytes(
    m: ModelSpec, fmt: WeightFormat, tp: int, pp: int, dp_attention: bool = False
) -> tuple[float, ...]:
    """Weight bytes on one GPU of each pipeline stage (TP shards columns, rows and the vocabulary;
    a tied embedding is also held by the last stage when pp > 1, as for training). A multimodal
    checkpoint's vision tower and projector sit on the first stage in 16 bits, whole on every TP
    rank: engines quantize the language model only (vLLM's quantization configs skip the
    vision tower's modules) and the encoder is small."""

    def size(ts) -> float:
        return sum(local_numel(t, tensor_tp(t, tp, dp_attention)) * tensor_bits(m, t, fmt) / 8 for t in ts)

    out, first = [], 0
    for stage, n in enumerate(layers_per_stage(m.num_layers, pp)):
        b = sum(count * size(layer_tensors(m, *kind)) for kind, count in m.layer_kinds(first, n))
        if stage == 0:
            b += size(embedding_tensors(m)) + 2.0 * sum(t.numel for t in vision_tensors(m))
        if stage == pp - 1:
            b += size(head_tensors(m))
            if m.tied_embeddings and pp > 1:
                b += size(t for t in embedding_tensors(m) if t.name == "embed.tokens")
        out.append(b)
        first += n
    return tuple(out)


def weight_bytes_per_gpu(
    m: ModelSpec, fmt: WeightFormat, tp: int = 1, pp: int = 1, dp_attention: bool = False
) -> float:
    """Bytes on the most loaded GPU."""
    return max(stage_weight_bytes(m, fmt, tp, pp, dp_attention))


def mtp_weight_bytes(m: ModelSpec, fmt: WeightFormat, tp: int = 1, dp_attention: bool = False) -> float:
    """Bytes on each GPU of the model's multi-token-prediction module used as its own draft (one
    depth: its block of ``ModelSpec.mtp_kind`` and ``mtp_tensors``), in the checkpoint's format.
    Its embedding and LM head are the target's (SGLang's NextN draft takes them with
    set_embed_and_head; vLLM's EAGLE proposer shares them with the target), so they add nothing."""
    ts = (*layer_tensors(m, *m.mtp_kind), *mtp_tensors(m))
    return sum(local_numel(t, tensor_tp(t, tp, dp_attention)) * tensor_bits(m, t, fmt) / 8 for t in ts)
