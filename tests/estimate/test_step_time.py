"""Kernel times, overlap and pipeline bubbles of the performance model."""

import dataclasses

import pytest

from gpuplan import catalog
from gpuplan.estimate.kernels import gemm_time
from gpuplan.estimate.step_time import step_time
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


@pytest.fixture(scope="module")
def h100():
    return catalog.gpu("h100-sxm")


def test_a_large_gemm_runs_at_the_sustained_achievable_matmul_rate(h100):
    m, n, k = 256 * 132, 128 * 8, 16384  # 132 x 8 tiles of 256x128: exactly 8 full waves on 132 SMs
    t = gemm_time(h100, "bf16", m, n, k)
    e = h100.efficiency
    rate = h100.peak("bf16") * e.gemm_fraction("bf16") * e.sustained
    assert 2 * m * n * k / t == pytest.approx(rate * k / (k + e.tile_k_fill), rel=0.01)


def test_a_gemm_with_small_k_pays_each_tiles_pipeline_fill(h100):
    # every output tile fills its mainloop (Stages x BK) and writes its epilogue whatever its K:
    # the same tiles with K = 512 run at k / (k + fill) of the large-K rate (CUTLASS mainloop)
    m, n = 256 * 132, 128 * 8
    e = h100.efficiency
    assert e.tile_k_fill == 4 * 64  # 4 stages of BK = 64, CUTLASS's Hopper/Ampere defaults
    big, small = 16384, 512
    rate_big = 2 * m * n * big / (gemm_time(h100, "bf16", m, n, big) - e.kernel_overhead_s)
    rate_small = 2 * m * n * small / (gemm_time(h100, "bf16", m, n, small) - e.kernel_overhead_s)
    assert rate_small / rate_big == pytest.approx((small / (small + 256)) / (big / (big + 256)), rel=1e-6)


def test_one_row_past_a_full_wave_costs_a_whole_wave_on_a100_and_its_share_on_h100(h100):
    # 108 SMs on A100: 12 x 9 tiles of 256x128 fill one wave exactly; one more row spills into a
    # second wave, which smaller tiles soften (as cuBLAS does) but cannot remove
    a100 = catalog.gpu("a100-sxm-80gb")
    k = 16384
    rows, cols = 256 * 12, 128 * 9
    over = gemm_time(a100, "bf16", rows + 1, cols, k) / gemm_time(a100, "bf16", rows, cols, k)
    assert over > 1.3
    # Hopper's persistent (stream-K) kernels spread the 12 extra tiles over the SMs: 143 / 132 of
    # the time, as measured (no staircase across wave boundaries, kernels/waves.json)
    rows, cols = 256 * 12, 128 * 11
    over = gemm_time(h100, "bf16", rows + 1, cols, k) / gemm_time(h100, "bf16", rows, cols, k)
    assert over == pytest.approx(143 / 132, rel=0.01)


def test_a_skinny_gemm_is_bound_by_memory(h100):
    m, n, k = 8, 8192, 8192  # decode-like: reads the weight once for 8 rows
    t = gemm_time(h100, "bf16", m, n, k)
    assert t >= 2 * n * k / (h100.hbm_bytes_per_s * h100.efficiency.hbm)


def _st(model, gpu, plan, cfg, mb):
    return step_time(catalog.model(model), cfg, plan, gpu, mb)


def test_1f1b_bubble_is_p_minus_1_stage_times_and_interleaving_divides_it_by_v(h100):
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    for vp in (1, 2):
        st = _st("llama-3.1-8b", h100, ParallelPlan(dp=1, tp=1, pp=4, vp=vp), cfg, 64)
        per_mb = max(s.total for s in st.stages)
        # 32 layers split evenly: stages differ only by the embedding and LM head, so the
        # simulated bubble is close to Narayanan's (p - 1)/v stage times (costs rounded to 1%)
        bubble = st.breakdown["bubble"]
        assert bubble == pytest.approx(sum(s.total for s in st.stages) / vp - per_mb / vp, rel=0.01)
        assert bubble / (64 * per_mb) < 3 / (vp * 64) * 1.2


