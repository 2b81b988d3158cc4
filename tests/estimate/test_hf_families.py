"""The config.json normaliser against transformers on the meta device: small configs that keep each
family's real keys and quirks (the catalog's real-size entries are checked in test_params.py)."""

import numpy as np
import pytest
from test_params import build_on_meta, text_config

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.params import count_params
from gpuplan.specs.hf import model_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2)
_ROPE = {"rope_type": "default", "rope_theta": 10000.0}
_MLA = dict(
    kv_lora_rank=32,
    qk_rope_head_dim=8,
    qk_nope_head_dim=16,
    v_head_dim=16,
    moe_intermediate_size=32,
    intermediate_size=96,
    num_experts_per_tok=2,
)

FAMILIES = {
    "qwen3": dict(_SMALL, model_type="qwen3", intermediate_size=96, head_dim=32, tie_word_embeddings=True),
    "qwen3-default-head-dim": dict(_SMALL, model_type="qwen3", intermediate_size=96),  # Qwen3Config: 128
    "qwen3-sliding": dict(
        _SMALL,
        model_type="qwen3",
        intermediate_size=96,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=2,
    ),
    "qwen3-moe": dict(
        _SMALL,
        model_type="qwen3_moe",
        intermediate_size=96,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        head_dim=32,
    ),
    # transformers 5 saves Qwen3MoeConfig.num_experts under its attribute-map name
    "ministral3": dict(_SMALL, model_type="ministral3", intermediate_size=96),  # head_dim 128 by default
    "ministral3-sliding": dict(_SMALL, model_type="ministral3", intermediate_size=96, head_dim=16, sliding_window=8),
    "qwen3-moe-v5-keys": dict(
        _SMALL,
        model_type="qwen3_moe",
        intermediate_size=96,
        moe_intermediate_size=32,
        num_local_experts=8,
        num_experts_per_tok=2,
        head_dim=32,
    ),
    "qwen3-moe-sparse-step": dict(
        _SMALL,
        model_type="qwen3_moe",
        intermediate_size=96,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        decoder_sparse_step=2,
        mlp_only_layers=[5],
    ),
    "gpt-oss": dict(
        _SMALL,
        model_type="gpt_oss",
        intermediate_size=48,
        num_local_experts=4,
        num_experts_per_tok=2,
        head_dim=16,
        sliding_window=8,
    ),
    "gpt-oss-layer-types": dict(
        _SMALL,
        model_type="gpt_oss",
        intermediate_size=48,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=8,
        layer_types=["full_attention"] * 2 + ["sliding_attention"] * 4,
    ),
    "llama4-scout-shaped": dict(
        _SMALL,
        model_type="llama4_text",
        intermediate_size=48,
        intermediate_size_mlp=96,
        num_local_experts=4,
        head_dim=16,
        attention_chunk_size=32,
        use_qk_norm=True,
    ),
    "llama4-maverick-shaped": dict(
        _SMALL,
        model_type="llama4_text",
        intermediate_size=48,
        intermediate_size_mlp=96,
        num_local_experts=8,
        interleave_moe_layer_step=2,
        head_dim=16,
        use_qk_norm=False,
    ),
    "llama4-moe-layers": dict(
        _SMALL,
        model_type="llama4_text",
        intermediate_size=48,
        intermediate_size_mlp=96,
        num_local_experts=4,
        moe_layers=[0, 4],
        head_dim=16,
        no_rope_layers=[1, 0, 1, 1, 0, 1],
    ),
    "llama4-nested": dict(
        model_type="llama4",
        text_config=dict(
            _SMALL,
            model_type="llama4_text",
            intermediate_size=48,
            intermediate_size_mlp=96,
            num_local_experts=4,
            head_dim=16,
        ),
        vision_config=dict(hidden_size=32),
    ),
    "gemma3-text": dict(_SMALL, model_type="gemma3_text", intermediate_size=96, head_dim=16, sliding_window=16),
    "gemma3-pattern-3": dict(_SMALL, model_type="gemma3_text", intermediate_size=96, sliding_window_pattern=3),
    "gemma3-nested": dict(
        model_type="gemma3",
        text_config=dict(
            hidden_size=64,
            num_hidden_layers=6,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=96,
            head_dim=16,
            model_type="gemma3_text",
        ),
        vision_config=dict(model_type="siglip_vision_model"),
    ),
    "phi3": dict(_SMALL, model_type="phi3", intermediate_size=96, pad_token_id=0),
    "phi4-mini-shaped": dict(
        _SMALL,
        model_type="phi3",
        intermediate_size=96,
        pad_token_id=0,
        partial_rotary_factor=0.75,
        tie_word_embeddings=True,
        sliding_window=None,
    ),
    "deepseek-v2-lite-shaped": dict(
        _SMALL | _MLA,
        model_type="deepseek_v2",
        n_routed_experts=8,
        n_shared_experts=2,
        first_k_dense_replace=1,
        q_lora_rank=None,
    ),
    "deepseek-v2-q-lora": dict(
        _SMALL | _MLA, model_type="deepseek_v2", n_routed_experts=8, q_lora_rank=24, attention_bias=True
    ),
    "kimi-k2-shaped": dict(
        _SMALL | _MLA,
        model_type="deepseek_v3",
        num_key_value_heads=4,
        n_routed_experts=12,
        n_shared_experts=1,
        first_k_dense_replace=1,
        q_lora_rank=24,
        n_group=1,
        topk_group=1,
        num_nextn_predict_layers=0,
    ),
    "glm4-moe": dict(
        _SMALL,
        model_type="glm4_moe",
        intermediate_size=96,
        moe_intermediate_size=32,
        n_routed_experts=8,
        head_dim=32,
        attention_bias=True,
        use_qk_norm=True,
        first_k_dense_replace=2,
        partial_rotary_factor=0.5,
    ),
    "glm4-moe-air-shaped": dict(
        _SMALL,
        model_type="glm4_moe",
        intermediate_size=96,
        moe_intermediate_size=32,
        n_routed_experts=8,
        n_shared_experts=2,
        num_experts_per_tok=2,
        attention_bias=True,
    ),
    "mistral-null-window": dict(_SMALL, model_type="mistral", intermediate_size=96, sliding_window=None, head_dim=32),
    "mixtral": dict(_SMALL, model_type="mixtral", intermediate_size=96, num_local_experts=4, sliding_window=8),
    # the newer Llama-shaped families (specs/hf/decoder.py), each as its transformers class builds it
    "gemma": dict(_SMALL, model_type="gemma", intermediate_size=96, head_dim=16),
    "granite": dict(_SMALL, model_type="granite", intermediate_size=96, attention_bias=True, mlp_bias=True),
    # HeliumAttention's o_proj is hidden x hidden: a real config has heads x head_dim = hidden
    "helium": dict(_SMALL, model_type="helium", intermediate_size=96, head_dim=16),
    "smollm3-sliding": dict(
        _SMALL, model_type="smollm3", intermediate_size=96, pad_token_id=0, use_sliding_window=True, sliding_window=8
    ),
    "seed-oss": dict(_SMALL, model_type="seed_oss", intermediate_size=96, head_dim=16),
    "seed-oss-out-bias": dict(_SMALL, model_type="seed_oss", intermediate_size=96, attention_out_bias=True),
    "ernie4.5": dict(_SMALL, model_type="ernie4_5", intermediate_size=96, head_dim=16, use_bias=True),
    "glm4": dict(_SMALL, model_type="glm4", intermediate_size=96, pad_token_id=0),
    "olmo2": dict(_SMALL, model_type="olmo2", intermediate_size=96),
    "olmo3": dict(_SMALL, model_type="olmo3", intermediate_size=96, sliding_window=8),
    "exaone4": dict(_SMALL, model_type="exaone4", intermediate_size=96, sliding_window=8, sliding_window_pattern=3),
    "cohere-qk-norm": dict(_SMALL, model_type="cohere", intermediate_size=96, use_qk_norm=True, pad_token_id=0),
    "cohere2": dict(_SMALL, model_type="cohere2", intermediate_size=96, sliding_window=8, pad_token_id=0),
    "starcoder2": dict(_SMALL, model_type="starcoder2", intermediate_size=96, sliding_window=8),
    "starcoder2-no-bias": dict(_SMALL, model_type="starcoder2", intermediate_size=96, use_bias=False),
    "stablelm": dict(_SMALL, model_type="stablelm", intermediate_size=96, use_qkv_bias=True),
    "stablelm-parallel": dict(_SMALL, model_type="stablelm", intermediate_size=96, use_parallel_residual=True),
    "phi": dict(_SMALL, model_type="phi", intermediate_size=96),
    "nemotron": dict(_SMALL, model_type="nemotron", intermediate_size=96, attention_bias=True, mlp_bias=True),
    "arcee": dict(_SMALL, model_type="arcee", intermediate_size=96),
    "apertus": dict(_SMALL, model_type="apertus", intermediate_size=96, head_dim=16, attention_bias=True),
    "qwen2-moe": dict(
        _SMALL,
        model_type="qwen2_moe",
        intermediate_size=96,
        num_experts=8,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        decoder_sparse_step=2,
        mlp_only_layers=[1],
    ),
    "olmoe": dict(_SMALL, model_type="olmoe", intermediate_size=32, num_experts=8),
    "granitemoe": dict(_SMALL, model_type="granitemoe", intermediate_size=32, num_local_experts=4),
    "granitemoeshared": dict(
        _SMALL, model_type="granitemoeshared", intermediate_size=32, num_local_experts=4, shared_intermediate_size=48
    ),
    "phimoe": dict(
        _SMALL, model_type="phimoe", intermediate_size=32, num_local_experts=4, attention_bias=True, lm_head_bias=True
    ),
    "minimax-m2": dict(_SMALL, model_type="minimax_m2", intermediate_size=32, num_local_experts=8, head_dim=16),
    "deepseek-v3.2": dict(
        _SMALL | _MLA,
        model_type="deepseek_v32",
        n_routed_experts=8,
        q_lora_rank=24,
        n_group=1,
        topk_group=1,
        index_n_heads=4,
        index_head_dim=16,
        index_topk=32,
    ),
    # (MinistralConfig and HunYuanDenseV1Config leave rope_theta unset: transformers needs it given)
    "ministral": dict(_SMALL, model_type="ministral", intermediate_size=96, head_dim=16, rope_parameters=_ROPE),
    "ministral-no-window": dict(
        _SMALL, model_type="ministral", intermediate_size=96, head_dim=16, sliding_window=None, rope_parameters=_ROPE
    ),
    "hunyuan-dense": dict(
        _SMALL, model_type="hunyuan_v1_dense", intermediate_size=96, head_dim=16, rope_parameters=_ROPE
    ),
    "glm-5-shaped": dict(
        _SMALL | _MLA,
        model_type="glm_moe_dsa",
        n_routed_experts=8,
        q_lora_rank=24,
        first_k_dense_replace=2,
        index_n_heads=4,
        index_head_dim=16,
    ),
    "glm-4.7-flash-shaped": dict(
        _SMALL | _MLA, model_type="glm4_moe_lite", n_routed_experts=8, q_lora_rank=24, first_k_dense_replace=2
    ),
    # GLM-4.7-Flash's 20 heads do not divide its 2048 hidden size: MLA has its own head widths
    "glm-4.7-flash-20-heads": dict(
        _SMALL | _MLA,
        model_type="glm4_moe_lite",
        n_routed_experts=8,
        q_lora_rank=24,
        num_attention_heads=5,
        num_key_value_heads=5,
    ),
    "glm-4.7-flash-mlp-types": dict(
        _SMALL | _MLA,
        model_type="glm4_moe_lite",
        n_routed_experts=8,
        q_lora_rank=24,
        mlp_layer_types=["dense", "sparse", "dense", "sparse", "sparse", "dense"],
    ),
    "exaone-moe": dict(
        _SMALL,
        model_type="exaone_moe",
        intermediate_size=96,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        num_shared_experts=2,
        sliding_window=8,
    ),
    "ernie4.5-moe": dict(
        _SMALL,
        model_type="ernie4_5_moe",
        intermediate_size=96,
        moe_num_experts=8,
        moe_k=2,
        moe_intermediate_size=32,
        moe_layer_start_index=1,
        moe_layer_end_index=4,
        moe_layer_interval=2,
    ),
    "dots1": dict(
        _SMALL,
        model_type="dots1",
        intermediate_size=96,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        n_shared_experts=1,
        first_k_dense_replace=1,
        sliding_window=8,
        max_window_layers=4,
    ),
}


