"""The serving estimate: memory, concurrency, latency, throughput and $/M tokens for one replica.

Steady state of continuous batching with ``C`` sequences (a mean-field model of what serve-sim
simulates request by request): every iteration each decoding sequence adds one token and, to keep
``C`` in flight, prompts of new sequences are prefilled at the rate sequences finish, i.e. D x
input/output prompt tokens per iteration for D decoding sequences (less the prefix-cache hits).
The batched-token budget caps D at budget x output / (input + output). Output tokens/s = D / t_iter;
the inter-token latency a user sees (TPOT) is an iteration with the other sequences' prefill
chunks; TTFT is the prompt's own prefill in chunks beside D - 1 decodes. Max-throughput mode
reserves every sequence's full input + output length up front, as TensorRT-LLM's default
GUARANTEED_NO_EVICT scheduler does.

A concurrency above what the KV pool (or ``max_num_seqs``) holds is a closed loop of N clients, the
way benchmark_serving.py / genai-perf run ``--concurrency N``: the engine runs at its capacity and
the other requests wait in its queue (vLLM's ``waiting`` deque, TensorRT-LLM's pending requests).
Little's law on the queue alone (Little 1961) gives the wait: N - running requests queue, and they
leave it at the completion rate X, so each waits (N - running) / X, added to its TTFT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from gpuplan.errors import DoesNotFit, GpuplanError, require
from gpuplan.estimate.comm import efficiency
from gpuplan.serve.engines import engine
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.kv import kv_bytes_per_sequence, kv_bytes_per_token
from gpuplan.serve.memory import (
    ServeConfig,
    ServeMemory,
    blocks_per_sequence,
    max_concurrency,
    max_context,
    serve_memory,
)
from gpuplan.serve.speculative import Speculation, speculation
from gpuplan.serve.timing import Deployment, Iteration, StepModel, step_model
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.units import HOUR, GiB

MILLION = 1e6


@dataclass(frozen=True)
class ServeRequest:
    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    weights: str = "bf16"
    kv: str = "bf16"
    input_len: int = 2048
    output_len: int = 256
    concurrency: int | None = None  # None with max_throughput False: one sequence
    max_throughput: bool = False
    config: ServeConfig = field(default_factory=ServeConfig)
    price_per_gpu_hour: float | None = None
    prefix_hit_rate: float = 0.0
    draft_model: ModelSpec | None = None
    ngram: bool = False
    draft_len: int = 4
    acceptance: float = 0.7
    target_tokens_per_s: float | None = None
    target_requests_per_s: float | None = None
    tpot_slo_s: float | None = None
    ttft_slo_s: float | None = None
    dp_attention: bool = False  # MLA models: attention data-parallel over the TP ranks (SGLang)

    def __post_init__(self) -> None:
        require(isinstance(self.input_len, int) and self.input_len >= 1, "input_len", "must be a positive integer")
        require(isinstance(self.output_len, int) and self.output_len >= 1, "output_len", "must be a positive integer")
        require(self.concurrency is None or self.concurrency >= 1, "concurrency", "must be a positive integer")
        require(
            not (self.concurrency and self.max_throughput),
            "concurrency",
            "--concurrency and --max-throughput are exclusive",
            "pass one of them",
        )
        require(0 <= self.prefix_hit_rate < 1, "prefix_hit_rate", f"must be in [0, 1), got {self.prefix_hit_rate}")
        require(not (self.ngram and self.draft_model), "draft", "pick a draft model or n-gram speculation, not both")
        # A draft proposes token ids the target verifies: both must share one vocabulary
        require(
            self.draft_model is None or self.draft_model.vocab_size == self.model.vocab_size,
            "draft_model",
            f"{getattr(self.draft_model, 'name', '')} has a vocabulary of {getattr(self.draft_model, 'vocab_size', 0):,}"
            f" tokens, {self.model.name} of {self.model.vocab_size:,}",
            "use a draft model of the same family (same tokenizer)",
        )
        # The SLOs pick the batch size that serves a target: without a target they would be ignored
        require(
            (self.tpot_slo_s is None and self.ttft_slo_s is None)
            or bool(self.target_tokens_per_s)
            or bool(self.target_requests_per_s),
            "tpot_slo" if self.tpot_slo_s is not None else "ttft_slo",
            "a latency target needs a throughput to serve",
            "add --target-rps or --target-tokens-per-s (or use serve-sim --itl-slo/--ttft-slo to find the rate)",
        )


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

    @property
    def running(self) -> int:
        return self.concurrency - self.queued


@dataclass(frozen=True)
class ServeEstimate:
    request: ServeRequest
    deployment: Deployment
    memory: ServeMemory
    kv_needed: float  # bytes on one GPU for the planned sequences at full length
    max_concurrency: int
    max_context_at_concurrency: int
    model_max_len: int
    point: Point
    decode_step: Iteration
    prefill: Iteration
    curve: tuple[Point, ...]
    compute_bound_batch: float
    speculation: Speculation | None
    offload_s: float  # time to bring one paused sequence's KV back from host memory
    gpus_needed: int | None

    @property
    def cost_per_million_output_tokens(self) -> float | None:
        p = self.request.price_per_gpu_hour
        if p is None:
            return None
        return p * self.deployment.gpus / HOUR * self.point.decode_share / self.point.output_tokens_per_s * MILLION

    @property
    def cost_per_million_input_tokens(self) -> float | None:
        p = self.request.price_per_gpu_hour
        if p is None:
            return None
        return p * self.deployment.gpus / HOUR * (1 - self.point.decode_share) / self.point.input_tokens_per_s * MILLION


def steady_state(
    sm: StepModel, cfg: ServeConfig, concurrency: int, input_len: int, output_len: int, hit: float = 0.0
) -> Point:
    fresh = input_len * (1 - hit)  # prompt tokens the prefix cache does not cover
    per_token_prefill = fresh / output_len  # prompt tokens to prefill per output token
    budget = cfg.max_batched_tokens
    d = min(float(concurrency), budget / (1 + per_token_prefill))
    if cfg.max_num_seqs:
        d = min(d, cfg.max_num_seqs)
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

    full = mixed(d, d * per_token_prefill)
    seen = mixed(d, (d - 1) * per_token_prefill) if d > 1 else sm.decode_step(d, ctx)
    alone = sm.decode_step(d, ctx).seconds
    # TTFT: the prompt in chunks of what the budget leaves beside the other sequences' decodes
    chunk = max(cfg.block_size, budget - math.ceil(d - 1))
    ttft, done = 0.0, 0.0
    while done < fresh:
        n = min(chunk, fresh - done)
        ttft += sm.iteration(
            decode=d - 1,
            prefill=n,
            decode_context=ctx,
            prefill_context=input_len * hit + done + n / 2,
            prefill_seqs=1 if done + n >= fresh else 0,
        ).seconds
        done += n
    return Point(
        concurrency=concurrency,
        decoding=d,
        iteration_s=full.seconds,
        tpot_s=seen.seconds,
        ttft_s=ttft,
        output_tokens_per_s=d / full.seconds,
        input_tokens_per_s=d * input_len / output_len / full.seconds,
        decode_share=min(1.0, alone / full.seconds),
    )


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


def _smallest_fix(req: ServeRequest, cfg: ServeConfig) -> str:
    """The fewest GPUs (tp within a node, then pp) that hold one sequence in this weight format, and
    the same in a smaller format."""
    m, gpu = req.model, req.gpu
    length = req.input_len + req.output_len

    def fewest(fmt: str) -> tuple[int, int] | None:
        layouts = sorted(
            (
                (tp, pp)
                for tp in (1, 2, 4, 8, 16, 32, 64, 72)
                for pp in (1, 2, 4, 8, 16)
                if tp <= gpu.fast_domain and m.num_heads % tp == 0 and pp <= m.num_layers
            ),
            key=lambda x: (x[0] * x[1], x[1]),
        )
        for tp, pp in layouts:
            try:
                d = Deployment(m, gpu, weight_format(fmt, gpu), kv_format(req.kv, gpu), tp, pp)
            except GpuplanError:
                continue
            if max_concurrency(serve_memory(d, cfg), d, cfg, length) >= 1:
                return tp, pp
        return None

    fixes = []
    for fmt in dict.fromkeys((req.weights, "fp8", "int8", "int4-awq")):
        found = fewest(fmt)
        if found:
            tp, pp = found
            flags = (
                ([f"--weights {fmt}"] if fmt != req.weights else [])
                + ([f"--tp {tp}"] if tp > 1 else [])
                + ([f"--pp {pp}"] if pp > 1 else [])
            )
            fixes.append(" ".join(flags) + f" ({tp * pp} GPUs)")
        if len(fixes) == 2:
            break
    return "use " + " or ".join(fixes) if fixes else "use a GPU with more memory"


def estimate_serving(req: ServeRequest) -> ServeEstimate:
    m, gpu, cfg = req.model, req.gpu, req.config
    d = Deployment(m, gpu, weight_format(req.weights, gpu), kv_format(req.kv, gpu), req.tp, req.pp, req.dp_attention)
    limit = cfg.max_model_len or m.max_position_embeddings
    length = req.input_len + req.output_len
    if length > limit:
        raise GpuplanError(
            "input_len",
            f"input + output = {length} tokens is longer than {m.name}'s maximum context of {limit}",
            f"use --input-len + --output-len <= {limit}",
        )
    mem = serve_memory(d, cfg)
    draft = None
    if req.draft_model is not None:
        dd = Deployment(req.draft_model, gpu, d.weights, d.kv, req.tp, 1)
        draft = step_model(dd)
        extra = serve_memory(dd, cfg).weights
        mem = ServeMemory(
            mem.capacity,
            mem.budget,
            mem.weights + extra,
            mem.activations,
            mem.other,
            mem.kv_pool - extra,
            mem.kv_block_bytes,
            mem.layers,
            mem.kv_groups,
        )
    conc_max = max_concurrency(mem, d, cfg, length)
    if conc_max < 1:
        short = (
            mem.kv_pool if mem.kv_pool < 0 else mem.kv_pool - blocks_per_sequence(d, cfg, length) * mem.kv_block_bytes
        )
        raise DoesNotFit(
            "memory",
            f"{m.name} in {req.weights} on {d.gpus} x {gpu.name} (tp={req.tp}, pp={req.pp}) "
            f"has no room for one {length}-token sequence: short by {-short / GiB:.2f} GiB per GPU",
            _smallest_fix(req, cfg),
        )
    seats = conc_max if not cfg.max_num_seqs else min(conc_max, cfg.max_num_seqs)
    clients = seats if req.max_throughput else (req.concurrency or 1)
    conc = min(clients, seats)  # running; the rest of a closed loop waits in the queue
    sm = step_model(d, engine(cfg.engine))
    hit = req.prefix_hit_rate
    point = closed_loop(steady_state(sm, cfg, conc, req.input_len, req.output_len, hit), clients, req.output_len)
    curve, b = [], 1
    while b < conc_max:
        curve.append(steady_state(sm, cfg, b, req.input_len, req.output_len, hit))
        b *= 2
    curve.append(steady_state(sm, cfg, conc_max, req.input_len, req.output_len, hit))

    spec = None
    if draft is not None or req.ngram:
        spec = speculation(sm, draft, conc, req.input_len + req.output_len / 2, req.draft_len, req.acceptance, conc_max)

    kv_needed = math.ceil(conc / d.kv_groups) * blocks_per_sequence(d, cfg, length) * mem.kv_block_bytes
    offload = blocks_per_sequence(d, cfg, length) * mem.kv_block_bytes / gpu.host_bytes_per_s

    gpus_needed = None
    target = req.target_tokens_per_s or (
        req.target_requests_per_s * req.output_len if req.target_requests_per_s else None
    )
    if target:
        ok = [
            p
            for p in curve + [point]
            if (req.tpot_slo_s is None or p.tpot_s <= req.tpot_slo_s)
            and (req.ttft_slo_s is None or p.ttft_s <= req.ttft_slo_s)
        ]
        if not ok:
            raise GpuplanError(
                "tpot_slo",
                "no batch size meets the latency target, not even one sequence",
                "relax --tpot-slo/--ttft-slo, or use more --tp or a faster GPU",
            )
        best = max(ok, key=lambda p: p.output_tokens_per_s)
        gpus_needed = math.ceil(target / best.output_tokens_per_s) * d.gpus

    return ServeEstimate(
        request=req,
        deployment=d,
        memory=mem,
        kv_needed=kv_needed,
        max_concurrency=conc_max,
        max_context_at_concurrency=max_context(mem, d, cfg, conc, limit),
        model_max_len=limit,
        point=point,
        decode_step=sm.decode_step(1, req.input_len),
        prefill=sm.prefill(req.input_len * (1 - hit), cfg.max_batched_tokens),
        curve=tuple(curve),
        compute_bound_batch=compute_bound_batch(d),
        speculation=spec,
        offload_s=offload,
        gpus_needed=gpus_needed,
    )


def _point(p: Point) -> dict:
    return {
        "concurrency": p.concurrency,
        "running": p.running,
        "queued": p.queued,
        "queue_wait_s": p.queue_wait_s,
        "decoding": p.decoding,
        "iteration_s": p.iteration_s,
        "tpot_s": p.tpot_s,
        "ttft_s": p.ttft_s,
        "output_tokens_per_s": p.output_tokens_per_s,
    }


def to_dict(e: ServeEstimate) -> dict:
    r, d, mem, p = e.request, e.deployment, e.memory, e.point
    m, cfg = r.model, r.config
    length = r.input_len + r.output_len
    paged = blocks_per_sequence(d, cfg, length) * mem.kv_block_bytes
    contiguous = kv_bytes_per_sequence(m, d.kv, e.model_max_len, d.tp) * mem.layers / m.num_layers
    exact = kv_bytes_per_sequence(m, d.kv, length, d.tp) * mem.layers / m.num_layers
    out = {
        "model": m.name,
        "model_notes": list(m.notes),
        "gpu": d.gpu.id,
        "tp": d.tp,
        "pp": d.pp,
        "dp_attention": d.dp_attention,
        "gpus": d.gpus,
        "weights": d.weights.name,
        "kv": d.kv.name,
        "input_len": r.input_len,
        "output_len": r.output_len,
        "engine": {
            "name": cfg.engine,
            "memory_rule": engine(cfg.engine).memory_rule,
            "max_batched_tokens": cfg.max_batched_tokens,
            "max_num_seqs": cfg.max_num_seqs,
            "host_note": engine(cfg.engine).note,
        },
        "memory": {
            "per_gpu": {
                "weights": mem.weights,
                "kv_cache": e.kv_needed,
                "activations": mem.activations,
                "other": mem.other,
                "total": mem.weights + e.kv_needed + mem.activations + mem.other,
            },
            "kv_pool": max(0.0, mem.kv_pool),
            "budget": mem.budget,
            "capacity": mem.capacity,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "block_size": cfg.block_size,
            "fits": e.kv_needed <= mem.kv_pool,
        },
        "kv_bytes_per_token": kv_bytes_per_token(m, d.kv),
        "kv_bytes_per_token_per_gpu": kv_bytes_per_token(m, d.kv, d.tp) * mem.layers / m.num_layers,
        "kv_bytes_per_sequence_per_gpu": exact,
        "max_concurrency": e.max_concurrency,
        "max_context_at_concurrency": e.max_context_at_concurrency,
        "concurrency": p.concurrency,
        "running": p.running,
        "queued": p.queued,
        "queue_wait_s": p.queue_wait_s,
        "paging": {
            "paged_bytes_per_sequence": paged,
            "paged_waste_fraction": 1 - exact / paged if paged else 0.0,
            "contiguous_bytes_per_sequence": contiguous,
            "contiguous_max_concurrency": int(max(0.0, mem.kv_pool) // contiguous) * mem.kv_groups if contiguous else 0,
            "contiguous_waste_fraction": 1 - exact / contiguous if contiguous else 0.0,
        },
        "ttft_s": p.ttft_s,
        "tpot_s": p.tpot_s,
        "e2e_s": p.ttft_s + (r.output_len - 1) * p.tpot_s,
        "output_tokens_per_s": p.output_tokens_per_s,
        "input_tokens_per_s": p.input_tokens_per_s,
        "output_tokens_per_s_per_gpu": p.output_tokens_per_s / d.gpus,
        "decode_step_s": e.decode_step.seconds,
        "decode_step_parts_s": e.decode_step.parts,
        "prefill_s": e.prefill.seconds,
        "prefill_parts_s": e.prefill.parts,
        "compute_bound_batch": e.compute_bound_batch,
        "throughput_curve": [_point(c) for c in e.curve],
        "price_per_gpu_hour": r.price_per_gpu_hour,
        "cost_per_million_input_tokens": e.cost_per_million_input_tokens,
        "cost_per_million_output_tokens": e.cost_per_million_output_tokens,
        "prefix_hit_rate": r.prefix_hit_rate,
        "kv_offload": {
            "bytes_per_sequence_per_gpu": paged,
            "host_link_bytes_per_s": d.gpu.host_bytes_per_s,
            "swap_in_s": e.offload_s,
        },
    }
    if e.speculation is not None:
        s = e.speculation
        out["speculative"] = {
            "method": s.method,
            "draft_len": s.draft_len,
            "acceptance": s.acceptance,
            "expected_tokens_per_pass": s.expected_tokens,
            "speedup": s.speedup,
            "stops_paying_at_batch": s.break_even_batch,
            "curve": [{"batch": b, "speedup": x} for b, x in s.curve],
        }
    if e.gpus_needed is not None:
        out["gpus_needed"] = e.gpus_needed
    return out
