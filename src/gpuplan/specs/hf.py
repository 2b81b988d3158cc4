"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`.

One small adapter per ``model_type``; each reads the keys (and the defaults) that the family's
``transformers`` configuration class uses, so that parameter counts match what ``transformers``
builds exactly (tests/estimate/test_params.py checks this on the ``meta`` device).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.specs.model import ModelSpec

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
                raise GpuplanError(f"{self.where}: {keys[0]}", "is missing",
                                   "add it to config.json (see the model's Hugging Face config)")
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
            raise GpuplanError(f"{self.where}: {keys[0]}",
                               f"must be {kind.__name__}, got {value!r}")
        # Sizes, counts and rates in a config are never negative (nor astronomically large)
        if kind in (int, float) and not (0 <= value <= 1e12):
            raise GpuplanError(f"{self.where}: {keys[0]}", f"must be between 0 and 1e12, got {value!r}",
                               "fix the value in config.json")
        return value


def _act(name: str, where: str) -> str:
    table = {"silu": "silu", "swiglu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
             "gelu_new": "gelu_new", "gelu_fast": "gelu_new", "relu": "relu"}
    if name not in table:
        raise GpuplanError(f"{where}: hidden_act", f"unsupported activation {name!r}",
                           f"use one of {sorted(table)}")
    return table[name]


def _llama_like(c: _Config, name: str, *, qkv_bias_default: bool = False) -> dict[str, Any]:
    hidden = c.get("hidden_size")
    heads = c.get("num_attention_heads")
    attention_bias = c.get("attention_bias", default=qkv_bias_default, kind=bool)
    return dict(
        name=name, vocab_size=c.get("vocab_size"), hidden_size=hidden,
        num_layers=c.get("num_hidden_layers"), num_heads=heads,
        num_kv_heads=c.get("num_key_value_heads", default=heads),
        head_dim=c.get("head_dim", default=hidden // heads if heads else 0),
        ffn_size=c.get("intermediate_size"), gated_mlp=True,
        activation=_act(c.get("hidden_act", "hidden_activation", default="silu", kind=str), c.where),
        qkv_bias=attention_bias, o_bias=attention_bias, mlp_bias=c.get("mlp_bias", default=False, kind=bool),
        tied_embeddings=c.get("tie_word_embeddings", default=False, kind=bool),
        max_position_embeddings=c.get("max_position_embeddings", default=2048),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float),
    )


def _llama(c: _Config, name: str) -> ModelSpec:
    return ModelSpec(model_type="llama", **_llama_like(c, name))


def _mistral(c: _Config, name: str) -> ModelSpec:
    kw = _llama_like(c, name)
    window = c.get("sliding_window", default=None)
    return ModelSpec(model_type="mistral", sliding_window=window,
                     num_sliding_layers=kw["num_layers"] if window else 0, **kw)


def _qwen2(c: _Config, name: str) -> ModelSpec:
    kw = _llama_like(c, name)
    kw.update(qkv_bias=True, o_bias=False)  # Qwen2Attention: bias on q/k/v only
    window = c.get("sliding_window", default=None) if c.get("use_sliding_window", default=False, kind=bool) else None
    sliding = 0
    if window:
        sliding = max(0, kw["num_layers"] - c.get("max_window_layers", default=kw["num_layers"]))
    return ModelSpec(model_type="qwen2", sliding_window=window if sliding else None,
                     num_sliding_layers=sliding, **kw)


def _mixtral(c: _Config, name: str) -> ModelSpec:
    kw = _llama_like(c, name)
    window = c.get("sliding_window", default=None)
    return ModelSpec(model_type="mixtral", num_experts=c.get("num_local_experts", default=8),
                     experts_per_token=c.get("num_experts_per_tok", default=2),
                     moe_ffn_size=kw["ffn_size"], sliding_window=window,
                     num_sliding_layers=kw["num_layers"] if window else 0, **kw)


