"""vLLM's async scheduling (``vllm-async``: the default from v0.14.0): the synchronous V1 engine's
defaults and memory but for its sampler, its host work hidden behind the GPU, and each batch formed
while the GPU runs the last, so a new request waits one iteration more."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.serve.engines import engine, engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import serve_memory
from gpuplan.serve.sim import Lengths, Workload, simulate
from gpuplan.serve.steady_state import steady_state
from gpuplan.serve.timing import Deployment, step_model

G = catalog.gpu("h100-sxm")
D = Deployment(catalog.model("llama-3.1-8b"), G, weight_format("bf16", G), kv_format("bf16"))
D_MOE = Deployment(catalog.model("qwen3-30b-a3b"), G, weight_format("bf16", G), kv_format("bf16"))


def test_async_scheduling_keeps_the_synchronous_engines_defaults_and_memory_but_its_sampler():
    sync, ahead = engine_config("vllm", G), engine_config("vllm-async", G)
    assert (sync.max_batched_tokens, sync.max_num_seqs, sync.block_size) == (
        ahead.max_batched_tokens,
        ahead.max_num_seqs,
        ahead.block_size,
    )
    # the profiling pass's sampler is the activation peak here: torch.sort's 38 B a logit under the
    # synchronous releases, FlashInfer's 14 B under the async ones (engines.py), over 1,024 rows
    sampler = sync.max_num_seqs * D.model.vocab_size * (38 - 14)
    assert serve_memory(D, ahead).kv_pool - serve_memory(D, sync).kv_pool == pytest.approx(sampler)


def test_its_host_work_shows_only_where_it_outlasts_the_gpu_step():
    sync = step_model(D, engine("vllm")).decode_step(256, 1024)
    ahead = step_model(D, engine("vllm-async")).decode_step(256, 1024)
    host = engine("vllm").host_s(256)
    assert sync.parts["host"] == pytest.approx(host)
    gpu = ahead.seconds - ahead.parts["host"]
    assert ahead.parts["host"] == pytest.approx(max(0.0, host - gpu))
    assert ahead.seconds == pytest.approx(sync.seconds - host + ahead.parts["host"])


def test_a_closed_loop_clients_next_request_waits_out_two_iterations_as_under_sglangs_overlap_loop():
    cfg = engine_config("vllm-async", G)
    out = np.full(40, 128)
    out[0] = 64  # the two clients stay 64 tokens apart
    pair = simulate(D, cfg, Workload(np.zeros(40), np.full(40, 1024), out), clients=2)
    sm = step_model(D, engine("vllm-async"))
    p = steady_state(sm, cfg, 2, 1024, 128)
    assert p.ttft_s == pytest.approx(pair.ttft_s[2:].mean(), rel=0.03)
    sync = steady_state(step_model(D, engine("vllm")), engine_config("vllm", G), 2, 1024, 128)
    step = sm.decode_step(1, 1024 + 64).seconds
    # one more iteration of wait than the synchronous engine (its host time aside)
    assert p.ttft_s - sync.ttft_s == pytest.approx(step, rel=0.15)


SMALL = Deployment(catalog.model("llama-3.2-1b"), G, weight_format("bf16", G), kv_format("bf16"))


@pytest.mark.parametrize("name", ["vllm", "vllm-async"])
def test_one_api_server_caps_a_small_models_stream_at_its_own_pace(name):
    # Llama-3.2-1B at 512 clients: the GPU could decode far faster than one API server streams
    e = engine(name)
    sm = step_model(SMALL, e)
    gpu_only = steady_state(step_model(SMALL), engine_config(name, G), 512, 256, 256)
    p = steady_state(sm, engine_config(name, G), 512, 256, 256)
    pace = 1 / e.frontend_s_per_token  # output tokens/s one API server streams
    assert gpu_only.output_tokens_per_s > 2 * pace
    assert p.output_tokens_per_s == pytest.approx(pace, rel=0.02)
    # serve-sim's closed loop runs at the same pace
    w = Workload(np.zeros(3000), np.full(3000, 256), np.full(3000, 256))
    r = simulate(SMALL, engine_config(name, G), w, clients=512)
    assert r.output_tokens / r.makespan_s == pytest.approx(pace, rel=0.05)


def test_the_api_server_does_not_show_where_the_engine_is_slower():
    # a 70B on one TP-4 node: each step's tokens stream well within the step
    big = Deployment(catalog.model("llama-3.1-70b"), G, weight_format("fp8", G), kv_format("fp8"), tp=4)
    cfg = engine_config("vllm", G)
    p = steady_state(step_model(big, engine("vllm")), cfg, 256, 2048, 256)
    e = engine("vllm")
    assert p.output_tokens_per_s * e.frontend_s_per_token < 1
    assert e.paced(1e-3, 10) == 1e-3
    assert e.paced(1e-3, 100) == pytest.approx(100 * e.frontend_s_per_token)


@pytest.mark.parametrize("output_len", [1, 2, 16])
def test_short_outputs_stream_at_the_api_servers_pace_in_serve_and_serve_sim(output_len):
    # a prompt's first token is one of its output tokens: the pace is per token streamed
    cfg = engine_config("vllm-async", G)
    pace = 1 / engine("vllm-async").frontend_s_per_token
    p = steady_state(step_model(D, engine("vllm-async")), cfg, 1024, 1, output_len)
    assert p.output_tokens_per_s == pytest.approx(pace, rel=0.01)
    w = Workload(np.zeros(4000), np.ones(4000, dtype=int), np.full(4000, output_len))
    r = simulate(D, cfg, w, clients=1024)
    assert r.output_tokens / r.makespan_s == pytest.approx(pace, rel=0.05)


def test_speculation_is_paced_by_the_tokens_it_keeps_not_the_drafts_it_verifies():
    # n-gram drafts on a small model: the API server streams the accepted tokens only, so
    # speculation cannot make the stream slower than plain decoding at the server's pace
    from gpuplan.serve.plan import ServeRequest, estimate_serving

    m = catalog.model("llama-3.2-1b")
    h = catalog.gpu("h200")
    kw = dict(input_len=256, output_len=512, concurrency=64, config=engine_config("vllm", h))
    plain = estimate_serving(ServeRequest(m, h, **kw))
    spec = estimate_serving(ServeRequest(m, h, ngram=True, **kw))
    pace = 1 / engine("vllm").frontend_s_per_token
    assert spec.point.output_tokens_per_s >= plain.point.output_tokens_per_s * 0.999
    assert spec.point.output_tokens_per_s <= pace * 1.001


def test_vllm_runs_the_sequences_its_pool_holds_at_their_mean_length_and_trtllm_at_their_full():
    # vLLM allocates blocks as tokens are computed: a sequence holds its prompt and half its output
    # on average; TensorRT-LLM reserves the whole length on admission
    from gpuplan.serve.plan import ServeRequest, estimate_serving

    m = catalog.model("qwen3-30b-a3b")
    kw = dict(input_len=1024, output_len=256, concurrency=128)
    v = estimate_serving(ServeRequest(m, G, config=engine_config("vllm-async", G), **kw))
    t = estimate_serving(ServeRequest(m, G, config=engine_config("trtllm", G), **kw))
    assert engine("vllm-async").held_tokens(1024, 256) == 1024 + 128
    assert v.seats > v.max_concurrency and t.seats == t.max_concurrency
    # serve-sim, which allocates blocks as tokens come, runs the same closed loop alike
    w = Workload.closed(2000, Lengths.parse("1024", "i"), Lengths.parse("128-384", "o"))
    r = simulate(D_MOE, engine_config("vllm-async", G), w, clients=128)
    assert r.to_dict()["output_tokens_per_s"] == pytest.approx(v.point.output_tokens_per_s, rel=0.10)
    assert float(np.median(r.ttft_s)) == pytest.approx(v.point.ttft_s, rel=0.15)