def test_zero_bubble_and_dualpipe_shrink_the_bubble(h100):
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=32)
    m = "llama-3.1-70b"
    b = {
        s: _st(m, h100, ParallelPlan(dp=1, tp=8, pp=8, schedule=s), cfg, 32).breakdown["bubble"]
        for s in ("1f1b", "zb", "zb-v", "dualpipe")
    }
    assert b["dualpipe"] < b["zb"] < b["1f1b"]
    assert b["zb-v"] < b["zb"]


def test_overlapping_the_gradient_reduction_hides_it_behind_the_backward(h100):
    plan = ParallelPlan(dp=8, tp=8, zero=1)
    on = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=16)
    off = dataclasses.replace(on, overlap_grad_reduce=False)
    a = _st("llama-3.1-8b", h100, plan, on, 2)
    b = _st("llama-3.1-8b", h100, plan, off, 2)
    assert a.comm["dp"].exposed < b.comm["dp"].exposed
    assert a.comm["dp"].bytes_per_gpu == pytest.approx(b.comm["dp"].bytes_per_gpu)
    assert a.comm["dp"].hidden > 0


def test_tp_overlap_hides_tensor_parallel_collectives(h100):
    plan = ParallelPlan(dp=1, tp=8)
    cfg = TrainingConfig(seq_len=8192, micro_batch=1, global_batch=1)
    off = _st("llama-3.1-70b", h100, plan, cfg, 1)
    on = _st("llama-3.1-70b", h100, plan, dataclasses.replace(cfg, tp_overlap=True), 1)
    assert on.breakdown["tp_comm"] < 0.5 * off.breakdown["tp_comm"]
    assert on.step_s < off.step_s


def test_breakdown_sums_to_the_step_and_recompute_costs_time(h100):
    plan = ParallelPlan(dp=4, tp=8, pp=2, zero=1)
    base = TrainingConfig(seq_len=8192, micro_batch=1, global_batch=512)
    times = {}
    for rec in ("none", "selective", "full"):
        st = _st("llama-3.1-70b", h100, plan, dataclasses.replace(base, recompute=rec), 128)
        assert sum(st.breakdown.values()) == pytest.approx(st.step_s)
        times[rec] = st.step_s
        assert 0 < st.mfu <= st.hfu < 1
    assert times["none"] < times["selective"] < times["full"]


def test_context_parallel_kv_bytes_per_layer_match_the_textbook_count(h100):
    """Llama-3.1-70B, 8K tokens over cp=8: each GPU holds 1024 tokens and, in a ring, sends its
    K and V chunk to the next rank cp-1 times forward; backward passes K, V and dK, dV."""
    m = catalog.model("llama-3.1-70b")
    cfg = TrainingConfig(seq_len=8192, micro_batch=1, global_batch=1)
    st = step_time(m, cfg, ParallelPlan(dp=1, cp=8, tp=1), h100, 1)
    chunk = 1024 * 2 * m.num_kv_heads * m.head_dim * 2  # tokens x (K and V) x kv heads x head dim x bf16
    assert chunk == 4 * 2**20  # 4 MiB per hop
    per_layer_fwd = 7 * chunk
    per_layer = per_layer_fwd + 7 * 2 * chunk
    assert st.comm["cp"].bytes_per_gpu == pytest.approx(m.num_layers * per_layer)


def test_expert_imbalance_slows_the_moe_layers_by_the_busiest_gpu(h100):
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    plan = ParallelPlan(dp=8, ep=8)
    even = _st("mixtral-8x7b", h100, plan, cfg, 8)
    skewed = _st("mixtral-8x7b", h100, plan, dataclasses.replace(cfg, expert_imbalance=1.5), 8)
    assert skewed.step_s > even.step_s
    assert skewed.comm["ep"].bytes_per_gpu == pytest.approx(1.5 * even.comm["ep"].bytes_per_gpu)