def _hf_model(config):
    return build_on_meta(config)


@pytest.mark.parametrize("name", FAMILIES)
def test_params_equal_transformers_per_layer(name):
    config = FAMILIES[name]
    hf = _hf_model(config)  # the text backbone (test_vision.py checks multimodal models whole)
    counts = count_params(model_from_hf_config(config, name))
    assert counts.total - counts.vision == sum(p.numel() for p in hf.parameters())
    blocks = hf.model.layers
    assert counts.per_layer == tuple(sum(p.numel() for p in b.parameters()) for b in blocks)


@pytest.mark.parametrize("name", FAMILIES)
def test_local_attention_layout_equals_transformers_layer_types(name):
    config = FAMILIES[name]
    cfg = transformers.AutoConfig.for_model(**text_config(config))
    spec = model_from_hf_config(config, name)
    window = getattr(cfg, "attention_chunk_size", None) or getattr(cfg, "sliding_window", None)
    # families without layer_types (Mistral, Mixtral, Phi-3) mask every layer with sliding_window
    types = getattr(cfg, "layer_types", None) or ["sliding_attention"] * spec.num_layers
    local = sum(t != "full_attention" for t in types) if window else 0
    assert spec.num_sliding_layers == local
    assert spec.attention_chunked == ("chunked_attention" in types and bool(local))