def _gemma2(c: _Config, name: str) -> ModelSpec:
    kw = _llama_like(c, name)
    kw["activation"] = _act(c.get("hidden_activation", "hidden_act", default="gelu_pytorch_tanh", kind=str), c.where)
    kw["tied_embeddings"] = c.get("tie_word_embeddings", default=True, kind=bool)
    kw["head_dim"] = c.get("head_dim", default=256)
    window = c.get("sliding_window", default=4096)
    layers = kw["num_layers"]
    return ModelSpec(model_type="gemma2", norm="rmsnorm_gemma", pre_norms_per_layer=2, post_norms_per_layer=2,
                     sliding_window=window, num_sliding_layers=(layers + 1) // 2,  # even layers slide
                     attn_logit_softcap=c.get("attn_logit_softcapping", default=50.0, kind=float),
                     final_logit_softcap=c.get("final_logit_softcapping", default=30.0, kind=float), **kw)


def _gpt2(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("n_embd", "hidden_size", default=768)
    heads = c.get("n_head", "num_attention_heads", default=12)
    return ModelSpec(
        name=name, model_type="gpt2", vocab_size=c.get("vocab_size", default=50257), hidden_size=hidden,
        num_layers=c.get("n_layer", "num_hidden_layers", default=12), num_heads=heads, num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0, ffn_size=c.get("n_inner", default=4 * hidden),
        gated_mlp=False, activation=_act(c.get("activation_function", default="gelu_new", kind=str), c.where),
        norm="layernorm", qkv_bias=True, o_bias=True, mlp_bias=True, rotary=False,
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        position_embeddings=c.get("n_positions", "max_position_embeddings", default=1024),
        max_position_embeddings=c.get("n_positions", "max_position_embeddings", default=1024),
        dropout=max(c.get("resid_pdrop", default=0.1, kind=float), c.get("embd_pdrop", default=0.1, kind=float)),
        attention_dropout=c.get("attn_pdrop", default=0.1, kind=float))


def _opt(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("hidden_size", default=768)
    heads = c.get("num_attention_heads", default=12)
    proj = c.get("word_embed_proj_dim", default=hidden)
    bias = c.get("enable_bias", default=True, kind=bool)
    max_pos = c.get("max_position_embeddings", default=2048)
    final = (c.get("do_layer_norm_before", default=True, kind=bool)
             and not c.get("_remove_final_layer_norm", default=False, kind=bool))
    return ModelSpec(
        name=name, model_type="opt", vocab_size=c.get("vocab_size", default=50272), hidden_size=hidden,
        num_layers=c.get("num_hidden_layers", default=12), num_heads=heads, num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0, ffn_size=c.get("ffn_dim", default=3072), gated_mlp=False,
        activation=_act(c.get("activation_function", default="relu", kind=str), c.where), norm="layernorm",
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, rotary=False,
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        position_embeddings=max_pos + 2,  # OPTLearnedPositionalEmbedding keeps an offset of 2 rows
        embed_proj_dim=proj if proj != hidden else 0, final_norm=final, max_position_embeddings=max_pos,
        dropout=c.get("dropout", default=0.1, kind=float), attention_dropout=c.get("attention_dropout", default=0.0, kind=float))


def _bloom(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("hidden_size", "n_embed", default=64)
    heads = c.get("n_head", "num_attention_heads", default=8)
    return ModelSpec(
        name=name, model_type="bloom", vocab_size=c.get("vocab_size", default=250880), hidden_size=hidden,
        num_layers=c.get("n_layer", "num_hidden_layers", default=2), num_heads=heads, num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0, ffn_size=4 * hidden, gated_mlp=False, activation="bloom_gelu",
        norm="layernorm", qkv_bias=True, o_bias=True, mlp_bias=True, embedding_norm=True, rotary=False,
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        max_position_embeddings=c.get("seq_length", default=2048),
        dropout=c.get("hidden_dropout", default=0.0, kind=float),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float))


def _gpt_neox(c: _Config, name: str) -> ModelSpec:
    hidden = c.get("hidden_size", default=6144)
    heads = c.get("num_attention_heads", default=64)
    bias = c.get("attention_bias", default=True, kind=bool)
    return ModelSpec(
        name=name, model_type="gpt_neox", vocab_size=c.get("vocab_size", default=50432), hidden_size=hidden,
        num_layers=c.get("num_hidden_layers", default=44), num_heads=heads, num_kv_heads=heads,
        head_dim=hidden // heads if heads else 0, ffn_size=c.get("intermediate_size", default=24576),
        gated_mlp=False, activation=_act(c.get("hidden_act", default="gelu", kind=str), c.where), norm="layernorm",
        qkv_bias=bias, o_bias=bias, mlp_bias=True,
        tied_embeddings=c.get("tie_word_embeddings", default=False, kind=bool),
        parallel_attn=c.get("use_parallel_residual", default=True, kind=bool),
        max_position_embeddings=c.get("max_position_embeddings", default=2048),
        dropout=c.get("hidden_dropout", default=0.0, kind=float),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float))


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
        name=name, model_type="falcon", vocab_size=c.get("vocab_size", default=65024), hidden_size=hidden,
        num_layers=c.get("num_hidden_layers", "n_layer", default=32), num_heads=heads, num_kv_heads=kv,
        head_dim=hidden // heads if heads else 0, ffn_size=c.get("ffn_hidden_size", default=4 * hidden),
        gated_mlp=False, activation="gelu", norm="layernorm", pre_norms_per_layer=norms,
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, parallel_attn=new_arch or parallel,
        rotary=not c.get("alibi", default=False, kind=bool),
        tied_embeddings=c.get("tie_word_embeddings", default=True, kind=bool),
        max_position_embeddings=c.get("max_position_embeddings", default=2048),
        dropout=c.get("hidden_dropout", default=0.0, kind=float),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float))


