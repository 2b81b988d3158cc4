"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`.

The Llama-shaped families go through one normaliser (``_decoder``) that reads the shared keys with
each family's defaults and quirks (``FAMILIES``); the older, differently-keyed families (GPT-2,
MPT, OPT, BLOOM, GPT-NeoX, Falcon) keep one small adapter each. Every reading follows the
family's ``transformers`` configuration class, so that parameter counts match what
``transformers`` builds exactly (tests/estimate/test_params.py and test_hf_families.py check this
on the ``meta`` device).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from gpuplan.errors import GpuplanError
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.vision import vision_tower

_MISSING = object()


class _Config:
    """A config dict whose reads name the key in their errors."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = data
        self.where = where

    def get(self, *keys: str, default: Any = _MISSING, kind: type = int) -> Any:
        for key in keys:
            if key in self.data and self.data[key] is not None:
                value = self.data[key]
                break
        else:
            if default is _MISSING:
                raise GpuplanError(
                    f"{self.where}: {keys[0]}",
                    "is missing",
                    "add it to config.json (see the model's Hugging Face config)",
                )
            return default
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise GpuplanError(f"{self.where}: {keys[0]}", f"must be {kind.__name__}, got {value!r}")
        # Sizes, counts and rates in a config are never negative (nor astronomically large)
        if kind in (int, float) and not (0 <= value <= 1e12):
            raise GpuplanError(
                f"{self.where}: {keys[0]}", f"must be between 0 and 1e12, got {value!r}", "fix the value in config.json"
            )
        return value


def _act(name: str, where: str) -> str:
    table = {
        "silu": "silu",
        "swiglu": "silu",
        "gelu": "gelu",
        "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_new": "gelu_new",
        "gelu_fast": "gelu_new",
        "relu": "relu",
    }
    if name not in table:
        raise GpuplanError(f"{where}: hidden_act", f"unsupported activation {name!r}", f"use one of {sorted(table)}")
    return table[name]


# --- one normaliser for the Llama-shaped families ------------------------------------------------
# Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE, Gemma 2/3, Phi-3/4, gpt-oss, Llama 4, GLM-4 MoE and
# DeepSeek-V2/V3 share the keys of LlamaConfig; they differ in defaults (the family's transformers
# configuration class), in which biases and norms exist, in how layers alternate between local and
# global attention, and in how MoE layers are laid out. ``_Family`` names those differences; one
# function, ``_decoder``, reads every config through it.

LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _every(step: int) -> Callable[[int], bool]:
    """Layer rule: every ``step``-th layer, counting from 1 (Gemma 3: sliding unless (i+1) % 6 == 0)."""
    return lambda i: bool((i + 1) % step)


@dataclasses.dataclass(frozen=True)
class _Family:
    """How one ``model_type`` reads the shared keys (defaults as its transformers config class)."""

    head_dim: int | None = None  # default head_dim (None: hidden_size // num_attention_heads)
    tied: bool = False  # default tie_word_embeddings
    act: str = "silu"  # default hidden_act
    attention_bias: bool = False  # default attention_bias
    bias: str = "all"  # what attention_bias switches on: "all" (q, k, v, o) or "qkv" (o has none)
    qkv_bias: bool = False  # q, k, v always biased (Qwen2)
    qk_norm: bool | str = False  # True, or the boolean key that switches it on (GLM-4 MoE: use_qk_norm)
    sinks: bool = False
    gemma: bool = False  # (1 + w) RMSNorm, four norms per layer, sqrt(hidden)-scaled embeddings
    vocab: int | None = None  # default vocab_size (Gemma 3's text_config omits it)
    # local/global layout when the config has no layer_types: default window and which layers slide
    window: int | None = None
    sliding: Callable[[_Config, int], Callable[[int], bool] | None] | None = None
    chunked: bool = False  # the local layers are Llama 4's chunked attention
    # MoE: the experts key and its default, experts per token, the expert width key, shared experts
    experts: tuple[str, int | None] | None = None
    top_k: int | None = None
    expert_ffn: str = "moe_intermediate_size"
    expert_ffn_default: int | None = None
    shared: str = ""  # "n_shared_experts" (DeepSeek, GLM: n x expert width) or "one" (Llama 4)
    shared_default: int = 1
    moe_rule: str = "all"  # all | deepseek | qwen3_moe | llama4
    dense_ffn: str = "intermediate_size"  # Llama 4's dense layers use intermediate_size_mlp
    first_dense_default: int = 0
    router_bias: bool = False
    expert_bias: bool = False
    mla: bool = False
    softcap: bool = False  # Gemma 2's attention and final logit soft-capping
    max_pos: int = 2048  # default max_position_embeddings (Gemma 3's Hub configs omit it)


def _mistral_layout(c: _Config, layers: int) -> Callable[[int], bool] | None:
    return (lambda i: True) if c.get("sliding_window", default=None) else None


def _qwen_layout(c: _Config, layers: int) -> Callable[[int], bool] | None:
    # Qwen2/Qwen3 configuration: sliding only with use_sliding_window, from max_window_layers on
    if not c.get("use_sliding_window", default=False, kind=bool):
        return None
    default = {"qwen2": layers, "qwen2_5_vl_text": 80}.get(str(c.data.get("model_type")), 28)
    first = c.get("max_window_layers", default=default)
    return lambda i: i >= first


def _gemma2_layout(c: _Config, layers: int) -> Callable[[int], bool] | None:
    return lambda i: i % 2 == 0  # even layers slide


def _gemma3_layout(c: _Config, layers: int) -> Callable[[int], bool] | None:
    return _every(c.get("sliding_window_pattern", default=6))


def _gpt_oss_layout(c: _Config, layers: int) -> Callable[[int], bool] | None:
    return _every(2)  # sliding, full, sliding, ... (GptOssConfig)


def _llama4_layout(c: _Config, layers: int) -> Callable[[int], bool] | None:
    # Llama4TextConfig: layers with RoPE use chunked attention, the NoPE layers (every
    # no_rope_layer_interval-th) attend globally; no_rope_layers holds 1 for the RoPE layers
    if not c.get("attention_chunk_size", default=8192):
        return None
    flags = c.data.get("no_rope_layers") or None
    if flags is None:
        return _every(c.get("no_rope_layer_interval", default=4))
    if not isinstance(flags, list) or len(flags) != layers:
        raise GpuplanError(f"{c.where}: no_rope_layers", f"must list one 0/1 per layer ({layers})")
    return lambda i: bool(flags[i])


def _phi3_layout(c: _Config, layers: int) -> Callable[[int], bool] | None:
    return (lambda i: True) if c.get("sliding_window", default=None) else None


FAMILIES: dict[str, _Family] = {
    "llama": _Family(),
    "mistral": _Family(sliding=_mistral_layout),
    "mixtral": _Family(
        sliding=_mistral_layout, experts=("num_local_experts", 8), top_k=2, expert_ffn="intermediate_size"
    ),
    "qwen2": _Family(qkv_bias=True, sliding=_qwen_layout),
    "qwen3": _Family(head_dim=128, qk_norm=True, sliding=_qwen_layout, window=4096),
    "qwen3_moe": _Family(
        qk_norm=True,
        sliding=_qwen_layout,
        window=4096,
        experts=("num_experts", 128),
        top_k=8,
        expert_ffn_default=768,
        moe_rule="qwen3_moe",
    ),
    # the text models of Qwen2.5-VL (Qwen2-shaped) and Qwen3-VL (Qwen3-shaped)
    "qwen2_5_vl_text": _Family(qkv_bias=True, sliding=_qwen_layout, vocab=152_064),
    "qwen3_vl_text": _Family(head_dim=128, qk_norm=True, vocab=151_936),
    "gemma2": _Family(
        head_dim=256, tied=True, act="gelu_pytorch_tanh", gemma=True, window=4096, sliding=_gemma2_layout, softcap=True
    ),
    "gemma3_text": _Family(
        head_dim=256,
        tied=True,
        act="gelu_pytorch_tanh",
        gemma=True,
        qk_norm=True,
        vocab=262_208,
        window=4096,
        sliding=_gemma3_layout,
    ),
    "phi3": _Family(sliding=_phi3_layout),
    "gpt_oss": _Family(
        head_dim=64,
        attention_bias=True,
        sinks=True,
        window=128,
        sliding=_gpt_oss_layout,
        experts=("num_local_experts", 128),
        top_k=4,
        expert_ffn="intermediate_size",
        router_bias=True,
        expert_bias=True,
    ),
    "llama4_text": _Family(
        head_dim=128,
        vocab=202_048,
        window=8192,
        sliding=_llama4_layout,
        chunked=True,
        experts=("num_local_experts", 16),
        top_k=1,
        expert_ffn="intermediate_size",
        shared="one",
        moe_rule="llama4",
        dense_ffn="intermediate_size_mlp",
    ),
    "glm4_moe": _Family(
        bias="qkv",
        qk_norm="use_qk_norm",
        experts=("n_routed_experts", 128),
        top_k=8,
        expert_ffn_default=1408,
        shared="n_shared_experts",
        moe_rule="deepseek",
        first_dense_default=1,
    ),
    "deepseek_v2": _Family(
        mla=True,
        experts=("n_routed_experts", 64),
        expert_ffn_default=1407,
        shared="n_shared_experts",
        shared_default=2,
        moe_rule="deepseek",
    ),
    "deepseek_v3": _Family(
        mla=True, experts=("n_routed_experts", None), shared="n_shared_experts", moe_rule="deepseek"
    ),
}
# default max_position_embeddings of each family's transformers config class, where it is not
# LlamaConfig's 2048 (tests/specs/test_hf_defaults.py reads them from transformers)
for _type, _pos in {
    "mistral": 131072,
    "mixtral": 131072,
    "qwen2": 32768,
    "qwen3": 32768,
    "qwen3_moe": 32768,
    "qwen2_5_vl_text": 32768,
    "qwen3_vl_text": 128000,
    "gemma2": 8192,
    "gemma3_text": 131072,
    "phi3": 4096,
    "gpt_oss": 131072,
    "llama4_text": 131072,
    "glm4_moe": 131072,
    "deepseek_v3": 4096,
}.items():
    FAMILIES[_type] = dataclasses.replace(FAMILIES[_type], max_pos=_pos)

# multimodal configs whose text model has its own model_type (used when text_config omits it)
NESTED_TEXT = {
    "llama4": "llama4_text",
    "gemma3": "gemma3_text",
    "mistral3": "mistral",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
}
# multimodal configs that may keep the text model's keys at the top level, beside vision_config
# (the Hub's Qwen2.5-VL configs; Qwen2_5_VLConfig moves them into text_config)
FLAT_TEXT = ("qwen2_5_vl",)
# composite configs whose own tie_word_embeddings (default as given) ties the LM head, as
# transformers builds them; Llama 4 and Mistral 3 follow their text_config's
OUTER_TIE = {"gemma3": True, "qwen2_5_vl": False, "qwen3_vl": False}


def _layer_flags(c: _Config, f: _Family, layers: int) -> tuple[int | None, int]:
    """(window, number of local layers): from ``layer_types`` when present, else the family's rule."""
    window = c.get("attention_chunk_size" if f.chunked else "sliding_window", default=f.window)
    if f.sliding is _qwen_layout and not c.get("use_sliding_window", default=False, kind=bool):
        return None, 0  # Qwen2/3 configuration: sliding_window is dropped without use_sliding_window
    types = c.data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
            raise GpuplanError(
                f"{c.where}: layer_types",
                f"must list one of {LAYER_TYPES} per layer ({layers})",
                "fix layer_types or leave it out",
            )
        local = sum(t != "full_attention" for t in types)
    else:
        rule = f.sliding(c, layers) if f.sliding else None
        local = sum(rule(i) for i in range(layers)) if rule else 0
    if local and not window:
        if types is not None and f.window is None:
            raise GpuplanError(
                f"{c.where}: sliding_window",
                "is missing but layer_types has local layers",
                "add sliding_window to config.json",
            )
        local = 0  # a null window: every layer attends globally (transformers builds full masks)
    return (window if local else None), local