def test_overlapped_expert_all_to_all_hides_behind_at_most_the_paired_compute(h100):
    # DeepSeek-V3 report, section 3.2.1: a forward chunk runs beside another micro-batch's backward
    # chunk, so the all-to-all of a layer hides behind that pair's compute and no more; cross-node
    # EP with small experts (here 2 nodes of 8) leaves the rest exposed
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    plan = ParallelPlan(dp=16, ep=16)
    plain = _st("mixtral-8x7b", h100, plan, cfg, 4)
    over = _st("mixtral-8x7b", h100, plan, dataclasses.replace(cfg, ep_overlap=True), 4)
    ep_plain, ep_over = plain.comm["ep"], over.comm["ep"]
    assert ep_plain.exposed == pytest.approx(ep_plain.time)  # no overlap: all of it on the path
    assert ep_over.time == pytest.approx(ep_plain.time)
    compute = over.breakdown["compute"]  # every layer's forward + backward over the step
    assert ep_over.hidden <= compute * (1 + 1e-9)
    assert ep_over.exposed == pytest.approx(max(0.0, ep_over.time - ep_over.hidden))
    assert over.step_s < plain.step_s


def test_hidden_communication_still_costs_the_sms_nccl_holds(h100):
    # NCCL runs a thread block per channel on its own SM: compute beside a collective runs on the
    # others, so the step pays hidden time x comm_sms / sm_count (overlap is never free)
    cfg = TrainingConfig.for_framework("torchtitan", seq_len=4096, micro_batch=1, global_batch=64, tp_overlap=True)
    st = _st("llama-3.1-8b", h100, ParallelPlan(dp=8, tp=8, sp=True), cfg, 8)
    hidden = sum(c.hidden for c in st.comm.values())
    e = h100.efficiency
    assert hidden > 0
    assert st.breakdown["overlap_contention"] == pytest.approx(hidden * e.comm_sms / h100.sm_count)


def test_transformer_engine_userbuffers_hold_their_own_sms_not_nccls(h100):
    # TE's default userbuffers (module/base.py initialize_ub): the all-gathers feeding a GEMM run
    # ring_exchange on the copy engine with 1 SM, the reduce-scatters and the backward's bulk
    # overlaps 16 SMs: hiding the same TP collectives costs less than NCCL's 32 channels would
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64, tp_overlap=True)
    st = _st("llama-3.1-8b", h100, ParallelPlan(dp=8, tp=8, sp=True), cfg, 8)
    tp = st.comm["tp"]
    assert tp.stated_hidden == pytest.approx(tp.hidden) and tp.hidden > 0
    assert 1 * tp.hidden < tp.sm_hidden < 16 * tp.hidden
    nccl = sum(c.hidden for d, c in st.comm.items() if d != "tp") * h100.efficiency.comm_sms
    assert st.breakdown["overlap_contention"] == pytest.approx((nccl + tp.sm_hidden) / h100.sm_count)


def test_a_recalibrated_gpu_never_reuses_a_cached_step_time(h100):
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64)
    plan = ParallelPlan(dp=8, tp=8, sp=True)
    base = _st("llama-3.1-8b", h100, plan, cfg, 8).step_s
    slower = dataclasses.replace(h100, efficiency=dataclasses.replace(h100.efficiency, sustained=0.4))
    assert slower != h100 and hash(slower) != hash(h100)
    assert _st("llama-3.1-8b", slower, plan, cfg, 8).step_s > 1.3 * base


def test_fp8_runs_the_attention_core_and_output_layer_in_bf16(h100):
    from gpuplan.estimate.compute import LayerShape, layer_times
    from gpuplan.estimate.model_ends import head_times

    m = catalog.model("llama-3.1-8b")
    shape = {
        d: LayerShape(
            tokens=8192, seq=8192, micro_batch=1, tp=1, cp=1, ep=1, sp=False, dtype=d, act_bytes=2, attention="flash"
        )
        for d in ("bf16", "fp8")
    }
    bf16, fp8 = (layer_times(m, h100, shape[d], False) for d in ("bf16", "fp8"))
    assert fp8.parts["attention"] == pytest.approx(bf16.parts["attention"])
    assert fp8.parts["gemm"] < 0.75 * bf16.parts["gemm"]
    assert head_times(m, h100, shape["fp8"]).parts["gemm"] == pytest.approx(
        head_times(m, h100, shape["bf16"]).parts["gemm"]
    )


