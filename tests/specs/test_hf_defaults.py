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
