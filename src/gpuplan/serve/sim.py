"""Serving simulation: requests arrive, are batched continuously, and each iteration takes the time
the performance model gives (timing.py).

The scheduler follows vLLM's V1 engine (vllm/v1/core/sched/scheduler.py): every iteration has a
budget of ``max_batched_tokens``; running sequences go first (one token each when decoding, a chunk
of their prompt when prefilling: chunked prefill, Agrawal et al. 2024 "Sarathi-Serve"), then waiting
requests are admitted first-come-first-served while the budget, ``max_num_seqs`` and free KV blocks
allow. KV memory is paged (Kwon et al. 2023): a sequence holds ceil(tokens / block_size) blocks,
allocated as it grows; when a running sequence needs a block and none is free, the most recently
admitted sequence is preempted, its blocks freed, and it waits to be recomputed (vLLM's default
RECOMPUTE preemption). Sliding-window layers are treated as full layers here (a slight
overestimate of their memory).

Arrivals are Poisson at ``rate`` (or read from a trace), or come from a closed loop of ``clients``
(benchmark_serving.py ``--max-concurrency``, genai-perf ``--concurrency``): each client sends its
next request the moment its last one finishes, so at most ``clients`` are in the engine or its
queue, and whatever the KV pool or ``max_num_seqs`` cannot seat waits. Lengths fixed, uniform or
exponential; a seed makes every run reproducible. Outputs: TTFT, inter-token latency (ITL) and
end-to-end latency percentiles, throughput and preemptions; ``max_rate`` bisects for the highest
rate whose p99s meet an SLO.
"""

from __future__ import annotations

import csv
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuplan.errors import GpuplanError, require
from gpuplan.serve.engines import engine
from gpuplan.serve.memory import ServeConfig, serve_memory
from gpuplan.serve.timing import Deployment, step_model


