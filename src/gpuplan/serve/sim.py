"""Serving simulation: requests arrive, are batched continuously, and each iteration takes the time
the performance model gives (timing.py).

The scheduler follows vLLM's V1 engine (vllm/v1/core/sched/scheduler.py): every iteration has a
budget of ``max_batched_tokens``; running sequences go first (one token each when decoding, a chunk
of their prompt when prefilling: chunked prefill, Agrawal et al. 2024 "Sarathi-Serve"), then waiting
requests are admitted first-come-first-served while the budget, ``max_num_seqs`` and free KV blocks
allow. KV memory is paged (Kwon et al. 2023): a sequence holds ceil(tokens / block_size) blocks,
allocated as it grows; when a running sequence needs a block and none is free, the most recently
admitted sequence is preempted, its blocks freed, and it waits at the head of the queue to be
recomputed (vLLM's default RECOMPUTE preemption); an iteration that preempted admits nobody from the
queue (V1's ``if not preempted_reqs``). Sliding-window layers hold at most their window's blocks
(``kv_blocks``), as ``serve`` counts them. An engine that does not mix prefills with decodes
(SGLang, ``Engine.mixed_prefill``) runs an iteration of prompt chunks alone whenever it can form
one (a prompt still in chunks, or the queue's head with a seat and its blocks) and decodes only
when it cannot: its running sequences wait out every prefill. SGLang admits a request only while
its prompt and its whole output fit beside a reserve of ``new_token_ratio`` times the running
requests' remaining output, a ratio that starts at 0.7, falls each decode batch and is re-estimated
after a retraction (engines.py ``TokenRatio``), so it seldom has to retract where an engine that
admits on the prompt alone would preempt again and again.

Arrivals are Poisson at ``rate`` (or read from a trace), all at t = 0 (a burst, ``rate`` = inf:
``vllm bench serve``'s default ``--request-rate inf``, a transient of queued prompts, prefill
waves and a decode tail rather than a steady state), or come from a closed loop of ``clients``
(benchmark_serving.py ``--max-concurrency``, genai-perf ``--concurrency``): each client sends its
next request the moment its last one finishes, so at most ``clients`` are in the engine or its
queue, and whatever the KV pool or ``max_num_seqs`` cannot seat waits. A request joins the first
iteration formed after it arrives: the next one, or, under an engine that forms each batch while
the GPU runs the last (SGLang's overlap loop, engines.py ``schedules_ahead``), the one after. Lengths fixed, uniform or
exponential; a seed makes every run reproducible. Outputs: TTFT, inter-token latency (ITL) and
end-to-end latency percentiles, throughput and preemptions; ``max_rate`` bisects for the highest
rate whose p99s meet an SLO.

The pieces: sim_workload.py (lengths and arrivals: Poisson, closed loop, trace), sim_report.py
(the measured latencies, their percentiles and the SLO check); this module runs the engine's
iterations and bisects for the highest rate. The public names are re-exported here.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpuplan.errors import DoesNotFit, GpuplanError, require
from gpuplan.serve.engines import engine
from gpuplan.serve.memory import ServeConfig, block_tokens, context_limit, kv_blocks, serve_memory, state_blocks
from gpuplan.serve.sim_report import SimResult, meets
from gpuplan.serve.sim_workload import Lengths, Workload
from gpuplan.serve.speculative import Proposer, accepted_tokens
from gpuplan.serve.timing import Deployment, StepModel, step_model

__all__ = ["MAX_ITERATIONS", "Lengths", "SimResult", "Speculating", "Workload", "max_rate", "meets", "simulate"]


@dataclass(frozen=True)
class Speculating:
    """Speculative decoding in the simulation: ``proposer`` drafts ``draft_len`` tokens per decoding
    sequence and iteration, each accepted with probability ``acceptance`` while the ones before it
    were (draws seeded by ``seed``)."""

    proposer: Proposer
    draft_len: int
    acceptance: float
    seed: int = 0

    def __post_init__(self) -> None:
        require(
            isinstance(self.draft_len, int) and 1 <= self.draft_len <= 64,
            "draft_len",
            f"must be 1-64, got {self.draft_len!r}",
        )
        require(0 <= self.acceptance <= 1, "acceptance", f"must be in [0, 1], got {self.acceptance}")


# Iterations a simulation may take (about 30 us each): beyond it the run ends with an error naming
# the flag that made it so long, rather than running for hours.
MAX_ITERATIONS = 1_000_000


def simulate(
    d: Deployment,
    cfg: ServeConfig,
    w: Workload,
    rate: float = 0.0,
    max_iterations: int = MAX_ITERATIONS,
    clients: int | None = None,
    bulk: bool = True,
    prefilled_s: np.ndarray | None = None,
    spec: Speculating | None = None,
) -> SimResult:
    """Run the requests of ``w`` through one replica until all finish; with ``clients``, as a
    closed loop (the first ``clients`` requests at time 0, each later one when another finishes).
    With ``prefilled_s``, a decode instance of disaggregated serving (sim_disagg.py): each request
    arrives with its prompt's KV computed elsewhere and its first token sent at ``prefilled_s``; it
    needs the prompt's blocks to be admitted and decodes from the iteration that admits it.
    With ``spec``, speculative decoding: each decoding sequence drafts ``draft_len`` tokens per
    iteration (the proposer's passes before the target's), the target verifies them beside its
    own in one pass (they count against the token budget and hold KV slots), and the sequence keeps
    the accepted prefix plus one token, drawn per sequence and iteration (speculative.accepted_tokens).

    State lives in numpy arrays over requests; the running set is an array of request ids in
    admission order. Stretches where every running sequence decodes and nothing is waiting are
    advanced as one step of k iterations (k up to the next arrival, the next finish or the free
    blocks), each timed as its own iteration (StepModel.decode_times): the same result as the
    plain per-iteration loop, which ``bulk=False`` runs.
    """
    eng = engine(cfg.engine)
    sm = step_model(d, eng)
    # a decode instance has no prompt to schedule apart: it admits in any iteration
    mixed = eng.mixed_prefill or prefilled_s is not None
    mem = serve_memory(d, cfg)
    n_draft = spec.draft_len if spec is not None else 0  # tokens each decoder drafts per iteration
    if spec is not None:  # the proposer's weights (and an MTP module's KV) come out of the pool
        p = spec.proposer
        mem = replace(mem, kv_pool=mem.kv_pool - p.weight_bytes, kv_block_bytes=mem.kv_block_bytes * p.kv_scale)
        rng = np.random.default_rng(spec.seed)
        bulk = False  # each iteration's accepted tokens are drawn: no stretch of identical steps
    # DP attention: the ranks' pools hold different sequences; one shared pool of all their blocks
    # (requests spread evenly over the ranks)
    free = int(mem.kv_pool // mem.kv_block_bytes) * mem.kv_groups if mem.kv_pool > 0 else 0
    bs = block_tokens(d, cfg)
    need_blocks = kv_blocks(d.model, bs)
    state = state_blocks(d, cfg)  # a hybrid's linear-attention states, held from admission
    if state:
        token_blocks = need_blocks

        def need_blocks(tokens):
            return token_blocks(tokens) + state

    n = len(w.arrival_s)
    longest = int((w.input_len + w.output_len).max())
    # as estimate_serving: the engine refuses a request longer than its context (vLLM's
    # max_model_len), and a longer one would only thrash the pool until the iteration cap
    limit = context_limit(d.model, cfg)
    if longest > limit:
        raise GpuplanError(
            "input_len",
            f"a request of input + output = {longest} tokens is longer than {d.model.name}'s maximum context of {limit}",
            f"use `input_len` + `output_len` <= {limit}",
        )
    if free == 0:
        # as estimate_serving: weights and overheads that leave no KV pool do not fit (exit code
        # 3), with the smallest layout that holds one request
        from gpuplan.serve.plan import ServeRequest, _smallest_fix

        req = ServeRequest(d.model, d.gpu, d.tp, d.pp, d.weights.name, d.kv.name, longest - 1, 1, config=cfg)
        raise DoesNotFit(
            "memory",
            f"{d.model.name} in {d.weights.name} on {d.tp * d.pp} x {d.gpu.name} (tp={d.tp}, pp={d.pp}) "
            "leaves no memory for a KV-cache pool",
            _smallest_fix(req, cfg),
        )
    if need_blocks(longest) > free:
        raise GpuplanError(
            "input_len",
            f"a {longest}-token request needs {math.ceil(need_blocks(longest))} KV blocks; the pool has {free}",
            "use shorter requests, `kv=fp8`, or a larger `tp`",
        )
    arrival, prompt, out = w.arrival_s, w.input_len.astype(np.int64), w.output_len.astype(np.int64)
    require(clients is None or clients >= 1, "concurrency", f"must be at least 1, got {clients}")
    if clients is not None:  # arrivals are issued as requests finish
        arrival = np.full(n, np.inf)
        arrival[: min(clients, n)] = 0.0
    issued = n if clients is None else min(clients, n)
    queued_area = 0.0
    # every iteration handles at most the budget: a lower bound of the iterations, checked before running
    least = int(prompt.sum() + out.sum()) // cfg.max_batched_tokens
    if least > max_iterations // 10:
        raise GpuplanError(
            "max_batched_tokens",
            f"{n:,} requests at {cfg.max_batched_tokens:,} tokens per iteration "
            f"take at least {least:,} engine iterations",
            "raise `max_batched_tokens` (vLLM's default is 8192) or simulate fewer `requests`",
        )
    # a sequence emits at most one token per iteration: an output this long cannot finish under
    # the cap, so say so now rather than after a minute of simulating
    if int(out.max()) >= max_iterations:
        raise GpuplanError(
            "output_len",
            f"a {int(out.max()):,}-token output takes more than the {max_iterations:,} engine iterations "
            "a simulation may run",
            f"simulate outputs shorter than {max_iterations:,} tokens",
        )
    computed = np.zeros(n, dtype=np.int64)  # tokens whose KV is in the cache
    generated = np.zeros(n, dtype=np.int64)
    target = prompt.copy()  # tokens to prefill (the prompt, plus generated tokens after a preemption)
    # blocks in all-layer units: fractional where sliding-window layers hold fewer (kv_blocks)
    blocks = np.zeros(n, dtype=np.float64 if d.model.num_sliding_layers or state else np.int64)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    if prefilled_s is not None:  # the prompt's KV arrives computed, the first token already sent
        require(len(prefilled_s) == n, "prefilled_s", f"needs one time per request ({n}), got {len(prefilled_s)}")
        computed[:] = prompt
        generated[:] = 1
        first[:] = last[:] = prefilled_s
    finish = np.full(n, np.nan)
    # SGLang's admission (engines.TokenRatio): an unmixed engine with a new_token_ratio keeps that
    # share of the running requests' remaining output out of its admissions, and admits a request
    # only while its prompt and whole output fit beside it
    tr = eng.new_token_ratio if not mixed else None
    ratio = tr.init if tr is not None else 0.0

    def later_blocks(ids: np.ndarray) -> np.ndarray:
        """Blocks the requests ``ids`` take for the rest of their output (SGLang's clipped estimate)."""
        held = prompt[ids] + generated[ids]
        assert tr is not None
        return need_blocks(held + np.minimum(out[ids] - generated[ids], tr.clip)) - need_blocks(held)

    def fits(whole: float, later: float, room: float) -> bool:
        """Whether an unmixed engine takes a request of ``whole`` prompt blocks still to place and
        ``later`` blocks of output into ``room`` free blocks: its whole prompt (SGLang's
        PrefillAdder), and under a new_token_ratio its output too (strictly, as add_one_req)."""
        return bool(whole + later < room) if tr is not None else bool(whole <= room)

    waiting: deque[int] = deque()
    running = np.zeros(0, dtype=np.int64)
    gaps: list[np.ndarray] = []
    now, nxt, done, preemptions, iterations = 0.0, 0, 0, 0, 0
    last_dt = 0.0  # the last iteration's seconds
    max_seqs = cfg.max_num_seqs or n
    budget0 = cfg.max_batched_tokens
    # when the iteration starting at `now` was formed: now, or, for an engine that forms the next
    # batch while the GPU runs the last (SGLang's overlap loop, Engine.schedules_ahead), the start
    # of the last iteration, so a request arriving during an iteration waits out the next one too
    ahead_loop = eng.forms_ahead(d.pp, d.dp_attention, spec.proposer.method if spec is not None else None)
    # the API server streams each iteration's tokens beside the engine (Engine.paced)
    pace = eng.frontend_s_per_token > 0
    formed = 0.0
    while done < n:
        # an idle engine reads a request as it comes
        seen = formed if ahead_loop and (len(running) or waiting) else now
        while nxt < n and arrival[nxt] <= seen:
            waiting.append(nxt)
            nxt += 1
        if not len(running) and not waiting:
            now = formed = max(now, float(arrival[nxt]))
            ratio = tr.init if tr is not None else 0.0  # SGLang re-initialises it when idle
            continue
        # an engine that does not mix (SGLang) runs a prefill batch alone whenever one can be
        # formed: a prompt still in chunks, or the queue's head with a seat and blocks for its whole
        # prompt (SGLang's PrefillAdder admits a request only if its whole input fits the pool,
        # schedule_policy.py ``add_one_req``)
        prefill_only = False
        # SGLang's reserve for the running requests' remaining output, read only to admit (and an
        # iteration that retracts admits nobody, so the retraction's new ratio waits for the next)
        held_back = ratio * float(later_blocks(running).sum()) if tr is not None and waiting else 0.0
        if not mixed:
            prefill_only = bool((computed[running] < target[running]).any())
            if not prefill_only and waiting and len(running) < max_seqs:
                r = waiting[0]
                later = float(later_blocks(np.array([r]))[0]) if tr is not None else 0.0
                prefill_only = fits(need_blocks(int(target[r])) - blocks[r], later, free - held_back)
        # running sequences first, in admission order: decoders take one token (none in a prefill
        # batch), prefills a chunk
        preempted = False
        while True:
            c, t, b = computed[running], target[running], blocks[running]
            full = np.where(c >= t, 0 if prefill_only else 1, t - c)
            if n_draft:  # a speculating decoder's drafts ride in the same pass: budget tokens, KV slots
                full_drafts = full + np.where(c >= t, 0 if prefill_only else n_draft, 0)
                before = np.cumsum(full_drafts) - full_drafts
                took = np.minimum(np.maximum(budget0 - before, 0), full_drafts)
                take = np.minimum(took, full)
            else:
                before = np.cumsum(full) - full
                take = took = np.minimum(np.maximum(budget0 - before, 0), full)  # np.clip, without its overhead
            want = np.maximum(0, need_blocks(c + took) - b)
            wanted = want.sum()
            if wanted <= free or len(running) <= 1:
                break
            v = int(running[-1])  # out of blocks: preempt the newest and recompute it later
            running = running[:-1]
            free += blocks[v]
            blocks[v] = computed[v] = 0
            target[v] = prompt[v] + generated[v]
            waiting.appendleft(v)
            preemptions += 1
            preempted = True
        if preempted and tr is not None:  # SGLang's retraction resets the ratio from the survivors
            ratio = tr.after_retract(float(generated[running].sum()), float(out[running].sum()), len(running))
        free -= wanted
        blocks[running] += want
        decoding = c >= t
        budget = budget0 - int(took.sum())
        # blocks the prompts being prefilled still need, held back from an unmixed engine's
        # admissions, which want a whole prompt in the pool (no decode runs between its prefill
        # chunks; only its prefill batches admit)
        reserve = float(np.maximum(0, need_blocks(t) - blocks[running]).sum()) if prefill_only else 0.0
        reserve += held_back
        # then waiting requests, first come first served, while budget, seats and blocks allow; none
        # in an iteration that preempted (vllm/v1/core/sched/scheduler.py ``schedule``: the waiting
        # queue is scheduled only ``if not preempted_reqs``), so a preempted sequence waits a step
        admitted: list = []
        adm_take: list = []
        adm_dec: list = []
        while (
            (mixed or prefill_only)
            and not preempted
            and waiting
            and budget > 0
            and len(running) + len(admitted) < max_seqs
        ):
            r = waiting[0]
            # a prompt's chunk; a request that arrives prefilled decodes its next token at once
            need = min(int(target[r] - computed[r]), budget) or 1
            blk = need_blocks(int(computed[r]) + need) - blocks[r]
            whole = 0.0 if mixed else need_blocks(int(target[r])) - blocks[r]
            later = float(later_blocks(np.array([r]))[0]) if tr is not None else 0.0
            if blk > free or not (mixed or fits(whole, later, free - reserve)):
                break
            waiting.popleft()
            free -= blk
            blocks[r] += blk
            reserve += whole - blk + later  # an admitted request reserves its whole (clipped) output
            admitted.append(r)
            adm_take.append(need)
            adm_dec.append(bool(computed[r] >= target[r]))
            budget -= need
        n_before = len(running)  # the sequences whose drafts were budgeted above
        if admitted:
            running = np.concatenate([running, np.array(admitted, dtype=np.int64)])
            take = np.concatenate([take, np.array(adm_take, dtype=np.int64)])
            decoding = np.concatenate([decoding, np.array(adm_dec, dtype=bool)])
        sel = take > 0
        ids, tk, dec = running[sel], take[sel], decoding[sel]
        # decoders that draft this iteration (one admitted prefilled this iteration starts next)
        drafting = dec & (np.arange(len(running)) < n_before)[sel] if n_draft else None
        pre = ~dec
        n_dec = int(dec.sum())
        dec_ctx = float(computed[ids[dec]].sum()) / n_dec + 1 if n_dec else 0.0
        pre_tok = int(tk[pre].sum())
        pre_done = int(((computed[ids[pre]] + tk[pre]) >= target[ids[pre]]).sum())
        pre_ctx = float(((computed[ids[pre]] + tk[pre] / 2) * tk[pre]).sum() / pre_tok) if pre_tok else 0.0

        left = int((out[ids] - generated[ids]).min()) if bulk and pre_tok == 0 and not waiting else 1
        # steps until the next arrival, guessed from the last iteration's time (only to size the
        # stretch: a guess too short just ends it early, and a few steps are not worth it)
        ahead = (arrival[nxt] - now) / last_dt if nxt < n and last_dt > 0 else math.inf
        kept = None  # a speculating iteration's tokens kept per sequence (drawn below)
        if left > 1 and ahead >= 2:
            # a pure decode stretch: the k iterations until the next arrival, finish or block
            # shortage, each timed as the per-iteration loop would time it, run at once
            next_arrival = float(arrival[nxt]) if nxt < n else None
            times, extra = _decode_stretch(
                sm, n_dec, dec_ctx, left, ahead, now, next_arrival, computed[ids], blocks[ids], free, need_blocks
            )
            steps = len(times)
            if extra is not None:  # blocks for the whole stretch
                free -= extra.sum()
                blocks[ids] += extra
                tk = np.full(len(ids), steps, dtype=np.int64)
        else:
            steps = 1
            # verified beside the decoders' own tokens, like a prompt chunk
            n_drafting = int(drafting.sum()) if drafting is not None else 0
            drafts = n_drafting * n_draft
            it = sm.iteration(
                decode=n_dec,
                prefill=pre_tok + drafts,
                decode_context=dec_ctx,
                prefill_context=(pre_ctx * pre_tok + dec_ctx * drafts) / (pre_tok + drafts) if drafts else pre_ctx,
                prefill_seqs=pre_done + drafts,
            )
            times = np.array([it.seconds])
            if drafts and spec is not None and spec.proposer.draft is not None:
                times += n_draft * spec.proposer.draft.decode_step(n_drafting, dec_ctx).seconds
            if n_drafting and spec is not None and drafting is not None:
                # each drafting decoder keeps its accepted drafts and one token more
                kept = np.ones(len(ids), dtype=np.int64)
                kept[drafting] = accepted_tokens(rng, spec.acceptance, n_draft, n_drafting)
                kept = np.minimum(kept, out[ids] - generated[ids])  # none past the output's end
            if pace:  # the tokens streamed: the decoders' (what each keeps) and the finished prompts' first
                times = eng.paced(times, (int(kept[dec].sum()) if kept is not None else n_dec) + pre_done)
        t0, last_dt = float(times[0]), float(times[-1])
        queued_area += len(waiting) * t0  # a stretch runs only with nobody waiting
        start, now = now, now + float(times.sum())
        formed = now - last_dt  # the next iteration is formed as the last one starts (schedules_ahead)
        iterations += steps
        if tr is not None and not prefill_only and n_dec:  # each decode batch lowers it a step
            ratio = max(ratio - steps * tr.decay, tr.floor)
        if iterations > max_iterations:
            raise GpuplanError(
                "requests",
                f"the simulation passed {max_iterations:,} engine iterations with "
                f"{n - done:,} of {n:,} requests unfinished",
                "simulate fewer `requests`, or a rate the engine can keep up with",
            )
        computed[ids] += tk
        emits = dec | (computed[ids] >= target[ids])  # decoders, and prompts whose last chunk ran
        e = ids[emits]
        tokens = steps
        if kept is not None:  # drawn above
            computed[ids] += kept - 1
            tokens = kept[emits]
        fresh = generated[e] == 0
        first[e[fresh]] = start + t0
        old = e[~fresh]
        if len(old):
            gaps.append(start + t0 - last[old])  # the first token of this stretch
        if steps > 1:  # every sequence's later tokens come one iteration apart
            gaps.append(np.broadcast_to(times[1:], (len(e), steps - 1)).ravel())
        generated[e] += tokens
        last[e] = now
        fin = generated[running] >= out[running]
        if fin.any():
            gone = running[fin]
            free += blocks[gone].sum()
            blocks[gone] = 0
            finish[gone] = now
            done += len(gone)
            running = running[~fin]
            if issued < n:  # closed loop: each finished client sends its next request now
                k = min(len(gone), n - issued)
                # just after the next iteration starts: the engine reads new requests once per
                # iteration, before scheduling it (steady_state.in_flight), so with others
                # running the request waits that iteration out (and the next, under an engine
                # that formed it already: `formed`); an idle engine takes it at once
                arrival[issued : issued + k] = np.nextafter(now, math.inf)
                issued += k
    itl = np.concatenate(gaps) if gaps else np.zeros(0)
    many = out > 1  # vllm/benchmarks/serve.py calculate_metrics: TPOT of requests with output_len > 1
    return SimResult(
        rate=rate,
        requests=n,
        makespan_s=float(np.nanmax(finish) - arrival[0]),
        ttft_s=first - arrival,
        e2e_s=finish - arrival,
        itl_s=itl,
        itl_weight=np.ones(len(itl)),
        output_tokens=int(out.sum()),
        preemptions=preemptions,
        iterations=iterations,
        clients=clients,
        queued_mean=queued_area / now if now else 0.0,
        arrival_s=arrival,
        tpot_s=(finish[many] - first[many]) / (out[many] - 1),
        input_tokens=int(prompt.sum()),
    )


def _decode_stretch(
    sm: StepModel,
    n_dec: int,
    dec_ctx: float,
    left: int,
    ahead: float,
    now: float,
    next_arrival: float | None,
    computed: np.ndarray,
    blocks: np.ndarray,
    free: float,
    need_blocks: Callable[[Any], Any],
) -> tuple[np.ndarray, np.ndarray | None]:
    """The iterations of a pure decode stretch (every running sequence decodes, nobody waits) that
    run as one step, each timed as its own iteration (StepModel.decode_times), and the KV blocks
    each sequence needs for them (None: one iteration, whose blocks the loop already gave).

    ``left``: iterations until the first running sequence finishes; ``ahead``: the guess of those
    until ``next_arrival`` (the stretch is sized by it, then cut where the loop would admit that
    arrival: before the first iteration starting after it); ``computed`` and ``blocks``: the
    running sequences' cached tokens and blocks. A stretch the ``free`` blocks cannot hold is
    halved until they do."""
    times = sm.decode_times(n_dec, dec_ctx, left if math.isinf(ahead) else min(left, int(ahead * 1.25) + 2))
    if sm.engine is not None and sm.engine.frontend_s_per_token:  # each step streams the decoders' tokens
        times = sm.engine.paced(times, n_dec)
    steps = len(times)
    if next_arrival is not None:  # the loop admits an arrival before the first step starting after it
        starts = now + np.cumsum(times) - times
        steps = max(1, int(np.searchsorted(starts, next_arrival, side="left")))
    extra = None
    if steps > 1:
        extra = np.maximum(0, need_blocks(computed + steps) - blocks)
        while steps > 1 and extra.sum() > free:
            steps //= 2
            extra = np.maximum(0, need_blocks(computed + steps) - blocks)
        if steps == 1:
            extra = None
    return times[:steps], extra


def max_rate(
    d: Deployment,
    cfg: ServeConfig,
    n: int,
    input_len: Lengths,
    output_len: Lengths,
    seed: int,
    ttft_slo_s: float | None,
    itl_slo_s: float | None,
    steps: int = 10,
    progress=None,
    sim: Callable[[Workload, float], SimResult] | None = None,
) -> tuple[float, SimResult | None]:
    """The highest Poisson rate whose p99 TTFT and ITL meet the SLO (bisection on a log scale).
    ``progress()`` is called after each simulation (at most about 14 + ``steps``); ``sim(workload,
    rate)`` runs one (default: ``simulate`` on ``d``; disaggregated pools pass their own)."""
    sim = sim or (lambda w, rate: simulate(d, cfg, w, rate))

    def run(rate: float) -> SimResult:
        r = sim(Workload.poisson(rate, n, input_len, output_len, seed), rate)
        if progress:
            progress()
        return r

    lo, hi = 0.0, 1.0
    best = None
    while True:  # grow until the SLO breaks
        r = run(hi)
        if not meets(r, ttft_slo_s, itl_slo_s):
            break
        lo, best, hi = hi, r, hi * 2
        if hi > 1e6:
            return lo, best
    for _ in range(steps):
        mid = (lo + hi) / 2 if lo == 0 else math.sqrt(lo * hi)
        r = run(mid)
        if meets(r, ttft_slo_s, itl_slo_s):
            lo, best = mid, r
        else:
            hi = mid
    return lo, best
