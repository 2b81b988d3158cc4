"""The serving estimate: memory, concurrency, latency, throughput and $/M tokens for one replica.

The pieces: steady_state.py (continuous batching at one concurrency, the mean-field model, and
the closed loop past the KV pool), serve_report.py (the JSON document); this module holds the
request, checks that one sequence fits (naming the smallest layout that does when none fits), and
puts memory (memory.py), timing (timing.py), steady state, speculation and cost together. The
public names are re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from gpuplan.errors import DoesNotFit, GpuplanError, require
from gpuplan.serve.engines import engine
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import (
    ServeConfig,
    ServeMemory,
    blocks_per_sequence,
    context_limit,
    max_concurrency,
    max_context,
    serve_memory,
)
from gpuplan.serve.serve_report import to_dict
from gpuplan.serve.speculative import Speculation, check_proposer, proposer, speculation, with_speculation
from gpuplan.serve.steady_state import Point, closed_loop, compute_bound_batch, steady_state
from gpuplan.serve.timing import Deployment, Iteration, step_model
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.units import HOUR, GiB

__all__ = [
    "MILLION",
    "Point",
    "ServeEstimate",
    "ServeRequest",
    "closed_loop",
    "compute_bound_batch",
    "estimate_serving",
    "steady_state",
    "to_dict",
]

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
    mtp: bool = False  # the model's own MTP module proposes (speculative.mtp_draft)
    draft_len: int = 4
    acceptance: float = 0.7
    target_tokens_per_s: float | None = None
    target_requests_per_s: float | None = None
    tpot_slo_s: float | None = None
    ttft_slo_s: float | None = None
    dp_attention: bool = False  # MLA models: attention data-parallel over the TP ranks (SGLang)

    def deployment(self) -> Deployment:
        """The model on its GPUs in the request's weight and KV formats, TP, PP and attention layout."""
        gpu = self.gpu
        return Deployment(
            self.model,
            gpu,
            weight_format(self.weights, gpu),
            kv_format(self.kv, gpu),
            self.tp,
            self.pp,
            self.dp_attention,
        )

    def __post_init__(self) -> None:
        require(isinstance(self.input_len, int) and self.input_len >= 1, "input_len", "must be a positive integer")
        require(isinstance(self.output_len, int) and self.output_len >= 1, "output_len", "must be a positive integer")
        require(self.concurrency is None or self.concurrency >= 1, "concurrency", "must be a positive integer")
        require(
            not (self.concurrency and self.max_throughput),
            "concurrency",
            "`concurrency` and `max_throughput` are exclusive",
            "pass one of them",
        )
        require(0 <= self.prefix_hit_rate < 1, "prefix_hit_rate", f"must be in [0, 1), got {self.prefix_hit_rate}")
        require(
            not (self.target_tokens_per_s and self.target_requests_per_s),
            "target_rps",
            "`target_rps` and `target_tokens_per_s` are two ways to state one target",
            "pass one of them (requests/s x output_len = tokens/s)",
        )
        check_proposer(self.model, self.draft_model, self.ngram, self.mtp)
        # The SLOs pick the batch size that serves a target: without a target they would be ignored
        require(
            (self.tpot_slo_s is None and self.ttft_slo_s is None)
            or bool(self.target_tokens_per_s)
            or bool(self.target_requests_per_s),
            "itl_slo" if self.tpot_slo_s is not None else "ttft_slo",
            "a latency target needs a throughput to serve",
            "add `target_rps` or `target_tokens_per_s` (or use serve-sim `itl_slo`/`ttft_slo` to find the rate)",
        )


@dataclass(frozen=True)
class ServeEstimate:
    request: ServeRequest
    deployment: Deployment
    memory: ServeMemory
    kv_needed: float  # bytes on one GPU for the planned sequences (the tokens each holds, Engine.held_tokens)
    max_concurrency: int  # sequences the pool holds at full length
    seats: int  # sequences the pool keeps running in a steady state (more where KV is allocated on demand)
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


# The highest memory fraction a fix proposes: advice, not physics. Users raise vLLM's
# gpu_memory_utilization to about 0.95 to fit a model on fewer GPUs; beyond it the little left
# outside the pool is what the profiling run did not see.
MOST_MEMORY_FRACTION = 0.95


def _gpus(n: int) -> str:
    return "1 GPU" if n == 1 else f"{n} GPUs"


def _fraction_fix(req: ServeRequest, cfg: ServeConfig, length: int) -> str | None:
    """The smallest memory fraction, up to ``MOST_MEMORY_FRACTION`` in steps of 0.01, at which the
    requested GPUs hold one ``length``-token sequence: a fix that costs no GPU."""
    d = req.deployment()
    start = math.floor(cfg.gpu_memory_utilization * 100) + 1
    for pct in range(start, round(MOST_MEMORY_FRACTION * 100) + 1):
        f = pct / 100
        bigger = replace(cfg, gpu_memory_utilization=f)
        if max_concurrency(serve_memory(d, bigger), d, bigger, length) >= 1:
            same = "the same GPU" if d.gpus == 1 else f"the same {d.gpus} GPUs"
            return f"`gpu_memory_utilization={f:.2f}` ({same})"
    return None


