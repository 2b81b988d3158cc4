"""A config.json that leaves a key out means the family's transformers default: gpuplan's defaults
are read against transformers' own config classes."""

import pytest

from gpuplan.specs.hf import FAMILIES, model_from_hf_config

transformers = pytest.importorskip("transformers")
CONFIG_CLASS = {
    "llama": "LlamaConfig",
    "mistral": "MistralConfig",
    "mixtral": "MixtralConfig",
    "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config",
    "qwen3_moe": "Qwen3MoeConfig",
    "qwen2_5_vl_text": "Qwen2_5_VLTextConfig",
    "qwen3_vl_text": "Qwen3VLTextConfig",
    "gemma2": "Gemma2Config",
    "gemma3_text": "Gemma3TextConfig",
    "phi3": "Phi3Config",
    "gpt_oss": "GptOssConfig",
    "llama4_text": "Llama4TextConfig",
    "glm4_moe": "Glm4MoeConfig",
    "deepseek_v2": "DeepseekV2Config",
    "deepseek_v3": "DeepseekV3Config",
    "ministral3": "Ministral3Config",
}


@pytest.mark.parametrize("model_type", sorted(CONFIG_CLASS))
def test_a_missing_max_position_embeddings_is_the_familys_transformers_default(model_type):
    assert model_type in FAMILIES
    assert FAMILIES[model_type].max_pos == getattr(transformers, CONFIG_CLASS[model_type])().max_position_embeddings


def test_gemma3_as_published_keeps_its_128k_context():
    from gpuplan import catalog

    assert catalog.model("gemma-3-27b").max_position_embeddings == 131072
    spec = model_from_hf_config(
        {
            "model_type": "gemma3",
            "text_config": {
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 128,
            },
        }
    )
    assert spec.max_position_embeddings == 131072


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},  # gpt-oss
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "mscale": 0.707,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },
        {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.25, "original_max_position_embeddings": 4096},
        {"rope_type": "linear", "factor": 8.0},
    ],
    ids=["factor-only", "equal-mscales", "unequal-mscales", "explicit", "not-yarn"],
)
def test_yarns_attention_factor_is_what_transformers_scales_cos_and_sin_by(rope):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    sizes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=256)
    config = transformers.LlamaConfig(**sizes, rope_parameters={**rope, "rope_theta": 10000.0})
    want = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")[1] if rope["rope_type"] == "yarn" else 1.0
    spec = model_from_hf_config({"model_type": "llama", **sizes, "rope_scaling": rope})
    assert spec.rope_attention_factor == pytest.approx(want)


def test_a_deepseek_yarn_with_equal_mscales_has_no_attention_factor_and_gpt_oss_has_its_clamp():
    from gpuplan import catalog

    # DeepSeek-V3's config.json: factor 40, mscale = mscale_all_dim = 1 -> their ratio, 1
    assert catalog.model("deepseek-v3").rope_attention_factor == 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    oss = catalog.model("gpt-oss-120b")  # its toml omits rope_scaling: GptOssConfig's default
    assert oss.rope_attention_factor == pytest.approx(
        ROPE_INIT_FUNCTIONS["yarn"](transformers.GptOssConfig(), "cpu")[1]
    )
    assert oss.glu_clamp == transformers.GptOssConfig().swiglu_limit
    assert catalog.model("llama-3.1-8b").glu_clamp is None