@pytest.mark.parametrize(
    "model_id", [m for m in catalog.model_ids() if "text_config" in catalog.model_entry(m)["config"]]
)
def test_multimodal_entries_count_the_vision_tower_and_say_what_is_not_modelled(model_id):
    spec = catalog.model(model_id)
    assert spec.vision is not None and count_params(spec).vision == spec.vision.params > 0
    assert any("vision tower counted" in n and "activations" in n for n in spec.notes)


def test_published_sizes():
    # totals and activated parameters as the model cards state them (rounded there)
    def size(m):
        p = count_params(catalog.model(m))
        return p.total / 1e9, p.active / 1e9

    assert 116.5 < size("gpt-oss-120b")[0] < 117.0  # OpenAI gpt-oss model card: 116.8B total
    assert 20.8 < size("gpt-oss-20b")[0] < 21.0  # 20.9B
    assert 235 < size("qwen3-235b-a22b")[0] < 235.5 and 21.5 < size("qwen3-235b-a22b")[1] < 22.5
    assert 30.4 < size("qwen3-30b-a3b")[0] < 30.6 and 3.2 < size("qwen3-30b-a3b")[1] < 3.4
    assert 16.5 < size("llama-4-scout")[1] < 17.5 and 16.5 < size("llama-4-maverick")[1] < 17.5  # "17B active"
    assert 395 < size("llama-4-maverick")[0] < 402  # 400B total (vision tower included)
    assert 108 < size("llama-4-scout")[0] < 110  # 109B total
    assert 8.28 < size("qwen2.5-vl-7b")[0] < 8.30  # Hugging Face model page: 8.29B
    assert 8.76 < size("qwen3-vl-8b")[0] < 8.78  # 8.77B
    assert 4.29 < size("gemma-3-4b")[0] < 4.31 and 27.3 < size("gemma-3-27b")[0] < 27.5  # 4.3B, 27.4B
    assert 1000 < size("kimi-k2")[0] < 1050 and 32 < size("kimi-k2")[1] < 33.5  # "1T total, 32B activated"
    assert 15.5 < size("deepseek-v2-lite")[0] < 16 and 235 < size("deepseek-v2")[0] < 237  # 15.7B, 236B


