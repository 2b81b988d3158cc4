"""The Llama-shaped families of ``config.json``: one normaliser (``decoder``) reading the shared
keys through each family's defaults and quirks (``FAMILIES``), as its ``transformers``
configuration class does."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from gpuplan.errors import GpuplanError, field_ref, require
from gpuplan.specs.hf.reader import MISSING, Config, activation
from gpuplan.specs.model import ModelSpec

# --- one normaliser for the Llama-shaped families ------------------------------------------------
# Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE, Gemma 2/3, Phi-3/4, gpt-oss, Llama 4, GLM-4 MoE and
# DeepSeek-V2/V3 share the keys of LlamaConfig; they differ in defaults (the family's transformers
# configuration class), in which biases and norms exist, in how layers alternate between local and
# global attention, and in how MoE layers are laid out. ``_Family`` names those differences; one
# function, ``decoder``, reads every config through it.

# "indexed_attention": DeepSeek-V3.2's DSA layers, which cache and may attend to every token;
# "linear_attention": Gated DeltaNet or Mamba-2 layers (Qwen3-Next, Qwen3.5; Granite 4.0-H, Bamba), a
# recurrent state, no KV cache; "mamba" and "attention": their legacy names (transformers'
# _LEGACY_LAYER_TYPE_REMAP, as Granite 4.0's Hub configs spell them)
LAYER_TYPES = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "indexed_attention",
    "linear_attention",
    "mamba",
    "attention",
)
LINEAR_TYPES = ("linear_attention", "mamba")
LOCAL_TYPES = ("sliding_attention", "chunked_attention")


def _every(step: int) -> Callable[[int], bool]:
    """Layer rule: every ``step``-th layer, counting from 1 (Gemma 3: sliding unless (i+1) % 6 == 0)."""
    return lambda i: bool((i + 1) % step)


@dataclasses.dataclass(frozen=True)
class _Family:
    """How one ``model_type`` reads the shared keys (defaults as its transformers config class)."""

    head_dim: int | None = None  # default head_dim (None: hidden_size // num_attention_heads)
    tied: bool = False  # default tie_word_embeddings
    act: str = "silu"  # default hidden_act
    gated: bool = True  # gate and up projections (False: one up projection, as GPT-2's MLP)
    attention_bias: bool = False  # default attention_bias
    bias_key: str = "attention_bias"  # the key that switches the attention biases on
    bias: str = "all"  # what attention_bias switches on: "all" (q, k, v, o) or "qkv" (o has none)
    o_bias_key: str = ""  # o's own bias key (Seed-OSS: attention_out_bias), default False
    qkv_bias: bool = False  # q, k, v always biased (Qwen2)
    mlp_bias_key: str = "mlp_bias"  # the key that switches the MLP biases on
    mlp_bias: bool = False  # its default
    lm_head_bias: bool | str = False  # True, or the key that switches it on (PhiMoE: lm_head_bias)
    qk_norm: bool | str = False  # True, or the boolean key that switches it on (GLM-4 MoE: use_qk_norm)
    qk_norm_full: bool = False  # the q/k norms span all heads (OLMo 2, MiniMax-M2, Cohere), not one head
    sinks: bool = False
    gemma: bool = False  # (1 + w) RMSNorm and sqrt(hidden)-scaled embeddings
    # rmsnorm | layernorm | rmsnorm_fp32 (the weight multiplies the fp32 normalised input before
    # the cast back: OLMo 2's Olmo2RMSNorm) | layernorm_fp32 (CohereLayerNorm: fp32 ops, no bias)
    norm: str = "rmsnorm"
    # norms per layer: (before attention and the MLP, after them); OLMo 2 and EXAONE 4 norm only the
    # blocks' outputs (0, 2), Gemma 2/3 and GLM-4 both (2, 2)
    norms: tuple[int, int] = (2, 0)
    parallel: bool | str = False  # attention and MLP side by side on one norm (True, or the key: StableLM)
    dropout_key: str = ""  # the residual dropout's key (Phi: resid_pdrop), default 0
    # boolean keys gpuplan does not model: a config that sets one is refused, naming it
    unsupported: tuple[str, ...] = ()
    vocab: int | None = None  # default vocab_size (Gemma 3's text_config omits it)
    # local/global layout when the config has no layer_types: default window and which layers slide
    window: int | None = None
    sliding: Callable[[Config, int], Callable[[int], bool] | None] | None = None
    chunked: bool = False  # the local layers are Llama 4's chunked attention
    # MoE: the experts key and its default, experts per token, the expert width key, shared experts
    experts: tuple[str, int | None] | None = None
    top_k: int | None = None
    top_k_key: str = "num_experts_per_tok"  # ERNIE 4.5: moe_k
    expert_ffn: str = "moe_intermediate_size"
    expert_ffn_default: int | None = None
    # a count key ending in "shared_experts" (DeepSeek, GLM: n_shared_experts; ERNIE 4.5:
    # moe_num_shared_experts; n x expert width), "one" (Llama 4), or the key of the shared expert's
    # own width (Qwen2-MoE: shared_expert_intermediate_size)
    shared: str = ""
    shared_default: int = 1  # n_shared_experts, or the width under a width key
    shared_gate: bool = False  # Qwen2-MoE's sigmoid gate over the shared expert
    moe_rule: str = "all"  # all | deepseek | qwen3_moe | llama4 | ernie | after_first
    dense_ffn: str = "intermediate_size"  # Llama 4's dense layers use intermediate_size_mlp
    # every layer MoE and no dense width in the config class (Qwen3_5MoeTextConfig): the dense
    # width, which no layer uses, is read as the expert width when the key is absent
    no_dense: bool = False
    first_dense_default: int = 0
    router_bias: bool = False
    expert_bias: bool = False
    # group-limited routing: (n_group, topk_group) when the config omits them; None: the family
    # has none (a config whose topk_method is "greedy", DeepSeek-V2's default, ignores them too)
    groups_default: tuple[int, int] | None = None
    mla: bool = False
    # MLA's defaults when a config omits them: q_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
    # v_head_dim (DeepseekV3Config's; GLM-4.7-Flash's Glm4MoeLiteConfig has its own)
    mla_defaults: tuple[int, int, int, int] = (1536, 64, 128, 128)
    dsa: bool = False  # DeepSeek Sparse Attention's indexer (index_topk, index_n_heads, index_head_dim)
    dsa_defaults: tuple[int, int, int] = (2048, 64, 128)  # DeepseekV32Config's index_topk, _n_heads, _head_dim
    # linear-attention layers: "gdn" (Gated DeltaNet: linear_* keys; layer_types, else every
    # full_attention_interval-th layer full; softmax layers whose q_proj also projects an output
    # gate: Qwen3-Next, Qwen3.5) or "mamba2" (mamba_* keys; layer_types or attn_layer_indices:
    # Granite 4.0-H, Bamba)
    linear: str = ""
    rope_key: str = ""  # the key that turns rotary positions on when it says "rope" (Granite 4.0-H)
    # the rope_scaling a config omits (GptOssConfig's default: YaRN, factor 32); None: no default
    rope_scaling: dict[str, Any] | None = None
    glu_clamp: float | None = None  # default swiglu_limit (GptOssConfig: 7.0); None: no clamp
    softcap: bool = False  # Gemma 2's attention and final logit soft-capping
    max_pos: int = 2048  # default max_position_embeddings (Gemma 3's Hub configs omit it)


# the names one MoE quantity goes by in transformers' configs (see the experts block of
# ``decoder``)
_EXPERT_KEYS = ("num_local_experts", "num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token")
_SHARED_KEYS = ("n_shared_experts", "num_shared_experts")


def _aliases(key: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The other names of ``key`` when it is one of ``names`` (none otherwise)."""
    return tuple(n for n in names if n != key) if key in names else ()


