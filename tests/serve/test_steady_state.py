"""The steady-state model's queueing terms, checked against simulated queues."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.serve.engines import engine_config
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.plan import ServeRequest, estimate_serving
from gpuplan.serve.steady_state import prefill_wait


def _simulated_md1_wait(rate: float, service: float, n: int = 400_000, seed: int = 0) -> float:
    """Mean wait of a FCFS queue with Poisson arrivals and a fixed service (Lindley's recursion)."""
    gaps = np.random.default_rng(seed).exponential(1 / rate, n)
    w, total = 0.0, 0.0
    for a in gaps[1:]:
        w = max(0.0, w + service - a)
        total += w
    return total / (n - 1)


@pytest.mark.parametrize("rho", [0.2, 0.5, 0.8])
def test_prefill_wait_is_the_md1_queue_of_the_prefills(rho):
    service = 0.4
    rate = rho / service
    assert prefill_wait(rate, service) == pytest.approx(_simulated_md1_wait(rate, service), rel=0.05)


def test_a_lone_client_never_waits_for_another_prefill():
    assert prefill_wait(0.0, 0.4) == 0.0
    assert prefill_wait(2.0, 0.4, others=0) == 0.0


def test_a_closed_loop_waits_at_most_for_every_other_clients_prefill():
    # past rho = 1 the open queue diverges; N - 1 other clients can put only N - 1 prompts ahead
    assert prefill_wait(10.0, 0.4, others=7) == pytest.approx(7 * 0.4)
    assert prefill_wait(2.0, 0.4, packed=4) < prefill_wait(2.0, 0.4)  # a budget that packs prompts


def test_long_prompts_wait_longer_for_their_first_token_as_clients_are_added():
    # NIM 1.8.0's curve (2 x H100, fp8, 5000 in / 500 out): measured TTFT 407, 547, 689, 835 ms at
    # 1, 5, 25, 50 clients while the prefill alone stays ~0.4 s
    m, h100 = catalog.model("llama-3.1-70b"), catalog.gpu("h100-sxm")
    ttft = [
        estimate_serving(
            ServeRequest(
                m,
                h100,
                tp=2,
                weights="fp8",
                kv="fp8",
                input_len=5000,
                output_len=500,
                concurrency=c,
                config=ServeConfig(max_batched_tokens=8192),
            )
        ).point.ttft_s
        for c in (1, 5, 25, 50)
    ]
    assert ttft == sorted(ttft)
    assert ttft[-1] > 1.7 * ttft[0]


def _closed_loop(model: str, gpu: str, concurrency: int, **kw) -> object:
    return estimate_serving(
        ServeRequest(
            catalog.model(model),
            catalog.gpu(gpu),
            input_len=2048,
            output_len=256,
            concurrency=concurrency,
            config=ServeConfig(max_batched_tokens=8192),
            **kw,
        )
    ).point


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v2-lite", "qwen3-30b-a3b"])
def test_a_lone_clients_throughput_is_one_request_per_its_own_latency(model):
    # Little's law for one client (an oracle outside the model): it sends its next request when the
    # last one ends, so output tokens/s = output / (TTFT + (output - 1) x TPOT). A prompt smeared
    # over every decode step made a many-expert MoE read the experts of ~9 rows a step (x2 time).
    p = _closed_loop(model, "h200", 1)
    assert p.output_tokens_per_s == pytest.approx(256 / (p.ttft_s + 255 * p.tpot_s), rel=0.03)


def test_clients_beyond_what_the_token_budget_keeps_prefilled_wait_in_the_queue():
    # 8192 tokens an iteration keep 8192 / (1 + 2048/256) = 910 sequences' successors prefilled; a
    # 1B model's KV pool on an H200 holds more, so the budget decides who runs and the rest queue
    p = estimate_serving(
        ServeRequest(
            catalog.model("llama-3.2-1b"),
            catalog.gpu("h200"),
            input_len=4096,
            output_len=64,
            concurrency=400,
            config=ServeConfig(max_batched_tokens=8192),
        )
    ).point
    assert (p.running, p.queued) == (126, 274)  # 8192 / (1 + 64) = 126.03
    assert p.queue_wait_s == pytest.approx(274 / (p.output_tokens_per_s / 64))


@pytest.mark.parametrize(
    "model, gpu", [("llama-3.2-1b", "h200"), ("llama-3.1-8b", "h100-sxm"), ("qwen3-30b-a3b", "h100-sxm")]
)
@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_clients_of_a_closed_loop_are_its_throughput_times_their_latency(model, gpu, engine):
    # Little's law on the whole loop (each client waits for its first token, then decodes): N =
    # X x (TTFT + (output - 1) x TPOT). Long prompts with short outputs at many clients broke it by
    # 2x when every client was counted as decoding while prompts queued for prefill.
    g = catalog.gpu(gpu)
    for (i, o), n in itertools.product([(512, 2048), (2048, 256), (4096, 64), (16000, 50)], [1, 8, 126, 400]):
        req = ServeRequest(catalog.model(model), g, input_len=i, output_len=o, concurrency=n)
        p = estimate_serving(replace(req, config=engine_config(engine, g))).point
        assert n == pytest.approx(p.output_tokens_per_s / o * (p.ttft_s + (o - 1) * p.tpot_s), rel=0.04), (i, o, n)
