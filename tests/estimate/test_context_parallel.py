"""Context parallelism's three K,V exchanges (ring p2p, all-gather, all-to-all) and its sequence split.

Oracles: the busiest rank's causal work counted query by query over an explicit assignment of
positions to ranks; the bytes each exchange moves written from the tensors' shapes."""

import dataclasses

import pytest
from mask_oracle import counted_imbalance

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.compute import LayerShape, layer_times
from gpuplan.estimate.flops import cp_attention_imbalance
from gpuplan.estimate.step_time import step_time
from gpuplan.estimate.train import TrainRequest, estimate_training
from gpuplan.search.plans import search
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
@pytest.mark.parametrize("window,chunked", [(None, False), (5, False), (40, False), (7, True), (60, True)])
@pytest.mark.parametrize("balanced", [True, False])
def test_busiest_rank_work_equals_counting_each_query(cp, window, chunked, balanced):
    seq = 240
    assert cp_attention_imbalance(seq, cp, window, balanced, chunked) == pytest.approx(
        counted_imbalance(seq, cp, window, balanced, chunked)
    )


def test_contiguous_causal_split_gives_the_last_rank_two_minus_one_over_cp():
    for cp in (2, 4, 8, 16):
        assert cp_attention_imbalance(2**20, cp, balanced=False) == pytest.approx(2 - 1 / cp, rel=1e-4)
        assert cp_attention_imbalance(2**20, cp, balanced=True) == pytest.approx(1.0)


def _shape(cp_comm: str, cp: int = 8, seq: int = 8192, balanced: bool = True) -> LayerShape:
    return LayerShape(
        tokens=seq // cp,
        seq=seq,
        micro_batch=1,
        tp=1,
        cp=cp,
        ep=1,
        sp=False,
        dtype="bf16",
        act_bytes=2,
        attention="flash",
        cp_comm=cp_comm,
        cp_balanced=balanced,
    )


def test_unbalanced_ring_attention_takes_the_busiest_ranks_attention_time():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    even = layer_times(m, gpu, _shape("p2p", cp=4, seq=32768), False)
    skew = layer_times(m, gpu, _shape("p2p", cp=4, seq=32768, balanced=False), False)
    assert skew.parts["attention"] == pytest.approx(
        even.parts["attention"] * cp_attention_imbalance(32768, 4, None, False)
    )
    assert skew.parts["gemm"] == pytest.approx(even.parts["gemm"])  # only the attention waits


def test_all_gather_and_a2a_kernels_walk_the_whole_sequence_where_the_ring_walks_a_chunk():
    # 8K tokens over cp 8: a ring step's kernel sees 1K keys, on the flash kernel's ramp
    # s / (s + seq_half); the gathered keys and the all-to-all's head split give it all 8K
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    half = efficiency(gpu).seq_half
    ring, gathered, ulysses = (
        layer_times(m, gpu, _shape(c), False).parts["attention"] for c in ("p2p", "all_gather", "a2a")
    )
    ramp = (8192 / (8192 + half)) / (1024 / (1024 + half))
    assert gathered == pytest.approx(ulysses)
    assert ring / gathered == pytest.approx(ramp, rel=0.02)  # the kernels' launch overhead aside


def _cp_line(cp_comm: str, recompute: str = "none"):
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    cfg = TrainingConfig(seq_len=32768, global_batch=1, cp_comm=cp_comm, recompute=recompute)
    return m, step_time(m, cfg, ParallelPlan(dp=1, cp=8), gpu, 1).comm["cp"]


def test_a2a_sends_seven_eighths_of_q_k_v_and_the_output_each_way():
    m, line = _cp_line("a2a")
    tokens, a = 32768 // 8, 2
    q, kv = m.num_heads * m.head_dim, 2 * m.num_kv_heads * m.head_dim
    o = m.num_heads * m.head_dim
    # forward: Q, K, V in and the output back; backward: dO in and dQ, dK, dV back
    per_layer = 2 * 7 / 8 * tokens * (q + kv + o) * a
    assert line.bytes_per_gpu == pytest.approx(m.num_layers * per_layer)
    assert line.exposed == pytest.approx(line.time)  # nothing to hide behind


def test_all_gather_gathers_the_sequences_k_v_forward_and_again_backward_then_reduce_scatters_them():
    m, line = _cp_line("all_gather")
    kv_all = 32768 * 2 * m.num_kv_heads * m.head_dim * 2  # the whole sequence's K and V, bf16
    per_layer = 3 * 7 / 8 * kv_all  # gather, gather again, reduce-scatter dK dV
    assert line.bytes_per_gpu == pytest.approx(m.num_layers * per_layer)
    assert line.collectives.keys() == {"all-gather", "reduce-scatter"}
    assert line.exposed == pytest.approx(line.time)
    # full recompute gathers once more for the rerun forward
    _, rerun = _cp_line("all_gather", "full")
    assert rerun.bytes_per_gpu == pytest.approx(m.num_layers * 4 * 7 / 8 * kv_all)


