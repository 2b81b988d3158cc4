"""Disaggregated prefill and decode, simulated: ``n_prefill`` prefill instances and ``n_decode``
decode instances, each a replica run by the serving simulation (sim.py), the requests handed from
the first pool to the second.

* **Prefill pool**: a request goes to the prefill instances in turn (round robin in arrival order,
  as NVIDIA Dynamo's and vLLM's P/D proxies route by default), which runs its prompt in chunks of
  the batched-token budget beside the other prompts queued there and sends its first token when
  the last chunk runs (the TTFT).
* **KV transfer**: the prompt's KV then moves to a decode instance over the scale-out network
  (disagg.kv_transfer_s: each GPU's TP shard through its NIC share, plus one network latency).
* **Decode pool**: the request joins the decode instances in turn, in the order its KV arrives;
  the instance admits it when its KV blocks fit (the prompt's, as the engine allocates them for
  the transfer) and decodes it with no prompt chunks beside it (sim.simulate ``prefilled_s``).
  The gap before its second token holds the transfer and the wait for a seat.

The plan for the same pools at steady state is ``serve --disaggregate`` (disagg.py, DistServe's
M/D/1 prefill queue); this runs the arrivals one by one, so queues, bursts and percentiles come
from the requests themselves. Limits: every prefill instance and every decode instance is one
replica of its deployment; the router does not look at the instances' load; a closed loop of
clients is not simulated across the two pools.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplan.errors import require
from gpuplan.serve.disagg import kv_transfer_seconds
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.sim import Speculating, simulate
from gpuplan.serve.sim_report import SimResult
from gpuplan.serve.sim_workload import Workload
from gpuplan.serve.timing import Deployment


@dataclass(frozen=True)
class Pools:
    """``n_prefill`` instances of ``prefill`` (run under ``prefill_config``: its TP may differ) beside
    ``n_decode`` instances of the decode deployment."""

    prefill: Deployment
    prefill_config: ServeConfig
    n_prefill: int
    n_decode: int

    def __post_init__(self) -> None:
        for name in ("n_prefill", "n_decode"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name, f"must be a positive integer, got {value!r}")

    def gpus(self, decode: Deployment) -> int:
        return self.n_prefill * self.prefill.gpus + self.n_decode * decode.gpus


def kv_transfer_times(decode: Deployment, prefill: Deployment, input_len: np.ndarray) -> np.ndarray:
    """Seconds to move each prompt's KV from its prefill to its decode instance
    (disagg.kv_transfer_seconds, once per distinct prompt length)."""
    times = {int(x): kv_transfer_seconds(decode.model, int(x), decode, prefill) for x in np.unique(input_len)}
    return np.array([times[int(x)] for x in input_len])


def simulate_disaggregated(
    d: Deployment,
    cfg: ServeConfig,
    w: Workload,
    pools: Pools,
    rate: float = 0.0,
    bulk: bool = True,
    spec: Speculating | None = None,
) -> SimResult:
    """Run the requests of ``w`` through the prefill pool, the KV transfer and the decode pool
    (``spec``: the decode instances speculate)."""
    n = len(w.arrival_s)
    order = np.argsort(w.arrival_s, kind="stable")
    first = np.full(n, np.nan)
    parts: list[SimResult] = []
    spans: list[float] = []  # each instance's simulated span, to average the queues over
    for i in range(pools.n_prefill):
        idx = order[i :: pools.n_prefill]
        if not len(idx):
            continue
        sub = Workload(w.arrival_s[idx], w.input_len[idx], np.ones(len(idx), dtype=np.int64))
        r = simulate(pools.prefill, pools.prefill_config, sub, rate / pools.n_prefill, bulk=bulk)
        first[idx] = w.arrival_s[idx] + r.ttft_s
        parts.append(r)
        spans.append(r.makespan_s)
    finish = first.copy()  # a request of one output token ends with its prefill
    more = np.flatnonzero(w.output_len > 1)
    ready = np.full(n, np.nan)  # when each prompt's KV reaches the decode pool
    ready[more] = first[more] + kv_transfer_times(d, pools.prefill, w.input_len[more])
    by_ready = more[np.argsort(ready[more], kind="stable")]
    itl, itl_w = [], []
    for j in range(pools.n_decode):
        idx = by_ready[j :: pools.n_decode]
        if not len(idx):
            continue
        arrive = ready[idx]
        sub = Workload(arrive, w.input_len[idx], w.output_len[idx])
        r = simulate(d, cfg, sub, rate / pools.n_decode, bulk=bulk, prefilled_s=first[idx], spec=spec)
        finish[idx] = arrive + r.e2e_s
        itl.append(r.itl_s)
        itl_w.append(r.itl_weight)
        parts.append(r)
        spans.append(r.makespan_s)
    makespan = float(np.nanmax(finish) - w.arrival_s.min())
    many = w.output_len > 1
    return SimResult(
        rate=rate,
        requests=n,
        makespan_s=makespan,
        ttft_s=first - w.arrival_s,
        e2e_s=finish - w.arrival_s,
        itl_s=np.concatenate(itl) if itl else np.zeros(0),
        itl_weight=np.concatenate(itl_w) if itl_w else np.zeros(0),
        output_tokens=int(w.output_len.sum()),
        preemptions=sum(r.preemptions for r in parts),
        iterations=sum(r.iterations for r in parts),
        # requests waiting in either pool, averaged over the whole run
        queued_mean=sum(r.queued_mean * s for r, s in zip(parts, spans, strict=True)) / makespan if makespan else 0.0,
        arrival_s=w.arrival_s,
        tpot_s=(finish[many] - first[many]) / (w.output_len[many] - 1),
        input_tokens=int(w.input_len.sum()),
    )
