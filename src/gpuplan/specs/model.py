"""A decoder-only transformer described by the facts that decide its size and cost.

One generic shape covers every supported family (Llama 2-4, Mistral, Mixtral, Qwen2/3, Qwen3-MoE,
Gemma 2/3, Phi-3/4, gpt-oss, GLM-4 MoE, DeepSeek-V2/V3, GPT-2, OPT, BLOOM, GPT-NeoX, Falcon): the
per-family differences are fields (biases, norm kind, gated MLP, QK norms, MoE layout, MLA,
linear-attention layers: Gated DeltaNet, Kimi Delta Attention or Mamba-2 beside softmax ones).
``gpuplan.specs.hf`` builds a ModelSpec from a Hugging Face ``config.json``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

from gpuplan.errors import require
from gpuplan.specs.vision import VisionTower

NORMS = ("rmsnorm", "rmsnorm_gemma", "rmsnorm_fp32", "layernorm", "layernorm_fp32")
# Activation functions as the eager implementation runs them; the name decides which tensors
# autograd saves (see estimate/activations.py).
LINEAR_KINDS = ("gdn", "kda", "mamba2")
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "gelu_new", "relu", "relu2", "xielu", "bloom_gelu")


class LayerKind(NamedTuple):
    """What a transformer block is made of: an MoE or a dense MLP, linear attention (Gated
    DeltaNet) or softmax attention. Blocks of one kind have the same weights and cost."""

    moe: bool = False
    linear: bool = False


MAX_LAYERS = 10_000  # transformer layers a ModelSpec may have (__post_init__)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    gated_mlp: bool = True
    activation: str = "silu"
    norm: str = "rmsnorm"
    norm_bias: bool = True  # LayerNorm's bias (MPT drops it: transformers' MptBlock sets norm.bias = None)
    pre_norms_per_layer: int = 2  # norms whose output feeds a linear layer
    post_norms_per_layer: int = 0  # norms whose output feeds the residual add (Gemma-2)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tied_embeddings: bool = False
    lm_head_bias: bool = False  # the LM head adds a vocabulary-wide bias (Phi-2)
    position_embeddings: int = 0  # rows of a learned absolute position table (0: rotary/ALiBi)
    rotary: bool = True  # rotary position embeddings (False: learned positions or ALiBi)
    embedding_norm: bool = False  # BLOOM's word_embeddings_layernorm
    embed_proj_dim: int = 0  # OPT's word_embed_proj_dim when it differs from hidden_size
    final_norm: bool = True
    parallel_attn: bool = False  # attention and MLP read the same normed input (Falcon, GPT-J)
    max_position_embeddings: int = 2048
    dropout: float = 0.0  # hidden (residual/embedding) dropout probability
    attention_dropout: float = 0.0
    sliding_window: int | None = None
    num_sliding_layers: int = 0  # layers that use the sliding window (Mistral: all, Gemma-2: half)
    # Llama 4's local layers attend within fixed chunks of ``sliding_window`` tokens (chunk-aligned,
    # not a window trailing each query): on average half the keys of a sliding window of that size
    attention_chunked: bool = False
    qk_norm: bool = False  # RMSNorm over each query and key head, with a head_dim weight (Qwen3, Gemma 3, GLM-4.5)
    # the query and key norms span all heads: one weight of the q width and one of the k width, split
    # with the heads under TP (OLMo 2/3, OLMoE, MiniMax-M2: a norm over q_proj's whole output; Cohere's
    # (heads, head_dim) LayerNorm)
    qk_norm_full: bool = False
    attn_sinks: bool = False  # one learned sink logit per head (gpt-oss)
    # YaRN's attention factor, multiplied into cos and sin (transformers' _compute_yarn_parameters,
    # Megatron's "mscale" concentration factor); 1 without YaRN. gpt-oss: 0.1 ln(32) + 1
    rope_attention_factor: float = 1.0
    # the gated activation's inputs clamped to +-this (gpt-oss ``swiglu_limit``); None: no clamp
    glu_clamp: float | None = None
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    # Mixture of experts
    num_experts: int = 0
    experts_per_token: int = 0
    moe_ffn_size: int = 0
    shared_expert_ffn_size: int = 0  # total width of always-active shared experts (DeepSeek)
    first_dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    moe_layer_freq: int = 1
    # Explicit MoE layer indices when the family's rule is not DeepSeek's (Llama 4 interleaves,
    # Qwen3-MoE has decoder_sparse_step and mlp_only_layers); None: the DeepSeek rule above
    moe_layers: tuple[int, ...] | None = None
    router_bias: bool = False  # the router linear has a bias (gpt-oss)
    shared_expert_gate: bool = False  # a sigmoid gate, Linear(hidden, 1), scales the shared expert (Qwen2-MoE)
    # Group-limited routing (DeepSeek-V2/V3: n_group, topk_group): the experts in this many equal
    # groups, each token's experts chosen inside this many of them (1, 1: no limit)
    expert_groups: int = 1
    expert_groups_per_token: int = 1
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 switches it on
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer of index_heads heads of
    # index_head_dim scores every earlier token; each query's MLA attends only the index_topk best
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    # Gated DeltaNet linear attention (Yang et al. 2025, "Gated Delta Networks", ICLR; Qwen3-Next,
    # Qwen3.5): the layers listed mix tokens through a fixed-size recurrent state instead of softmax
    # attention. Their q and k have linear_k_heads heads of linear_k_dim, v (and the output gate z)
    # linear_v_heads heads of linear_v_dim; a causal depthwise conv of linear_conv taps runs over
    # q, k and v first. The state per sequence is linear_v_heads x linear_k_dim x linear_v_dim.
    linear_layers: tuple[int, ...] = ()
    # "gdn" (Gated DeltaNet), "kda" (Kimi Delta Attention: Gated DeltaNet with a decay per channel,
    # Kimi Team 2025, "Kimi Linear"; Kimi-Linear) or "mamba2". Mamba-2's SSD (Dao and Gu 2024,
    # "Transformers are SSMs") is the same shape read as linear attention (their section 7: C as
    # queries, B as keys, x as values), so the fields below hold it so: n_groups of B and C as the key heads of d_state
    # (linear_k_heads, linear_k_dim), the SSM heads of head_dim as the value heads (linear_v_heads,
    # linear_v_dim), its state heads x d_state x head_dim (Granite 4.0-H, Bamba)
    linear_kind: str = "gdn"
    linear_bias: bool = False  # Mamba-2's in_proj and out_proj biases (mamba_proj_bias)
    linear_conv_bias: bool = False  # Mamba-2's conv bias (mamba_conv_bias)
    # tokens per chunk of the chunked scan: FLA's Gated DeltaNet kernels use 64; Mamba-2's
    # mamba_chunk_size (its SSD kernels' chunk, 256 by default)
    linear_chunk: int = 64
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    linear_conv: int = 0
    # bytes per element of the recurrent state a server keeps (config.json's mamba_ssm_dtype:
    # "float32" in Qwen3.5's configs; vLLM's default, "auto", is the model's 16-bit type)
    linear_state_bytes: int = 2
    # the softmax layers' q_proj also projects a per-channel gate, sigmoid(gate) x the attention
    # output before o_proj (Qwen3-Next's gated attention, Qiu et al. 2025)
    attn_output_gate: bool = False
    # A multimodal checkpoint's image encoder and projector (specs/vision.py): its weights and
    # training states are counted on the first pipeline stage; None for a text-only model
    vision: VisionTower | None = None
    # Multi-token prediction modules the checkpoint defines (config.json's num_nextn_predict_layers,
    # Qwen3-Next's mtp_num_hidden_layers): a fact of the model, trained only when the training
    # config asks for them (TrainingConfig.mtp_layers); transformers builds none of them
    mtp_layers: int = 0
    source: str = field(default="", compare=False)
    # What the plan leaves out or approximates (a multimodal config's vision tower, MTP modules)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        # named by their config.json keys, where a user fixes them (the catalog is config.json too)
        for name, key in (
            ("vocab_size", "vocab_size"),
            ("hidden_size", "hidden_size"),
            ("num_layers", "num_hidden_layers"),
            ("num_heads", "num_attention_heads"),
            ("num_kv_heads", "num_key_value_heads"),
            ("head_dim", "head_dim"),
            ("ffn_size", "intermediate_size"),
            ("max_position_embeddings", "max_position_embeddings"),
        ):
            value = getattr(self, name)
            require(
                isinstance(value, int) and value > 0,
                key,
                f"must be a positive integer, got {value!r}",
                f"fix {key} in {self.name}'s config.json",
            )
        # every plan walks the layers one by one: a count far beyond any model (the largest have
        # ~200) is a typo that would take hours, not a model
        require(
            self.num_layers <= MAX_LAYERS,
            "num_hidden_layers",
            f"{self.num_layers:,} layers is more than any model has",
            f"fix num_hidden_layers in {self.name}'s config.json (at most {MAX_LAYERS:,})",
        )
        require(
            self.num_heads % self.num_kv_heads == 0,
            "num_key_value_heads",
            f"{self.num_kv_heads} does not divide num_attention_heads={self.num_heads}",
            "use a divisor of the number of attention heads",
        )
        require(self.norm in NORMS, "norm", f"unknown norm {self.norm!r}", f"use one of {NORMS}")
        require(
            self.activation in ACTIVATIONS,
            "activation",
            f"unknown activation {self.activation!r}",
            f"use one of {ACTIVATIONS}",
        )
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            require(0.0 <= value < 1.0, name, f"must be in [0, 1), got {value}")
        require(
            self.rope_attention_factor > 0,
            "rope_scaling.attention_factor",
            f"must be positive, got {self.rope_attention_factor}",
        )
        if self.glu_clamp is not None:
            require(self.glu_clamp > 0, "swiglu_limit", f"must be positive, got {self.glu_clamp}")
        if self.num_experts:
            require(
                0 < self.experts_per_token <= self.num_experts,
                "num_experts_per_tok",
                f"must be between 1 and num_experts={self.num_experts}, got {self.experts_per_token}",
            )
            require(
                self.moe_ffn_size > 0,
                "moe_intermediate_size",
                "must be positive for an MoE model",
                "give each expert's MLP width (the model's Hugging Face config has it)",
            )
            require(
                0 <= self.first_dense_layers <= self.num_layers,
                "first_k_dense_replace",
                f"must be between 0 and num_hidden_layers={self.num_layers}",
            )
            require(self.moe_layer_freq >= 1, "moe_layer_freq", "must be at least 1")
            require(
                self.expert_groups >= 1 and self.num_experts % self.expert_groups == 0,
                "n_group",
                f"must divide n_routed_experts={self.num_experts}, got {self.expert_groups}",
            )
            require(
                1 <= self.expert_groups_per_token <= self.expert_groups,
                "topk_group",
                f"must be between 1 and n_group={self.expert_groups}, got {self.expert_groups_per_token}",
            )
        if self.is_mla:
            require(
                self.qk_rope_head_dim > 0 and self.v_head_dim > 0,
                "qk_rope_head_dim",
                "MLA needs positive qk_rope_head_dim and v_head_dim",
            )
        if self.index_heads:
            require(
                self.is_mla and self.q_lora_rank > 0,
                "index_n_heads",
                "DeepSeek Sparse Attention's indexer reads MLA's compressed query (q_lora_rank > 0)",
            )
            require(self.index_topk > 0, "index_topk", f"must be positive, got {self.index_topk}")
            require(self.index_head_dim > 0, "index_head_dim", f"must be positive, got {self.index_head_dim}")
        if self.linear_layers:
            require(
                all(0 <= i < self.num_layers for i in self.linear_layers),
                "layer_types",
                f"linear-attention layer indices must be in [0, {self.num_layers})",
            )
            for name, key in (
                ("linear_k_heads", "linear_num_key_heads"),
                ("linear_v_heads", "linear_num_value_heads"),
                ("linear_k_dim", "linear_key_head_dim"),
                ("linear_v_dim", "linear_value_head_dim"),
                ("linear_conv", "linear_conv_kernel_dim"),
                ("linear_state_bytes", "mamba_ssm_dtype"),
                ("linear_chunk", "mamba_chunk_size"),
            ):
                value = getattr(self, name)
                require(isinstance(value, int) and value > 0, key, f"must be a positive integer, got {value!r}")
            require(
                self.linear_kind in LINEAR_KINDS,
                "linear_kind",
                f"unknown linear attention {self.linear_kind!r}",
                f"use one of {LINEAR_KINDS}",
            )
            heads, groups = ("linear_num_value_heads", "linear_num_key_heads")
            if self.linear_kind == "mamba2":
                heads, groups = ("mamba_n_heads", "mamba_n_groups")
            require(
                self.linear_v_heads % self.linear_k_heads == 0,
                heads,
                f"{self.linear_v_heads} is not a multiple of {groups}={self.linear_k_heads}",
                f"each of the {groups} serves a whole number of heads",
            )
        if self.moe_layers is not None:
            require(
                all(0 <= i < self.num_layers for i in self.moe_layers),
                "moe_layers",
                f"layer indices must be in [0, {self.num_layers})",
            )
        require(
            isinstance(self.mtp_layers, int) and self.mtp_layers >= 0,
            "num_nextn_predict_layers",
            f"must be a non-negative integer, got {self.mtp_layers!r}",
        )
        require(
            0 <= self.num_sliding_layers <= self.num_layers,
            "num_sliding_layers",
            f"must be between 0 and {self.num_layers}",
        )

    # --- derived shapes --------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of queries and keys (MLA: nope + rope parts)."""
        return self.head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        """Per-head width of values."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def q_size(self) -> int:
        return self.num_heads * self.qk_head_dim

    @property
    def kv_heads_effective(self) -> int:
        """Heads that carry distinct K/V (MLA materialises all heads)."""
        return self.num_heads if self.is_mla else self.num_kv_heads

    def is_moe_layer(self, index: int) -> bool:
        """Explicit ``moe_layers`` when given; else DeepSeek's rule: MoE from first_k_dense_replace on,
        every freq-th."""
        if self.moe_layers is not None:
            return self.is_moe and index in self.moe_layers
        return self.is_moe and index >= self.first_dense_layers and index % self.moe_layer_freq == 0

    @property
    def mtp_kind(self) -> LayerKind:
        """The block of a multi-token-prediction module: a softmax-attention layer with the last
        decoder layer's MLP (Megatron-Core's get_gpt_mtp_block_spec builds it from the last layer's
        spec, training.py counts it MoE when the last layer is; torchtitan's _build_mtp_layers copies
        the last decoder layer's config; DeepSeek-V3's checkpoint holds an MoE layer 61)."""
        return LayerKind(self.is_moe_layer(self.num_layers - 1), False)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    @property
    def linear_in_proj_width(self) -> int:
        """Outputs of a linear-attention layer's fused input projection: Gated DeltaNet's q, k, v, the
        output gate z, beta and alpha (Megatron-Core GatedDeltaNet's in_proj); Kimi Delta Attention's
        q, k, v and beta (its gates come from low-rank projections); Mamba-2's z, x, B, C and dt
        (transformers' Mamba2 mixers, Megatron-Core MambaMixer: d_inner + conv_dim + heads)."""
        kd = self.linear_k_heads * self.linear_k_dim
        vd, heads = self.linear_v_heads * self.linear_v_dim, self.linear_v_heads
        if self.linear_kind == "kda":
            return 2 * kd + vd + heads
        return 2 * kd + 2 * vd + (heads if self.linear_kind == "mamba2" else 2 * heads)

    def is_linear_layer(self, index: int) -> bool:
        """A linear-attention layer (``linear_layers``: Gated DeltaNet, KDA or Mamba-2), not softmax
        attention."""
        return index in self.linear_layers

    @property
    def num_linear_layers(self) -> int:
        return len(self.linear_layers)

    @property
    def num_attention_layers(self) -> int:
        """Layers with softmax attention (all of them but the linear-attention ones)."""
        return self.num_layers - len(self.linear_layers)

    def layer_kinds(self, first: int = 0, n: int | None = None) -> tuple[tuple[LayerKind, int], ...]:
        """(kind, count) of the layers first .. first + n - 1 (default all), in a fixed order: what
        a stage's time, weights and activations are summed over."""
        return _layer_kinds(self, first, self.num_layers - first if n is None else n)


@functools.lru_cache(maxsize=4096)  # keyed on the whole ModelSpec and the range
def _layer_kinds(m: ModelSpec, first: int, n: int) -> tuple[tuple[LayerKind, int], ...]:
    counts: dict[LayerKind, int] = {}
    for i in range(first, first + n):
        kind = LayerKind(m.is_moe_layer(i), m.is_linear_layer(i))
        counts[kind] = counts.get(kind, 0) + 1
    return tuple(sorted(counts.items()))
