"""serve-sim bursts (`--rate inf`, vllm bench serve's default): every request at t = 0, run to
completion, reported as the benchmark reports it."""

import json
import math

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.engines import engine
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.sim import Lengths, Workload, simulate
from gpuplan.serve.sim_study import parse_rates, study
from gpuplan.serve.timing import Deployment, step_model

G = catalog.gpu("h100-sxm")
D = Deployment(catalog.model("llama-3.1-8b"), G, weight_format("fp8", G), kv_format("fp8"))
CFG = ServeConfig(max_num_seqs=256)


def _burst(n=200, i="512", o="64", cfg=CFG, seed=0):
    w = Workload.burst(n, Lengths.parse(i, "i"), Lengths.parse(o, "o"), seed)
    return simulate(D, cfg, w, math.inf)


def test_a_burst_sends_every_request_at_time_zero():
    w = Workload.burst(50, Lengths.parse("128-1024", "i"), Lengths.parse("exp:64", "o"), 3)
    assert (w.arrival_s == 0).all() and len(w.input_len) == len(w.output_len) == 50
    r = simulate(D, CFG, w, math.inf)
    assert r.burst and (r.arrival_s == 0).all()


def test_a_bursts_duration_is_its_last_completion():
    r = _burst(i="256-2048", o="16-256")
    assert r.makespan_s == pytest.approx(float(np.max(r.e2e_s)), rel=1e-12)
    assert (r.e2e_s >= r.ttft_s).all() and (r.ttft_s > 0).all()


def test_a_burst_that_fits_one_batch_takes_one_prefill_then_the_decode_steps():
    # oracle: the iterations counted by hand and timed one by one with the step-time function;
    # 8 prompts of 64 tokens (512 <= the 8192-token budget) all prefill in the first iteration
    # and give their first token; then each of the 15 decode steps adds one token to all 8,
    # step j (1..15) attending over the 64 prompt tokens + j (the token it feeds included)
    n, prompt, out = 8, 64, 16
    sm = step_model(D, engine(CFG.engine))
    prefill = sm.iteration(decode=0, prefill=n * prompt, prefill_context=prompt / 2, prefill_seqs=n).seconds
    decode = sum(sm.iteration(decode=n, decode_context=prompt + j).seconds for j in range(1, out))
    r = _burst(n=n, i=str(prompt), o=str(out))
    assert r.iterations == out and r.preemptions == 0
    assert r.ttft_s == pytest.approx(np.full(n, prefill), rel=1e-9)
    assert r.makespan_s == pytest.approx(prefill + decode, rel=1e-6)
    assert r.tpot_s == pytest.approx(np.full(n, decode / (out - 1)), rel=1e-6)


def test_a_bursts_throughputs_are_its_tokens_and_requests_over_its_duration():
    r = _burst(n=300, i="100-900", o="exp:80", seed=2)
    doc = r.to_dict()
    total_out = r.output_tokens
    assert doc["output_tokens_per_s"] == pytest.approx(total_out / r.makespan_s)
    assert doc["total_tokens_per_s"] == pytest.approx((r.input_tokens + total_out) / r.makespan_s)
    assert doc["requests_per_s"] == pytest.approx(300 / r.makespan_s)
    assert r.input_tokens > 0 and total_out > 0


def test_tpot_is_each_requests_decode_time_over_its_later_tokens_as_vllm_bench_computes_it():
    w = Workload.burst(60, Lengths.parse("256", "i"), Lengths.parse("1-40", "o"), 1)
    r = simulate(D, CFG, w, math.inf)
    many = w.output_len > 1  # vllm bench serve leaves single-token requests out of TPOT
    assert len(r.tpot_s) == int(many.sum()) < 60
    assert r.tpot_s == pytest.approx((r.e2e_s[many] - r.ttft_s[many]) / (w.output_len[many] - 1))


def test_a_bursts_json_has_no_float_infinity_and_says_it_is_a_burst():
    doc = _burst(n=20).to_dict()
    assert doc["rate"] is None and doc["burst"] is True
    json.dumps(doc, allow_nan=False)
    assert set(doc["tpot_s"]) == {"p50", "p90", "p99", "mean"}
    poisson = simulate(
        D, CFG, Workload.poisson(4, 20, Lengths.parse("512", "i"), Lengths.parse("64", "o")), 4
    ).to_dict()
    assert poisson["rate"] == 4 and poisson["burst"] is False


def test_a_burst_larger_than_the_kv_pool_preempts_and_still_finishes_everything():
    l4 = catalog.gpu("l4")
    d = Deployment(catalog.model("llama-3.1-8b"), l4, weight_format("fp8", l4), kv_format("fp8"))
    w = Workload.burst(300, Lengths.parse("512", "i"), Lengths.parse("512", "o"))
    r = simulate(d, ServeConfig(max_num_seqs=None), w, math.inf)
    assert r.preemptions > 0 and np.isfinite(r.e2e_s).all()
    assert r.makespan_s == pytest.approx(float(np.max(r.e2e_s)))


def test_max_num_seqs_caps_a_burst_so_later_requests_wait_for_a_seat():
    free = _burst(n=64, i="128", o="32", cfg=ServeConfig(max_num_seqs=None))
    capped = _burst(n=64, i="128", o="32", cfg=ServeConfig(max_num_seqs=16))
    # 16 seats: the last 48 wait for earlier ones to finish, so their first tokens come later
    assert np.sort(capped.ttft_s)[-1] > 3 * np.sort(free.ttft_s)[-1]
    assert capped.makespan_s > free.makespan_s


def test_inf_is_read_as_a_burst_among_rates():
    assert parse_rates("4,inf") == [4.0, math.inf]
    assert parse_rates(" INF ") == [math.inf]
    with pytest.raises(GpuplanError) as e:
        parse_rates("infinity")
    assert e.value.field == "rate"


def _study(**kw):
    args = {"rates": [math.inf], "trace": None, "clients": None, "ttft_slo_s": None, "itl_slo_s": None}
    return study(D, CFG, 100, Lengths.parse("512", "i"), Lengths.parse("64", "o"), 0, **(args | kw))


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"clients": 8}, "concurrency"), ({"ttft_slo_s": 2.0}, "ttft_slo"), ({"itl_slo_s": 0.05}, "itl_slo")],
)
def test_a_burst_with_a_closed_loop_or_an_slo_search_is_refused_naming_the_field(kw, field):
    with pytest.raises(GpuplanError) as e:
        _study(**kw)
    assert e.value.field == field and "rate=inf" in e.value.message


def test_a_study_runs_a_burst_beside_poisson_rates():
    results, _ = _study(rates=[2.0, math.inf]).run()
    assert [r.burst for r in results] == [False, True]
    assert (results[1].arrival_s == 0).all() and results[1].requests == 100