def test_the_ring_hides_its_exchange_behind_each_steps_kernel():
    _, line = _cp_line("p2p")
    assert line.exposed < 0.05 * line.time


def test_a2a_refuses_a_cp_that_does_not_divide_the_heads_per_tp_rank():
    m, gpu = catalog.model("llama-3.1-70b"), catalog.gpu("h100-sxm")  # 64 heads, 8 KV heads
    cfg = TrainingConfig(seq_len=65536, global_batch=8, cp_comm="a2a", recompute="full")
    with pytest.raises(GpuplanError) as err:
        estimate_training(TrainRequest(m, gpu, ParallelPlan(dp=1, tp=8, cp=8, zero=1), cfg))
    assert err.value.field == "cp" and "a2a" in str(err.value) and "p2p" in str(err.value)
    # tp 2 leaves 4 KV heads per rank: cp 4 divides them
    estimate_training(TrainRequest(m, gpu, ParallelPlan(dp=2, tp=2, cp=4, zero=3), cfg))


def test_the_search_counts_a2a_plans_whose_cp_splits_no_whole_heads():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    base = TrainingConfig(seq_len=65536, global_batch=16, cp_comm="a2a")
    result = search(m, gpu, 32, base, max_vp=1, top=50)
    assert result.rejected["cp does not divide the heads per tp rank (cp_comm a2a)"] > 0
    for r in result.ranked:
        p = r.plan
        assert (m.num_kv_heads // p.tp) % p.cp == 0, p


def test_frameworks_refuse_exchanges_and_splits_they_do_not_have():
    with pytest.raises(GpuplanError) as err:
        TrainingConfig.for_framework("deepspeed", cp_comm="p2p")
    assert err.value.field == "cp_comm" and "deepspeed" in str(err.value) and "a2a" in str(err.value)
    with pytest.raises(GpuplanError) as err:
        TrainingConfig.for_framework("megatron", cp_load_balance=False)
    assert err.value.field == "cp_load_balance"
    with pytest.raises(GpuplanError) as err:
        TrainingConfig(cp_comm="all_gather", cp_load_balance=False)  # TE always takes head-tail chunks
    assert err.value.field == "cp_load_balance"
    with pytest.raises(GpuplanError) as err:
        TrainingConfig(cp_comm="ring")
    assert err.value.field == "cp_comm"
    # each framework's own exchange when none is given
    assert TrainingConfig.for_framework("deepspeed").cp_exchange == "a2a"
    assert TrainingConfig.for_framework("torchtitan").cp_exchange == "p2p"
    assert TrainingConfig().cp_exchange == "p2p"
    assert (
        dataclasses.replace(TrainingConfig.for_framework("megatron"), cp_comm="all_gather").cp_exchange == "all_gather"
    )


def test_options_no_published_run_uses_are_marked_uncalibrated():
    from gpuplan.estimate.validate import error_band

    gpu, plan = catalog.gpu("h100-sxm"), ParallelPlan(dp=2, tp=2, cp=2)
    ring = error_band(gpu, TrainingConfig(seq_len=65536), plan, 10.0)
    assert "uncalibrated_features" not in ring
    for cfg, words in (
        (TrainingConfig(seq_len=65536, cp_comm="a2a"), "all-to-all"),
        (TrainingConfig(seq_len=65536, cp_load_balance=False), "unbalanced"),
        (TrainingConfig(seq_len=65536, document_len=4096), "document-masked"),
    ):
        band = error_band(gpu, cfg, plan, 10.0)
        assert any(words in f for f in band["uncalibrated_features"]), cfg


def test_the_search_ranks_each_exchange_and_counts_each_cp_plan_once_per_exchange():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    base = TrainingConfig(seq_len=131072, global_batch=16)
    one = search(m, gpu, 16, base, max_vp=1, top=200)
    both = search(m, gpu, 16, base, max_vp=1, top=200, cp_comms=("p2p", "all_gather"))
    from gpuplan.search.plans import enumerate_layouts

    cp_layouts = sum(lo.cp > 1 for lo in enumerate_layouts(m, gpu, 16, 1))
    per_layout = 4 * 4 * 3  # micro-batches x ZeRO stages x recompute modes
    assert both.considered == one.considered + cp_layouts * per_layout
    seen = [(c.plan, c.config.micro_batch, c.config.recompute, c.config.cp_exchange) for c in both.ranked]
    assert len(seen) == len(set(seen))
    assert {c.config.cp_exchange for c in both.ranked if c.plan.cp > 1} == {"p2p", "all_gather"}
    # a plan without context parallelism is ranked once, whatever the exchanges
    flat = [(c.plan, c.config.micro_batch, c.config.recompute) for c in both.ranked if c.plan.cp == 1]
    assert len(flat) == len(set(flat))
    with pytest.raises(GpuplanError) as err:
        search(
            m,
            gpu,
            16,
            TrainingConfig.for_framework("deepspeed", seq_len=131072, global_batch=16),
            cp_comms=("p2p", "a2a"),
        )
    assert err.value.field == "cp_comm"