def test_fp8_pays_a_cast_and_transpose_of_every_gemm_input_and_output_gradient(h100):
    from gpuplan.estimate.compute import LayerShape, layer_times
    from gpuplan.estimate.kernels import memory_time

    m = catalog.model("llama-3.1-8b")
    T = 8192
    shape = LayerShape(
        tokens=T, seq=8192, micro_batch=1, tp=1, cp=1, ep=1, sp=False, dtype="fp8", act_bytes=2, attention="flash"
    )
    h, f, qkv = 4096, 14336, 4096 + 2 * 1024
    # (in, out) of qkv, o, gate+up, down; read BF16 (2 B), write FP8 and its transpose (1 + 1 B)
    gemms = [(h, qkv), (h, h), (h, 2 * f), (f, h)]
    expected = sum(memory_time(h100, T * n_in * 4) + memory_time(h100, T * n_out * 4) for n_in, n_out in gemms)
    assert layer_times(m, h100, shape, False).parts["fp8_cast"] == pytest.approx(expected)


def test_fp8_training_is_faster_than_bf16_by_less_than_the_peak_ratio(h100):
    # frameworks report 1.3-1.5x (not the 2x of the datasheet): casts, BF16 attention and norms
    plan = ParallelPlan(dp=4, tp=8, pp=2, sp=True)
    base = TrainingConfig(seq_len=8192, micro_batch=1, global_batch=512, recompute="selective", tp_overlap=True)
    bf16 = _st("llama-3.1-70b", h100, plan, base, 128).step_s
    fp8 = _st("llama-3.1-70b", h100, plan, dataclasses.replace(base, precision="fp8"), 128).step_s
    assert 1.2 < bf16 / fp8 < 1.6


def test_sdpa_frameworks_run_flashattention_2_which_hopper_runs_slower_than_fa3(h100):
    from gpuplan.estimate.kernels import flash_time

    flops = 1e12
    fa3 = flash_time(h100, "bf16", flops, 8192, "fa3")
    fa2 = flash_time(h100, "bf16", flops, 8192, "fa2")
    e = h100.efficiency
    # the FA3 paper's 1.5-2.0x forward speed-up over FA2 on H100
    assert 1.5 <= (fa2[0] - e.kernel_overhead_s) / (fa3[0] - e.kernel_overhead_s) <= 2.0
    assert fa2[1] > fa3[1]
    # the A100 has no FA3: both names run FlashAttention-2's measured rate
    a100 = catalog.gpu("a100-sxm-80gb")
    assert flash_time(a100, "bf16", flops, 8192, "fa2") == flash_time(a100, "bf16", flops, 8192, "fa3")
    assert TrainingConfig.for_framework("deepspeed").attention_kernel == "fa2"
    assert TrainingConfig.for_framework("megatron").attention_kernel == "fa3"


def test_torchtitan_runs_sdpa_with_cudnn_first():
    # torchtitan's ScaledDotProductAttention: sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, ...],
    # set_priority=True) since October 2025 (pytorch/torchtitan 6a3a9da95)
    assert TrainingConfig.for_framework("torchtitan").attention_kernel == "sdpa"


# -- MoE parallel folding ------------------------------------------------------------------------


def test_moe_layers_put_no_attention_tp_collective_around_the_experts(h100):
    # Qwen3-30B-A3B (every layer MoE, no shared expert) with TP 2: the dispatcher routes each
    # rank's sequence-parallel share as it is (token_dispatcher.py), so only the attention's
    # all-gather in and reduce-scatter out run over tp, forward and backward, and (Megatron's
    # sequence parallelism) the input's all-gather again for the weight gradient: by hand, 5
    # collectives of 4096 tokens x 2048 x bf16, each sending half of it, per layer (48) and
    # micro-batch (4)
    m = catalog.model("qwen3-30b-a3b")
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=16)
    unset = step_time(m, cfg, ParallelPlan(dp=4, tp=2, ep=4), h100, 4)
    assert unset.comm["tp"].bytes_per_gpu == pytest.approx(48 * 4 * 5 * 4096 * 2048 * 2 / 2)
    # etp unset is Megatron's default etp = tp (model_parallel_config.py __post_init__)
    same = step_time(m, cfg, ParallelPlan(dp=4, tp=2, ep=4, etp=2), h100, 4)
    assert unset.step_s == same.step_s
    assert unset.comm["ep"].bytes_per_gpu == same.comm["ep"].bytes_per_gpu


