"""Weight formats: bytes against published checkpoint sizes, and GPUs that cannot run a format."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.formats import weight_format
from gpuplan.serve.weights import stage_weight_bytes, weight_bytes_per_gpu

H100 = catalog.gpu("h100-sxm")

# File sizes on the Hugging Face model cards of TheBloke's conversions (GB = 10^9 bytes):
# Llama-2-7B-GGUF, Llama-2-70B-GGUF, Llama-2-7B-AWQ (model.safetensors).
PUBLISHED = [
    ("llama-2-7b", "q4_k_m", 4.08e9),
    ("llama-2-7b", "q8_0", 7.16e9),
    ("llama-2-70b", "q4_k_m", 41.42e9),
    ("llama-2-70b", "q8_0", 73.29e9),
    ("llama-2-7b", "int4-awq", 3.89e9),
]


@pytest.mark.parametrize("model,fmt,size", PUBLISHED)
def test_quantised_weights_match_published_checkpoint_sizes(model, fmt, size):
    assert weight_bytes_per_gpu(catalog.model(model), weight_format(fmt, H100)) == pytest.approx(size, rel=0.015)


def test_a_7b_model_in_fp16_is_about_14_gb():
    assert 13e9 < weight_bytes_per_gpu(catalog.model("llama-2-7b"), weight_format("fp16", H100)) < 14.5e9


def test_fp8_keeps_embeddings_and_lm_head_in_16_bits():
    m = catalog.model("llama-3.1-8b")
    fp8, bf16 = (weight_bytes_per_gpu(m, weight_format(f, H100)) for f in ("fp8", "bf16"))
    tables = 2 * m.vocab_size * m.hidden_size * 2  # embedding and LM head, bf16
    assert fp8 == pytest.approx((bf16 - tables) / 2 + tables, rel=1e-3)


def test_tensor_and_pipeline_parallel_shards_add_up():
    m, fmt = catalog.model("llama-3.1-70b"), weight_format("bf16", H100)
    whole = weight_bytes_per_gpu(m, fmt)
    assert sum(stage_weight_bytes(m, fmt, 1, 4)) == pytest.approx(whole)
    assert weight_bytes_per_gpu(m, fmt, tp=8) == pytest.approx(whole / 8, rel=0.01)  # norms are replicated


def test_fp8_on_an_a100_explains_the_weight_only_fallback():
    with pytest.raises(GpuplanError) as e:
        weight_format("fp8", catalog.gpu("a100-sxm-80gb"))
    assert e.value.field == "weights" and "fp8-wo" in str(e.value)
    assert weight_format("fp8-wo", catalog.gpu("a100-sxm-80gb")).weight_only