@dataclass(frozen=True)
class Lengths:
    """A length distribution: ``2048`` (fixed), ``512-4096`` (uniform) or ``exp:512`` (exponential mean)."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str | int, field: str) -> Lengths:
        s = str(text).strip()
        try:
            if s.startswith("exp:"):
                out = cls("exp", float(s[4:]))
            elif "-" in s:
                lo, hi = s.split("-", 1)
                out = cls("uniform", float(lo), float(hi))
            else:
                out = cls("fixed", float(s))
        except ValueError:
            raise GpuplanError(field, f"cannot read {text!r} as a length", "write 2048, 512-4096 or exp:512") from None
        require(
            math.isfinite(out.a) and math.isfinite(out.b) and out.a >= 1 and (out.kind != "uniform" or out.b >= out.a),
            field,
            f"lengths must be at least 1 (and lo <= hi), got {text!r}",
            "write 2048, 512-4096 or exp:512",
        )
        require(out.max <= 1e8, field, f"{text!r} is longer than any model's context", "use at most 100M tokens")
        return out

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, size=n)
        return np.maximum(1, np.round(rng.exponential(self.a, size=n))).astype(np.int64)

    @property
    def max(self) -> float:
        return self.b if self.kind == "uniform" else (self.a * 10 if self.kind == "exp" else self.a)


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    @classmethod
    def poisson(cls, rate: float, n: int, input_len: Lengths, output_len: Lengths, seed: int = 0) -> Workload:
        require(rate > 0, "rate", f"must be positive, got {rate}")
        require(n >= 1, "requests", f"must be at least 1, got {n}")
        rng = np.random.default_rng(seed)
        arrivals = np.cumsum(rng.exponential(1 / rate, size=n))
        return cls(arrivals, input_len.sample(rng, n), output_len.sample(rng, n))

    @classmethod
    def closed(cls, n: int, input_len: Lengths, output_len: Lengths, seed: int = 0) -> Workload:
        """``n`` requests for a closed loop: their arrival times are set by the simulation (zero here)."""
        require(n >= 1, "requests", f"must be at least 1, got {n}")
        rng = np.random.default_rng(seed)
        return cls(np.zeros(n), input_len.sample(rng, n), output_len.sample(rng, n))

    @classmethod
    def from_trace(cls, path: Path) -> Workload:
        """CSV with columns arrival_s, input_len, output_len (one request per row); a bad cell is
        an error naming its line and column."""
        from gpuplan.inputs import read_text

        rows = list(csv.reader(read_text(path, "trace").splitlines()))
        header = [h.strip() for h in rows[0]] if rows else []
        need = ("arrival_s", "input_len", "output_len")
        missing = [c for c in need if c not in header]
        require(
            not missing,
            "trace",
            f"{path} line 1: no column {', '.join(missing)} in the header",
            "give a CSV with the header arrival_s,input_len,output_len",
        )
        cols = [header.index(c) for c in need]
        a: list[float] = []  # arrival times
        i: list[float] = []  # input and output lengths (whole numbers)
        o: list[float] = []
        for line, row in enumerate(rows[1:], start=2):
            if not any(c.strip() for c in row):
                continue
            vals: list[float] = []
            for name, col in zip(need, cols):
                text = row[col].strip() if col < len(row) else None
                v: float
                try:
                    if text is None:  # a short row: no cell for this column
                        raise ValueError(name)
                    v = float(text) if name == "arrival_s" else int(text)
                except (TypeError, ValueError):
                    raise GpuplanError(
                        "trace",
                        f"{path} line {line}, column {name}: cannot read "
                        f"{'a missing value' if text is None else repr(text)}"
                        f" as {'seconds' if name == 'arrival_s' else 'a whole number of tokens'}",
                        "fix or remove that row",
                    ) from None
                ok = math.isfinite(v) and v >= 0 if name == "arrival_s" else 1 <= v <= 10**8
                require(
                    ok,
                    "trace",
                    f"{path} line {line}, column {name}: {text} is out of range",
                    "arrival_s must be >= 0 seconds, lengths from 1 token",
                )
                vals.append(v)
            a.append(vals[0])
            i.append(vals[1])
            o.append(vals[2])
        require(len(a) > 0, "trace", f"{path} has no requests", "add rows of arrival_s,input_len,output_len")
        arrival, inputs, outputs = np.array(a, dtype=float), np.array(i, dtype=np.int64), np.array(o, dtype=np.int64)
        order = np.argsort(arrival, kind="stable")
        return cls(arrival[order], inputs[order], outputs[order])


@dataclass(frozen=True)
class SimResult:
    rate: float  # offered requests/s
    requests: int
    makespan_s: float
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    itl_s: np.ndarray  # distinct inter-token gaps ...
    itl_weight: np.ndarray  # ... and how many tokens had each
    output_tokens: int
    preemptions: int
    iterations: int
    clients: int | None = None  # closed loop of this many clients; None: open arrivals
    queued_mean: float = 0.0  # requests waiting for a seat, averaged over time
    arrival_s: np.ndarray | None = None  # when each request was sent (a closed loop sets them)

    def percentiles(self) -> dict:
        def pct(x, w=None):
            if w is None:
                return {f"p{q}": float(np.percentile(x, q)) for q in (50, 90, 99)} | {"mean": float(np.mean(x))}
            order = np.argsort(x)
            x, w = x[order], w[order]
            cum = np.cumsum(w) / w.sum()
            return {f"p{q}": float(x[min(len(x) - 1, np.searchsorted(cum, q / 100))]) for q in (50, 90, 99)} | {
                "mean": float((x * w).sum() / w.sum())
            }

        return {
            "ttft_s": pct(self.ttft_s),
            "itl_s": pct(self.itl_s, self.itl_weight) if len(self.itl_s) else {},
            "e2e_s": pct(self.e2e_s),
        }

    def to_dict(self) -> dict:
        return {
            "rate": self.rate,
            "requests": self.requests,
            "makespan_s": self.makespan_s,
            "output_tokens_per_s": self.output_tokens / self.makespan_s if self.makespan_s else 0.0,
            "requests_per_s": self.requests / self.makespan_s if self.makespan_s else 0.0,
            "preemptions": self.preemptions,
            "iterations": self.iterations,
            "clients": self.clients,
            "queued_mean": self.queued_mean,
            **self.percentiles(),
        }


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
) -> SimResult:
    """Run the requests of ``w`` through one replica until all finish; with ``clients``, as a
    closed loop (the first ``clients`` requests at time 0, each later one when another finishes).

    State lives in numpy arrays over requests; the running set is an array of request ids in
    admission order. Stretches where every running sequence decodes and nothing is waiting are
    advanced as one step of k iterations (k up to the next arrival, the next finish or the free
    blocks), each timed as its own iteration (StepModel.decode_times): the same result as the
    plain per-iteration loop, which ``bulk=False`` runs.
    """
    sm = step_model(d, engine(cfg.engine))
    mem = serve_memory(d, cfg)
    # DP attention: the ranks' pools hold different sequences; one shared pool of all their blocks
    # (requests spread evenly over the ranks)
    free = int(mem.kv_pool // mem.kv_block_bytes) * mem.kv_groups if mem.kv_pool > 0 else 0
    bs = cfg.block_size
    n = len(w.arrival_s)
    longest = int((w.input_len + w.output_len).max())
    if math.ceil(longest / bs) > free:
        raise GpuplanError(
            "input_len",
            f"a {longest}-token request needs {math.ceil(longest / bs)} KV blocks; the pool has {free}",
            "use shorter requests, --kv fp8, or a larger --tp",
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
            "raise --max-batched-tokens (vLLM's default is 8192) or simulate fewer --requests",
        )
    computed = np.zeros(n, dtype=np.int64)  # tokens whose KV is in the cache
    generated = np.zeros(n, dtype=np.int64)
    target = prompt.copy()  # tokens to prefill (the prompt, plus generated tokens after a preemption)
    blocks = np.zeros(n, dtype=np.int64)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    waiting: deque[int] = deque()
    running = np.zeros(0, dtype=np.int64)
    gaps: list[np.ndarray] = []
    now, nxt, done, preemptions, iterations = 0.0, 0, 0, 0, 0
    last_dt = 0.0  # the last iteration's seconds
    max_seqs = cfg.max_num_seqs or n
    budget0 = cfg.max_batched_tokens
    while done < n:
        while nxt < n and arrival[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        if not len(running) and not waiting:
            now = float(arrival[nxt])
            continue
        # running sequences first, in admission order: decoders take one token, prefills a chunk
        while True:
            c, t, b = computed[running], target[running], blocks[running]
            full = np.where(c >= t, 1, t - c)
            before = np.cumsum(full) - full
            take = np.minimum(np.maximum(budget0 - before, 0), full)  # np.clip, without its overhead
            want = np.maximum(0, -(-(c + take) // bs) - b)
            wanted = int(want.sum())
            if wanted <= free or len(running) <= 1:
                break
            v = int(running[-1])  # out of blocks: preempt the newest and recompute it later
            running = running[:-1]
            free += int(blocks[v])
            blocks[v] = computed[v] = 0
            target[v] = prompt[v] + generated[v]
            waiting.appendleft(v)
            preemptions += 1
        free -= wanted
        blocks[running] += want
        decoding = c >= t
        budget = budget0 - int(take.sum())
        # then waiting requests, first come first served, while budget, seats and blocks allow
        admitted: list = []
        adm_take: list = []
        while waiting and budget > 0 and len(running) + len(admitted) < max_seqs:
            r = waiting[0]
            need = min(int(target[r] - computed[r]), budget)
            blk = -(-(int(computed[r]) + need) // bs) - int(blocks[r])
            if blk > free:
                break
            waiting.popleft()
            free -= blk
            blocks[r] += blk
            admitted.append(r)
            adm_take.append(need)
            budget -= need
        if admitted:
            running = np.concatenate([running, np.array(admitted, dtype=np.int64)])
            take = np.concatenate([take, np.array(adm_take, dtype=np.int64)])
            decoding = np.concatenate([decoding, np.zeros(len(admitted), dtype=bool)])
        sel = take > 0
        ids, tk, dec = running[sel], take[sel], decoding[sel]
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
        if left > 1 and ahead >= 2:
            # a pure decode stretch: the k iterations until the next arrival, finish or block
            # shortage, each timed as the per-iteration loop would time it, run at once
            times = sm.decode_times(n_dec, dec_ctx, left if math.isinf(ahead) else min(left, int(ahead * 1.25) + 2))
            steps = len(times)
            if nxt < n:  # the loop admits an arrival before the first step starting after it
                starts = now + np.cumsum(times) - times
                steps = max(1, int(np.searchsorted(starts, arrival[nxt], side="left")))
            if steps > 1:  # blocks for the whole stretch
                extra = np.maximum(0, -(-(computed[ids] + steps) // bs) - blocks[ids])
                while steps > 1 and extra.sum() > free:
                    steps //= 2
                    extra = np.maximum(0, -(-(computed[ids] + steps) // bs) - blocks[ids])
                if steps > 1:
                    free -= int(extra.sum())
                    blocks[ids] += extra
                    tk = np.full(len(ids), steps, dtype=np.int64)
            times = times[:steps]
        else:
            steps = 1
            it = sm.iteration(
                decode=n_dec, prefill=pre_tok, decode_context=dec_ctx, prefill_context=pre_ctx, prefill_seqs=pre_done
            )
            times = np.array([it.seconds])
        t0, last_dt = float(times[0]), float(times[-1])
        queued_area += len(waiting) * t0  # a stretch runs only with nobody waiting
        start, now = now, now + float(times.sum())
        iterations += steps
        if iterations > max_iterations:
            raise GpuplanError(
                "requests",
                f"the simulation passed {max_iterations:,} engine iterations with "
                f"{n - done:,} of {n:,} requests unfinished",
                "simulate fewer --requests, or a rate the engine can keep up with",
            )
        computed[ids] += tk
        emits = dec | (computed[ids] >= target[ids])  # decoders, and prompts whose last chunk ran
        e = ids[emits]
        fresh = generated[e] == 0
        first[e[fresh]] = start + t0
        old = e[~fresh]
        if len(old):
            gaps.append(start + t0 - last[old])  # the first token of this stretch
        if steps > 1:  # every sequence's later tokens come one iteration apart
            gaps.append(np.broadcast_to(times[1:], (len(e), steps - 1)).ravel())
        generated[e] += steps
        last[e] = now
        fin = generated[running] >= out[running]
        if fin.any():
            gone = running[fin]
            free += int(blocks[gone].sum())
            blocks[gone] = 0
            finish[gone] = now
            done += len(gone)
            running = running[~fin]
            if issued < n:  # closed loop: each finished client sends its next request now
                k = min(len(gone), n - issued)
                arrival[issued : issued + k] = now
                issued += k
    itl = np.concatenate(gaps) if gaps else np.zeros(0)
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
    )


def meets(result: SimResult, ttft_slo_s: float | None, itl_slo_s: float | None) -> bool:
    p = result.percentiles()
    return (ttft_slo_s is None or p["ttft_s"]["p99"] <= ttft_slo_s) and (
        itl_slo_s is None or not p["itl_s"] or p["itl_s"]["p99"] <= itl_slo_s
    )


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
) -> tuple[float, SimResult | None]:
    """The highest Poisson rate whose p99 TTFT and ITL meet the SLO (bisection on a log scale).
    ``progress()`` is called after each simulation (at most about 14 + ``steps``)."""

    def run(rate: float) -> SimResult:
        r = simulate(d, cfg, Workload.poisson(rate, n, input_len, output_len, seed), rate)
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
