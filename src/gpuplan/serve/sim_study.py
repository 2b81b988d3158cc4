"""What ``gpuplan serve-sim`` simulates: one arrival process chosen from what the user gave (a
closed loop of clients, a trace, Poisson rates and/or a burst, or the highest rate meeting an SLO),
checked for combinations that would silently drop a setting, and run (serve/sim.py).

A rate of ``inf`` is a burst, ``vllm bench serve``'s default ``--request-rate inf``: all
``requests`` sent at t = 0 and run to completion (Workload.burst)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan import inputs
from gpuplan.errors import GpuplanError
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.sim import Lengths, SimResult, Speculating, Workload, max_rate, simulate
from gpuplan.serve.sim_disagg import Pools, simulate_disaggregated
from gpuplan.serve.timing import Deployment

# Simulations the SLO search runs at most (about 14 to grow the rate, then the bisection), for a
# progress bar's length
SLO_SEARCH_STEPS = 30


def parse_rates(text: str | None) -> list[float]:
    """Poisson rates in requests per second: ``4`` or ``1,2,4,8`` (empty: none); ``inf`` (as vLLM
    spells it) is a burst, every request at t = 0, returned as ``math.inf``."""
    rates: list[float] = []
    text = text or ""
    if not text.strip():
        return rates
    for part in text.split(","):
        if part.strip().lower() == "inf":
            rates.append(math.inf)
        elif not part.strip():
            raise GpuplanError("rate", f"has an empty item in {text!r}", "write e.g. 4 or 1,2,4,8")
        else:
            try:
                # at least one request a million seconds (11.6 days): slower, the arrival times
                # outgrow the float precision of the simulated clock
                rates.append(inputs.finite(part, "rate", lo=1e-6, hi=1e6, fix="write e.g. 4 or 1,2,4,8"))
            except GpuplanError as exc:
                raise GpuplanError(
                    "rate",
                    f"cannot use {part.strip()!r} as a rate ({exc.message})",
                    "write positive requests per second, e.g. 4 or 1,2,4,8, or inf (all requests at once)",
                ) from None
    return rates


@dataclass(frozen=True)
class Study:
    """The simulations to run; exactly one arrival process: ``clients`` (closed loop), ``trace``,
    or ``rates`` (``math.inf``: a burst) and/or an SLO search (``ttft_slo_s``, ``itl_slo_s``)."""

    deployment: Deployment
    config: ServeConfig
    requests: int
    input_len: Lengths
    output_len: Lengths
    seed: int = 0
    rates: list[float] = field(default_factory=list)
    trace: Workload | None = None
    clients: int | None = None
    ttft_slo_s: float | None = None
    itl_slo_s: float | None = None
    pools: Pools | None = None  # disaggregated prefill and decode pools (sim_disagg.py); None: one replica
    spec: Speculating | None = None  # speculative decoding in every decoding replica

    @property
    def searches(self) -> bool:
        """Whether the highest rate meeting an SLO is searched for."""
        return bool(self.ttft_slo_s or self.itl_slo_s)

    def describe(self) -> tuple[str, int]:
        """(what runs, how many simulations at most), for a progress bar."""
        if self.clients is not None:
            return f"simulating {self.clients:,} clients", 1
        if self.trace is not None:
            return "simulating the trace", 1
        return f"simulating {self.requests:,} requests", len(self.rates) + (SLO_SEARCH_STEPS if self.searches else 0)

    def run(
        self, advance: Callable[[], object] = lambda: None
    ) -> tuple[list[SimResult], tuple[float, SimResult | None]]:
        """(one result per run, (highest rate meeting the SLO, its result)); ``advance()`` after each
        simulation. Without an SLO search the rate is 0 and its result None."""
        d, cfg, lin, lout = self.deployment, self.config, self.input_len, self.output_len
        results: list[SimResult] = []
        best: tuple[float, SimResult | None] = (0.0, None)
        pools, spec = self.pools, self.spec

        def sim(w: Workload, rate: float = 0.0) -> SimResult:
            if pools is not None:
                return simulate_disaggregated(d, cfg, w, pools, rate, spec=spec)
            return simulate(d, cfg, w, rate, spec=spec)

        if self.clients is not None:
            w = Workload.closed(self.requests, lin, lout, self.seed)
            results.append(simulate(d, cfg, w, clients=self.clients, spec=spec))
            advance()
        elif self.trace is not None:
            results.append(sim(self.trace))
            advance()
        else:
            for r in self.rates:
                if math.isinf(r):
                    w = Workload.burst(self.requests, lin, lout, self.seed)
                else:
                    w = Workload.poisson(r, self.requests, lin, lout, self.seed)
                results.append(sim(w, r))
                advance()
            if self.searches:
                best = max_rate(
                    d,
                    cfg,
                    self.requests,
                    lin,
                    lout,
                    self.seed,
                    self.ttft_slo_s,
                    self.itl_slo_s,
                    progress=advance,
                    sim=sim,
                )
        return results, best


def study(
    deployment: Deployment,
    config: ServeConfig,
    requests: int,
    input_len: Lengths,
    output_len: Lengths,
    seed: int,
    *,
    rates: list[float],
    trace: str | None,
    clients: int | None,
    ttft_slo_s: float | None,
    itl_slo_s: float | None,
    pools: Pools | None = None,
    spec: Speculating | None = None,
) -> Study:
    """The study of one arrival process; a combination that would silently drop a setting (a rate
    with a trace, a trace with a closed loop, ...) or no arrival process at all is refused."""
    searches = bool(ttft_slo_s or itl_slo_s)
    burst = any(math.isinf(r) for r in rates)
    if burst and clients is not None:
        # vLLM's --request-rate inf --max-concurrency N is exactly the closed loop of N clients
        raise GpuplanError(
            "concurrency",
            "`rate=inf` sends every request at t = 0; a closed loop of `concurrency` clients sets the arrivals itself",
            "drop `rate` (vLLM's `--request-rate inf --max-concurrency N` is the closed loop), or drop `concurrency`",
        )
    if burst and searches:
        raise GpuplanError(
            "ttft_slo" if ttft_slo_s else "itl_slo",
            "the SLO search raises a finite Poisson rate; `rate=inf` (a burst) has none to raise",
            "drop `ttft_slo`/`itl_slo` to run the burst, or give finite rates to search",
        )
    if trace and (rates or searches):
        # A trace brings its own arrivals: a rate or an SLO search would be silently dropped
        raise GpuplanError(
            "trace",
            "a trace sets the arrivals itself: `rate` and the SLO search do not apply",
            "drop `rate`/`ttft_slo`/`itl_slo`, or drop `trace`",
        )
    if clients is not None and (trace or rates or searches):
        # a closed loop sets its own arrivals, as a trace or a rate would
        raise GpuplanError(
            "concurrency",
            "a closed loop of `concurrency` clients sets the arrivals itself",
            "drop `rate`/`trace`/`ttft_slo`/`itl_slo`, or drop `concurrency`",
        )
    if pools is not None and clients is not None:
        raise GpuplanError(
            "concurrency",
            "a closed loop of clients across disaggregated prefill and decode pools is not simulated",
            "give `rate` (Poisson or inf) or `trace` with the pools, or drop the pools for the closed loop",
        )
    if not trace and not rates and not searches and clients is None:
        raise GpuplanError(
            "rate", "give `rate`, `trace`, or an SLO (`ttft_slo`/`itl_slo`) to search the rate", "e.g. `rate=1,2,4,8`"
        )
    return Study(
        deployment,
        config,
        requests,
        input_len,
        output_len,
        seed,
        rates=rates,
        trace=Workload.from_trace(Path(trace)) if trace else None,
        clients=clients,
        ttft_slo_s=ttft_slo_s,
        itl_slo_s=itl_slo_s,
        pools=pools,
        spec=spec,
    )
