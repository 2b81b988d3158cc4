"""DeepSeek Sparse Attention (DeepSeek-V3.2): the indexer's weights, FLOPs, time, saved bytes and
cache, against transformers' DeepseekV32 on CPU and against the definition of top-k attention."""

import dataclasses

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.estimate.activations import activation_breakdown
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.compute import layer_times
from gpuplan.estimate.flops import (
    attention_flops_per_token,
    indexer_flops_per_token,
    mean_context,
    mla_absorbed_width,
    training_flops,
)
from gpuplan.estimate.step_time import _shape
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.kv import attended_tokens, cached_tokens, kv_bytes_per_token_layer
from gpuplan.serve.timing import Deployment, step_model
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
flop_counter = pytest.importorskip("torch.utils.flop_counter")

SMALL = dict(
    model_type="deepseek_v32",
    vocab_size=1000,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=32,
    q_lora_rank=48,
    qk_rope_head_dim=8,
    qk_nope_head_dim=16,
    v_head_dim=16,
    moe_intermediate_size=64,
    n_routed_experts=4,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
    n_group=1,
    topk_group=1,
    index_n_heads=4,
    index_head_dim=16,
    index_topk=2048,
)
# a DeepSeek-V3.2-sized model: 64 indexer heads of 128, top-2048 (DeepseekV32Config's defaults)
BIG = dataclasses.replace(
    catalog.model("deepseek-v3"), model_type="deepseek_v32", index_topk=2048, index_heads=64, index_head_dim=128
)


def test_forward_flops_equal_flop_counter_below_the_top_k():
    # below index_topk every key is picked, so transformers' masked dense attention is the sparse
    # work; its indexer (scores and head weighting) runs in the same forward
    batch, seq = 2, 96
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**SMALL)
    # eager attention and experts: the counter sees bmm's and per-expert mm's, not SDPA or grouped_mm
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", experts_implementation="eager"
    )
    with torch.no_grad(), flop_counter.FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, cfg.vocab_size, (batch, seq)))
    m = model_from_hf_config(SMALL)
    predicted = training_flops(m, seq, causal=False).forward_per_token * batch * seq
    assert predicted == pytest.approx(counter.get_total_flops(), rel=1e-9)


def test_each_query_attends_at_most_top_k_keys_while_the_indexer_scores_them_all():
    seq, k = 32768, BIG.index_topk
    dense = dataclasses.replace(BIG, index_topk=0, index_heads=0, index_head_dim=0)
    per_key = 2 * BIG.num_heads * (BIG.qk_head_dim + BIG.v_dim)
    # causal: query i sees min(i + 1, k) keys (mean_context against the count itself)
    assert mean_context(10, 4, True) == sum(min(i + 1, 4) for i in range(10)) / 10
    main = per_key * BIG.num_layers * sum(min(i + 1, k) for i in range(seq)) / seq
    indexer = BIG.num_layers * 2 * 64 * (128 + 1) * (seq + 1) / 2
    assert indexer_flops_per_token(BIG, seq) == pytest.approx(indexer)
    assert attention_flops_per_token(BIG, seq) == pytest.approx(main + indexer)
    # dense: every query sees i + 1 keys; at 32K the indexer's O(L^2) scores outweigh the top-k core
    full = per_key * BIG.num_layers * (seq + 1) / 2
    assert attention_flops_per_token(dense, seq) == pytest.approx(full)
    assert indexer > main
    # at or below k tokens DSA is dense attention plus the indexer
    short = 2048
    assert attention_flops_per_token(BIG, short) == pytest.approx(
        attention_flops_per_token(dense, short) + indexer_flops_per_token(BIG, short)
    )