@pytest.mark.parametrize("ep,etp", [(4, 2), (8, 1), (2, 4)])
def test_expert_dispatch_collectives_are_sized_by_ep_and_etp(h100, ep, etp):
    # per layer and micro-batch, by hand from Megatron's MoEAlltoAllTokenDispatcher: each rank
    # routes its 4096 / tp tokens' k copies (hidden x bf16) over EP, all-to-all in dispatch and
    # combine, forward and backward; the expert-TP all-gather (dispatch) and reduce-scatter
    # (combine) move etp of those shares, once each way forward and once backward
    m = catalog.model("qwen3-30b-a3b")
    mb, tp = 4, 2
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=4 * mb)
    st = step_time(m, cfg, ParallelPlan(dp=4, tp=tp, ep=ep, etp=etp), h100, mb)
    share = 4096 / tp * m.experts_per_token * m.hidden_size * 2
    per = m.num_layers * mb
    got = st.comm["ep"].collectives
    assert got["all-to-all"] == pytest.approx(per * 4 * share * (ep - 1) / ep)
    gathered = share * etp * (etp - 1) / etp
    assert got.get("all-gather", 0.0) == pytest.approx(per * 2 * gathered)
    assert got.get("reduce-scatter", 0.0) == pytest.approx(per * 2 * gathered)


def test_expert_gradients_reduce_over_the_expert_data_parallel_ranks(h100):
    # TP 2 x DP 4 = 8 ranks: EP 8 x ETP 1 leaves one expert replica (EDP 1, nothing to reduce);
    # EP 4 x ETP 1 leaves two (EDP 2: a reduce-scatter of the experts' gradients over 2 ranks)
    from gpuplan.estimate.memory import stage_params

    m = catalog.model("qwen3-30b-a3b")
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=16)
    for ep, edp in ((8, 1), (4, 2)):
        plan = ParallelPlan(dp=4, tp=2, ep=ep, etp=1, zero=1)
        assert plan.expert_zero_group == edp
        st = step_time(m, cfg, plan, h100, 4)
        held = stage_params(m, 1, 0, 0, m.num_layers, 2, ep, 0, 1)
        dense_rs = held.dense * cfg.grad_bytes * 3 / 4
        expert_rs = held.expert * cfg.grad_bytes * (edp - 1) / edp
        assert st.comm["dp"].collectives["reduce-scatter"] == pytest.approx(dense_rs + expert_rs)


def test_interleaved_pipeline_hides_its_sends_behind_the_next_chunk_but_1f1b_waits_for_each(h100):
    # Megatron-Core's interleaved schedule (overlap_p2p_comm) posts each receive ahead: only the
    # 2(p-1) hops of the fill and drain wait, as long as a transfer is shorter than a chunk's
    # forward; plain 1F1B's blocking send/recv waits for every one of its 2(m + p - 1) transfers.
    # By hand: each TP rank sends its 1/tp slice, 4096 tokens x 8192 x bf16 / 4, over the
    # neighbour link (pp across nodes in tp-cp-dp-pp order with tp 4 x dp 2 = one node per stage)
    from gpuplan.estimate.comm import collective_time, place

    m = catalog.model("llama-3.1-70b")
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=32)
    p, mb = 4, 16
    size = 4096 * 8192 * 2 / 4
    plain_plan = ParallelPlan(dp=2, tp=4, pp=p)
    t = collective_time("p2p", size, place(plain_plan, h100, ("tp", "cp", "dp", "pp"))["pp"], h100)
    plain = step_time(m, cfg, plain_plan, h100, mb)
    assert plain.breakdown["pp_comm"] == pytest.approx(2 * (mb + p - 1) * t)
    interleaved = step_time(m, cfg, ParallelPlan(dp=2, tp=4, pp=p, vp=5), h100, mb)
    assert interleaved.stages[0].fwd / 5 > t  # a chunk (4 layers) outlasts a transfer
    assert interleaved.breakdown["pp_comm"] == pytest.approx(2 * (p - 1) * t)
    assert interleaved.comm["pp"].time == pytest.approx(2 * (mb * 5 + p - 1) * t)  # all still sent
    # Megatron-LM 2021-22 waited on each batch_isend_irecv: every interleaved transfer on the path
    blocking = step_time(m, dataclasses.replace(cfg, overlap_p2p=False), ParallelPlan(dp=2, tp=4, pp=p, vp=5), h100, mb)
    assert blocking.breakdown["pp_comm"] == pytest.approx(2 * (mb * 5 + p - 1) * t)


