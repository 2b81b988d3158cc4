"""Disaggregated prefill and decode: separate pools of prefill (P) and decode (D) instances, their
ratio chosen to serve the most requests per GPU within a TTFT and an ITL target.

Following DistServe (Zhong et al., OSDI 2024), each phase runs on its own instances so neither
slows the other: a prefill instance runs prompts only, a decode instance decode-only iterations.

* **Prefill instance**: prompts run one after another in chunks of the batched-token budget (a
  prompt of ``input_len`` tokens takes ``D`` seconds, StepModel.prefill), so it serves 1/D
  prompts/s. Requests arrive at random, so a prompt also waits for the ones before it: DistServe
  models the prefill instance as an M/D/1 queue, mean TTFT = D + R D^2 / (2 (1 - R D)) at R
  requests/s per instance (DistServe section 3.1, eq. 1). The highest R whose TTFT (with the KV
  transfer and the first decode step) meets the target is the instance's rate.
* **KV transfer**: the prompt's KV cache moves from the P to the D instance over the scale-out
  network, each GPU sending its own TP shard through its share of the node's NICs (Mooncake,
  Qin et al. 2024; NVIDIA Dynamo's NIXL transfers): bytes per GPU / NIC bandwidth per GPU, at the
  catalog's measured network efficiency, plus one network latency.
* **Decode instance**: C sequences decode together with no prompt chunks beside them, so the
  inter-token latency is the decode step at C sequences (context: the prompt plus half the
  output). C is the largest batch whose step meets the ITL target and whose KV fits; the instance
  serves C / step / output_len requests/s.
* **Ratio**: with n_P and n_D instances the pools serve min(n_P R_P, n_D R_D) requests/s on
  (n_P + n_D) x GPUs-per-instance GPUs; the ratio is searched over small pools (DistServe
  Algorithm 1 does the same search, by simulation) for the best requests/s per GPU.

The colocated replica under the same targets (plan.py's steady state, with its prompt chunks
beside the decodes) is reported beside it, so the two can be compared per GPU and per $/M tokens;
its TTFT waits behind other prompts' prefills by the same M/D/1 mean (steady_state.prefill_wait).

Limits: both pools run one engine (the prefill pool may have its own TP degree); a prefill instance runs one prompt at a
time (prompts of a thousand tokens and more already fill the GPU; shorter ones would batch and
serve more than 1/D); the M/D/1 TTFT is a mean, not a percentile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError, require
from gpuplan.estimate.comm import efficiency
from gpuplan.serve.engines import engine
from gpuplan.serve.kv import kv_bytes_per_sequence
from gpuplan.serve.memory import max_concurrency, serve_memory
from gpuplan.serve.plan import MILLION, ServeRequest, estimate_serving
from gpuplan.serve.steady_state import prefill_wait
from gpuplan.serve.timing import Deployment, step_model
from gpuplan.specs.model import ModelSpec
from gpuplan.units import HOUR

MAX_POOL = 16  # instances per pool searched


@dataclass(frozen=True)
class PrefillPool:
    prefill_s: float  # one prompt alone (D)
    transfer_s: float  # its KV to the decode instance
    rate_per_instance: float  # requests/s one instance takes within the TTFT target
    ttft_s: float  # mean TTFT at that rate: queue + prefill + transfer + first decode step


@dataclass(frozen=True)
class DecodePool:
    batch: int  # sequences decoding together
    step_s: float  # one decode iteration = the inter-token latency
    max_batch_kv: int  # sequences the KV pool holds
    rate_per_instance: float  # requests/s


@dataclass(frozen=True)
class DisaggPlan:
    request: ServeRequest
    ttft_slo_s: float
    itl_slo_s: float
    gpus_per_instance: int  # a decode instance
    prefill_gpus_per_instance: int
    prefill: PrefillPool
    decode: DecodePool
    n_prefill: int
    n_decode: int
    requests_per_s: float
    colocated_requests_per_s_per_gpu: float | None  # the best colocated point within both targets

    @property
    def gpus(self) -> int:
        return self.n_prefill * self.prefill_gpus_per_instance + self.n_decode * self.gpus_per_instance

    @property
    def requests_per_s_per_gpu(self) -> float:
        return self.requests_per_s / self.gpus

    @property
    def cost_per_million_output_tokens(self) -> float | None:
        p = self.request.price_per_gpu_hour
        if p is None:
            return None
        return p * self.gpus / HOUR / (self.requests_per_s * self.request.output_len) * MILLION


def md1_ttft(service_s: float, rate: float) -> float:
    """Mean time in an M/D/1 queue (DistServe eq. 1): service + R D^2 / (2 (1 - R D))."""
    return service_s + prefill_wait(rate, service_s)


def kv_transfer_s(req: ServeRequest, d: Deployment, p: Deployment | None = None) -> float:
    """Seconds to move one prompt's KV from a prefill instance ``p`` (default: laid out as ``d``) to
    a decode instance ``d`` (kv_transfer_seconds of the request's prompt)."""
    return kv_transfer_seconds(req.model, req.input_len, d, p or d)


def kv_transfer_seconds(m: ModelSpec, prompt: int, d: Deployment, p: Deployment) -> float:
    """Seconds to move a ``prompt``-token KV cache of ``m`` from ``p`` to ``d``: each GPU sends or
    receives its TP shard through its NIC share, so the side with fewer GPUs sets the time."""
    e = efficiency(d.gpu)
    shard = max(
        kv_bytes_per_sequence(m, x.kv, prompt, x.tp) / x.kv_groups / x.pp for x in (p, d)
    )  # bytes through the busiest GPU's NIC
    return shard / (d.gpu.inter_bytes_per_s * e.inter_bus) + e.inter_latency_s


def prefill_deployment(d: Deployment, prefill_tp: int | None) -> Deployment:
    """The prefill instances' layout: ``d`` at ``prefill_tp`` (None: ``d``'s own). A TP the model
    cannot take is refused naming ``prefill_tp``, the field the user gave."""
    if not prefill_tp or prefill_tp == d.tp:
        return d
    try:
        return replace(d, tp=prefill_tp)
    except GpuplanError as exc:
        if exc.field != "tp":
            raise

        def named(text: str | None) -> str | None:
            return re.sub(r"\btp\b", "prefill_tp", text) if text else text

        raise GpuplanError("prefill_tp", named(exc.message) or exc.message, named(exc.fix)) from None


def plan_disaggregated(
    req: ServeRequest, ttft_slo_s: float, itl_slo_s: float, prefill_tp: int | None = None
) -> DisaggPlan:
    """Pools for ``req`` (its TP/PP for the decode instances; ``prefill_tp`` for the prefill ones,
    default the same: DistServe picks each phase's parallelism apart)."""
    require(ttft_slo_s > 0, "ttft_slo", "must be positive", "e.g. `ttft_slo=2s`")
    require(itl_slo_s > 0, "itl_slo", "must be positive", "e.g. `itl_slo=50ms`")
    m, gpu, cfg = req.model, req.gpu, req.config
    d = req.deployment()
    sm = step_model(d, engine(cfg.engine))
    length = req.input_len + req.output_len
    ctx = req.input_len + req.output_len / 2

    # decode pool: the largest batch within the ITL target and the KV pool
    kv_max = max_concurrency(serve_memory(d, cfg), d, cfg, length)
    if kv_max < 1:
        raise GpuplanError(
            "memory",
            f"{m.name} on {d.gpus} x {gpu.name} has no room for one {length}-token sequence",
            "use more `tp` or a smaller `weights` format",
        )
    seats = min(kv_max, cfg.max_num_seqs or kv_max)
    if sm.decode_step(1, ctx).seconds > itl_slo_s:
        raise GpuplanError(
            "itl_slo",
            f"one sequence alone decodes in {sm.decode_step(1, ctx).seconds * 1e3:.1f} ms, over the "
            f"{itl_slo_s * 1e3:.1f} ms target",
            "relax `itl_slo`, or use more `tp` or a faster GPU",
        )
    lo, hi = 1, seats
    while lo < hi:  # the step grows with the batch: bisect
        mid = (lo + hi + 1) // 2
        if sm.decode_step(mid, ctx).seconds <= itl_slo_s:
            lo = mid
        else:
            hi = mid - 1
    step = sm.decode_step(lo, ctx).seconds
    dec = DecodePool(lo, step, kv_max, lo / step / req.output_len)

    # prefill pool: the highest M/D/1 rate whose mean TTFT meets the target
    pd = prefill_deployment(d, prefill_tp)
    prompt = req.input_len * (1 - req.prefix_hit_rate)  # tokens the prefix cache does not cover
    service = step_model(pd, engine(cfg.engine)).prefill(prompt, cfg.max_batched_tokens).seconds
    transfer = kv_transfer_s(req, d, pd)
    fixed = transfer + sm.decode_step(1, req.input_len).seconds  # the first token comes from a decode step
    if md1_ttft(service, 0.0) + fixed > ttft_slo_s:
        raise GpuplanError(
            "ttft_slo",
            f"one prompt alone takes {(service + fixed) * 1e3:.0f} ms to its first token (prefill "
            f"{service * 1e3:.0f} ms, KV transfer {transfer * 1e3:.1f} ms), over the target",
            "relax `ttft_slo`, or use more `tp` or a faster GPU",
        )
    lo_r, hi_r = 0.0, 1.0 / service
    for _ in range(60):  # TTFT grows with the rate: bisect
        mid_r = (lo_r + hi_r) / 2
        if md1_ttft(service, mid_r) + fixed <= ttft_slo_s:
            lo_r = mid_r
        else:
            hi_r = mid_r
    pre = PrefillPool(service, transfer, lo_r, md1_ttft(service, lo_r) + fixed)

    # the ratio: the most requests/s per GPU over small pools
    best = max(
        ((n_p, n_d) for n_p in range(1, MAX_POOL + 1) for n_d in range(1, MAX_POOL + 1)),
        key=lambda x: (
            min(x[0] * pre.rate_per_instance, x[1] * dec.rate_per_instance) / (x[0] * pd.gpus + x[1] * d.gpus),
            -sum(x),
        ),
    )
    rate = min(best[0] * pre.rate_per_instance, best[1] * dec.rate_per_instance)

    colocated = None
    try:
        e = estimate_serving(replace(req, max_throughput=True, concurrency=None))
        ok = [p for p in e.curve if p.tpot_s <= itl_slo_s and p.ttft_s <= ttft_slo_s]
        if ok:
            colocated = max(p.output_tokens_per_s for p in ok) / req.output_len / d.gpus
    except GpuplanError:
        colocated = None
    return DisaggPlan(req, ttft_slo_s, itl_slo_s, d.gpus, pd.gpus, pre, dec, best[0], best[1], rate, colocated)


def to_dict(p: DisaggPlan) -> dict:
    r = p.request
    return {
        "model": r.model.name,
        "gpu": r.gpu.id,
        "tp": r.tp,
        "pp": r.pp,
        "gpus_per_instance": p.gpus_per_instance,
        "prefill_gpus_per_instance": p.prefill_gpus_per_instance,
        "input_len": r.input_len,
        "output_len": r.output_len,
        "ttft_slo_s": p.ttft_slo_s,
        "itl_slo_s": p.itl_slo_s,
        "prefill": {
            "instances": p.n_prefill,
            "prefill_s": p.prefill.prefill_s,
            "kv_transfer_s": p.prefill.transfer_s,
            "requests_per_s_per_instance": p.prefill.rate_per_instance,
            "ttft_s": p.prefill.ttft_s,
        },
        "decode": {
            "instances": p.n_decode,
            "batch": p.decode.batch,
            "itl_s": p.decode.step_s,
            "kv_max_batch": p.decode.max_batch_kv,
            "requests_per_s_per_instance": p.decode.rate_per_instance,
        },
        "ratio_p_to_d": f"{p.n_prefill}:{p.n_decode}",
        "gpus": p.gpus,
        "requests_per_s": p.requests_per_s,
        "output_tokens_per_s": p.requests_per_s * r.output_len,
        "requests_per_s_per_gpu": p.requests_per_s_per_gpu,
        "colocated_requests_per_s_per_gpu": p.colocated_requests_per_s_per_gpu,
        "price_per_gpu_hour": r.price_per_gpu_hour,
        "cost_per_million_output_tokens": p.cost_per_million_output_tokens,
    }