def _mistral_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    return (lambda i: True) if c.get("sliding_window", default=None) else None


def _qwen_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    # Qwen2/Qwen3 configuration: sliding only with use_sliding_window, from max_window_layers on
    if not c.get("use_sliding_window", default=False, kind=bool):
        return None
    default = {"qwen2": layers, "qwen2_5_vl_text": 80}.get(str(c.data.get("model_type")), 28)
    first = c.get("max_window_layers", default=default)
    return lambda i: i >= first


def _gemma2_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    return lambda i: i % 2 == 0  # even layers slide


def _gemma3_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    return _every(c.get("sliding_window_pattern", default=6))


def _gpt_oss_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    return _every(2)  # sliding, full, sliding, ... (GptOssConfig)


def _llama4_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
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


def _phi3_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    return (lambda i: True) if c.get("sliding_window", default=None) else None


def _ministral_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    # MinistralConfig: every layer slides unless sliding_window is null (its default is 4096)
    return None if c.data.get("sliding_window", 4096) is None else (lambda i: True)


def _dots1_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    # Dots1Config: with a sliding_window, the layers from max_window_layers on slide
    first = c.get("max_window_layers", default=62)
    return lambda i: i >= first


def _pattern_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    # Cohere2Config and Exaone4Config: every sliding_window_pattern-th layer attends globally;
    # EXAONE 4's Hub configs spell the pattern as a string, "LLLG" (L: local, G: global)
    pattern = c.data.get("sliding_window_pattern", 4)
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        return lambda i: pattern[i % len(pattern)] == "L"
    step = c.get("sliding_window_pattern", default=4)
    return _every(step) if step else None


def _olmo3_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    return _every(4)  # Olmo3Config: three sliding layers, then a full one


