"""KV-cache sizes against a real Hugging Face cache, and the figures people quote."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.formats import kv_format
from gpuplan.serve.kv import kv_bytes_per_sequence, kv_bytes_per_token, kv_heads_per_gpu
from gpuplan.specs.hf import model_from_hf_config
from tests.small_models import CONFIGS

KV_CASES = {
    "mha": dict(CONFIGS["llama"], num_key_value_heads=8),
    "gqa": CONFIGS["llama"],
    "mqa": CONFIGS["mistral-mqa"],
    "sliding": dict(CONFIGS["mistral-mqa"], num_key_value_heads=2, sliding_window=8),
    "alternating": dict(CONFIGS["gemma2"], num_hidden_layers=4, sliding_window=8),
    # the newer families' layouts: 3 sliding + 1 full (OLMo 3, Cohere 2, EXAONE 4), all sliding
    # (Ministral, StarCoder 2), MoE with a dense layer (Qwen2-MoE)
    "olmo3": dict(CONFIGS["olmo2"], model_type="olmo3", num_hidden_layers=4, sliding_window=8),
    "cohere2": dict(
        CONFIGS["cohere-qk"], model_type="cohere2", num_hidden_layers=4, sliding_window=8, use_qk_norm=False
    ),
    "exaone4": dict(CONFIGS["exaone4"], num_hidden_layers=4, sliding_window=8),
    "ministral": dict(
        CONFIGS["olmo2"],
        model_type="ministral",
        num_hidden_layers=4,
        sliding_window=8,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    "starcoder2": dict(CONFIGS["starcoder2"], sliding_window=8),
    "qwen2-moe": CONFIGS["qwen2-moe"],
}


def _hf_cache_bytes(config: dict, tokens: int) -> int:
    cfg = AutoConfig.for_model(**config)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, cfg.vocab_size, (1, tokens)), use_cache=True).past_key_values
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


@pytest.mark.parametrize("tokens", [5, 20])
@pytest.mark.parametrize("case", list(KV_CASES))
def test_kv_bytes_match_a_real_hugging_face_cache(case, tokens):
    config = KV_CASES[case]
    m = model_from_hf_config(config, case)
    assert kv_bytes_per_sequence(m, kv_format("bf16"), tokens) == _hf_cache_bytes(config, tokens)


def test_llama2_7b_at_batch_64_by_2048_needs_64_gib_of_fp16_kv_and_mistral_a_quarter():
    llama, mistral = catalog.model("llama-2-7b"), catalog.model("mistral-7b")
    fp16 = kv_format("fp16")
    llama_kv = 64 * kv_bytes_per_sequence(llama, fp16, 2048)
    assert llama_kv == 64 * 2**30  # 32 layers x 2 x 4096 x 2 bytes = 512 KiB per token
    assert 64 * kv_bytes_per_sequence(mistral, fp16, 2048) == llama_kv / 4  # 8 KV heads of 32


def test_fp8_halves_the_cache_and_int8_pays_for_its_scales():
    m = catalog.model("llama-3.1-8b")
    bf16, fp8, int8 = (kv_bytes_per_token(m, kv_format(f)) for f in ("bf16", "fp8", "int8"))
    assert fp8 == bf16 / 2
    assert int8 == pytest.approx(fp8 * (1 + 4 / m.head_dim))  # an fp16 scale and zero per head, K and V


def test_tensor_parallelism_splits_kv_heads_but_never_below_one():
    m = catalog.model("llama-3.1-8b")  # 8 KV heads
    assert [kv_heads_per_gpu(m, tp) for tp in (1, 2, 8, 16)] == [8, 4, 1, 1]
    with pytest.raises(GpuplanError):
        kv_heads_per_gpu(m, 3)


def test_mla_caches_the_latent_not_the_heads():
    m = catalog.model("deepseek-v3")  # kv_lora_rank 512 + rope 64 per layer (DeepSeek-V2 report, Table 1)
    assert kv_bytes_per_token(m, kv_format("bf16")) == 61 * (512 + 64) * 2
    assert kv_bytes_per_token(m, kv_format("bf16"), tp=8) == kv_bytes_per_token(m, kv_format("bf16"))
