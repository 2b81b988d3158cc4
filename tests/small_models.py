"""Small configs of every family for the CPU oracle tests (random weights, no downloads)."""

CONFIGS = {
    "llama": dict(
        model_type="llama",
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
    ),
    "qwen2": dict(
        model_type="qwen2",
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "mistral-mqa": dict(
        model_type="mistral",
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        sliding_window=None,
    ),
    "mixtral": dict(
        model_type="mixtral",
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    "gemma2": dict(
        model_type="gemma2",
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    ),
    "gpt2": dict(
        model_type="gpt2",
        vocab_size=1000,
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_positions=256,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    ),
    "opt": dict(
        model_type="opt",
        vocab_size=1000,
        hidden_size=128,
        ffn_dim=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
        word_embed_proj_dim=128,
        dropout=0.0,
    ),
    "bloom": dict(model_type="bloom", vocab_size=1000, hidden_size=128, n_layer=2, n_head=4),
    "falcon": dict(model_type="falcon", vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4),
    "deepseek-mla": dict(
        model_type="deepseek_v3",
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=2,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        n_group=1,
        topk_group=1,
    ),
}

# Llama-shaped families that differ in their norms, biases, activation or residual layout, at one
# small size (head_dim given: their config classes default it to 128 or 256)
_SMALL = dict(
    vocab_size=1000,
    hidden_size=128,
    intermediate_size=352,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    pad_token_id=0,
)
CONFIGS |= {
    "qwen3": dict(_SMALL, model_type="qwen3"),  # per-head q/k RMSNorm
    "olmo2": dict(_SMALL, model_type="olmo2"),  # norms after the blocks only, full-width q/k norms
    "exaone4": dict(_SMALL, model_type="exaone4"),  # OLMo 2's layout, per-head q/k norms
    "cohere-qk": dict(_SMALL, model_type="cohere", use_qk_norm=True),  # parallel blocks, fp32 LayerNorm
    "starcoder2": dict(_SMALL, model_type="starcoder2"),  # LayerNorm, biases, GELU MLP
    "arcee": dict(_SMALL, model_type="arcee"),  # squared-ReLU MLP
    "apertus": dict(_SMALL, model_type="apertus"),  # xIELU MLP (two trainable scalars), q/k norms
    "nemotron": dict(_SMALL, model_type="nemotron"),  # LayerNorm1p, squared ReLU, partial rotary
    "phi": dict(_SMALL, model_type="phi", resid_pdrop=0.0),  # parallel, GELU (new), partial rotary
    "glm4": dict(_SMALL, model_type="glm4"),  # four norms, fused gate/up, partial rotary
    # MoE with a sigmoid-gated shared expert and a dense layer between MoE ones
    "qwen2-moe": dict(
        _SMALL,
        model_type="qwen2_moe",
        num_hidden_layers=3,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=96,
        mlp_only_layers=[1],
    ),
    "olmoe": dict(_SMALL, model_type="olmoe", intermediate_size=64, num_experts=4, num_experts_per_tok=2),
    # Qwen3-Next's softmax layers (output gate, per-head q/k norms, zero-centred norms) and its
    # gated shared expert; its linear-attention layers run FLA's kernels on a GPU, not these
    "qwen3-next-softmax": dict(
        _SMALL,
        model_type="qwen3_next",
        head_dim=16,
        layer_types=["full_attention"] * _SMALL["num_hidden_layers"],
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
    ),
}
