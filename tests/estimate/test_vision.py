"""Multimodal configs: the text backbone planned, the vision tower counted, both against
transformers' whole model (``AutoModelForImageTextToText``) built on the meta device."""

import json
from pathlib import Path

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.params import count_params
from gpuplan.specs.hf import load_hf_config, model_from_hf_config
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

H100 = catalog.gpu("h100-sxm")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DATA = Path(__file__).parent.parent / "data" / "hf"
_TEXT = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
_VIT = dict(
    hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, image_size=56, patch_size=14
)

SMALL = {
    "gemma3-siglip-head": dict(
        model_type="gemma3",
        text_config=dict(_TEXT, model_type="gemma3_text", intermediate_size=96, head_dim=16),
        vision_config=dict(_VIT, model_type="siglip_vision_model"),
        mm_tokens_per_image=4,
    ),
    "gemma3-no-head-untied": dict(
        model_type="gemma3",
        tie_word_embeddings=False,
        text_config=dict(_TEXT, model_type="gemma3_text", intermediate_size=96),
        vision_config=dict(_VIT, model_type="siglip_vision_model", vision_use_head=False, num_channels=4),
        mm_tokens_per_image=4,
    ),
    "llama4": dict(
        model_type="llama4",
        text_config=dict(
            _TEXT, model_type="llama4_text", intermediate_size=48, intermediate_size_mlp=96, num_local_experts=2
        ),
        vision_config=dict(_VIT, vision_output_dim=40, projector_input_dim=40, projector_output_dim=24),
    ),
    "qwen2.5-vl-flat": dict(
        _TEXT,
        model_type="qwen2_5_vl",
        intermediate_size=96,
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64),
    ),
    "qwen2.5-vl-tied": dict(
        _TEXT,
        model_type="qwen2_5_vl",
        intermediate_size=96,
        tie_word_embeddings=True,
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=64),
    ),
    "qwen3-vl": dict(
        model_type="qwen3_vl",
        text_config=dict(_TEXT, intermediate_size=96, head_dim=16),
        vision_config=dict(
            depth=3,
            hidden_size=32,
            intermediate_size=48,
            num_heads=4,
            out_hidden_size=64,
            deepstack_visual_indexes=[0, 2],
            num_position_embeddings=16,
        ),
    ),
    # Qwen3.5: Gated DeltaNet text models under Qwen3-VL's tower without its deepstack mergers
    "qwen3.5": dict(
        model_type="qwen3_5",
        text_config=dict(_TEXT, intermediate_size=96, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4),
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64),
    ),
    "qwen3.5-moe": dict(
        model_type="qwen3_5_moe",
        text_config=dict(
            _TEXT,
            head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
        ),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64),
    ),
}


def build_whole_on_meta(config: dict):
    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        return transformers.AutoModelForImageTextToText.from_config(cfg)


def _vision_part(name: str) -> bool:
    return any(k in name for k in ("vision_tower", "vision_model", "visual", "multi_modal_projector"))


def _counts(model) -> tuple[int, int]:
    params = dict(model.named_parameters())  # shared (tied) tensors once, as transformers counts them
    return sum(p.numel() for p in params.values()), sum(p.numel() for n, p in params.items() if _vision_part(n))


@pytest.mark.parametrize("name", SMALL)
def test_whole_model_and_vision_tower_equal_transformers(name):
    total, vision = _counts(build_whole_on_meta(SMALL[name]))
    counts = count_params(model_from_hf_config(SMALL[name], name))
    assert (counts.total, counts.vision) == (total, vision)


@pytest.mark.parametrize(
    "name, outer, text",
    [
        ("gemma3-siglip-head", None, False),  # Gemma3Config ties by default, whatever text_config says
        ("qwen3-vl", None, True),  # Qwen3VLConfig does not, whatever text_config says
        ("qwen3-vl", True, None),
        ("llama4", True, None),  # Llama 4 follows its text_config
        ("llama4", None, True),
    ],
)
def test_tied_embeddings_are_read_where_transformers_reads_them(name, outer, text):
    config = json.loads(json.dumps(SMALL[name]))
    if outer is not None:
        config["tie_word_embeddings"] = outer
    if text is not None:
        config["text_config"]["tie_word_embeddings"] = text
    assert count_params(model_from_hf_config(config)).total == _counts(build_whole_on_meta(config))[0]


def test_a_hub_config_json_with_flat_text_keys_is_read_whole():
    # Qwen2.5-VL-7B-Instruct's config.json as the Hub ships it: text keys beside vision_config
    path = DATA / "Qwen2.5-VL-7B-Instruct" / "config.json"
    spec = load_hf_config(path)
    total, vision = _counts(build_whole_on_meta(json.loads(path.read_text())))
    assert (count_params(spec).total, count_params(spec).vision) == (total, vision)
    assert spec.model_type == "qwen2_5_vl_text" and spec.qkv_bias and spec.num_layers == 28