def _smollm3_layout(c: Config, layers: int) -> Callable[[int], bool] | None:
    # SmolLM3Config: with use_sliding_window, the NoPE layers (no_rope_layers[i] == 0, every
    # no_rope_layer_interval-th by default) slide
    if not c.get("use_sliding_window", default=False, kind=bool):
        return None
    flags = c.data.get("no_rope_layers")
    if flags is None:
        return lambda i: not _every(c.get("no_rope_layer_interval", default=4))(i)
    if not isinstance(flags, list) or len(flags) != layers:
        raise GpuplanError(f"{c.where}: no_rope_layers", f"must list one 0/1 per layer ({layers})")
    return lambda i: not flags[i]


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
    # Gated DeltaNet hybrids: three linear-attention layers to one gated softmax layer by default
    # (Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig); zero-centred (1 + w) RMSNorms
    "qwen3_next": _Family(
        head_dim=256,
        qk_norm=True,
        norm="rmsnorm_gemma",
        vocab=151_936,
        experts=("num_experts", 512),
        top_k=10,
        expert_ffn_default=512,
        shared="shared_expert_intermediate_size",
        shared_default=512,
        shared_gate=True,
        moe_rule="qwen3_moe",
        linear="gdn",
    ),
    "qwen3_5_text": _Family(head_dim=256, qk_norm=True, norm="rmsnorm_gemma", vocab=248_320, linear="gdn"),
    "qwen3_5_moe_text": _Family(
        head_dim=256,
        qk_norm=True,
        norm="rmsnorm_gemma",
        vocab=248_320,
        experts=("num_experts", 256),
        top_k=8,
        expert_ffn_default=512,
        shared="shared_expert_intermediate_size",
        shared_default=512,
        shared_gate=True,
        no_dense=True,
        linear="gdn",
    ),
    # Mamba-2 hybrids: Granite 4.0-H (GraniteMoeHybridConfig: Mamba-2 and attention layers, each with
    # a shared MLP of shared_intermediate_size and, with num_local_experts, routed experts of
    # intermediate_size; no rotary positions unless position_embedding_type is "rope") and Bamba
    # (BambaConfig: attention at attn_layer_indices)
    "granitemoehybrid": _Family(
        vocab=32_000,
        experts=("num_local_experts", 8),
        top_k=2,
        expert_ffn="intermediate_size",
        dense_ffn="shared_intermediate_size",
        shared="shared_intermediate_size",
        shared_default=1024,
        linear="mamba2",
        rope_key="position_embedding_type",
    ),
    "bamba": _Family(vocab=128_000, linear="mamba2"),
    # Kimi-Linear (KimiLinearConfig): Kimi Delta Attention layers beside MLA ones, DeepSeek's MoE
    # (first_k_dense_replace 1, one shared expert, group-limited routing off by default)
    "kimi_linear": _Family(
        vocab=163_840,
        mla=True,
        mla_defaults=(0, 64, 128, 128),  # no query compression (q_lora_rank None)
        experts=("num_local_experts", 256),
        top_k=8,
        expert_ffn_default=1024,
        shared="n_shared_experts",
        moe_rule="deepseek",
        first_dense_default=1,
        groups_default=(1, 1),
        linear="kda",
    ),  # its config has no rope switch: rotary in every attention layer
    # the text models of Qwen2.5-VL (Qwen2-shaped) and Qwen3-VL (Qwen3-shaped)
    "qwen2_5_vl_text": _Family(qkv_bias=True, sliding=_qwen_layout, vocab=152_064),
    "qwen3_vl_text": _Family(head_dim=128, qk_norm=True, vocab=151_936),
    "gemma2": _Family(
        head_dim=256,
        tied=True,
        act="gelu_pytorch_tanh",
        gemma=True,
        norms=(2, 2),
        window=4096,
        sliding=_gemma2_layout,
        softcap=True,
    ),
    "gemma3_text": _Family(
        head_dim=256,
        tied=True,
        act="gelu_pytorch_tanh",
        gemma=True,
        norms=(2, 2),
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
        rope_scaling={"rope_type": "yarn", "factor": 32.0},
        glu_clamp=7.0,
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
        groups_default=(1, 1),
    ),
    "deepseek_v3": _Family(
        mla=True,
        experts=("n_routed_experts", None),
        shared="n_shared_experts",
        moe_rule="deepseek",
        first_dense_default=3,  # DeepseekV3Config's first_k_dense_replace
        groups_default=(8, 4),  # DeepseekV3Config's n_group, topk_group
    ),
    "deepseek_v32": _Family(  # DeepSeek-V3.2: V3 with DeepSeek Sparse Attention
        mla=True,
        dsa=True,
        experts=("n_routed_experts", None),
        shared="n_shared_experts",
        moe_rule="deepseek",
        first_dense_default=3,
        groups_default=(8, 4),
    ),
    # --- Llama-shaped dense families (each as its transformers configuration and modeling code) ---
    "gemma": _Family(head_dim=256, tied=True, act="gelu_pytorch_tanh", gemma=True, vocab=256_000),
    "granite": _Family(),  # Llama with scaling multipliers (no weights)
    "ministral": _Family(window=4096, sliding=_ministral_layout),
    # Ministral 3 (Ministral3Config): Mistral's layers with head_dim 128 and YaRN by default; its
    # per-position query scale (get_llama_4_attn_scale, one multiply of q) is not timed
    "ministral3": _Family(
        head_dim=128,
        vocab=131_072,
        sliding=_mistral_layout,
        rope_scaling={
            "rope_type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 16384,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    ),
    "hunyuan_v1_dense": _Family(qk_norm=True),  # query_layernorm / key_layernorm over each head
    "helium": _Family(head_dim=128),
    "smollm3": _Family(tied=True, window=None, sliding=_smollm3_layout),
    "seed_oss": _Family(head_dim=128, attention_bias=True, bias="qkv", o_bias_key="attention_out_bias"),
    "ernie4_5": _Family(head_dim=128, tied=True, bias_key="use_bias", mlp_bias_key="use_bias"),
    "glm4": _Family(head_dim=128, attention_bias=True, bias="qkv", norms=(2, 2)),
    "olmo2": _Family(norm="rmsnorm_fp32", qk_norm=True, qk_norm_full=True, norms=(0, 2)),
    "olmo3": _Family(
        norm="rmsnorm_fp32", qk_norm=True, qk_norm_full=True, norms=(0, 2), window=4096, sliding=_olmo3_layout
    ),
    "exaone4": _Family(qk_norm=True, norms=(0, 2), window=4096, sliding=_pattern_layout),
    "cohere": _Family(tied=True, norm="layernorm_fp32", parallel=True, qk_norm="use_qk_norm", qk_norm_full=True),
    "cohere2": _Family(tied=True, norm="layernorm_fp32", parallel=True, window=4096, sliding=_pattern_layout),
    "starcoder2": _Family(
        tied=True,
        act="gelu_pytorch_tanh",
        gated=False,
        norm="layernorm",
        attention_bias=True,
        bias_key="use_bias",
        mlp_bias=True,
        mlp_bias_key="use_bias",
        sliding=_mistral_layout,
        dropout_key="residual_dropout",
    ),
    "stablelm": _Family(
        norm="layernorm",
        bias_key="use_qkv_bias",
        bias="qkv",
        parallel="use_parallel_residual",
        dropout_key="hidden_dropout",
        unsupported=("qk_layernorm",),  # one LayerNorm per head, without bias
    ),
    "phi": _Family(
        act="gelu_new",
        gated=False,
        norm="layernorm",
        parallel=True,
        attention_bias=True,
        bias_key="",
        mlp_bias=True,
        mlp_bias_key="",
        lm_head_bias=True,
        dropout_key="resid_pdrop",
        unsupported=("qk_layernorm",),
    ),
    "nemotron": _Family(act="relu2", gated=False, norm="layernorm"),  # LayerNorm1p: weight and bias
    "arcee": _Family(act="relu2", gated=False),
    "apertus": _Family(act="xielu", gated=False, qk_norm=True),
    # --- MoE families -------------------------------------------------------------------------------
    "qwen2_moe": _Family(
        attention_bias=True,  # Qwen2MoeConfig.qkv_bias, True unless a config turns it off
        bias_key="qkv_bias",
        bias="qkv",
        sliding=_qwen_layout,
        experts=("num_experts", 60),
        top_k=4,
        expert_ffn_default=1408,
        shared="shared_expert_intermediate_size",
        shared_default=5632,
        shared_gate=True,
        moe_rule="qwen3_moe",  # decoder_sparse_step and mlp_only_layers, as Qwen3-MoE
    ),
    "olmoe": _Family(
        qk_norm=True, qk_norm_full=True, experts=("num_experts", 64), top_k=8, expert_ffn="intermediate_size"
    ),
    "granitemoe": _Family(experts=("num_local_experts", 8), top_k=2, expert_ffn="intermediate_size"),
    "granitemoeshared": _Family(
        experts=("num_local_experts", 8),
        top_k=2,
        expert_ffn="intermediate_size",
        shared="shared_intermediate_size",
        shared_default=0,
    ),
    "phimoe": _Family(
        norm="layernorm",
        sliding=_mistral_layout,
        experts=("num_local_experts", 16),
        top_k=2,
        expert_ffn="intermediate_size",
        lm_head_bias="lm_head_bias",
    ),
    # GLM-5: MLA, DeepSeek Sparse Attention and DeepSeek's MoE layout
    "glm_moe_dsa": _Family(
        mla=True,
        mla_defaults=(2048, 64, 192, 256),
        dsa=True,
        dsa_defaults=(2048, 32, 128),
        experts=("n_routed_experts", 256),
        top_k=8,
        expert_ffn_default=2048,
        shared="n_shared_experts",
        moe_rule="deepseek",
        first_dense_default=3,
        groups_default=(1, 1),
    ),
    # GLM-4.7-Flash: MLA and DeepSeek's MoE layout
    "glm4_moe_lite": _Family(
        mla=True,
        mla_defaults=(768, 64, 192, 256),
        experts=("n_routed_experts", 64),
        top_k=4,
        expert_ffn_default=1536,
        shared="n_shared_experts",
        moe_rule="after_first",  # Glm4MoeLiteConfig: the first layer dense, whatever first_k_dense_replace says
        groups_default=(1, 1),
    ),
    "exaone_moe": _Family(
        qk_norm=True,
        window=4096,
        sliding=_pattern_layout,
        experts=("num_experts", 64),
        top_k=8,
        expert_ffn_default=1024,
        shared="num_shared_experts",
        moe_rule="deepseek",
        first_dense_default=1,
        groups_default=(1, 1),
    ),
    "ernie4_5_moe": _Family(
        tied=True,
        unsupported=("use_bias",),  # biases on attention and the dense MLPs but not on the experts
        experts=("moe_num_experts", 64),
        top_k=6,
        top_k_key="moe_k",
        expert_ffn_default=1536,
        shared="moe_num_shared_experts",
        shared_default=2,
        moe_rule="ernie",
        router_bias=True,  # the gate's e_score_correction_bias, one value per expert
    ),
    "dots1": _Family(
        qk_norm=True,
        window=4096,
        sliding=_dots1_layout,
        experts=("n_routed_experts", None),
        expert_ffn_default=1408,
        shared="n_shared_experts",
        shared_default=0,
        moe_rule="deepseek",
        groups_default=(1, 1),
    ),
    "minimax_m2": _Family(
        head_dim=128,
        qk_norm=True,
        qk_norm_full=True,
        experts=("num_local_experts", 256),
        top_k=8,
        expert_ffn="intermediate_size",
    ),
}
# default max_position_embeddings of each family's transformers config class, where it is not
# LlamaConfig's 2048 (tests/specs/test_hf_defaults.py reads them from transformers)
for _type, _pos in {
    "bamba": 262144,
    "kimi_linear": 1048576,
    "mistral": 131072,
    "mixtral": 131072,
    "qwen2": 32768,
    "qwen3": 32768,
    "qwen3_moe": 32768,
    "qwen3_next": 32768,
    "qwen3_5_text": 32768,
    "qwen3_5_moe_text": 32768,
    "qwen2_5_vl_text": 32768,
    "qwen3_vl_text": 128000,
    "gemma2": 8192,
    "gemma3_text": 131072,
    "phi3": 4096,
    "gpt_oss": 131072,
    "llama4_text": 131072,
    "glm4_moe": 131072,
    "deepseek_v3": 4096,
    "deepseek_v32": 163840,
    "gemma": 8192,
    "helium": 4096,
    "smollm3": 32768,
    "seed_oss": 524288,
    "ernie4_5": 131072,
    "glm4": 131072,
    "cohere": 8192,
    "cohere2": 8192,
    "starcoder2": 4096,
    "stablelm": 4096,
    "nemotron": 4096,
    "arcee": 4096,
    "qwen2_moe": 32768,
    "olmoe": 4096,
    "phimoe": 131072,
    "minimax_m2": 196608,
    "ernie4_5_moe": 131072,
    "ministral": 131072,
    "ministral3": 262144,
    "glm4_moe_lite": 202752,
    "apertus": 65536,
    "glm_moe_dsa": 202752,
}.items():
    FAMILIES[_type] = dataclasses.replace(FAMILIES[_type], max_pos=_pos)


def _layer_flags(c: Config, f: _Family, layers: int) -> tuple[int | None, int]:
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
        local = sum(t in LOCAL_TYPES for t in types)
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


def _step(c: Config, key: str) -> int:
    """A 'every step-th layer is MoE' key: 0 would divide by zero where transformers reads it."""
    step: int = c.get(key, default=1)
    if step < 1:
        raise GpuplanError(f"{c.where}: {key}", f"must be at least 1, got {step}", "1 makes every layer MoE")
    return step


MLP_TYPES = {"dense": False, "sparse": True}  # transformers' mlp_layer_types (DeepSeek-V3.2, GLM-4.7-Flash)


def _moe_layers(c: Config, f: _Family, layers: int) -> dict[str, Any]:
    types = c.data.get("mlp_layer_types")
    if types is not None:  # the per-layer list a config class builds, when given, decides
        if not isinstance(types, list) or len(types) != layers or any(t not in MLP_TYPES for t in types):
            raise GpuplanError(
                f"{c.where}: mlp_layer_types",
                f"must list one of {tuple(MLP_TYPES)} per layer ({layers})",
                "fix mlp_layer_types or leave it out",
            )
        return dict(moe_layers=tuple(i for i, t in enumerate(types) if MLP_TYPES[t]))
    if f.moe_rule == "deepseek":  # DeepseekV3DecoderLayer: MoE from first_k_dense_replace on
        return dict(
            first_dense_layers=c.get("first_k_dense_replace", default=f.first_dense_default),
            moe_layer_freq=c.get("moe_layer_freq", default=1),
        )
    if f.moe_rule == "qwen3_moe":  # Qwen3MoeDecoderLayer
        step = _step(c, "decoder_sparse_step")
        dense = c.get("mlp_only_layers", default=[], kind=list)
        return dict(moe_layers=tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0))
    if f.moe_rule == "after_first":
        return dict(moe_layers=tuple(range(1, layers)))
    if f.moe_rule == "ernie":  # Ernie4_5_MoeDecoderLayer: every interval-th layer from start to end
        step = _step(c, "moe_layer_interval")
        start = c.get("moe_layer_start_index", default=1)
        end = c.data.get("moe_layer_end_index", -1)
        end = layers - 1 if end == -1 else c.get("moe_layer_end_index")
        return dict(moe_layers=tuple(i for i in range(layers) if (i + 1) % step == 0 and start <= i <= end))
    if f.moe_rule == "llama4":  # Llama4TextConfig.moe_layers, default every interleave_moe_layer_step-th
        given = c.get("moe_layers", default=None, kind=list)
        if given is None:
            step = _step(c, "interleave_moe_layer_step")
            given = list(range(step - 1, layers, step))
        return dict(moe_layers=tuple(int(i) for i in given))
    return {}