def test_the_sparse_kernel_runs_under_the_fused_profile_and_transformers_masks_a_dense_one():
    gpu = catalog.gpu("h100-sxm")
    plan = ParallelPlan(tp=8, ep=8, dp=8)
    seq, k = 32768, BIG.index_topk
    wide = dataclasses.replace(BIG, index_topk=10**9)  # top-k beyond the sequence: every key

    def attention(m, cfg):
        return layer_times(m, gpu, _shape(m, cfg, plan), True).parts["attention"]

    def no_indexer(m):
        return dataclasses.replace(m, index_heads=0, index_head_dim=0)

    for profile in ("fused", "eager"):
        cfg = TrainingConfig(seq_len=seq, profile=profile)
        core_sparse, core_wide = attention(no_indexer(BIG), cfg), attention(no_indexer(wide), cfg)
        # the indexer scores every key whatever the top-k: the same time on both
        indexer = attention(BIG, cfg) - core_sparse
        assert indexer > 0 and attention(wide, cfg) - core_wide == pytest.approx(indexer)
        if profile == "eager":  # transformers masks a dense attention
            assert core_sparse == pytest.approx(core_wide)
            continue
        # the sparse core does the top-k's share of the FLOPs, on a kernel whose rate ramps with the
        # keys it walks (span / (span + seq_half)): at most (k + seq_half) / k slower per FLOP
        share = mean_context(seq, k, True) / mean_context(seq, None, True)
        ramp = (k + efficiency(gpu).seq_half) / k
        assert share < core_sparse / core_wide < share * ramp


def test_mlas_mqa_mode_does_the_absorbed_widths_per_head_and_key():
    # oracle: MLA's absorbed attention written out (DeepSeek-V2 paper, section 2.1.2): each query,
    # absorbed into the latent, and its rotary part against the cached latent and rotary key; the
    # output a mix of latents (up-projected by the absorbed W^UV x W^O afterwards, a weight GEMM)
    m = model_from_hf_config(SMALL)
    queries, keys, h, r, c = 16, 64, m.num_heads, m.qk_rope_head_dim, m.kv_lora_rank
    q_lat, q_rope = torch.randn(queries, h, c), torch.randn(queries, h, r)
    latent, k_rope = torch.randn(keys, c), torch.randn(keys, r)
    with flop_counter.FlopCounterMode(display=False) as counter:
        scores = torch.einsum("qhc,kc->qhk", q_lat, latent) + torch.einsum("qhr,kr->qhk", q_rope, k_rope)
        torch.einsum("qhk,kc->qhc", scores.softmax(-1), latent)
    assert counter.get_total_flops() == 2 * queries * h * keys * mla_absorbed_width(m)  # 2 FLOPs a MAC


def test_the_sparse_kernel_attends_in_mqa_mode_while_mfu_counts_the_unabsorbed_form():
    # DeepSeek-V3.2's DSA runs MLA's MQA mode (its report, section 2.1; the TileLang sparse-MLA
    # kernels Megatron-Core trains it with): below the top-k every key is attended, so the fused
    # core does 1,088 / 320 the FLOPs of the dense model's unabsorbed attention at the same rates
    gpu = catalog.gpu("h100-sxm")
    plan = ParallelPlan(tp=8, ep=8, dp=8)
    cfg = TrainingConfig(seq_len=2048, profile="fused")
    sparse = dataclasses.replace(BIG, index_heads=0, index_head_dim=0)  # the core alone, no indexer
    dense = dataclasses.replace(BIG, index_topk=0, index_heads=0, index_head_dim=0)

    def attention(m):  # forward and backward kernel, less their launch overheads
        return (
            layer_times(m, gpu, _shape(m, cfg, plan), True).parts["attention"] - 2 * efficiency(gpu).kernel_overhead_s
        )

    widths = mla_absorbed_width(BIG) / (BIG.qk_head_dim + BIG.v_dim)
    assert widths == pytest.approx((512 + 64 + 512) / (192 + 128))
    assert attention(sparse) / attention(dense) == pytest.approx(widths, rel=1e-9)
    # the model FLOPs (MFU's numerator) are the architecture's, unabsorbed, either way
    assert attention_flops_per_token(BIG, 2048) - indexer_flops_per_token(BIG, 2048) == pytest.approx(
        attention_flops_per_token(dense, 2048)
    )


