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
