"""How a decode step's attention reads a GQA model's KV cache under each engine: once per KV head
(XQA, FlashAttention, vLLM's kernels) or once per query head (TensorRT-LLM's masked MHA kernel
before XQA, the ``trtllm-0.6`` profile)."""

from dataclasses import replace

import pytest

from gpuplan import catalog
from gpuplan.serve.engines import DECODE_ATTENTION, ENGINES, engine, engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.plan import ServeRequest, estimate_serving
from gpuplan.serve.timing import Deployment, step_model

H100, H200 = catalog.gpu("h100-sxm"), catalog.gpu("h200")


def test_every_engine_names_a_known_decode_attention():
    assert {e.decode_attention for e in ENGINES.values()} <= set(DECODE_ATTENTION)
    assert engine("trtllm-0.6").decode_attention == "per_query_head"
    assert engine("trtllm").decode_attention == "grouped"


def test_the_masked_mha_kernel_reads_each_kv_head_once_per_query_head_of_its_group():
    # hand count from the kernel's grid (one block per query head and sequence, hi_kv = hi / qhead_per_kv):
    # Llama-2-70B, 64 query heads over 8 KV heads; at TP 4 each GPU holds 16 and 2 of them
    d = Deployment(catalog.model("llama-2-70b"), H100, weight_format("fp8", H100), kv_format("fp8", H100), tp=4)
    batch, ctx = 64, 2048
    grouped = step_model(d, engine("trtllm")).iteration(decode=batch, decode_context=ctx).parts["attention"]
    masked = step_model(d, engine("trtllm-0.6")).iteration(decode=batch, decode_context=ctx).parts["attention"]
    m = d.model
    kv_bytes = batch * ctx * m.num_layers * 2 * (m.num_kv_heads // 4) * m.head_dim * 1  # K and V, FP8
    hbm = H100.hbm_bytes_per_s * step_model(d).eff.hbm
    # the extra 7 reads of every KV head, over the HBM bandwidth (the launch overheads cancel)
    assert masked - grouped == pytest.approx(7 * kv_bytes / hbm, rel=1e-6)


def test_a_model_without_gqa_reads_its_cache_once_under_either_kernel():
    d = Deployment(catalog.model("llama-2-7b"), H100, weight_format("fp8", H100), kv_format("fp8", H100))
    a = step_model(d, engine("trtllm")).iteration(decode=48, decode_context=3072)
    b = step_model(d, engine("trtllm-0.6")).iteration(decode=48, decode_context=3072)
    assert b.parts["attention"] == pytest.approx(a.parts["attention"])


def test_xqa_speedup_on_one_h200_lies_in_the_published_range():
    # NVIDIA, "New XQA-kernel provides 2.4x more Llama-70B throughput within the same latency budget"
    # (TensorRT-LLM docs/source/blogs/XQA-kernel.md, v0.8a): Llama-70B FP8, 128 in / 2048 out,
    # 1 x H200 1,227 -> 2,941 tok/s/GPU (2.4x), 8 x H200 13,232 -> 25,300 (1.9x). At the batch the
    # H200's KV pool holds, the masked-MHA profile against the grouped one must fall in that range
    m = catalog.model("llama-2-70b")
    out = {}
    for name in ("trtllm-0.6", "trtllm"):
        cfg = replace(engine_config(name, H200, 1, 0.9), max_num_seqs=None)
        req = ServeRequest(
            m, H200, weights="fp8", kv="fp8", input_len=128, output_len=2048, max_throughput=True, config=cfg
        )
        out[name] = estimate_serving(req).point.output_tokens_per_s
    assert 1.9 <= out["trtllm"] / out["trtllm-0.6"] <= 2.5
