"""Packed documents under a document (block-causal) mask: what attention does, counted query by query."""

import pytest
from mask_oracle import counted_imbalance, keys_seen

from gpuplan import catalog
from gpuplan.estimate.compute import LayerShape, layer_times
from gpuplan.estimate.flops import attention_flops_per_token, cp_attention_imbalance, mean_context
from gpuplan.estimate.step_time import step_time
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


@pytest.mark.parametrize("seq,document", [(240, 40), (240, 70), (240, 240), (240, 0)])
@pytest.mark.parametrize("window,chunked", [(None, False), (16, False), (25, True)])
def test_mean_keys_per_query_equal_counting_each_query(seq, document, window, chunked):
    counted = sum(keys_seen(i, window, chunked, document) for i in range(seq)) / seq
    assert mean_context(seq, window, True, chunked, document) == pytest.approx(counted)


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("balanced", [True, False])
@pytest.mark.parametrize("document", [30, 48, 100])
def test_busiest_cp_rank_under_a_document_mask_equals_counting(cp, balanced, document):
    counted = counted_imbalance(240, cp, None, balanced, False, document)
    assert cp_attention_imbalance(240, cp, None, balanced, False, document) == pytest.approx(counted)


def test_short_documents_spread_the_work_evenly_over_unbalanced_cp_ranks():
    # 1K-token documents in a 128K sequence: every rank's 16K tokens hold whole documents
    assert cp_attention_imbalance(131072, 8, balanced=False, document=1024) == pytest.approx(1.0)
    assert cp_attention_imbalance(131072, 8, balanced=False) == pytest.approx(2 - 1 / 8, rel=1e-4)


def test_attention_flops_per_token_follow_the_documents_length():
    m = catalog.model("llama-3.1-8b")
    per_key = 2 * m.num_heads * (m.qk_head_dim + m.v_dim) * m.num_layers
    assert attention_flops_per_token(m, 32768, document=4096) == pytest.approx(per_key * 4097 / 2)
    assert attention_flops_per_token(m, 32768) == pytest.approx(per_key * 32769 / 2)


def test_a_packed_sequence_attends_in_the_time_of_its_documents_alone():
    # one 32K sequence of eight 4K documents, masked, and eight 4K sequences: the same keys and
    # the same kernel span, so the same attention time
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    common = dict(tp=1, cp=1, ep=1, sp=False, dtype="bf16", act_bytes=2, attention="flash")
    packed = LayerShape(tokens=32768, seq=32768, micro_batch=1, document=4096, **common)
    alone = LayerShape(tokens=32768, seq=4096, micro_batch=8, **common)
    a, b = layer_times(m, gpu, packed, False), layer_times(m, gpu, alone, False)
    assert a.parts["attention"] == pytest.approx(b.parts["attention"])
    assert a.parts["gemm"] == pytest.approx(b.parts["gemm"])


def test_document_masking_shortens_a_long_context_step_and_its_model_flops():
    m, gpu = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=1, cp=8)
    whole = step_time(m, TrainingConfig(seq_len=131072, global_batch=1, recompute="full"), plan, gpu, 1)
    docs = step_time(
        m, TrainingConfig(seq_len=131072, global_batch=1, recompute="full", document_len=8192), plan, gpu, 1
    )
    assert docs.step_s < 0.5 * whole.step_s
    assert docs.model_flops_per_step < 0.5 * whole.model_flops_per_step
