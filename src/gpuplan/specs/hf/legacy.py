"""The older, differently-keyed families of ``config.json`` (GPT-2, MPT, OPT, BLOOM, GPT-NeoX,
Falcon): one small adapter each, reading the keys as its ``transformers`` configuration class."""

from __future__ import annotations

from gpuplan.errors import GpuplanError
from gpuplan.specs.hf.reader import Config, activation
from gpuplan.specs.model import ModelSpec


def gpt2(c: Config, name: str) -> ModelSpec:
    if c.get("add_cross_attention", default=False, kind=bool):
        # GPT2Block then adds a cross-attention over an encoder's outputs (an encoder-decoder's
        # decoder): its weights, FLOPs and activations depend on the encoder, which a decoder-only
        # plan does not have
        raise GpuplanError(
            f"{c.where}: add_cross_attention",
            "cross-attention to an encoder is not modelled (gpuplan plans decoder-only models)",
            "set it to false to plan the decoder alone",
        )
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
        activation=activation(c.get("activation_function", default="gelu_new", kind=str), c.where),
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


def mpt(c: Config, name: str) -> ModelSpec:
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


def opt(c: Config, name: str) -> ModelSpec:
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
        activation=activation(c.get("activation_function", default="relu", kind=str), c.where),
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


def bloom(c: Config, name: str) -> ModelSpec:
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


def gpt_neox(c: Config, name: str) -> ModelSpec:
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
        activation=activation(c.get("hidden_act", default="gelu", kind=str), c.where),
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


def falcon(c: Config, name: str) -> ModelSpec:
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