def _head_dim(c: Config, f: _Family, hidden: int, heads: int) -> int:
    """``head_dim``, else the family's default, else hidden_size / num_attention_heads, which must
    then divide: a remainder is a typo far more often than a model (and transformers would drop it)."""
    if c.data.get("head_dim") is not None or f.head_dim:
        return int(c.get("head_dim", default=f.head_dim))
    if heads and hidden % heads:
        raise GpuplanError(
            f"{c.where}: hidden_size",
            f"{hidden} is not divisible by num_attention_heads={heads} and head_dim is not given",
            "fix hidden_size or num_attention_heads, or add head_dim to config.json",
        )
    return hidden // heads if heads else 0


def _rope_attention_factor(c: Config, f: _Family) -> float:
    """YaRN's attention factor from ``rope_scaling`` (transformers 5: ``rope_parameters``), as
    transformers' _compute_yarn_parameters and Megatron's _yarn_get_concentration_factor compute it:
    ``attention_factor`` if given, else get_mscale(factor, mscale) / get_mscale(factor,
    mscale_all_dim) when both are given (DeepSeek: 1), else get_mscale(factor) = 0.1 ln(factor) + 1;
    1 for any other rope type."""
    rs = c.data.get("rope_scaling") or c.data.get("rope_parameters") or f.rope_scaling
    if not isinstance(rs, dict) or (rs.get("rope_type") or rs.get("type")) != "yarn":
        return 1.0
    if isinstance(rs.get("attention_factor"), (int, float)):
        return float(rs["attention_factor"])

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    factor = float(rs.get("factor") or 1.0)
    mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    return get_mscale(factor)


