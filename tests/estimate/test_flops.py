"""FLOPs against the oracle flop_counter.FlopCounterMode on small real models."""

import math

import pytest
from small_models import CONFIGS

from gpuplan import catalog
from gpuplan.estimate.flops import mean_context, six_nd, training_flops
from gpuplan.specs.hf import model_from_hf_config

torch = pytest.importorskip("torch")
flop_counter = pytest.importorskip("torch.utils.flop_counter")
transformers = pytest.importorskip("transformers")

FLOP_CASES = [
    "llama",
    "qwen2",
    "mixtral",
    "gpt2",
    "opt",
    "olmo2",
    "cohere-qk",
    "starcoder2",
    "nemotron",
    "phi",
    "glm4",
    "qwen2-moe",
    "olmoe",
    "apertus",
]


def measured_training_flops(config: dict, batch: int, seq: int) -> float:
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**config)
    # eager attention: its bmm's are visible to the counter (the CPU SDPA kernel is not);
    # eager experts: transformers' default grouped_mm kernel is not counted either
    moe = config["model_type"] in ("mixtral", "qwen2_moe", "olmoe")
    extra = {"experts_implementation": "eager"} if moe else {}
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    with flop_counter.FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", FLOP_CASES)
def test_training_flops_match_flop_counter(name):
    batch, seq = 2, 96
    measured = measured_training_flops(CONFIGS[name], batch, seq)
    # FlopCounterMode counts the full s x s score matrix of eager attention: causal=False.
    predicted = training_flops(model_from_hf_config(CONFIGS[name]), seq, causal=False).model_per_token * batch * seq
    assert predicted == pytest.approx(measured, rel=0.02)


def test_causal_attention_counts_half_the_keys_plus_diagonal():
    assert mean_context(8192, None, causal=True) == (8192 + 1) / 2
    assert mean_context(8192, None, causal=False) == 8192


def test_sliding_window_limits_keys_per_query():
    # positions 0..3 see 1..4 keys, positions 4..9 see 4: (10 + 24) / 10
    assert mean_context(10, 4, causal=True) == pytest.approx(3.4)
    assert mean_context(10, 20, causal=True) == pytest.approx(5.5)


def test_full_recompute_adds_one_forward_of_the_blocks(llama70b):
    none = training_flops(llama70b, 8192, "none")
    full = training_flops(llama70b, 8192, "full")
    head = 2 * llama70b.vocab_size * llama70b.hidden_size
    assert full.hardware_per_token - none.hardware_per_token == pytest.approx(none.forward_per_token - head)
    assert full.model_per_token == none.model_per_token


def test_405b_on_15_6t_tokens_is_3_8e25_flops():
    # Llama 3 paper (Dubey et al. 2024), section 3.2.1: 3.8e25 FLOPs for 405B on 15.6T tokens
    assert six_nd(catalog.model("llama-3.1-405b"), 15.6e12) == pytest.approx(3.8e25, rel=0.01)


def test_attention_adds_to_6nd_at_long_sequences():
    m = catalog.model("llama-3.1-405b")
    f = training_flops(m, 8192)
    ratio = f.model_per_token / (6 * 405.85e9)
    # 12 * L * H * (s+1)/2 extra per token, relative to 6N: about 3.3% at 8K
    expected = 1 + 6 * 126 * 128 * 256 * 4096.5 / (6 * 405.85e9) - 6 * (128256 * 16384) / (6 * 405.85e9)
    assert math.isclose(ratio, expected, rel_tol=0.002)