def test_mtp_layers_are_noted():
    assert any("multi-token-prediction" in n for n in catalog.model("glm-4.5").notes)
    assert not catalog.model("kimi-k2").notes  # num_nextn_predict_layers = 0


@pytest.mark.parametrize(
    "config, key",
    [
        (dict(FAMILIES["qwen3-moe"], num_experts_per_tok=None), None),  # null: Qwen3MoeConfig's default, 8
        ({k: v for k, v in FAMILIES["gpt-oss"].items() if k != "hidden_size"}, "hidden_size"),
        ({k: v for k, v in FAMILIES["deepseek-v2-lite-shaped"].items() if k != "kv_lora_rank"}, "kv_lora_rank"),
        ({k: v for k, v in FAMILIES["kimi-k2-shaped"].items() if k != "n_routed_experts"}, "n_routed_experts"),
        (
            dict(model_type="llama4", text_config={"model_type": "llama4_text", "hidden_size": 64}),
            "num_attention_heads",
        ),
    ],
)
def test_missing_keys_are_named(config, key):
    if key is None:
        model_from_hf_config(config)
        return
    with pytest.raises(GpuplanError, match=key) as err:
        model_from_hf_config(config)
    assert "missing" in str(err.value) and "\n" not in str(err.value)


def test_bad_layouts_name_the_key():
    bad = dict(FAMILIES["gpt-oss"], layer_types=["sliding_attention"])
    with pytest.raises(GpuplanError, match="layer_types"):
        model_from_hf_config(bad)
    with pytest.raises(GpuplanError, match="text_config"):
        model_from_hf_config(dict(model_type="llama4", text_config=[1]))
    with pytest.raises(GpuplanError, match="moe_layers"):
        model_from_hf_config(dict(FAMILIES["llama4-moe-layers"], moe_layers=[9]))