def _every_layer_indexes(c: Config, layers: int) -> None:
    """GLM-5's DSA may let a layer reuse the previous layer's top-k ("shared": no indexer of its own),
    per indexer_types, index_topk_pattern ("F"/"S") or index_topk_freq / index_skip_topk_offset
    (GlmMoeDsaConfig.__post_init__); gpuplan models an indexer in every layer and refuses the rest."""
    types = c.data.get("indexer_types")
    if types is None:
        pattern = c.data.get("index_topk_pattern")
        if isinstance(pattern, str):
            types = ["shared" if ch == "S" else "full" for ch in pattern]
        else:
            freq = max(c.get("index_topk_freq", default=1), 1)
            offset = c.get("index_skip_topk_offset", default=2)
            types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(layers)]
    if not isinstance(types, list) or any(t != "full" for t in types):
        raise GpuplanError(
            f"{c.where}: indexer_types",
            'layers that reuse another layer\'s top-k ("shared") are not modelled: every layer runs its own indexer here',
            'set indexer_types to "full" for every layer to plan an upper bound on the indexer\'s cost',
        )


def _linear_layers(c: Config, layers: int, kind: str) -> dict[str, Any]:
    """A hybrid's linear layers and their heads: ``layer_types``' "linear_attention" (or "mamba"),
    else the family's rule: Gated DeltaNet's all but every full_attention_interval-th (default 4,
    as Qwen3NextConfig builds them), Bamba's all but attn_layer_indices, Granite 4.0-H's all."""
    types = c.data.get("layer_types")
    linear = None
    if isinstance(types, list):  # validated against LAYER_TYPES by _layer_flags
        linear = tuple(i for i, t in enumerate(types) if t in LINEAR_TYPES)
    if kind == "kda":  # its default layout reads linear_attn_config
        return _kda(c, layers, linear)
    if linear is None and kind == "mamba2":
        attention = c.get("attn_layer_indices", default=[], kind=list) or []
        linear = tuple(i for i in range(layers) if i not in attention)
    elif linear is None:
        step = _step(c, "full_attention_interval") if "full_attention_interval" in c.data else 4
        linear = tuple(i for i in range(layers) if (i + 1) % step)
    if kind == "mamba2":
        return _mamba2(c, linear)
    return dict(
        linear_layers=linear,
        linear_k_heads=c.get("linear_num_key_heads", default=16),
        linear_v_heads=c.get("linear_num_value_heads", default=32),
        linear_k_dim=c.get("linear_key_head_dim", default=128),
        linear_v_dim=c.get("linear_value_head_dim", default=128),
        linear_conv=c.get("linear_conv_kernel_dim", default=4),
        linear_state_bytes=_state_bytes(c),
        # Qwen3.5's configs say attn_output_gate: true; transformers' Qwen3NextAttention and
        # Qwen3_5Attention always project the gate (q_proj is 2 x heads x head_dim)
        attn_output_gate=c.get("attn_output_gate", default=True, kind=bool),
    )


