"""Speculative decoding: Leviathan's expectation against a simulated verifier, and where it stops paying."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.speculative import expected_tokens, speculation
from gpuplan.serve.timing import Deployment, StepModel


@pytest.mark.parametrize("alpha,k", [(0.5, 1), (0.7, 4), (0.9, 8), (1.0, 3), (0.0, 5)])
def test_expected_tokens_per_pass_match_a_simulated_verifier(alpha, k):
    rng = np.random.default_rng(1)
    accepted = rng.random((200_000, k)) < alpha
    # tokens kept = drafts accepted before the first rejection, plus the target's own token
    run = np.where(accepted.all(axis=1), k, np.argmin(accepted, axis=1))
    assert expected_tokens(alpha, k) == pytest.approx(run.mean() + 1, rel=0.01)


def test_speculation_pays_at_batch_one_and_stops_when_decode_turns_compute_bound():
    g = catalog.gpu("h100-sxm")
    target = StepModel(Deployment(catalog.model("llama-3.1-70b"), g, weight_format("fp8", g), kv_format("fp8"), 4))
    draft = StepModel(Deployment(catalog.model("llama-3.2-1b"), g, weight_format("fp8", g), kv_format("fp8"), 4))
    s = speculation(target, draft, 1, 2048, 4, 0.8, 4096)
    assert s.speedup > 1.5
    assert s.break_even_batch is not None and s.break_even_batch > 8
    speedups = [x for _, x in s.curve]
    assert speedups[0] > speedups[-1]
    ngram = speculation(target, None, 1, 2048, 4, 0.8, 64)
    assert ngram.speedup > s.speedup  # same acceptance, no draft model to run


def test_an_mtp_draft_is_one_block_of_the_mtp_layers_kind_with_the_models_ends():
    from gpuplan.estimate.params import count_params, embedding_tensors, head_tensors, layer_tensors
    from gpuplan.serve.speculative import mtp_draft

    m = catalog.model("deepseek-v3")
    d = mtp_draft(m)
    assert d.num_layers == 1 and d.is_moe_layer(0) and d.mtp_layers == 0  # DeepSeek-V3's layer 61 is MoE
    ends = sum(t.numel for t in (*embedding_tensors(m), *head_tensors(m)))
    assert count_params(d).total == sum(t.numel for t in layer_tensors(m, True)) + ends


def test_mtp_speculation_adds_the_modules_weights_and_kv_layer_and_pays_at_batch_one():
    from gpuplan.estimate.params import mtp_params
    from gpuplan.serve.plan import ServeRequest, estimate_serving
    from gpuplan.serve.speculative import expected_tokens

    g = catalog.gpu("h200")
    base = dict(model=catalog.model("deepseek-v3"), gpu=g, tp=8, weights="fp8", input_len=1000, output_len=2000)
    plain = estimate_serving(ServeRequest(**base))
    mtp = estimate_serving(ServeRequest(**base, mtp=True, draft_len=1, acceptance=0.85))
    extra = mtp.memory.weights - plain.memory.weights
    # the block and projection in FP8 (1 byte a weight, plus its block scales and 16-bit norms and
    # router), over 8 GPUs: the embedding and head are shared
    assert extra == pytest.approx(mtp_params(catalog.model("deepseek-v3"), 1) / 8, rel=0.03)
    assert mtp.memory.kv_pool == pytest.approx(plain.memory.kv_pool - extra)
    assert mtp.memory.kv_block_bytes == pytest.approx(plain.memory.kv_block_bytes * 62 / 61)  # 61 layers + MTP's
    s = mtp.speculation
    assert s.method == "mtp" and 1.0 < s.speedup < expected_tokens(0.85, 1)
    from gpuplan.serve.plan import to_dict

    assert to_dict(mtp)["kv_bytes_per_token"] == pytest.approx(to_dict(plain)["kv_bytes_per_token"] * 62 / 61)


@pytest.mark.parametrize(
    "kw,field",
    [(dict(model="llama-3.1-8b", mtp=True), "mtp"), (dict(model="deepseek-v3", mtp=True, ngram=True), "draft")],
)
def test_mtp_speculation_needs_an_mtp_layer_and_is_the_only_proposer(kw, field):
    from gpuplan.errors import GpuplanError
    from gpuplan.serve.plan import ServeRequest

    with pytest.raises(GpuplanError) as err:
        ServeRequest(**{**kw, "model": catalog.model(kw["model"])}, gpu=catalog.gpu("h200"), tp=8)
    assert err.value.field == field
