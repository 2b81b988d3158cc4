"""An engine that does not mix prompt chunks with decodes (SGLang, ``Engine.mixed_prefill``): every
prefill runs as a batch of its own, first, and the running sequences wait it out."""

import math
from dataclasses import replace

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.serve import engines
from gpuplan.serve.engines import engine, engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.sim import Lengths, Workload, simulate
from gpuplan.serve.steady_state import steady_state
from gpuplan.serve.timing import Deployment, step_model

G = catalog.gpu("h100-sxm")
D = Deployment(catalog.model("llama-3.1-8b"), G, weight_format("fp8", G), kv_format("fp8"))
SGL = engine_config("sglang", G)


@pytest.fixture
def mixed_twin(monkeypatch):
    """SGLang's profile with mixed batches, the one thing changed."""
    twin = replace(engine("sglang"), name="sglang-mixed", mixed_prefill=True)
    monkeypatch.setitem(engines.ENGINES, twin.name, twin)
    return replace(SGL, engine=twin.name)


def _two_requests():
    """One sequence decoding when a 4096-token prompt arrives."""
    return Workload(np.array([0.0, 0.3]), np.array([512, 4096]), np.array([100, 5]))


def _bounds(sm):
    prefill = sm.iteration(decode=0, prefill=4096, prefill_context=2048, prefill_seqs=1).seconds
    low = prefill + sm.iteration(decode=2, decode_context=512).seconds
    high = prefill + sm.iteration(decode=2, decode_context=4096 + 600).seconds
    return prefill, low, high


def test_sglang_decodes_wait_out_a_prefill_that_runs_alone():
    sm = step_model(D, engine("sglang"))
    prefill, low, high = _bounds(sm)
    r = simulate(D, SGL, _two_requests())
    # the decoding sequence's longest gap: the prompt's prefill batch, then a decode of both
    assert low <= r.itl_s.max() <= high
    # the prompt goes first: it waits out the decode step in flight and the one the overlap loop
    # had already formed (Engine.schedules_ahead), then its own prefill
    one_step = sm.iteration(decode=1, decode_context=1000).seconds
    assert prefill + one_step * 0.9 <= r.ttft_s[1] <= prefill + 2 * one_step


def test_a_request_arriving_mid_iteration_waits_one_more_iteration_under_the_overlap_loop(monkeypatch):
    # the same engine with its overlap loop off (SGLang --disable-overlap-schedule): the request
    # joins the next iteration formed after it arrives, which is the next one
    twin = replace(engine("sglang"), name="sglang-normal", schedules_ahead=False)
    monkeypatch.setitem(engines.ENGINES, twin.name, twin)
    overlap = simulate(D, SGL, _two_requests())
    normal = simulate(D, replace(SGL, engine=twin.name), _two_requests())
    one_step = step_model(D, engine("sglang")).iteration(decode=1, decode_context=1000).seconds
    extra = overlap.ttft_s[1] - normal.ttft_s[1]
    assert extra == pytest.approx(one_step, rel=0.05)
    # the first request found the engine idle: no wait under either loop
    assert overlap.ttft_s[0] == normal.ttft_s[0]


def test_the_overlap_loop_is_off_where_sglang_turns_it_off():
    e = engine("sglang")
    assert e.forms_ahead()
    assert not e.forms_ahead(pp=2) and not e.forms_ahead(dp_attention=True)
    assert not any(e.forms_ahead(proposer=k) for k in ("draft", "ngram", "mtp"))
    assert not engine("vllm").forms_ahead() and not engine("trtllm").forms_ahead()
    # vLLM's async scheduling (0.14+) keeps MTP drafts, not others, nor pipeline parallelism
    a = engine("vllm-async")
    assert a.forms_ahead() and a.forms_ahead(proposer="mtp")
    assert not a.forms_ahead(proposer="ngram") and not a.forms_ahead(proposer="draft") and not a.forms_ahead(pp=2)


def test_a_mixing_engine_carries_the_decode_inside_the_prefill_iteration(mixed_twin):
    _, low, _ = _bounds(step_model(D, engine("sglang")))
    r = simulate(D, mixed_twin, _two_requests())
    assert r.itl_s.max() < low


@pytest.mark.parametrize("clients, i, o", [(32, 1024, 256), (64, 3000, 500)])
def test_the_steady_state_of_prefills_apart_agrees_with_the_simulated_closed_loop(clients, i, o):
    # outputs spread around the mean so that sequences finish one by one, not in waves whose
    # successors would share one prefill batch
    w = Workload.closed(1500, Lengths.parse(str(i), "i"), Lengths.parse(f"{o // 2}-{3 * o // 2}", "o"))
    r = simulate(D, SGL, w, clients=clients)
    p = steady_state(step_model(D, engine("sglang")), SGL, clients, i, o)
    assert r.to_dict()["output_tokens_per_s"] == pytest.approx(p.output_tokens_per_s, rel=0.10)
    assert r.to_dict()["tpot_s"]["mean"] == pytest.approx(p.tpot_s, rel=0.10)


def test_prefills_apart_cost_more_than_mixed_ones_at_the_same_load(mixed_twin):
    a = steady_state(step_model(D, engine("sglang")), SGL, 64, 3000, 500)
    b = steady_state(step_model(D, engine("sglang-mixed")), mixed_twin, 64, 3000, 500)
    assert a.tpot_s > b.tpot_s and a.output_tokens_per_s < b.output_tokens_per_s


