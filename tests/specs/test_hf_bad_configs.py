"""Malformed config.json files a user brings: each is one GpuplanError naming the key, never a traceback."""

import pytest
from small_models import CONFIGS

from gpuplan.errors import GpuplanError
from gpuplan.specs.hf import model_from_hf_config

LLAMA = CONFIGS["llama"]  # the small Llama of the CPU oracle tests
QWEN3_MOE = dict(LLAMA, model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
LLAMA4 = dict(LLAMA, model_type="llama4_text", num_local_experts=4, num_experts_per_tok=1, head_dim=16)


def _error(config):
    with pytest.raises(GpuplanError) as err:
        model_from_hf_config(config)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    "config, key",
    [
        (dict(QWEN3_MOE, decoder_sparse_step=0), "decoder_sparse_step"),
        (dict(LLAMA4, interleave_moe_layer_step=0), "interleave_moe_layer_step"),
    ],
)
def test_a_zero_moe_layer_step_names_the_key_instead_of_dividing_by_zero(config, key):
    assert _error(config).startswith(f"config.json: {key}: must be at least 1")


def test_hidden_size_not_divisible_by_heads_without_head_dim_asks_for_head_dim():
    message = _error(dict(LLAMA, hidden_size=66))
    assert "hidden_size" in message and "add head_dim" in message
    # an explicit head_dim (Mistral-Nemo: 5120 / 32 heads, head_dim 128) is a real model
    assert model_from_hf_config(dict(LLAMA, hidden_size=66, head_dim=16)).head_dim == 16


@pytest.mark.parametrize(
    "key", ["num_attention_heads", "num_key_value_heads", "intermediate_size", "max_position_embeddings"]
)
def test_a_zero_size_names_its_config_key(key):
    assert _error(dict(LLAMA, **{key: 0})).startswith(f"{key}: must be a positive integer")


@pytest.mark.parametrize("value", [["llama"], {"a": 1}, 7, None])
def test_a_model_type_that_is_not_a_string_is_named_not_a_traceback(value):
    # a list or object was looked up as a family key (TypeError: unhashable type)
    assert "model_type" in _error(dict(LLAMA, model_type=value))
    assert "model_type" in _error(dict(model_type="llama4", text_config=dict(LLAMA, model_type=value)))


@pytest.mark.parametrize("family", ["olmo2", "cohere-qk", "starcoder2", "phi", "qwen2-moe"])
@pytest.mark.parametrize("key", ["hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"])
@pytest.mark.parametrize("value", [-1, "abc", [1], 1e13])
def test_the_newer_families_name_a_bad_size(family, key, value):
    assert key in _error(dict(CONFIGS[family], **{key: value}))