def test_training_memory_holds_the_tower_states_on_the_first_stage_unsplit_by_tp():
    spec = catalog.model("gemma-3-4b")
    text_only = spec.__class__(**{**spec.__dict__, "vision": None})
    cfg = TrainingConfig(seq_len=2048)  # bf16 weights, fp32 grads (fused), fp32 masters, AdamW
    n = spec.vision.params
    for tp in (1, 2):
        plan = ParallelPlan(dp=1, tp=tp, pp=2)
        with_tower = estimate_memory(spec, cfg, plan, H100, microbatches=2).stages
        without = estimate_memory(text_only, cfg, plan, H100, microbatches=2).stages
        first = with_tower[0].model_states - without[0].model_states
        assert first == pytest.approx((2 + 4 + 4 + 8) * n)
        assert with_tower[1].model_states == without[1].model_states
        assert with_tower[0].activations == without[0].activations  # images are not modelled


def test_zero_shards_the_tower_states_like_the_text_model():
    spec = catalog.model("qwen2.5-vl-7b")
    text_only = spec.__class__(**{**spec.__dict__, "vision": None})
    cfg = TrainingConfig(seq_len=2048)
    plan = ParallelPlan(dp=8, zero=1)
    extra = (
        estimate_memory(spec, cfg, plan, H100).per_gpu.model_states
        - estimate_memory(text_only, cfg, plan, H100).per_gpu.model_states
    )
    assert extra == pytest.approx((2 + 4 + (4 + 8) / 8) * spec.vision.params)


def test_a_tower_gpuplan_cannot_count_is_said_to_be_ignored():
    config = dict(
        model_type="mistral3",
        text_config=dict(_TEXT, intermediate_size=96),
        vision_config=dict(model_type="pixtral"),
    )
    spec = model_from_hf_config(config)
    assert spec.vision is None and count_params(spec).vision == 0
    assert any("not counted" in n for n in spec.notes)


@pytest.mark.parametrize(
    "vision, key",
    [
        (dict(hidden_size="big"), "hidden_size"),
        (dict(depth=0), "depth"),
        (dict(hidden_size=32, num_heads=5), "num_heads"),
    ],
)
def test_bad_vision_config_names_the_key(vision, key):
    config = dict(SMALL["qwen2.5-vl-flat"], vision_config=vision)
    with pytest.raises(GpuplanError, match=f"vision_config: {key}") as err:
        model_from_hf_config(config)
    assert "\n" not in str(err.value)


def test_vision_tower_is_out_of_the_text_token_flops():
    spec = catalog.model("qwen3-vl-8b")
    p = count_params(spec)
    assert p.active == p.total - p.vision  # dense text model: every text parameter is active


@pytest.mark.parametrize("outer_type", ["internvl", "llava"])
@pytest.mark.parametrize("outer_tie", [None, True, False])
def test_a_composite_config_ties_its_head_as_transformers_builds_it(outer_type, outer_tie):
    # a composite class gpuplan has no table for: an explicit outer tie_word_embeddings true ties
    # the head whichever way the class combines the flags (transformers 5 ties InternVL by its
    # outer flag and LLaVA when either asks); otherwise the text config's flag decides
    config = dict(
        model_type=outer_type,
        text_config=dict(_TEXT, model_type="qwen2", intermediate_size=96, tie_word_embeddings=False),
    )
    if outer_tie is not None:
        config["tie_word_embeddings"] = outer_tie
    spec = model_from_hf_config(config)
    if outer_type == "internvl" and outer_tie is None:
        # InternVLConfig's class default (true) is not assumed: without the outer flag the text
        # model's decides, as it did in transformers 4 (a known difference from transformers 5)
        assert spec.tied_embeddings is False
        return
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config)
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert spec.tied_embeddings == tied
    text = sum(p.numel() for n, p in model.named_parameters() if "vision" not in n and "projector" not in n)
    assert count_params(spec).total == text


def test_an_encoder_gpuplan_does_not_know_is_said_not_to_be_counted():
    config = dict(
        model_type="qwen2_audio",
        text_config=dict(_TEXT, model_type="qwen2", intermediate_size=96),
        audio_config=dict(model_type="qwen2_audio_encoder", d_model=32),
    )
    spec = model_from_hf_config(config)
    assert spec.notes == ("qwen2_audio audio_config not counted: the plan covers the text backbone",)