@pytest.mark.parametrize(
    "keys", [dict(index_topk_freq=2), dict(index_topk_pattern="FSFSFS"), dict(indexer_types=["full", "shared"] * 3)]
)
def test_glm5_layers_that_reuse_another_layers_top_k_are_refused_naming_the_key(keys):
    with pytest.raises(GpuplanError, match="indexer_types") as err:
        model_from_hf_config(dict(FAMILIES["glm-5-shaped"], **keys))
    assert "\n" not in str(err.value)
    every = model_from_hf_config(dict(FAMILIES["glm-5-shaped"], indexer_types=["full"] * 6))
    assert (every.index_heads, every.index_head_dim, every.index_topk) == (4, 16, 2048)


def test_mlp_layer_types_decide_the_moe_layers_and_a_bad_list_names_the_key():
    spec = model_from_hf_config(FAMILIES["glm-4.7-flash-mlp-types"])
    assert [spec.is_moe_layer(i) for i in range(6)] == [False, True, False, True, True, False]
    for bad in (["dense"] * 5, ["dense", "moe", "dense", "dense", "dense", "dense"], "dense"):
        with pytest.raises(GpuplanError, match="mlp_layer_types"):
            model_from_hf_config(dict(FAMILIES["glm-4.7-flash-mlp-types"], mlp_layer_types=bad))


