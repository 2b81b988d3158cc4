"""Serving simulation: reproducible, conserves requests, agrees with the steady-state model."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.serve.engines import engine, engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.plan import steady_state
from gpuplan.serve.sim import Lengths, Workload, max_rate, simulate
from gpuplan.serve.timing import Deployment, step_model

G = catalog.gpu("h100-sxm")
D = Deployment(catalog.model("llama-3.1-8b"), G, weight_format("fp8", G), kv_format("fp8"))
CFG = ServeConfig(max_num_seqs=256)


def _run(rate, n=300, i="1024", o="128", seed=0, cfg=CFG, d=D):
    return simulate(d, cfg, Workload.poisson(rate, n, Lengths.parse(i, "i"), Lengths.parse(o, "o"), seed), rate)


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    a, b, c = (
        _run(5, i="256-2048", o="exp:128"),
        _run(5, i="256-2048", o="exp:128"),
        _run(5, i="256-2048", o="exp:128", seed=1),
    )
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != c.to_dict()


def test_every_request_finishes_after_it_arrives_and_first_tokens_come_first():
    r = _run(20, i="64-4096", o="exp:200")
    assert np.isfinite(r.e2e_s).all() and (r.ttft_s > 0).all() and (r.e2e_s >= r.ttft_s).all()


def test_at_low_load_ttft_is_the_prefill_and_itl_the_decode_step():
    r = _run(0.2, n=50).percentiles()
    p = steady_state(step_model(D), CFG, 1, 1024, 128)
    assert r["ttft_s"]["p50"] == pytest.approx(p.ttft_s, rel=0.02)
    assert r["itl_s"]["p50"] == pytest.approx(p.tpot_s, rel=0.02)


def test_saturated_throughput_agrees_with_the_steady_state_model():
    r = _run(1000, n=2000)
    p = steady_state(step_model(D), CFG, 256, 1024, 128)
    assert r.output_tokens / r.makespan_s == pytest.approx(p.output_tokens_per_s, rel=0.10)


def test_a_small_kv_pool_preempts_and_still_finishes_everything():
    d = Deployment(
        catalog.model("llama-3.1-8b"), catalog.gpu("l4"), weight_format("fp8", catalog.gpu("l4")), kv_format("fp8")
    )
    r = _run(50, n=200, i="512", o="1024", d=d, cfg=ServeConfig(max_num_seqs=None))
    assert r.preemptions > 0 and np.isfinite(r.e2e_s).all()


def test_the_highest_rate_meeting_an_slo_meets_it_and_twice_that_does_not():
    rate, at = max_rate(D, CFG, 200, Lengths.parse("1024", "i"), Lengths.parse("128", "o"), 0, 0.5, None, steps=6)
    assert at.percentiles()["ttft_s"]["p99"] <= 0.5
    assert _run(2 * rate, n=200).percentiles()["ttft_s"]["p99"] > 0.5


def _closed(clients, n, cfg, i="1024", o="128"):
    w = Workload.closed(n, Lengths.parse(i, "i"), Lengths.parse(o, "o"))
    return simulate(D, cfg, w, clients=clients)


def test_a_closed_loop_never_has_more_requests_outstanding_than_clients():
    r = _closed(40, 300, ServeConfig(max_num_seqs=16), i="64-2048", o="exp:100")
    assert r.arrival_s is not None
    ends = r.arrival_s + r.e2e_s
    for t in ends:  # requests sent and not finished just after each finish
        assert ((r.arrival_s <= t) & (ends > t)).sum() <= 40
    assert (r.arrival_s[:40] == 0).all() and (r.arrival_s[40:] > 0).all()
    assert r.queued_mean > 0 and r.clients == 40


def test_a_closed_loop_beyond_the_seats_matches_the_queueing_estimate():
    from gpuplan.serve.plan import ServeRequest, estimate_serving

    cfg = ServeConfig(max_num_seqs=64)
    r = _closed(256, 1500, cfg)
    e = estimate_serving(
        ServeRequest(D.model, G, weights="fp8", kv="fp8", input_len=1024, output_len=128, concurrency=256, config=cfg)
    )
    assert e.point.queued == 192
    assert r.queued_mean == pytest.approx(192, rel=0.1)
    d = r.to_dict()
    assert d["output_tokens_per_s"] == pytest.approx(e.point.output_tokens_per_s, rel=0.15)
    assert r.percentiles()["ttft_s"]["p50"] == pytest.approx(e.point.ttft_s, rel=0.15)


@pytest.mark.parametrize(
    "model, gpu, cfg, workload, clients",
    [
        ("llama-3.1-8b", "h100-sxm", CFG, ("poisson", 2, "64-2048", "exp:200"), None),  # low rate: long stretches
        ("llama-3.1-8b", "h100-sxm", ServeConfig(max_num_seqs=32), ("poisson", 40, "64-2048", "exp:200"), None),
        ("gemma-2-9b", "h100-sxm", ServeConfig(max_num_seqs=32), ("poisson", 3, "2000-6000", "exp:300"), None),
        ("llama-3.2-1b", "l4", ServeConfig(gpu_memory_utilization=0.2), ("poisson", 8, "1000-3000", "exp:400"), None),
        ("llama-3.1-8b", "h100-sxm", ServeConfig(max_num_seqs=16), ("closed", 0, "512", "64-256"), 40),
        ("llama-3.1-8b", "h100-sxm", "vllm", ("poisson", 5, "64-2048", "exp:200"), None),  # with host time
    ],
)
def test_bulk_decode_stretches_give_what_the_per_iteration_loop_gives(model, gpu, cfg, workload, clients):
    from gpuplan.serve.engines import engine_config

    g = catalog.gpu(gpu)
    d = Deployment(catalog.model(model), g, weight_format("bf16", g), kv_format("bf16"))
    cfg = engine_config(cfg, g) if isinstance(cfg, str) else cfg
    kind, rate, i, o = workload
    li, lo = Lengths.parse(i, "i"), Lengths.parse(o, "o")
    w = Workload.closed(120, li, lo) if kind == "closed" else Workload.poisson(rate, 120, li, lo, seed=3)
    fast = simulate(d, cfg, w, rate, clients=clients)
    plain = simulate(d, cfg, w, rate, clients=clients, bulk=False)
    assert (fast.iterations, fast.preemptions) == (plain.iterations, plain.preemptions)
    for got, want in (
        (fast.ttft_s, plain.ttft_s),
        (fast.e2e_s, plain.e2e_s),
        (np.sort(fast.itl_s), np.sort(plain.itl_s)),
    ):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_a_request_longer_than_the_context_is_refused_as_serve_refuses_it():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="input_len: .*maximum context of 131072"):
        _run(4, n=2, i="130000", o="2000")
    with pytest.raises(GpuplanError, match="maximum context of 4096"):
        _run(4, n=2, i="4000", o="200", cfg=ServeConfig(max_num_seqs=256, max_model_len=4096))


def test_an_output_longer_than_the_iteration_cap_is_refused_before_simulating():
    import time

    from gpuplan.errors import GpuplanError

    w = Workload.poisson(4, 2, Lengths.parse("128", "i"), Lengths.parse("1000", "o"))
    start = time.perf_counter()
    with pytest.raises(GpuplanError, match="output_len: a 1,000-token output"):
        simulate(D, CFG, w, 4, max_iterations=1000)
    assert time.perf_counter() - start < 1.0  # up front, not at the cap
    assert simulate(D, CFG, w, 4, max_iterations=2000).output_tokens == 2000


def test_weights_that_leave_no_kv_pool_do_not_fit_as_serve_says():
    from gpuplan.errors import DoesNotFit

    l4 = catalog.gpu("l4")
    d = Deployment(catalog.model("llama-3.1-70b"), l4, weight_format("bf16", l4), kv_format("bf16"))
    with pytest.raises(DoesNotFit, match="^memory: .*leaves no memory for a KV-cache pool; use .*GPUs") as err:
        _run(2, n=5, d=d)
    assert err.value.exit_code == 3


def test_a_sliding_window_model_seats_as_many_sequences_as_serve_says_without_preempting():
    # gemma-3-27b: five of every six layers attend over a 1024-token window and hold only its blocks
    # (vLLM's hybrid KV cache manager); counted as full layers the pool held a fraction of them
    from gpuplan.serve.engines import engine_config
    from gpuplan.serve.plan import ServeRequest, estimate_serving

    g = catalog.gpu("h100-sxm")
    m = catalog.model("gemma-3-27b")
    cfg = engine_config("vllm", g)
    seats = estimate_serving(
        ServeRequest(m, g, tp=2, input_len=120_000, output_len=40, max_throughput=True, config=cfg)
    ).max_concurrency
    assert seats >= 4
    d = Deployment(m, g, weight_format("bf16", g), kv_format("bf16"), tp=2)
    w = Workload.closed(seats, Lengths.parse("120000", "i"), Lengths.parse("40", "o"))
    r = simulate(d, cfg, w, clients=seats)
    # counted as full layers the pool held fewer and the run preempted hundreds of times
    assert r.preemptions == 0 and np.isfinite(r.e2e_s).all()


def test_a_hybrid_model_seats_as_many_sequences_as_serve_says_without_preempting():
    # qwen3-next: 36 of its 48 layers hold a fixed state per sequence, paged as vLLM V1 pages it
    # (memory.block_tokens, state_blocks); serve's seats and serve-sim's blocks must agree
    from gpuplan.serve.engines import engine_config
    from gpuplan.serve.plan import ServeRequest, estimate_serving

    g = catalog.gpu("h100-sxm")
    m = catalog.model("qwen3-next-80b-a3b")
    cfg = engine_config("vllm", g)
    length = ("30000", "40")
    seats = estimate_serving(
        ServeRequest(m, g, tp=4, input_len=30_000, output_len=40, max_throughput=True, config=cfg)
    ).max_concurrency
    assert seats >= 4
    d = Deployment(m, g, weight_format("bf16", g), kv_format("bf16"), tp=4)
    fits = simulate(
        d, cfg, Workload.closed(seats, Lengths.parse(length[0], "i"), Lengths.parse(length[1], "o")), clients=seats
    )
    assert fits.preemptions == 0 and np.isfinite(fits.e2e_s).all()


def test_a_closed_loop_clients_next_request_waits_out_the_iteration_already_running():
    # the engine reads new requests once per iteration, before scheduling it: a lone client finds it
    # idle, but beside another client's decodes its request arrives just after an iteration began.
    # The first request is half as long, so the two clients stay 64 tokens apart from then on.
    def run(clients, n):
        out = np.full(n, 128)
        out[0] = 64
        return simulate(D, CFG, Workload(np.zeros(n), np.full(n, 1024), out), clients=clients)

    alone, pair = run(1, 6), run(2, 40)
    assert alone.ttft_s[1:] == pytest.approx(alone.ttft_s[0])  # no wait when nothing else runs
    sm, ctx = step_model(D), 1024 + 64  # the other client is 64 tokens into its output
    waited = sm.decode_step(1, ctx).seconds  # the other client's step, already running
    beside = sm.iteration(1, 1024, ctx, 512, 1).seconds - sm.iteration(0, 1024, 0, 512, 1).seconds
    assert pair.ttft_s[2:].mean() - alone.ttft_s.mean() == pytest.approx(waited + beside, rel=0.05)
    # the steady-state model counts the same wait (steady_state.in_flight)
    p = steady_state(sm, CFG, 2, 1024, 128)
    assert p.ttft_s == pytest.approx(pair.ttft_s[2:].mean(), rel=0.02)
    assert p.output_tokens_per_s == pytest.approx(pair.output_tokens / pair.makespan_s, rel=0.02)


def test_under_sglangs_overlap_loop_the_next_request_waits_out_two_iterations():
    # SGLang forms iteration n + 1 while the GPU runs n (event_loop_overlap): a request sent when
    # the other client's token comes out misses the batch already formed too; the steady state
    # counts the same two iterations
    cfg = engine_config("sglang", D.gpu)
    out = np.full(40, 128)
    out[0] = 64
    pair = simulate(D, cfg, Workload(np.zeros(40), np.full(40, 1024), out), clients=2)
    sm = step_model(D, engine("sglang"))
    p = steady_state(sm, cfg, 2, 1024, 128)
    assert p.ttft_s == pytest.approx(pair.ttft_s[2:].mean(), rel=0.03)
    step = sm.decode_step(1, 1024 + 64).seconds
    assert p.ttft_s - sm.iteration(0, 1024, 0, 1024, 1).seconds == pytest.approx(2 * step, rel=0.1)
