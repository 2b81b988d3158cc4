"""serve-sim with speculative decoding: drafts verified beside each decoder's token, the accepted
prefix kept per sequence and iteration (serve/sim.py ``spec``)."""

from dataclasses import replace

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.engines import engine, engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import serve_memory
from gpuplan.serve.sim import Speculating, Workload, simulate
from gpuplan.serve.speculative import accepted_tokens, expected_tokens, proposer
from gpuplan.serve.timing import Deployment, step_model

GPU = catalog.gpu("h100-sxm")
D = Deployment(catalog.model("llama-3.1-8b"), GPU, weight_format("bf16", GPU), kv_format("bf16", GPU))
CFG = engine_config(None, GPU, 1)


def _lone(prompt: int, out: int) -> Workload:
    return Workload(np.zeros(1), np.array([prompt]), np.array([out]))


def test_accepted_tokens_average_the_expected_tokens_of_leviathan_et_al():
    # oracle: E = (1 - alpha^(k+1)) / (1 - alpha), Leviathan et al. 2023 eq. 1
    rng = np.random.default_rng(0)
    for alpha, k in ((0.0, 4), (0.6, 3), (0.9, 5), (1.0, 2)):
        kept = accepted_tokens(rng, alpha, k, 200_000)
        assert kept.min() >= 1 and kept.max() <= k + 1
        assert kept.mean() == pytest.approx(expected_tokens(alpha, k), rel=0.01)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.8, 1.0])
def test_a_lone_sequence_decodes_at_the_verify_pass_over_its_expected_tokens(alpha):
    # oracle: one target pass over the decoder's token and its 4 drafts (n-gram: free to propose),
    # divided by the tokens it keeps on average, at the mid-output context
    prompt, out, k = 512, 4000, 4
    sm = step_model(D, engine(CFG.engine))
    ctx = prompt + out / 2
    verify = sm.iteration(decode=1, prefill=k, decode_context=ctx, prefill_context=ctx, prefill_seqs=k).seconds
    spec = Speculating(proposer(D, None, True, False), k, alpha, seed=1)
    r = simulate(D, CFG, _lone(prompt, out), spec=spec)
    assert r.tpot_s[0] == pytest.approx(verify / expected_tokens(alpha, k), rel=0.03)
    assert r.output_tokens == out


def test_a_draft_model_pays_its_proposals_and_its_weights():
    draft = catalog.model("llama-3.2-1b")
    prop = proposer(D, draft, False, False)
    spec = Speculating(prop, 4, 0.7, seed=1)
    free = simulate(D, CFG, _lone(512, 2000), spec=Speculating(proposer(D, None, True, False), 4, 0.7, seed=1))
    paid = simulate(D, CFG, _lone(512, 2000), spec=spec)
    assert paid.tpot_s[0] > free.tpot_s[0]  # k draft passes per target pass
    assert prop.weight_bytes == pytest.approx(serve_memory(Deployment(draft, GPU, D.weights, D.kv), CFG).weights)


def test_the_same_seed_gives_the_same_run_and_no_spec_the_plain_one():
    w = Workload.poisson(4.0, 100, *_lengths(), seed=0)
    spec = Speculating(proposer(D, None, True, False), 3, 0.6, seed=7)
    a, b = simulate(D, CFG, w, 4.0, spec=spec), simulate(D, CFG, w, 4.0, spec=spec)
    assert np.array_equal(a.e2e_s, b.e2e_s)
    plain = simulate(D, CFG, w, 4.0)
    assert np.median(a.tpot_s) < np.median(plain.tpot_s)


def _lengths():
    from gpuplan.serve.sim import Lengths

    return Lengths.parse("1024", "input_len"), Lengths.parse("256", "output_len")


def test_speculating_refuses_a_draft_length_or_acceptance_out_of_range():
    prop = proposer(D, None, True, False)
    with pytest.raises(GpuplanError, match="draft_len"):
        Speculating(prop, 0, 0.5)
    with pytest.raises(GpuplanError, match="acceptance"):
        Speculating(prop, 2, 1.5)


@pytest.mark.parametrize("draft", [None, "llama-3.2-1b"])
def test_serve_speculates_its_decode_steps_as_serve_sim_does(draft):
    # serve counted the proposer's memory but timed plain decoding (TPOT 15 ms against serve-sim's
    # 7 ms for a 1B draft at one client); a lone sequence's TPOT and throughput must agree
    from gpuplan.serve.plan import ServeRequest, estimate_serving

    m = catalog.model(draft) if draft else None
    req = ServeRequest(
        D.model, GPU, input_len=512, output_len=2000, concurrency=1, config=CFG, draft_model=m, ngram=draft is None
    )
    plain = estimate_serving(replace(req, draft_model=None, ngram=False)).point
    p = estimate_serving(req).point
    spec = Speculating(proposer(D, m, draft is None, False), req.draft_len, req.acceptance, seed=1)
    r = simulate(D, CFG, _lone(512, 2000), spec=spec)
    assert p.tpot_s == pytest.approx(r.tpot_s[0], rel=0.05)
    assert p.tpot_s < plain.tpot_s and p.output_tokens_per_s > plain.output_tokens_per_s
    assert p.ttft_s == plain.ttft_s  # the prompt's prefill is not speculated