@pytest.mark.parametrize("gpu_id", ["h100-sxm", "b200"])
def test_a_model_with_some_sliding_layers_prices_each_kind_of_layer_at_its_own_kernel_rate(gpu_id):
    # gpt-oss-120b alternates sliding-window (128 tokens) and full-attention layers. Oracle: the
    # same model with every layer full and with every layer sliding, averaged by the layer shares:
    # a full layer's kernel runs at the sequence's rate, not at the window's
    from gpuplan.estimate.compute import LayerShape, layer_times

    gpu = catalog.gpu(gpu_id)
    m = catalog.model("gpt-oss-120b")
    assert 0 < m.num_sliding_layers < m.num_layers
    shape = LayerShape(
        tokens=4096, seq=4096, micro_batch=1, tp=1, cp=1, ep=1, sp=False, dtype="bf16", act_bytes=2, attention="flash"
    )

    def attention(model):
        return layer_times(model, gpu, shape, True).parts["attention"]

    share = m.num_sliding_layers / m.num_layers
    full = attention(dataclasses.replace(m, num_sliding_layers=0))
    sliding = attention(dataclasses.replace(m, num_sliding_layers=m.num_layers))
    assert attention(m) == pytest.approx((1 - share) * full + share * sliding)


def test_the_fused_kernel_follows_the_measured_head_dim_shape_where_one_is_measured(h100):
    # H100's cuDNN attention measured at head dims 64 / 128 / 256 (catalog sdpa_cudnn): the fused
    # kernel's head-dim-128 rates scale by the same ratios. Oracle: the measured table itself and
    # the FA3 paper's forward ratio at head dim 64 (497 / 648 TFLOP/s at 16K, Shah et al. 2024)
    e = h100.efficiency
    table = {d: (f, b) for d, f, b in e.sdpa_cudnn}
    fwd64, bwd64 = e.attention_fractions("fa3", 64)
    assert fwd64 / e.flash_fwd == pytest.approx(table[64][0] / table[128][0])
    assert bwd64 / e.flash_bwd == pytest.approx(table[64][1] / table[128][1])
    assert fwd64 / e.flash_fwd == pytest.approx(497 / 648, abs=0.03)
    assert e.attention_fractions("fa3", 128) == (e.flash_fwd, e.flash_bwd)
    # one published head dim (Blackwell): no shape to follow
    b200 = catalog.gpu("b200").efficiency
    assert b200.attention_fractions("fa3", 64) == (b200.flash_fwd, b200.flash_bwd)


def test_ep_overlap_hides_each_exchange_only_behind_its_partner_computation():
    # Megatron-Core's layer pair (model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):
    # combine_bwd | dispatch_fwd->dispatch_bwd | combine_fwd beside
    # pre_dispatch_fwd | mlp_bwd->mlp_fwd | pre_dispatch_bwd. Forward 3 s (MoE block 2), backward
    # 6 s (so experts 4, attention 2); a dispatch-direction exchange 1.5 s, a combine 0.5 s:
    # phases max(1.5, 1) + max(1.5, 4) + max(2, 0.5) + max(0.5, 2) = 9.5 s against 9 s of compute.
    # The whole pair's compute (9 s) would hide all 4 s; the combine's backward beside the 1 s
    # attention forward leaves 0.5 s.
    from gpuplan.estimate.compute import OpTimes
    from gpuplan.estimate.layer_comm import paired_exposure

    ops = OpTimes(fwd=3.0, bwd_input=4.0, bwd_weight=2.0, modules={"moe": 2.0})
    assert paired_exposure(ops, 1.5, 0.5) == pytest.approx(0.5)
    assert paired_exposure(ops, 0.5, 0.5) == pytest.approx(0.0)  # every exchange under its partner