def _moe_layers(c: _Config, f: _Family, layers: int) -> dict[str, Any]:
    if f.moe_rule == "deepseek":  # DeepseekV3DecoderLayer: MoE from first_k_dense_replace on
        return dict(
            first_dense_layers=c.get("first_k_dense_replace", default=f.first_dense_default),
            moe_layer_freq=c.get("moe_layer_freq", default=1),
        )
    if f.moe_rule == "qwen3_moe":  # Qwen3MoeDecoderLayer
        step = c.get("decoder_sparse_step", default=1)
        dense = c.get("mlp_only_layers", default=[], kind=list)
        return dict(moe_layers=tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0))
    if f.moe_rule == "llama4":  # Llama4TextConfig.moe_layers, default every interleave_moe_layer_step-th
        given = c.get("moe_layers", default=None, kind=list)
        if given is None:
            step = c.get("interleave_moe_layer_step", default=1)
            given = list(range(step - 1, layers, step))
        return dict(moe_layers=tuple(int(i) for i in given))
    return {}


def _decoder(c: _Config, name: str, model_type: str) -> ModelSpec:
    """Every Llama-shaped family: the shared keys, read through the family's :class:`_Family`."""
    f = FAMILIES[model_type]
    hidden = c.get("hidden_size")
    heads = c.get("num_attention_heads")
    layers = c.get("num_hidden_layers")
    attention_bias = c.get("attention_bias", default=f.attention_bias, kind=bool)
    qk_norm = c.get(f.qk_norm, default=False, kind=bool) if isinstance(f.qk_norm, str) else f.qk_norm
    dense_ffn = c.get(f.dense_ffn, default=16384 if f.dense_ffn == "intermediate_size_mlp" else _MISSING)
    window, local = _layer_flags(c, f, layers)
    kw: dict[str, Any] = dict(
        name=name,
        model_type=model_type,
        vocab_size=c.get("vocab_size", default=f.vocab or _MISSING),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=c.get("num_key_value_heads", default=heads),
        head_dim=c.get("head_dim", default=f.head_dim or (hidden // heads if heads else 0)),
        ffn_size=dense_ffn,
        gated_mlp=True,
        activation=_act(c.get("hidden_act", "hidden_activation", default=f.act, kind=str), c.where),
        qkv_bias=attention_bias or f.qkv_bias,
        o_bias=attention_bias and f.bias == "all",
        mlp_bias=c.get("mlp_bias", default=False, kind=bool),
        tied_embeddings=c.get("tie_word_embeddings", default=f.tied, kind=bool),
        max_position_embeddings=c.get("max_position_embeddings", default=f.max_pos),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float),
        sliding_window=window,
        num_sliding_layers=local,
        attention_chunked=f.chunked and local > 0,
        qk_norm=qk_norm,
        attn_sinks=f.sinks,
    )
    if f.gemma:
        kw.update(norm="rmsnorm_gemma", pre_norms_per_layer=2, post_norms_per_layer=2)
        kw["activation"] = _act(c.get("hidden_activation", "hidden_act", default=f.act, kind=str), c.where)
    if f.softcap:
        kw.update(
            attn_logit_softcap=c.get("attn_logit_softcapping", default=50.0, kind=float),
            final_logit_softcap=c.get("final_logit_softcapping", default=30.0, kind=float),
        )
    if f.experts:
        key, default = f.experts
        experts = c.get(key, default=_MISSING if default is None else default)
        expert_ffn = c.get(f.expert_ffn, default=_MISSING if f.expert_ffn_default is None else f.expert_ffn_default)
        shared = 0
        if f.shared == "n_shared_experts":
            shared = expert_ffn * c.get("n_shared_experts", default=f.shared_default)
        elif f.shared == "one":
            shared = expert_ffn
        kw.update(
            num_experts=experts,
            experts_per_token=c.get("num_experts_per_tok", default=_MISSING if f.top_k is None else f.top_k),
            moe_ffn_size=expert_ffn,
            shared_expert_ffn_size=shared,
            router_bias=f.router_bias,
            **_moe_layers(c, f, layers),
        )
        if f.expert_bias:
            kw["mlp_bias"] = True  # gpt-oss experts carry gate_up and down biases
    if f.mla:
        # MLA: head_dim is the "nope" part of queries and keys; q_lora_rank null = a plain q_proj
        kw["head_dim"] = c.get("qk_nope_head_dim", default=128)
        # q_lora_rank: null (DeepSeek-V2-Lite) means no query compression; a missing key means the
        # configuration class's default, 1536
        q_rank = c.data.get("q_lora_rank", 1536)
        if q_rank is not None:
            q_rank = c.get("q_lora_rank")
        kw.update(
            q_lora_rank=q_rank or 0,
            kv_lora_rank=c.get("kv_lora_rank"),
            qk_rope_head_dim=c.get("qk_rope_head_dim", default=64),
            v_head_dim=c.get("v_head_dim", default=128),
        )
    notes = []
    mtp = c.data.get("num_nextn_predict_layers") or c.data.get("num_mtp_layers")
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) not counted (transformers does not build them)")
    return ModelSpec(notes=tuple(notes), **kw)


