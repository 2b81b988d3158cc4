"""DP attention for MLA models: each rank holds the whole attention block and its own requests'
latent KV, instead of the latent replicated on every TP rank."""

import math

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.params import embedding_tensors, layer_tensors
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import ServeConfig, max_concurrency, serve_memory
from gpuplan.serve.timing import Deployment, step_model
from gpuplan.serve.weights import tensor_bits

H200 = catalog.gpu("h200")
V3 = catalog.model("deepseek-v3")


def _d(dp, tp=8):
    return Deployment(V3, H200, weight_format("fp8", H200), kv_format("bf16"), tp=tp, dp_attention=dp)


def test_each_rank_holds_the_whole_attention_block_and_embedding():
    tp_mem, dp_mem = serve_memory(_d(False), ServeConfig()), serve_memory(_d(True), ServeConfig())
    # oracle: the attention matrices TP shards (the model spec's split), and the embedding, each
    # held whole instead of in eighths
    fmt = weight_format("fp8", H200)
    attn = sum(
        math.prod(t.shape) * tensor_bits(V3, t, fmt) / 8
        for t in layer_tensors(V3, True)
        if t.name.startswith("attn.") and t.split != "none"
    )
    embed = sum(
        math.prod(t.shape) * tensor_bits(V3, t, fmt) / 8 for t in embedding_tensors(V3) if t.name == "embed.tokens"
    )
    added = dp_mem.weights - tp_mem.weights
    assert added == pytest.approx((V3.num_layers * attn + embed) * 7 / 8, rel=1e-6)


def test_the_replica_holds_tp_times_the_sequences_of_one_rank_pool():
    d = _d(True)
    mem = serve_memory(d, ServeConfig())
    # oracle: the latent (kv_lora_rank + rope dims) per token and layer, 2 bytes, DeepSeek-V3 config
    per_seq = 4096 * 61 * (512 + 64) * 2
    assert max_concurrency(mem, d, ServeConfig(), 4096) == pytest.approx(8 * mem.kv_pool / per_seq, abs=8)


def test_a_rank_reads_only_its_own_sequences_latent_when_decoding():
    tp_attn = step_model(_d(False)).decode_step(256, 4096).parts["attention"]
    dp_attn = step_model(_d(True)).decode_step(256, 4096).parts["attention"]
    assert dp_attn < tp_attn / 4  # the latent is read by one rank, not all eight


def test_dp_attention_needs_an_mla_model():
    g = catalog.gpu("h100-sxm")
    with pytest.raises(GpuplanError) as e:
        Deployment(
            catalog.model("llama-3.1-70b"), g, weight_format("bf16", g), kv_format("bf16"), tp=8, dp_attention=True
        )
    assert e.value.field == "dp_attention"