def test_the_indexer_keeps_its_queries_keys_weights_and_top_k_indices_for_its_loss_under_megatron():
    plan = ParallelPlan(tp=8, ep=8, dp=8)
    dense = dataclasses.replace(BIG, index_topk=0, index_heads=0, index_head_dim=0)
    for seq in (1024, 8192):
        cfg = TrainingConfig(seq_len=seq, profile="fused")
        extra = activation_breakdown(BIG, cfg, plan).moe_layer - activation_breakdown(dense, cfg, plan).moe_layer
        per_token = 2 * 64 * 128 + 2 * 128 + 4 * 64 + 8 * min(2048, seq)  # bf16 q, k; fp32 weights; int64
        assert extra == pytest.approx(per_token * seq)
    eager = TrainingConfig(seq_len=1024, profile="eager")  # transformers: the indexer under no_grad
    assert activation_breakdown(BIG, eager, plan).moe_layer == activation_breakdown(dense, eager, plan).moe_layer


def test_the_cache_holds_the_indexer_key_beside_the_latent_and_decode_reads_top_k_latents():
    # vLLM's DeepseekV32IndexerCache: 128 FP8 values and one fp32 scale, whatever the latent's format
    assert kv_bytes_per_token_layer(BIG, kv_format("bf16")) == (512 + 64) * 2 + 132
    fmt = kv_format("fp8")
    assert kv_bytes_per_token_layer(BIG, fmt) == (512 + 64) * 1 + 132
    assert cached_tokens(BIG, 100_000) == BIG.num_layers * 100_000
    assert attended_tokens(BIG, 100_000) == BIG.num_layers * 2048
    gpu = catalog.gpu("h200")
    d = Deployment(BIG, gpu, weight_format("fp8", gpu), fmt, tp=8)
    sm = step_model(d)
    # past top-k each step reads one more indexer key per layer, not one more latent: with both
    # steps bound by HBM at batch 64 (bytes / HBM above FLOPs / rate, checked), the growth is the
    # ratio of the bytes a token adds to what is read, 132 for an FP8 index key against 576
    a, b = (float(sm.decode_attention(64, c)) for c in (50_000, 100_000))
    dense = dataclasses.replace(BIG, index_topk=0, index_heads=0, index_head_dim=0)
    sd = step_model(Deployment(dense, gpu, weight_format("fp8", gpu), fmt, tp=8))
    a0, b0 = (float(sd.decode_attention(64, c)) for c in (50_000, 100_000))
    heads = BIG.num_heads // 8
    for per_key_bytes, per_key_flops in ((132, 2 * 64 * 129), (576, 2 * heads * (512 + 64 + 512))):
        assert per_key_bytes / sm.hbm > per_key_flops / sm.decode_rate
    assert (b - a) / (b0 - a0) == pytest.approx(132 / 576)


@pytest.mark.parametrize("model", ["dsa", "gemma-3-27b", "llama-3.1-8b"])
def test_vectorised_decode_steps_equal_one_iteration_each(model):
    m = BIG if model == "dsa" else catalog.model(model)
    gpu = catalog.gpu("h200")
    tp = 8 if model == "dsa" else 1
    sm = step_model(Deployment(m, gpu, weight_format("fp8", gpu), kv_format("fp8"), tp=tp))
    start, steps, batch = 1500, 1200, 32  # crosses a 2048 top-k and Gemma 3's 1024 window
    vec = sm.decode_times(batch, start, steps)
    one = np.array([sm.decode_step(batch, start + i).seconds for i in range(0, steps, 97)])
    assert vec[::97] == pytest.approx(one, rel=1e-9)


def test_dsa_needs_mla_with_a_compressed_query():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="index_n_heads"):
        model_from_hf_config(dict(SMALL, q_lora_rank=None))


def test_a_dsa_plan_says_no_published_run_calibrates_its_sparse_attention():
    from gpuplan.estimate.validate import error_band

    gpu, cfg, plan = catalog.gpu("h100-sxm"), TrainingConfig(seq_len=4096), ParallelPlan(tp=8, ep=8, dp=8)
    band = error_band(gpu, cfg, plan, 10.0, BIG)
    assert any("DeepSeek Sparse Attention" in f for f in band["uncalibrated_features"])
    dense = dataclasses.replace(BIG, index_topk=0, index_heads=0, index_head_dim=0)
    assert "uncalibrated_features" not in error_band(gpu, cfg, plan, 10.0, dense)