def test_sglang_seats_what_its_pool_holds_with_the_decayed_reserve_and_agrees_with_serve_sim():
    # SGLang fills its pool as tokens come but keeps new_token_ratio (decayed to 0.7 x 0.14) of the
    # running requests' remaining output in reserve: more seats than at full length, fewer than
    # vLLM's prompt-and-half-the-output
    from gpuplan.serve.plan import ServeRequest, estimate_serving

    assert engine("sglang").held_tokens(1024, 256) == 1024 + math.ceil(128 * (1 + 0.7 * 0.14))
    assert engine("vllm").held_tokens(1024, 256) < engine("sglang").held_tokens(1024, 256) < 1024 + 256
    m = catalog.model("qwen3-30b-a3b")
    d = Deployment(m, G, weight_format("bf16", G), kv_format("bf16"))
    cfg = engine_config("sglang", G)
    e = estimate_serving(ServeRequest(m, G, input_len=1024, output_len=256, concurrency=128, config=cfg))
    assert e.max_concurrency < e.seats < 128
    w = Workload.closed(2000, Lengths.parse("1024", "i"), Lengths.parse("128-384", "o"))
    r = simulate(d, cfg, w, clients=128)
    assert r.to_dict()["output_tokens_per_s"] == pytest.approx(e.point.output_tokens_per_s, rel=0.10)
    assert float(np.median(r.ttft_s)) == pytest.approx(e.point.ttft_s, rel=0.25)


def _small_pool(tokens: int):
    """Qwen3-0.6B on one H100 under SGLang with mem_fraction_static shrunk until its pool holds
    about ``tokens`` tokens, and the tokens it holds exactly."""
    from gpuplan.serve.memory import serve_memory

    m = catalog.model("qwen3-0.6b")
    d = Deployment(m, G, weight_format("bf16", G), kv_format("bf16"))
    base = serve_memory(d, replace(SGL, gpu_memory_utilization=0.5))
    frac = 0.5 - (base.kv_pool - tokens * base.kv_block_bytes) / base.capacity
    cfg = replace(SGL, gpu_memory_utilization=frac)
    mem = serve_memory(d, cfg)
    return d, cfg, int(mem.kv_pool // mem.kv_block_bytes)


@pytest.mark.parametrize("in2, out2, joins", [(1000, 2500, True), (3500, 4000, False)])
def test_sglang_admits_a_request_only_if_its_whole_output_fits_beside_the_running_reserve(in2, out2, joins):
    # SGLang's PrefillAdder (schedule_policy.py add_one_req): a new request needs its prompt and
    # its whole output free beside new_token_ratio times the running requests' remaining output
    # (each clipped at 4,096 tokens). One request of 12,000 + 4,000 runs in a pool of 20,000
    # tokens; a second arrives as it starts decoding: free is 8,000, the reserve 0.7 x 4,000 =
    # 2,800, so 1,000 + 2,500 joins at once. The ratio falls 0.001 a decode step to 0.098, so the
    # room beside the reserve grows as the first runs, but never past ~7,070 tokens (600 steps in:
    # 7,400 free, 0.098 x 3,400 reserved): 3,500 + 4,000 waits until the first finishes, though
    # its prompt alone would fit at once (vLLM's rule)
    d, cfg, free = _small_pool(20_000)
    assert 19_900 <= free <= 20_100
    w = Workload(np.array([0.0, 0.05]), np.array([12_000, in2]), np.array([4000, out2]))
    r = simulate(d, cfg, w)
    if joins:
        assert r.ttft_s[1] < 0.1
    else:
        assert r.ttft_s[1] > float(r.e2e_s[0]) - 0.1
    assert r.preemptions == 0


def test_sglang_reserve_retracts_far_less_than_admitting_on_the_prompt(monkeypatch):
    # admitting on the prompt alone fills the pool with prompts whose outputs then do not fit, and
    # the newest are preempted and recomputed again and again; SGLang's reserve admits fewer (it
    # still retracts some once the ratio has decayed below what these full-length outputs take)
    d, cfg, _ = _small_pool(40_000)
    twin = replace(engine("sglang"), name="sglang-prompt-only", new_token_ratio=None)
    monkeypatch.setitem(engines.ENGINES, twin.name, twin)
    w = Workload(np.zeros(200), np.full(200, 1000), np.full(200, 1000))
    sglang = simulate(d, cfg, w)
    prompt_only = simulate(d, replace(cfg, engine=twin.name), w)
    assert prompt_only.preemptions > 100
    assert sglang.preemptions < prompt_only.preemptions / 3


def test_sglang_new_token_ratio_follows_its_scheduler_constants():
    tr = engine("sglang").new_token_ratio
    assert tr is not None
    # global_config.py: init 0.7, min factor 0.14, 600 decay steps; retract_decode_steps 20
    assert tr.floor == pytest.approx(0.098)
    assert tr.decay == pytest.approx((0.7 - 0.098) / 600)
    # estimate_new_token_ratio_after_retract: (decoded + 20 per request) / (outputs + 1), at most 1
    assert tr.after_retract(300, 1000, 2) == pytest.approx(340 / 1001)
    assert tr.after_retract(5000, 1000, 2) == 1.0
    assert engine("sglang").kv_reserve_ratio == tr.floor
    assert engine("vllm").new_token_ratio is None and engine("vllm").kv_reserve_ratio == 0.0
