"""Parameter counts against the oracle: transformers builds every catalog model on `meta`."""

import pytest

from gpuplan import catalog
from gpuplan.estimate.params import count_params

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def text_config(config: dict) -> dict:
    """What transformers builds as the causal LM: a multimodal config's text_config (its text
    backbone; test_vision.py checks the whole model); TOML has no null, so a catalog
    ``q_lora_rank = 0`` is the config.json's null."""
    if "text_config" in config:
        config = dict(config["text_config"])
    elif config.get("model_type") == "qwen2_5_vl":  # the Hub's flat layout: text keys at the top level
        config = {k: v for k, v in config.items() if k != "vision_config"} | {"model_type": "qwen2_5_vl_text"}
    if config.get("q_lora_rank") == 0:
        config["q_lora_rank"] = None
    return config


def build_on_meta(config: dict):
    cfg = transformers.AutoConfig.for_model(**text_config(config))
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def build_whole_on_meta(config: dict):
    """A multimodal config's whole model: text backbone, vision tower and projector."""
    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        return transformers.AutoModelForImageTextToText.from_config(cfg)


@pytest.mark.parametrize("model_id", catalog.model_ids())
def test_total_params_equal_transformers_on_meta(model_id):
    config = dict(catalog.model_entry(model_id)["config"])
    hf = build_whole_on_meta(config) if "vision_config" in config else build_on_meta(config)
    expected = sum(p.numel() for p in hf.parameters())
    assert count_params(catalog.model(model_id)).total == expected


@pytest.mark.parametrize("model_id", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt2", "gemma-2-9b"])
def test_per_layer_params_equal_transformers_blocks(model_id):
    hf = build_on_meta(dict(catalog.model_entry(model_id)["config"]))
    blocks = next(
        mod
        for name, mod in hf.named_modules()
        if name.endswith(("layers", ".h")) and isinstance(mod, torch.nn.ModuleList)
    )
    expected = tuple(sum(p.numel() for p in block.parameters()) for block in blocks)
    assert count_params(catalog.model(model_id)).per_layer == expected


def test_embedding_counts_token_and_position_tables():
    gpt2 = count_params(catalog.model("gpt2"))
    assert gpt2.embedding == 50257 * 768 + 1024 * 768
    assert gpt2.lm_head == 0  # tied


def test_active_params_count_only_routed_experts_in_use():
    # Mixtral-8x7B: 46.7B total, 12.9B active (Jiang et al. 2024, "Mixtral of Experts", section 2)
    p = count_params(catalog.model("mixtral-8x7b"))
    assert 46.6e9 < p.total < 46.8e9
    assert 12.8e9 < p.active < 13.0e9
    # DeepSeek-V3: 671B total, 37B activated (DeepSeek-V3 technical report, abstract)
    d = count_params(catalog.model("deepseek-v3"))
    assert 670e9 < d.total < 672e9
    assert 36.5e9 < d.active < 38e9


def test_dense_model_active_equals_total(llama70b):
    p = count_params(llama70b)
    assert p.active == p.total