def test_group_limited_routing_is_read_and_bad_groups_name_the_key():
    # DeepSeek's n_group / topk_group (estimate/ep_dispatch.distinct_units reads them)
    base = dict(FAMILIES["kimi-k2-shaped"], model_type="deepseek_v3", topk_method="noaux_tc")
    experts = base["n_routed_experts"]
    m = model_from_hf_config(dict(base, n_group=2, topk_group=1))
    assert (m.expert_groups, m.expert_groups_per_token) == (2, 1)
    with pytest.raises(GpuplanError, match="n_group") as err:
        model_from_hf_config(dict(base, n_group=experts + 1, topk_group=1))
    assert "\n" not in str(err.value)
    with pytest.raises(GpuplanError, match="topk_group"):
        model_from_hf_config(dict(base, n_group=2, topk_group=3))
    greedy = model_from_hf_config(dict(base, topk_method="greedy", n_group=2, topk_group=1))
    assert greedy.expert_groups == 1  # DeepSeek-V2's greedy top-k ignores the groups


def test_exaone4_reads_its_hub_pattern_string_as_the_layer_types_it_spells():
    # EXAONE 4.0's Hub configs spell the layout "LLLG" (L local, G global); Exaone4Config's own
    # expansion takes an int, so the oracle is the layer_types the string stands for
    base = dict(FAMILIES["exaone4"], sliding_window_pattern="LLLG")
    spelled = ["sliding_attention" if "LLLG"[i % 4] == "L" else "full_attention" for i in range(6)]
    from_string = model_from_hf_config(base)
    from_types = model_from_hf_config(dict(FAMILIES["exaone4"], layer_types=spelled))
    assert from_string.num_sliding_layers == from_types.num_sliding_layers == spelled.count("sliding_attention")


@pytest.mark.parametrize(
    "family, key", [("stablelm", "qk_layernorm"), ("phi", "qk_layernorm"), ("ernie4.5-moe", "use_bias")]
)
def test_layouts_gpuplan_does_not_model_are_refused_naming_the_key(family, key):
    # StableLM's and Phi's per-head q/k LayerNorms; ERNIE 4.5 MoE's biases, which skip the experts
    with pytest.raises(GpuplanError, match=key) as err:
        model_from_hf_config(dict(FAMILIES[family], **{key: True}))
    assert "\n" not in str(err.value)


def test_gpt2_cross_attention_to_an_encoder_is_refused_naming_the_key():
    config = dict(model_type="gpt2", vocab_size=512, n_embd=64, n_layer=2, n_head=4, add_cross_attention=True)
    with pytest.raises(GpuplanError, match="add_cross_attention") as err:
        model_from_hf_config(config)
    assert "\n" not in str(err.value)
    assert model_from_hf_config(dict(config, add_cross_attention=False)).num_layers == 2


def test_unsupported_model_type_lists_families_and_nested_configs():
    with pytest.raises(GpuplanError, match="qwen3_moe") as err:
        model_from_hf_config({"model_type": "t5"})
    assert "gemma3" in str(err.value) and "text_config" in str(err.value)


@pytest.mark.parametrize("seq, chunk", [(100, 32), (64, 32), (10, 32), (8193, 8192)])
@pytest.mark.parametrize("causal", [True, False])
def test_chunked_attention_mean_context_counts_the_keys_of_the_own_chunk(seq, chunk, causal):
    from gpuplan.estimate.flops import mean_context

    # brute force over the whole mask: key j is visible to query i when both lie in one chunk (and j <= i)
    i, j = np.arange(seq)[:, None], np.arange(seq)[None, :]
    seen = np.count_nonzero((i // chunk == j // chunk) & ((j <= i) | (not causal)))
    assert mean_context(seq, chunk, causal, chunked=True) == pytest.approx(seen / seq)