def _kda(c: Config, layers: int, linear: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Kimi-Linear's KDA layers and heads (KimiLinearConfig.__post_init__): ``layer_types`` (read by
    the caller), else the checkpoint's ``linear_attn_config`` ({full_attn_layers, kda_layers},
    1-indexed; head_dim, num_heads, short_conv_kernel_size), else full attention at every 4th
    layer from the 4th (0-indexed i % 4 == 0, i > 0)."""
    sub = c.data.get("linear_attn_config") or {}
    if not isinstance(sub, dict):
        raise GpuplanError(f"{c.where}: linear_attn_config", "must be an object", "fix it or leave it out")
    inner = Config(sub, f"{c.where}: linear_attn_config")
    if linear is None:
        kda = sub.get("kda_layers")
        if isinstance(kda, list) and "full_attn_layers" in sub:
            if not all(isinstance(i, int) and 1 <= i <= layers for i in kda):
                raise GpuplanError(f"{c.where}: linear_attn_config.kda_layers", f"must list layers 1..{layers}")
            linear = tuple(sorted(i - 1 for i in kda))
        else:
            linear = tuple(i for i in range(layers) if not (i and i % 4 == 0))
    heads = inner.get("num_heads", default=c.get("linear_num_heads", default=32))
    dim = inner.get("head_dim", default=c.get("linear_head_dim", default=128))
    return dict(
        linear_layers=linear,
        linear_kind="kda",
        linear_k_heads=heads,
        linear_v_heads=heads,
        linear_k_dim=dim,
        linear_v_dim=dim,
        linear_conv=inner.get("short_conv_kernel_size", default=c.get("linear_conv_kernel_dim", default=4)),
        linear_state_bytes=_state_bytes(c),
    )


def _mamba2(c: Config, linear: tuple[int, ...]) -> dict[str, Any]:
    """Mamba-2's mixer keys (GraniteMoeHybridConfig, BambaConfig) as ModelSpec's linear-attention
    fields: n_groups of B and C of d_state as the key heads, the SSM heads of head_dim as the value
    heads (head_dim "auto": mamba_expand x hidden_size / mamba_n_heads, which must divide)."""
    heads = c.get("mamba_n_heads", default=128)
    inner = c.get("mamba_expand", default=2) * c.get("hidden_size")
    head_dim = c.data.get("mamba_d_head", "auto")
    if head_dim == "auto":
        if heads < 1 or inner % heads:
            raise GpuplanError(
                f"{c.where}: mamba_n_heads",
                f"{heads} does not divide mamba_expand x hidden_size = {inner}",
                "use a head count that divides it, or give mamba_d_head",
            )
        head_dim = inner // heads
    else:
        head_dim = c.get("mamba_d_head")
        if head_dim * heads != inner:
            raise GpuplanError(
                f"{c.where}: mamba_d_head",
                f"{head_dim} x mamba_n_heads={heads} is not mamba_expand x hidden_size = {inner}",
                'fix mamba_d_head or set it to "auto"',
            )
    return dict(
        linear_layers=linear,
        linear_kind="mamba2",
        linear_k_heads=c.get("mamba_n_groups", default=1),
        linear_k_dim=c.get("mamba_d_state", default=256),
        linear_v_heads=heads,
        linear_v_dim=head_dim,
        linear_conv=c.get("mamba_d_conv", default=4),
        linear_conv_bias=c.get("mamba_conv_bias", default=True, kind=bool),
        linear_chunk=c.get("mamba_chunk_size", default=256),
        linear_bias=c.get("mamba_proj_bias", default=False, kind=bool),
        linear_state_bytes=_state_bytes(c),
    )


STATE_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}


def _state_bytes(c: Config) -> int:
    """Bytes per recurrent-state element a server keeps: ``mamba_ssm_dtype`` (Qwen3.5; vLLM reads it
    into mamba_ssm_cache_dtype) or ``mamba_ssm_cache_dtype`` (NVIDIA's hybrids), else vLLM's "auto",
    the model's 16-bit type."""
    name = c.get("mamba_ssm_dtype", "mamba_ssm_cache_dtype", default="auto", kind=str)
    if name not in STATE_DTYPES:
        key = "mamba_ssm_dtype" if "mamba_ssm_dtype" in c.data else "mamba_ssm_cache_dtype"
        raise GpuplanError(f"{c.where}: {key}", f"unknown dtype {name!r}", f"use one of {tuple(STATE_DTYPES)}")
    return STATE_DTYPES[name]


def decoder(c: Config, name: str, model_type: str) -> ModelSpec:
    """Every Llama-shaped family: the shared keys, read through the family's :class:`_Family`."""
    f = FAMILIES[model_type]
    for key in f.unsupported:
        if c.get(key, default=False, kind=bool):
            raise GpuplanError(
                f"{c.where}: {key}",
                f"is true, a layout gpuplan does not model for {model_type}",
                f"plan without it by setting {key} to false (its weights are a small share of the model)",
            )
    hidden = c.get("hidden_size")
    heads = c.get("num_attention_heads")
    layers = c.get("num_hidden_layers")

    def switch(key: bool | str, default: bool = False) -> bool:
        """A family's fixed choice (a bool), else the config's boolean ``key`` ("" : ``default``)."""
        if isinstance(key, bool):
            return key
        return c.get(key, default=default, kind=bool) if key else default

    attention_bias = switch(f.bias_key, f.attention_bias)
    qk_norm = switch(f.qk_norm)
    parallel = switch(f.parallel)
    pre_norms, post_norms = (1, 0) if parallel else f.norms
    if f.no_dense:
        dense_ffn = c.get(f.dense_ffn, f.expert_ffn, default=f.expert_ffn_default)
    else:
        dense_ffn = c.get(f.dense_ffn, default=16384 if f.dense_ffn == "intermediate_size_mlp" else MISSING)
    # MLA: head_dim is the "nope" part of queries and keys, its own key; hidden_size need not divide
    # over the heads (GLM-4.7-Flash: 20 heads of a 2048 model)
    head_dim = c.get("qk_nope_head_dim", default=f.mla_defaults[2]) if f.mla else _head_dim(c, f, hidden, heads)
    window, local = _layer_flags(c, f, layers)
    kw: dict[str, Any] = dict(
        name=name,
        model_type=model_type,
        vocab_size=c.get("vocab_size", default=f.vocab or MISSING),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=c.get("num_key_value_heads", default=heads),
        head_dim=head_dim,
        ffn_size=dense_ffn,
        gated_mlp=f.gated,
        activation=activation(c.get("hidden_act", "hidden_activation", default=f.act, kind=str), c.where),
        norm=f.norm,
        pre_norms_per_layer=pre_norms,
        post_norms_per_layer=post_norms,
        parallel_attn=parallel,
        qkv_bias=attention_bias or f.qkv_bias,
        o_bias=(attention_bias and f.bias == "all") or switch(f.o_bias_key),
        mlp_bias=switch(f.mlp_bias_key, f.mlp_bias),
        tied_embeddings=c.get("tie_word_embeddings", default=f.tied, kind=bool),
        lm_head_bias=switch(f.lm_head_bias),
        dropout=c.get(f.dropout_key, default=0.0, kind=float) if f.dropout_key else 0.0,
        max_position_embeddings=c.get("max_position_embeddings", default=f.max_pos),
        attention_dropout=c.get("attention_dropout", default=0.0, kind=float),
        sliding_window=window,
        num_sliding_layers=local,
        attention_chunked=f.chunked and local > 0,
        qk_norm=qk_norm,
        qk_norm_full=qk_norm and f.qk_norm_full,
        attn_sinks=f.sinks,
        rope_attention_factor=_rope_attention_factor(c, f),
        glu_clamp=c.get("swiglu_limit", default=f.glu_clamp, kind=float) if f.glu_clamp else None,
    )
    if f.gemma:
        kw.update(norm="rmsnorm_gemma")
        kw["activation"] = activation(c.get("hidden_activation", "hidden_act", default=f.act, kind=str), c.where)
    if f.softcap:
        kw.update(
            attn_logit_softcap=c.get("attn_logit_softcapping", default=50.0, kind=float),
            final_logit_softcap=c.get("final_logit_softcapping", default=30.0, kind=float),
        )
    if f.experts:
        key, default = f.experts
        # transformers renames these keys between versions and families (Qwen3MoeConfig maps
        # num_experts to num_local_experts and saves the latter since v5; KimiLinearConfig saves
        # num_experts, num_experts_per_token and num_shared_experts): the family's own key first,
        # then its aliases, so a config saved by either version reads the same
        experts = c.get(key, *_aliases(key, _EXPERT_KEYS), default=MISSING if default is None else default)
        expert_ffn = c.get(f.expert_ffn, default=MISSING if f.expert_ffn_default is None else f.expert_ffn_default)
        shared = 0
        if f.shared.endswith("shared_experts"):
            shared = expert_ffn * c.get(f.shared, *_aliases(f.shared, _SHARED_KEYS), default=f.shared_default)
        elif f.shared == "one":
            shared = expert_ffn
        elif f.shared:  # the shared expert's own width key
            shared = c.get(f.shared, default=f.shared_default)
        kw.update(
            num_experts=experts,
            experts_per_token=c.get(
                f.top_k_key, *_aliases(f.top_k_key, _TOP_K_KEYS), default=MISSING if f.top_k is None else f.top_k
            ),
            moe_ffn_size=expert_ffn,
            shared_expert_ffn_size=shared,
            router_bias=f.router_bias,
            shared_expert_gate=f.shared_gate and shared > 0,
            **_moe_layers(c, f, layers),
        )
        if f.expert_bias:
            kw["mlp_bias"] = True  # gpt-oss experts carry gate_up and down biases
        if f.groups_default is not None and c.get("topk_method", default="", kind=str) != "greedy":
            # DeepSeek's group-limited routing (DeepSeek-V2 report section 2.1.3, "device-limited
            # routing"; V3 report 2.1.2, "node-limited"): n_group groups, topk_group per token
            kw.update(
                expert_groups=c.get("n_group", default=f.groups_default[0], kind=int) or 1,
                expert_groups_per_token=c.get("topk_group", default=f.groups_default[1], kind=int) or 1,
            )
    if f.mla:
        # q_lora_rank null = a plain q_proj
        q_default, rope_default, _, v_default = f.mla_defaults
        # q_lora_rank: null (DeepSeek-V2-Lite) means no query compression; a missing key means the
        # configuration class's default
        q_rank = c.data.get("q_lora_rank", q_default)
        if q_rank is not None:
            q_rank = c.get("q_lora_rank", default=q_default)
        kw.update(
            q_lora_rank=q_rank or 0,
            kv_lora_rank=c.get("kv_lora_rank"),
            qk_rope_head_dim=c.get("qk_rope_head_dim", default=rope_default),
            v_head_dim=c.get("v_head_dim", default=v_default),
        )
    if f.linear:
        kw.update(_linear_layers(c, layers, f.linear))
    if f.rope_key:
        kw.update(rotary=c.get(f.rope_key, default="", kind=str) == "rope")
    if f.dsa:
        _every_layer_indexes(c, layers)
        topk, heads, dim = f.dsa_defaults
        kw.update(
            index_topk=c.get("index_topk", default=topk),
            index_heads=c.get("index_n_heads", default=heads),
            index_head_dim=c.get("index_head_dim", default=dim),
        )
    notes = []
    # DeepSeek's, GLM's and Qwen3.5's key for their multi-token-prediction layers
    mtp = c.get("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers", default=0)
    require(mtp >= 0, f"{c.where}: num_nextn_predict_layers", f"must be non-negative, got {mtp}")
    kw.update(mtp_layers=mtp)
    if mtp:
        notes.append(
            f"{mtp} multi-token-prediction layer(s) not in the parameter count (transformers does not build "
            f"them); training counts them with {field_ref('mtp_layers', mtp)}"
        )
    if kw.get("linear_layers"):
        kind = {"gdn": "Gated DeltaNet", "kda": "Kimi Delta Attention", "mamba2": "Mamba-2"}[
            kw.get("linear_kind", "gdn")
        ]
        notes.append(
            f"{len(kw['linear_layers'])} of {layers} layers are {kind} linear attention: "
            "a fixed state per sequence instead of a KV cache"
        )
    return ModelSpec(notes=tuple(notes), **kw)