def _gpt2(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("n_embd", "hidden_size", default=768)
    heads = c.get("n_head", "num_attention_heads", default=12)
    return ModelSpec(
        name=name,
        model_type="gpt2",
        vocab_size=c.get("vocab_size", default=50257),
        hidden_size=hidden,
        num_layers=c.get("n_layer", "num_hidden_layers", default=12),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0,
        ffn_size=c.get("n_inner", default=4 * hidden),
        gated_mlp=False,
        activation=_act(c.get("activation_function", default="gelu_new", kind=str), c.where),
        norm="layernorm",
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        rotary=False,
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        position_embeddings=c.get("n_positions", "max_position_embeddings", default=1024),
        max_position_embeddings=c.get("n_positions", "max_position_embeddings", default=1024),
        dropout=max(c.get("resid_pdrop", default=0.1, kind=float), c.get("embd_pdrop", default=0.1, kind=float)),
        attention_dropout=c.get("attn_pdrop", default=0.1, kind=float),
    )


def _mpt(c: _Config, name: str) -> ModelSpec:
    """MosaicML MPT (transformers' MptConfig): LayerNorm, GeLU MLP of ``expansion_ratio`` x d_model,
    ALiBi instead of position embeddings, no biases by default (``no_bias``), tied embeddings."""
    hidden = c.get("d_model", default=2048)
    heads = c.get("n_heads", default=16)
    attn = c.data.get("attn_config") or {}
    if not isinstance(attn, dict):
        raise GpuplanError(
            f"{c.where}: attn_config",
            f"must be an object, got {type(attn).__name__}",
            "give attn_config as a JSON object or leave it out",
        )
    kv = (
        attn.get("kv_n_heads", heads)
        if attn.get("attn_type", "multihead_attention") != "multihead_attention"
        else heads
    )
    bias = not c.get("no_bias", default=True, kind=bool)
    return ModelSpec(
        name=name,
        model_type="mpt",
        vocab_size=c.get("vocab_size", default=50368),
        hidden_size=hidden,
        num_layers=c.get("n_layers", default=24),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hidden // heads if heads else 0,
        ffn_size=int(c.get("expansion_ratio", default=4, kind=float) * hidden),
        gated_mlp=False,
        activation="gelu",
        norm="layernorm",
        norm_bias=bias,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        rotary=False,
        tied_embeddings=True,
        position_embeddings=0,
        max_position_embeddings=c.get("max_seq_len", default=2048),
        dropout=c.get("resid_pdrop", default=0.0, kind=float),
        attention_dropout=float(attn.get("attn_pdrop", 0.0)),
    )


def _opt(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("hidden_size", default=768)
    heads = c.get("num_attention_heads", default=12)
    proj = c.get("word_embed_proj_dim", default=hidden)
    bias = c.get("enable_bias", default=True, kind=bool)
    max_pos = c.get("max_position_embeddings", default=2048)
    final = c.get("do_layer_norm_before", default=True, kind=bool) and not c.get(
        "_remove_final_layer_norm", default=False, kind=bool
    )
    return ModelSpec(
        name=name,
        model_type="opt",
        vocab_size=c.get("vocab_size", default=50272),
        hidden_size=hidden,
        num_layers=c.get("num_hidden_layers", default=12),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0,
        ffn_size=c.get("ffn_dim", default=3072),
        gated_mlp=False,
        activation=_act(c.get("activation_function", default="relu", kind=str), c.where),
        norm="layernorm",
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        rotary=False,
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        position_embeddings=max_pos + 2,  # OPTLearnedPositionalEmbedding keeps an offset of 2 rows
        embed_proj_dim=proj if proj != hidden else 0,
        final_norm=final,
        max_position_embeddings=max_pos,
        dropout=c.get("dropout", default=0.1, kind=float),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float),
    )


def _bloom(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("hidden_size", "n_embed", default=64)
    heads = c.get("n_head", "num_attention_heads", default=8)
    return ModelSpec(
        name=name,
        model_type="bloom",
        vocab_size=c.get("vocab_size", default=250880),
        hidden_size=hidden,
        num_layers=c.get("n_layer", "num_hidden_layers", default=2),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0,
        ffn_size=4 * hidden,
        gated_mlp=False,
        activation="bloom_gelu",
        norm="layernorm",
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        embedding_norm=True,
        rotary=False,
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        max_position_embeddings=c.get("seq_length", default=2048),
        dropout=c.get("hidden_dropout", default=0.0, kind=float),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float),
    )


def _gpt_neox(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("hidden_size", default=6144)
    heads = c.get("num_attention_heads", default=64)
    bias = c.get("attention_bias", default=True, kind=bool)
    return ModelSpec(
        name=name,
        model_type="gpt_neox",
        vocab_size=c.get("vocab_size", default=50432),
        hidden_size=hidden,
        num_layers=c.get("num_hidden_layers", default=44),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0,
        ffn_size=c.get("intermediate_size", default=24576),
        gated_mlp=False,
        activation=_act(c.get("hidden_act", default="gelu", kind=str), c.where),
        norm="layernorm",
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=True,
        tied_embeddings=c.get("tie_word_embeddings", default=False, kind=bool),
        parallel_attn=c.get("use_parallel_residual", default=True, kind=bool),
        max_position_embeddings=c.get("max_position_embeddings", default=2048),
        dropout=c.get("hidden_dropout", default=0.0, kind=float),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float),
    )


def _falcon(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("hidden_size", default=4544)
    heads = c.get("num_attention_heads", "n_head", default=71)
    new_arch = c.get("new_decoder_architecture", default=False, kind=bool)
    if new_arch:
        kv = c.get("num_kv_heads", "n_head_kv", default=heads)
    else:
        kv = 1 if c.get("multi_query", default=True, kind=bool) else heads
    parallel = c.get("parallel_attn", default=True, kind=bool)
    norms = c.get("num_ln_in_parallel_attn", default=2) if new_arch else (1 if parallel else 2)
    bias = c.get("bias", default=False, kind=bool)
    return ModelSpec(
        name=name,
        model_type="falcon",
        vocab_size=c.get("vocab_size", default=65024),
        hidden_size=hidden,
        num_layers=c.get("num_hidden_layers", "n_layer", default=32),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hidden // heads if heads else 0,
        ffn_size=c.get("ffn_hidden_size", default=4 * hidden),
        gated_mlp=False,
        activation="gelu",
        norm="layernorm",
        pre_norms_per_layer=norms,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        parallel_attn=new_arch or parallel,
        rotary=not c.get("alibi", default=False, kind=bool),
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        max_position_embeddings=c.get("max_position_embeddings", default=2048),
        dropout=c.get("hidden_dropout", default=0.0, kind=float),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float),
    )


ADAPTERS: dict[str, Callable[[_Config, str], ModelSpec]] = {
    "gpt2": _gpt2,
    "mpt": _mpt,
    "opt": _opt,
    "bloom": _bloom,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
    **{t: functools.partial(_decoder, model_type=t) for t in FAMILIES},
}


def _split_multimodal(config: dict[str, Any], where: str) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """(text config, where it is, the outer multimodal config or None) of a config.json."""
    outer = config.get("model_type")
    text = config.get("text_config")
    if text is None and outer in FLAT_TEXT and "vision_config" in config:
        text = {k: v for k, v in config.items() if k not in ("vision_config", "model_type")}
    if text is None:
        return config, where, None
    if not isinstance(text, dict):
        raise GpuplanError(f"{where}: text_config", f"must be an object, got {type(text).__name__}")
    text = dict(text)
    text.setdefault("model_type", NESTED_TEXT.get(str(outer), outer))
    if outer in OUTER_TIE:
        # the composite config's tie_word_embeddings decides (its class default when absent);
        # Qwen2_5_VLConfig also ties when its text config asks
        tied = config.get("tie_word_embeddings")
        tied = OUTER_TIE[outer] if tied is None else tied
        if not isinstance(tied, bool):
            raise GpuplanError(f"{where}: tie_word_embeddings", f"must be true or false, got {tied!r}")
        text["tie_word_embeddings"] = tied or (outer == "qwen2_5_vl" and text.get("tie_word_embeddings") is True)
    return text, f"{where}: text_config", config


def model_from_hf_config(config: dict[str, Any], name: str = "custom", where: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from the dict of a Hugging Face ``config.json``.

    A multimodal config (``text_config`` inside, as Llama 4 and Gemma 3 ship, or Qwen2.5-VL's text
    keys beside ``vision_config``) plans its text backbone and counts the vision tower's parameters
    (specs/vision.py) where gpuplan knows the family; otherwise the spec's ``notes`` say the tower
    is not counted."""
    if not isinstance(config, dict):
        raise GpuplanError(where, "must hold a JSON object", "pass a Hugging Face config.json")
    text, text_where, outer = _split_multimodal(config, where)
    model_type = text.get("model_type")
    if model_type not in ADAPTERS:
        raise GpuplanError(
            f"{text_where}: model_type",
            f"unsupported model_type {model_type!r}",
            f"supported: {', '.join(sorted(ADAPTERS))} (and multimodal configs of "
            f"{', '.join(sorted(NESTED_TEXT))} through their text_config)",
        )
    spec = ADAPTERS[model_type](_Config(text, text_where), name)
    if outer is None or "vision_config" not in outer:
        return spec
    tower = vision_tower(outer, spec.hidden_size, where)
    kind = outer.get("model_type")
    if tower is None:
        note = f"{kind} vision tower (vision_config) not counted: the plan covers the text backbone"
    else:
        note = (
            f"{kind} vision tower counted ({tower.params:,} parameters: weights and training states on "
            "the first pipeline stage); its activations, FLOPs and step time are not modelled (they "
            "depend on images per sample)"
        )
    return dataclasses.replace(spec, vision=tower, notes=(note, *spec.notes))


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read ``config.json`` from a file (or a folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise GpuplanError("model", f"no such file {str(path)!r}", "pass a catalog id or a config.json path")
    from gpuplan.inputs import read_text

    def no_constant(token: str) -> NoReturn:  # NaN, Infinity: not JSON, and no size a model can have
        raise ValueError(f"{token} is not a number JSON allows")

    text = read_text(path, "model")  # outside the try: its errors are GpuplanErrors (ValueErrors) already
    try:
        data = json.loads(text, parse_constant=no_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise GpuplanError(
            str(path), f"is not valid JSON ({exc})", "pass a complete Hugging Face config.json"
        ) from None
    return model_from_hf_config(data, name=path.parent.name or path.stem, where=str(path))
