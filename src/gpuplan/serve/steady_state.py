"""Continuous batching in steady state: the mean-field model of one replica at a concurrency.

Steady state of continuous batching with ``C`` sequences (a mean-field model of what serve-sim
simulates request by request): every iteration each decoding sequence adds one token and, to keep
``C`` in flight, prompts of new sequences are prefilled at the rate sequences finish, i.e. D x
input/output prompt tokens per iteration for D decoding sequences (less the prefix-cache hits),
in lumps of one prompt (or one budget's chunk of it): a share of the iterations carries a prompt
and the rest decode alone, until every iteration carries prefill. The batched-token budget caps D
at budget x output / (input + output); clients beyond it wait in the queue. Output tokens/s =
D / mean t_iter; the inter-token latency a user sees (TPOT) is the mean iteration with the other
sequences' prompts; TTFT is the prompt's own prefill in chunks beside D - 1 decodes, plus the
wait behind the prefills of requests that arrived just before it (``prefill_wait``) and the
iteration already running when a client's request arrives (``in_flight``). Max-throughput mode
reserves every sequence's full input + output length up front, as TensorRT-LLM's default
GUARANTEED_NO_EVICT scheduler does. An engine that runs prefills apart from decodes (SGLang)
pays each prompt's prefill as iterations of its own that every running sequence waits out
(``_prefill_apart``).

Within the loop a client either waits for its first token or decodes, so Little's law over the
whole loop (N = X x (TTFT + (output - 1) x TPOT)) sets how many decode: all N while prompts are
prefilled at once, fewer where they queue for prefill (``_in_the_loop``).

A concurrency above what the KV pool (or ``max_num_seqs``) holds is a closed loop of N clients, the
way benchmark_serving.py / genai-perf run ``--concurrency N``: the engine runs at its capacity and
the other requests wait in its queue (vLLM's ``waiting`` deque, TensorRT-LLM's pending requests).
Little's law on the queue alone (Little 1961) gives the wait: N - running requests queue, and they
leave it at the completion rate X, so each waits (N - running) / X, added to its TTFT.

Where the engine's API server streams the tokens slower than the engine makes them (many sequences
of a small model under vLLM, engines.py ``frontend_s_per_token``), the clients see the server's
pace (``api_server_pace``), as serve-sim paces each iteration by the tokens it streams.

The step times come from timing.py (``StepModel``); plan.py puts memory, this and the cost together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuplan.estimate.comm import efficiency
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.timing import Deployment, Iteration, StepModel


@dataclass(frozen=True)
class Point:
    """Steady state at one concurrency."""

    concurrency: int
    decoding: float  # sequences decoding each iteration
    iteration_s: float
    tpot_s: float
    ttft_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    decode_share: float  # of the GPU time, the part decode would take alone (for $/token split)
    queued: int = 0  # requests of the closed loop waiting for a slot
    queue_wait_s: float = 0.0  # each one's wait, included in ttft_s
    in_flight_s: float = 0.0  # the iterations a closed-loop request waits out first, included in ttft_s

    @property
    def running(self) -> int:
        return self.concurrency - self.queued


def steady_state(
    sm: StepModel,
    cfg: ServeConfig,
    concurrency: int,
    input_len: int,
    output_len: int,
    hit: float = 0.0,
    proposer: str | None = None,
    speculate: Callable[[Point], Point] | None = None,
) -> Point:
    """The steady state of ``concurrency`` closed-loop clients (``proposer``: the kind of the
    speculative proposer that runs, if any, which may turn scheduling ahead off, Engine.forms_ahead;
    ``speculate``: the point with its decode steps speculated, speculative.with_speculation), as
    its clients see it: at the pace of the engine's API server where that is slower
    (``api_server_pace``)."""
    ahead = sm.engine is not None and sm.engine.forms_ahead(sm.d.pp, sm.d.dp_attention, proposer)
    per_token = sm.engine.frontend_s_per_token if sm.engine is not None else 0.0

    def seen(p: Point) -> Point:
        return api_server_pace(speculate(p) if speculate is not None else p, per_token)

    if sm.engine is not None and not sm.engine.mixed_prefill:
        seats = float(min(concurrency, cfg.max_num_seqs) if cfg.max_num_seqs else concurrency)
        return _in_the_loop(
            lambda d: seen(_prefill_apart(sm, cfg, concurrency, d, input_len, output_len, hit, ahead)),
            seats,
            concurrency,
            output_len,
        )
    fresh = input_len * (1 - hit)  # prompt tokens the prefix cache does not cover
    cap = cfg.max_batched_tokens / (1 + fresh / output_len)  # decodes whose successors the budget prefills
    if cfg.max_num_seqs:
        cap = min(cap, cfg.max_num_seqs)
    running = max(1, math.floor(cap))
    if concurrency > running:
        # Beyond the budget the prompts fall behind: the engine runs `running` sequences and the
        # other clients wait for prefill in its queue, as beyond the KV pool (closed_loop).
        return closed_loop(
            steady_state(sm, cfg, running, input_len, output_len, hit, proposer, speculate), concurrency, output_len
        )
    return _in_the_loop(
        lambda d: seen(_mixed(sm, cfg, concurrency, d, input_len, output_len, hit, ahead)),
        min(float(concurrency), cap),
        concurrency,
        output_len,
    )


def _in_the_loop(at: Callable[[float], Point], most: float, clients: int, output_len: int) -> Point:
    """The point whose decoding sequences and waiting prompts add up to the closed loop's clients.

    ``at(d)`` is the steady state with ``d`` sequences decoding. A client is either decoding or
    waiting for its first token, so by Little's law (Little 1961) on the whole loop the clients
    are X x (TTFT + (output - 1) x TPOT) at a completion rate X: ``d`` = ``clients`` holds only
    while TTFT is short beside the decode. Where prompts queue for prefill (long prompts, short
    outputs, many clients) fewer sequences decode, down to the prefill-bound rate; this finds
    that ``d`` by bisection (the clients ``at(d)`` implies grow with ``d``)."""

    def implied(p: Point) -> float:
        return p.output_tokens_per_s / output_len * (p.ttft_s + (output_len - 1) * p.tpot_s)

    p = at(most)
    if implied(p) <= clients:
        return p
    lo, hi = 0.0, most
    for _ in range(60):  # to 0.1% of d; a cap, as implied() -> 0 only in the limit d -> 0
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if implied(at(mid)) > clients else (mid, hi)
        if hi - lo <= 1e-3 * hi:
            break
    return at(lo) if lo > 0 else at(hi)


def _mixed(
    sm: StepModel,
    cfg: ServeConfig,
    concurrency: int,
    d: float,
    input_len: int,
    output_len: int,
    hit: float,
    ahead: bool = False,
) -> Point:
    """Steady state of a chunked-prefill engine with ``d`` of ``concurrency`` clients decoding
    (``ahead``: the engine forms each batch while the GPU runs the last, ``in_flight``)."""
    fresh = input_len * (1 - hit)
    per_token_prefill = fresh / output_len  # prompt tokens to prefill per output token
    budget = cfg.max_batched_tokens
    ctx = input_len + output_len / 2
    pctx = input_len * hit + fresh / 2

    def mixed(decoding: float, prefill: float) -> Iteration:
        return sm.iteration(
            decode=decoding,
            prefill=prefill,
            decode_context=ctx,
            prefill_context=pctx,
            prefill_seqs=prefill / max(fresh, 1),
        )

    alone = sm.decode_step(d, ctx).seconds
    # TTFT: the prompt in chunks of what the budget leaves beside the other sequences' decodes
    others = max(0.0, d - 1)
    chunk = max(cfg.block_size, budget - math.ceil(others))
    # The prompts come in lumps, not smeared over every iteration: an engine prefills a waiting
    # prompt in the next iteration, whole or in chunks of the budget, and the iterations between
    # carry decodes alone. Smeared, each decode step of a many-expert MoE would read the experts
    # of ~input/output extra rows (DeepSeek-V2-Lite at concurrency 1, 2048/256: 37 of 64 experts
    # a step instead of 6), twice its real time. `lumped` is the mean iteration time when a share
    # of iterations carries `per_iteration` prompt tokens in lumps of at most one prompt's chunk;
    # once every iteration carries prefill (the share reaches 1) it is the smeared iteration.
    lump = min(float(chunk), max(fresh, 1.0))

    def lumped(decoding: float, per_iteration: float) -> float:
        share = min(1.0, per_iteration / lump)
        if share <= 0:
            return alone
        return share * mixed(decoding, per_iteration / share).seconds + (1 - share) * alone

    full_s = lumped(d, d * per_token_prefill)
    # the gap between a sequence's tokens: the iterations that carry the other sequences' prompts
    seen_s = lumped(d, others * per_token_prefill) if d > 1 else alone
    ttft = _prefill_s(sm, fresh, input_len * hit, chunk, others, ctx)
    completions = d / full_s / output_len  # requests/s: the closed loop's arrival rate
    packed = max(1, math.floor(chunk / max(fresh, 1)))  # prompts one iteration's budget prefills
    wait = prefill_wait(completions * (concurrency - 1) / concurrency, ttft, packed, concurrency - 1)
    return _point(concurrency, d, full_s, seen_s, ttft + wait, alone, input_len / output_len, ahead)


def _prefill_s(
    sm: StepModel, fresh: float, cached: float, chunk: float, decode: float = 0.0, decode_context: float = 0.0
) -> float:
    """Seconds to prefill ``fresh`` prompt tokens after ``cached`` ones, in chunks of ``chunk``
    tokens, each iteration beside ``decode`` sequences decoding at ``decode_context``."""
    seconds, done = 0.0, 0.0
    while done < fresh:
        n = min(chunk, fresh - done)
        seconds += sm.iteration(
            decode=decode,
            prefill=n,
            decode_context=decode_context,
            prefill_context=cached + done + n / 2,
            prefill_seqs=1 if done + n >= fresh else 0,
        ).seconds
        done += n
    return seconds


def _prefill_apart(
    sm: StepModel,
    cfg: ServeConfig,
    concurrency: int,
    d: float,
    input_len: int,
    output_len: int,
    hit: float,
    ahead: bool = False,
) -> Point:
    """Steady state of an engine that runs prefill batches alone and first (SGLang,
    ``Engine.mixed_prefill``): each new prompt is prefilled in iterations of its own, in chunks of
    the budget, while the running sequences wait. Per decode step D / output sequences finish and
    as many successors are prefilled, so a decode step costs its own time plus D / output prefills
    (each prompt its own prefill iteration: at moderate load prompts arrive one at a time; packed
    into one batch they would share its weight reads, so this is the upper end). Decodes take no
    token budget here, so D is at most the concurrency (``_in_the_loop`` sets it). TTFT: the prompt's own prefill, which goes before
    any decode, plus the wait behind the prefills of prompts that arrived just before it."""
    fresh = input_len * (1 - hit)
    ctx = input_len + output_len / 2
    alone = sm.decode_step(d, ctx).seconds
    chunk = cfg.max_batched_tokens
    prefill = _prefill_s(sm, fresh, input_len * hit, chunk)
    step = alone + d / output_len * prefill  # one decode step and its share of the prefills
    seen = alone + max(0.0, d - 1) / output_len * prefill  # a sequence's token gap: the others' prefills
    completions = d / step / output_len
    packed = max(1, math.floor(chunk / max(fresh, 1)))
    wait = prefill_wait(completions * (concurrency - 1) / concurrency, prefill, packed, concurrency - 1)
    return _point(concurrency, d, step, seen, prefill + wait, alone, input_len / output_len, ahead)


def _point(
    clients: int,
    d: float,
    iteration_s: float,
    tpot_s: float,
    ttft_s: float,
    alone_s: float,
    ratio: float,
    ahead: bool = False,
) -> Point:
    """The steady state of ``d`` decoding sequences at a mean iteration of ``iteration_s``: TTFT
    ``ttft_s`` (prefill and the wait behind other prompts) plus the iterations in flight when a
    closed-loop request arrives (``ahead``: two, see ``in_flight``), ``ratio`` prompt tokens per
    output token, ``alone_s`` the decode step without prompts."""
    wait = in_flight(d, tpot_s, ahead)
    return Point(
        concurrency=clients,
        decoding=d,
        iteration_s=iteration_s,
        tpot_s=tpot_s,
        ttft_s=ttft_s + wait,
        output_tokens_per_s=d / iteration_s,
        input_tokens_per_s=d * ratio / iteration_s,
        decode_share=min(1.0, alone_s / iteration_s),
        in_flight_s=wait,
    )


def api_server_pace(p: Point, s_per_token: float) -> Point:
    """``p`` as clients see it through an API server that streams each output token in
    ``s_per_token`` seconds beside the engine (engines.py ``frontend_s_per_token``): where the engine
    emits tokens faster than that, the server's pace sets the throughput (1 / ``s_per_token``), and
    every iteration, the token gaps and the iterations a new request waits out stretch with it,
    as serve-sim paces each iteration (Engine.paced)."""
    k = p.output_tokens_per_s * s_per_token
    if k <= 1.0:
        return p
    return replace(
        p,
        iteration_s=p.iteration_s * k,
        tpot_s=p.tpot_s * k,
        ttft_s=p.ttft_s + p.in_flight_s * (k - 1),
        in_flight_s=p.in_flight_s * k,
        output_tokens_per_s=p.output_tokens_per_s / k,
        input_tokens_per_s=p.input_tokens_per_s / k,
        decode_share=p.decode_share / k,
    )


def in_flight(d: float, iteration_s: float, ahead: bool = False) -> float:
    """The iterations a closed-loop client's next request waits out before it is scheduled.

    Engines read new requests once per iteration, before scheduling it (vLLM V1
    ``EngineCoreProc.run_busy_loop``: ``_process_input_queue`` then ``_process_engine_step``; SGLang's
    ``event_loop_normal``: ``recv_requests`` then ``get_next_batch_to_run``). A client sends its
    next request when its last token arrives, which the engine emits at the end of an iteration;
    with other sequences running the engine has already begun the next iteration by the time the
    request reaches it, and the request waits that iteration out. An engine that forms the next
    batch while the GPU runs the last (``ahead``: SGLang's default ``event_loop_overlap``,
    engines.py ``schedules_ahead``) has formed that next one too: two iterations. A lone client
    finds the engine idle (``d`` <= 1: no wait); between one and two sequences, the share of the
    time another runs."""
    return min(1.0, max(0.0, d - 1)) * iteration_s * (2 if ahead else 1)


def prefill_wait(arrivals_per_s: float, prefill_s: float, packed: int = 1, others: float = math.inf) -> float:
    """Mean wait of a prompt behind the prefills of prompts that arrived just before it.

    An iteration that prefills a prompt runs for about ``prefill_s``; a prompt arriving meanwhile
    waits for it. With arrivals at ``arrivals_per_s`` (the other requests of the loop: an arriving
    request sees the other N - 1 clients, the arrival theorem of closed networks, Reiser & Lavenberg
    1980) and each prefill a fixed service, this is M/D/1: the Pollaczek-Khinchine mean wait
    rho x S / (2 (1 - rho)), rho = lambda x S (Kleinrock 1975, Queueing Systems I, ch. 5, with a
    deterministic service; DistServe, Zhong et al. 2024, eq. 1, models a prefill instance the same
    way). A budget that prefills ``packed`` prompts in one iteration serves them together:
    rho = lambda x S / packed (an approximation of the bulk-service queue). The mean-field
    throughput already pays for every prefill, so rho stays below 1 (it is about the prefill's share of
    the engine's time). A closed loop bounds the wait where the open queue would not: no prompt waits
    for more than the ``others`` prompts of the other clients (the prefill-bound limit, rho -> 1).
    """
    rho = arrivals_per_s * prefill_s / packed
    if rho <= 0 or others <= 0:
        return 0.0
    most = others * prefill_s / packed
    return most if rho >= 1 else min(most, rho * prefill_s / (2 * (1 - rho)))


def closed_loop(p: Point, clients: int, output_len: int) -> Point:
    """``clients`` closed-loop clients against an engine that runs ``p.concurrency`` of them at once:
    the rest queue, each for (clients - running) / X with X the completion rate in requests/s
    (Little's law, L = X W, applied to the queue). Throughput stays the capacity's."""
    if clients <= p.concurrency:
        return p
    queued = clients - p.concurrency
    wait = queued / (p.output_tokens_per_s / output_len)
    return replace(p, concurrency=clients, ttft_s=p.ttft_s + wait, queued=queued, queue_wait_s=wait)


def compute_bound_batch(d: Deployment) -> float:
    """Decode batch at the roofline ridge of the weight GEMMs: 2 FLOPs per weight and token
    against the weight's bytes, rate x bytes / (2 x bandwidth)."""
    e = efficiency(d.gpu)
    rate = d.gpu.peak(d.weights.compute) * e.gemm_fraction(d.weights.compute) * e.sustained
    return rate * d.weights.bytes / (2 * d.gpu.hbm_bytes_per_s * e.hbm)