def _deepseek_v3(c: _Config, name: str) -> ModelSpec:
    kw = _llama_like(c, name)
    moe_ffn = c.get("moe_intermediate_size")
    kw["head_dim"] = c.get("qk_nope_head_dim", default=128)
    return ModelSpec(
        model_type="deepseek_v3", num_experts=c.get("n_routed_experts"),
        experts_per_token=c.get("num_experts_per_tok"), moe_ffn_size=moe_ffn,
        shared_expert_ffn_size=moe_ffn * c.get("n_shared_experts", default=1),
        first_dense_layers=c.get("first_k_dense_replace", default=0),
        moe_layer_freq=c.get("moe_layer_freq", default=1),
        q_lora_rank=c.get("q_lora_rank", default=0), kv_lora_rank=c.get("kv_lora_rank"),
        qk_rope_head_dim=c.get("qk_rope_head_dim", default=64), v_head_dim=c.get("v_head_dim", default=128), **kw)


ADAPTERS: dict[str, Callable[[_Config, str], ModelSpec]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2, "gemma2": _gemma2,
    "gpt2": _gpt2, "opt": _opt, "bloom": _bloom, "gpt_neox": _gpt_neox, "falcon": _falcon,
    "deepseek_v3": _deepseek_v3,
}


def model_from_hf_config(config: dict[str, Any], name: str = "custom", where: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from the dict of a Hugging Face ``config.json``."""
    if not isinstance(config, dict):
        raise GpuplanError(where, "must hold a JSON object", "pass a Hugging Face config.json")
    model_type = config.get("model_type")
    if model_type not in ADAPTERS:
        raise GpuplanError(f"{where}: model_type", f"unsupported model_type {model_type!r}",
                           f"supported: {', '.join(sorted(ADAPTERS))}")
    return ADAPTERS[model_type](_Config(config, where), name)


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read ``config.json`` from a file (or a folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise GpuplanError("model", f"no such file {str(path)!r}", "pass a catalog id or a config.json path")
    from gpuplan.inputs import read_text

    def no_constant(token: str):  # NaN, Infinity: not JSON, and no size a model can have
        raise ValueError(f"{token} is not a number JSON allows")

    text = read_text(path, "model")  # outside the try: its errors are GpuplanErrors (ValueErrors) already
    try:
        data = json.loads(text, parse_constant=no_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise GpuplanError(str(path), f"is not valid JSON ({exc})", "pass a complete Hugging Face config.json") from None
    return model_from_hf_config(data, name=path.parent.name or path.stem, where=str(path))