def _smallest_fix(req: ServeRequest, cfg: ServeConfig) -> str:
    """What holds one sequence: a larger memory fraction on the same GPUs if one does, then the
    fewest GPUs (tp within a node, then pp) in this weight format and in a smaller one."""
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

    fraction = _fraction_fix(req, cfg, length)
    fixes = [fraction] if fraction else []
    sizes: list[float] = []
    for fmt in dict.fromkeys((req.weights, "fp8", "int8", "int4-awq")):
        try:
            bits = weight_format(fmt, gpu).bits
        except GpuplanError:  # a format this GPU cannot run (fp8 on an A100) is no fix to offer
            continue
        if any(abs(bits - b) < 0.5 for b in sizes):  # int8 after fp8: the same bytes, the same GPUs
            continue
        sizes.append(bits)
        found = fewest(fmt)
        if found:
            tp, pp = found
            flags = (
                ([f"`weights={fmt}`"] if fmt != req.weights else [])
                + ([f"`tp={tp}`"] if tp > 1 else [])
                + ([f"`pp={pp}`"] if pp > 1 else [])
            )
            fixes.append(" ".join(flags) + f" ({_gpus(tp * pp)})")
        if len(fixes) == 2 + bool(fraction):
            break
    return "use " + " or ".join(fixes) if fixes else "use a GPU with more memory"


def estimate_serving(req: ServeRequest) -> ServeEstimate:
    m, gpu, cfg = req.model, req.gpu, req.config
    d = req.deployment()
    limit = context_limit(m, cfg)
    length = req.input_len + req.output_len
    if length > limit:
        raise GpuplanError(
            "input_len",
            f"input + output = {length} tokens is longer than {m.name}'s maximum context of {limit}",
            f"use `input_len` + `output_len` <= {limit}",
        )
    mem = serve_memory(d, cfg)
    prop = proposer(d, req.draft_model, req.ngram, req.mtp)
    if prop is not None:  # the proposer's weights (and an MTP module's KV) come out of the pool
        mem = replace(
            mem,
            weights=mem.weights + prop.weight_bytes,
            kv_pool=mem.kv_pool - prop.weight_bytes,
            kv_block_bytes=mem.kv_block_bytes * prop.kv_scale,
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
    eng = engine(cfg.engine)
    # the tokens a running sequence holds: all of them where the engine reserves the whole length,
    # its prompt and half its output on average where it allocates blocks as tokens come (vLLM)
    held = eng.held_tokens(req.input_len, req.output_len)  # at most the whole length: at least conc_max seats
    pool_seats = max_concurrency(mem, d, cfg, held)
    seats = pool_seats if not cfg.max_num_seqs else min(pool_seats, cfg.max_num_seqs)
    clients = seats if req.max_throughput else (req.concurrency or 1)
    conc = min(clients, seats)  # running; the rest of a closed loop waits in the queue
    sm = step_model(d, eng)
    hit = req.prefix_hit_rate
    context = req.input_len + req.output_len / 2

    speculate = None  # a proposer's decode steps speculated, inside the steady state (before the API server's pace)
    if prop is not None:
        draft = prop.draft

        def speculate(p: Point) -> Point:
            return with_speculation(p, sm, draft, context, req.draft_len, req.acceptance)

    method = prop.method if prop is not None else None

    def at(batch: int) -> Point:  # the steady state at `batch` clients
        return steady_state(sm, cfg, batch, req.input_len, req.output_len, hit, method, speculate)

    point = closed_loop(at(conc), clients, req.output_len)
    curve, b = [], 1
    while b < pool_seats:
        curve.append(at(b))
        b *= 2
    curve.append(at(pool_seats))

    spec = None
    if prop is not None:
        spec = speculation(
            sm, prop.draft, conc, context, req.draft_len, req.acceptance, pool_seats, "mtp" if req.mtp else None
        )

    # the KV of the sequences that run; the queued hold none until they are admitted
    kv_needed = math.ceil(point.running / d.kv_groups) * blocks_per_sequence(d, cfg, held) * mem.kv_block_bytes
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
                "relax `tpot_slo`/`ttft_slo`, or use more `tp` or a faster GPU",
            )
        best = max(ok, key=lambda p: p.output_tokens_per_s)
        gpus_needed = math.ceil(target / best.output_tokens_per_s) * d.gpus

    return ServeEstimate(
        request=req,
        deployment=d,
        memory=mem,
        kv_needed=kv_needed,
        max_concurrency=conc_max,
        seats=pool_seats,
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
