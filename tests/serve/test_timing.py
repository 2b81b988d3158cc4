"""Iteration times: bandwidth-bound decode, the unpacking tax, MoE expert reads, tensor parallelism."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.timing import Deployment, StepModel, step_model
from gpuplan.serve.weights import weight_bytes_per_gpu
from tests.small_models import CONFIGS


def _model(name="llama-3.1-8b", gpu="h100-sxm", weights="bf16", tp=1) -> StepModel:
    g = catalog.gpu(gpu)
    return StepModel(Deployment(catalog.model(name), g, weight_format(weights, g), kv_format("bf16"), tp))


def test_batch_one_decode_is_reading_the_weights_once():
    sm = _model()
    d = sm.d
    stream = weight_bytes_per_gpu(d.model, d.weights) / (d.gpu.hbm_bytes_per_s * d.gpu.efficiency.hbm)
    t = sm.decode_step(1, 128).seconds
    assert stream < t < 1.25 * stream  # launch gaps and the KV read are the rest


def test_decode_time_barely_grows_with_batch_until_the_ridge_then_linearly():
    sm = _model()
    t1, t8 = sm.decode_step(1, 1).seconds, sm.decode_step(8, 1).seconds
    assert t8 < 1.1 * t1
    t2k, t4k = sm.decode_step(2048, 1).seconds, sm.decode_step(4096, 1).seconds
    assert t4k / t2k == pytest.approx(2, rel=0.15)


def test_int4_beats_fp16_at_small_batch_and_loses_once_compute_bound():
    awq, fp16 = _model(weights="int4-awq"), _model(weights="fp16")
    assert awq.decode_step(1, 128).seconds < 0.6 * fp16.decode_step(1, 128).seconds
    big = awq.decode_step(1024, 128)
    assert big.seconds > fp16.decode_step(1024, 128).seconds
    assert big.parts["unpack"] > 0


def test_moe_decode_reads_only_the_experts_its_tokens_touch():
    # oracle: route random tokens to k of E experts and count the distinct experts hit
    sm = _model("mixtral-8x7b")
    m = sm.d.model
    rng = np.random.default_rng(0)
    for tokens in (1, 2, 4, 16):
        hits = [
            len(
                set(
                    np.concatenate(
                        [rng.choice(m.num_experts, m.experts_per_token, replace=False) for _ in range(tokens)]
                    )
                )
            )
            for _ in range(4000)
        ]
        expected = m.num_experts * (1 - (1 - m.experts_per_token / m.num_experts) ** tokens)
        assert np.mean(hits) == pytest.approx(expected, rel=0.03)
    one, many = sm.decode_step(1, 128).seconds, sm.decode_step(64, 128).seconds
    assert many > 2 * one  # batch 1 reads 2 of 8 experts, batch 64 all of them


def test_tensor_parallel_decode_is_faster_but_pays_all_reduces():
    one, two = _model("llama-3.1-70b", weights="fp8"), _model("llama-3.1-70b", weights="fp8", tp=2)
    t1, t2 = one.decode_step(1, 1024), two.decode_step(1, 1024)
    assert t2.seconds < 0.65 * t1.seconds
    assert t2.parts["communication"] > 0 == t1.parts["communication"]


def test_routed_experts_unpack_their_weights_once_per_expected_row_tile_not_per_tile_of_the_mean():
    # gpt-oss's MXFP4 experts unpack their weights again for every 64-row tile; each expert's
    # count falls around the mean and pays its own last tile, so one more decode row cannot
    # double the unpacking (it did at 2,049 rows: 64 -> 64.03 rows an expert, ceil 1 -> 2)
    from gpuplan.serve.engines import engine

    g = catalog.gpu("b200")
    d = Deployment(catalog.model("gpt-oss-120b"), g, weight_format("mxfp4-experts", g), kv_format("fp8"))
    sm = step_model(d, engine("trtllm"))
    for rows in (2100, 4096):
        a, b = sm.decode_step(rows, 1500).parts["unpack"], sm.decode_step(rows + 1, 1500).parts["unpack"]
        assert b == pytest.approx(a, rel=0.01)
    # and it grows with the rows: about rows / 64 / experts-per-row tiles, plus half a tile
    assert sm.decode_step(4096, 1500).parts["unpack"] > sm.decode_step(2100, 1500).parts["unpack"] * 1.4


# the shared small DeepSeek-V3 with values wider than the query/key nope part, so that the two
# widths cannot stand in for each other
MLA_SMALL = dict(CONFIGS["deepseek-mla"], v_head_dim=24)


def test_mla_prefill_attention_flops_are_the_unabsorbed_kernels_flops():
    # oracle: the FLOPs FlopCounterMode counts in the attention of transformers' DeepSeek-V3
    # forward (eager: its QK^T and PV are the only batched matmuls), which runs MLA unabsorbed
    # (keys and values up-projected from the latent) as the engines' prefill does; the counter
    # counts every query-key pair, so the context is the whole sequence. The absorbed widths
    # (2 x 32 + 8 = 72 per head, not 24 + 24) would read 1.5x here and 3.4x at DeepSeek-V3's.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    from gpuplan.specs.hf import model_from_hf_config

    batch, seq = 2, 40
    cfg = transformers.AutoConfig.for_model(**MLA_SMALL)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", experts_implementation="eager"
    )
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, cfg.vocab_size, (batch, seq)))
    counted = counter.get_flop_counts()["Global"][torch.ops.aten.bmm]
    m = model_from_hf_config(MLA_SMALL)
    g = catalog.gpu("h100-sxm")
    sm = StepModel(Deployment(m, g, weight_format("bf16", g), kv_format("bf16")))
    assert counted > 0
    assert m.num_layers * sm.prefill_attention_flops(batch * seq, seq) == pytest.approx(counted, rel=1e-9)
    # decode keeps the absorbed form: its attention FLOPs per cached token are the latent's widths
    assert sm.attn_dims == 2 * m.kv_lora_rank + m.qk_rope_head_dim


def test_sparse_mla_prefills_in_the_absorbed_form_dense_mla_unabsorbed():
    # DeepSeek-V3.2's DSA runs MLA in its MQA (absorbed) mode in prefill as in decode (its report,
    # section 2.1); DeepSeek-V3's dense MLA prefills as multi-head attention
    import dataclasses

    g = catalog.gpu("h200")
    v3 = catalog.model("deepseek-v3")
    v32 = dataclasses.replace(v3, model_type="deepseek_v32", index_topk=2048, index_heads=64, index_head_dim=128)
    dense, sparse = (StepModel(Deployment(m, g, weight_format("fp8", g), kv_format("bf16"), 8)) for m in (v3, v32))
    assert dense.prefill_attn_dims == 192 + 128 and dense.attn_dims == 512 + 64 + 512
    assert sparse.prefill_attn_dims == sparse.attn_dims == 512 + 64 + 512
    assert sparse.prefill_attention_flops(1000, 1000) == pytest.approx(
        dense.prefill_attention_flops(1000, 1000) * 1088 / 320
    )
