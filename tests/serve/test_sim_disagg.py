"""serve-sim with disaggregated prefill and decode pools (serve/sim_disagg.py): requests prefilled on
one pool, their KV moved over the network, decoded on the other."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.serve.disagg import kv_transfer_seconds
from gpuplan.serve.engines import engine, engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.sim import Workload, simulate
from gpuplan.serve.sim_disagg import Pools, simulate_disaggregated
from gpuplan.serve.timing import Deployment, step_model

GPU = catalog.gpu("h100-sxm")
D = Deployment(catalog.model("llama-3.1-8b"), GPU, weight_format("bf16", GPU), kv_format("bf16", GPU))


def _cfg(budget: int = 8192):
    return engine_config(None, GPU, 1, max_batched_tokens=budget)


def _pools(n_prefill: int = 1, n_decode: int = 1, budget: int = 8192) -> Pools:
    return Pools(D, _cfg(budget), n_prefill, n_decode)


def _workload(arrivals, prompt: int, out: int) -> Workload:
    n = len(arrivals)
    return Workload(np.array(arrivals, dtype=float), np.full(n, prompt), np.full(n, out))


def test_a_lone_request_pays_its_prefill_the_kv_transfer_and_its_decode_steps():
    # oracle: the step model's own iterations, added up by hand
    prompt, out = 2048, 20
    sm = step_model(D, engine(_cfg().engine))
    prefill = sm.iteration(decode=0, prefill=prompt, prefill_context=prompt / 2, prefill_seqs=1).seconds
    transfer = kv_transfer_seconds(D.model, prompt, D, D)
    # the decode instance's first iteration reads the prompt and the first token: context prompt + 1
    decode = sum(sm.decode_step(1, prompt + 1 + i).seconds for i in range(out - 1))
    r = simulate_disaggregated(D, _cfg(), _workload([0.0], prompt, out), _pools())
    assert r.ttft_s[0] == pytest.approx(prefill, rel=1e-9)
    assert r.e2e_s[0] == pytest.approx(prefill + transfer + decode, rel=1e-6)
    # the gap before the second token holds the transfer; the rest are decode steps
    assert r.tpot_s[0] == pytest.approx((transfer + decode) / (out - 1), rel=1e-6)
    assert transfer > 0


def test_one_prefill_instance_runs_a_burst_of_prompts_one_after_another():
    # each prompt fills an iteration's whole token budget, so the k-th waits for the k before it
    prompt = 4096
    sm = step_model(D, engine(_cfg().engine))
    one = sm.iteration(decode=0, prefill=prompt, prefill_context=prompt / 2, prefill_seqs=1).seconds
    r = simulate_disaggregated(D, _cfg(prompt), _workload([0.0] * 3, prompt, 4), _pools(budget=prompt))
    assert np.sort(r.ttft_s) == pytest.approx(one * np.arange(1, 4), rel=1e-9)
    # two prefill instances take turns: two prompts at once, the third behind one of them
    r2 = simulate_disaggregated(D, _cfg(prompt), _workload([0.0] * 3, prompt, 4), _pools(2, budget=prompt))
    assert np.sort(r2.ttft_s) == pytest.approx([one, one, 2 * one], rel=1e-9)


def test_decoding_apart_from_the_prompts_keeps_the_per_token_time_down():
    # prompt-heavy load: colocated, every decode step shares its iteration with prompt chunks
    w = Workload.poisson(6.0, 300, *(_lengths(4096, 128)), seed=0)
    colocated = simulate(D, _cfg(), w, 6.0)
    pools = simulate_disaggregated(D, _cfg(), w, _pools(2, 1), 6.0)
    assert np.median(pools.tpot_s) < 0.7 * np.median(colocated.tpot_s)
    assert pools.output_tokens == colocated.output_tokens and pools.requests == 300


def _lengths(prompt: int, out: int):
    from gpuplan.serve.sim import Lengths

    return Lengths.parse(str(prompt), "input_len"), Lengths.parse(str(out), "output_len")


def test_a_request_of_one_output_token_ends_with_its_prefill():
    r = simulate_disaggregated(D, _cfg(), _workload([0.0], 1024, 1), _pools())
    assert r.e2e_s[0] == r.ttft_s[0] and len(r.tpot_s) == 0


def test_pools_refuse_a_count_that_is_not_a_positive_integer():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="n_decode"):
        Pools(D, _cfg(), 1, 0)
