"""Held-out serving throughput and latency against published engine benchmarks (``validate serving-held-out``).

Kept apart from the shared rows (validate.py) and from the KV-pool logs (validate_kv.py): these rows
were gathered after the engine profiles (engines.py), all-reduce model and closed-loop queueing were
built, and nothing was fitted to them. Each row names its source (URL, with the commit for files in a
repository) and states its engine, model, GPU, TP, weight and KV formats, input/output lengths and
its load: a closed-loop concurrency (or a static batch), ``max`` (offline maximum throughput),
``burst`` (``vllm bench serve --request-rate inf``: all ``num_prompts`` requests sent at t = 0) or
``poisson`` (``vllm bench serve --request-rate R``: ``num_prompts`` requests with exponential gaps
of mean 1/R, an open-loop point of a latency-vs-rate curve).

Columns: id, source, url, tag, engine, engine_version, model, gpu, gpus, tp, precision,
kv_precision, input_len, output_len (a ``burst`` or ``poisson`` row may give a distribution in
serve-sim's syntax, ``1-1913``: uniform, as SGLang's bench_serving draws random lengths without
``--random-range-ratio``), concurrency (a number, ``max``, ``burst`` or ``poisson``),
num_prompts (the requests of a ``burst`` or ``poisson`` row, required there; empty elsewhere),
rate (a ``poisson`` row's mean request rate in requests/s, required there; empty elsewhere),
gpu_memory_utilization, max_model_len (empty: the engine's default), metric, value, note. The
``num_prompts`` and ``rate`` columns may be absent from an older file (read as empty).

Every row is predicted the way ``gpuplan serve`` predicts it: ``engine_config`` with the row's
engine and the memory fraction / ``max_model_len`` it states (the engine's default where it states
none), then ``estimate_serving``; the metric is read from the same document ``serve --json`` prints:

* ``output_tokens_per_s`` (``_per_gpu``: divided by the GPUs), the point's throughput;
* ``ttft_ms`` and ``itl_ms``: the point's TTFT (queue wait included beyond the capacity) and TPOT;
* ``mean_itl_ms`` (serve-sim rows): the mean over every inter-token gap of every request, which
  SGLang's bench_serving prints as "Mean ITL" (its ``np.mean`` of all the requests' ``itl`` lists
  pooled): token-weighted, where TPOT weighs each request once;
* ``e2e_latency_ms``: ``ttft + (output - 1) x tpot``, the request's end-to-end latency.

``burst`` rows are a transient, not a steady state (prompts queue, prefill waves, then a decode
tail as requests drain), so they run through serve-sim instead (serve/sim.py, ``Workload.burst``):
the row's ``num_prompts`` requests of fixed lengths at t = 0, under the engine's own scheduler
defaults (its ``max_num_seqs``: the benchmark sets none), run to completion; the metric is what the
benchmark prints (vllm/benchmarks/serve.py ``calculate_metrics``): output tokens over the duration
(first send to last completion), and the MEAN TTFT, TPOT (as ``itl_ms``) and end-to-end latency.

``poisson`` rows run through serve-sim the same way at their rate: ``Workload.poisson(rate,
num_prompts, ...)`` with the fixed seed ``SEED`` (numpy's default_rng; vllm/benchmarks/serve.py
``get_request`` draws its gaps from a gamma distribution of shape ``burstiness`` = 1, i.e.
exponential, with its own seed, so the arrival times are a different draw of the same process),
and the same metrics (means over the requests). The burst and Poisson rows of one configuration
form a latency-vs-rate curve; ``summary`` groups rows by load (``by_load``).

``max`` rows run as validate.py runs its TensorRT-LLM rows: no ``max_num_seqs`` cap (trtllm-bench
picks the batch by its own heuristic, which the tables do not state), so the KV pool decides. A row
gpuplan refuses (no room for one sequence) is reported as a refusal, the engine having run it.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.engines import engine_config
from gpuplan.serve.plan import ServeRequest, estimate_serving, to_dict
from gpuplan.serve.sim import Lengths, Workload, simulate
from gpuplan.serve.validate import row_request

CSV = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "held_out" / "serving_runs.csv"
SEED = 0  # serve-sim's arrival and length draws for poisson rows: reproducible, never tuned
LOADS = ("steady", "burst", "poisson")
METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "ttft_ms", "itl_ms", "mean_itl_ms", "e2e_latency_ms")


@dataclass(frozen=True)
class HeldOutRow:
    id: str
    source: str
    url: str
    tag: str
    engine: str
    gpu: str
    tp: int
    metric: str
    measured: float
    request: ServeRequest
    num_prompts: int | None = None  # a burst or poisson row: this many requests (serve-sim)
    rate: float | None = None  # a poisson row: mean requests/s; a burst row: inf
    # a burst or poisson row's length distributions (serve-sim's; None on a steady row)
    input_lengths: Lengths | None = None
    output_lengths: Lengths | None = None

    @property
    def load(self) -> str:
        """``steady`` (the analytic model), ``burst`` or ``poisson`` (serve-sim)."""
        if self.num_prompts is None:
            return "steady"
        return "burst" if self.rate is not None and math.isinf(self.rate) else "poisson"


@dataclass(frozen=True)
class HeldOutCheck:
    row: HeldOutRow
    predicted: float | None  # None: gpuplan refused a configuration the engine ran
    refusal: str = ""

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.row.measured - 1


def load_rows(path: Path = CSV) -> list[HeldOutRow]:
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] not in METRICS:
                raise ValueError(f"unknown metric {r['metric']!r} in {r['id']}")
            gpu = catalog.gpu(r["gpu"])
            tp = int(r["tp"])
            frac = float(r["gpu_memory_utilization"]) if r["gpu_memory_utilization"] else None
            mml = int(r["max_model_len"]) if r["max_model_len"] else None
            cfg = engine_config(r["engine"], gpu, tp, frac, max_model_len=mml)
            conc = r["concurrency"]
            prompts, rate = _sim_load(r)
            if conc == "max":
                cfg = replace(cfg, max_num_seqs=None)
            lengths: tuple[Lengths | None, Lengths | None] = (None, None)
            if prompts:  # serve-sim draws the lengths; the request carries the longest
                lengths = _sim_lengths(r)
                r = {**r, "input_len": str(int(lengths[0].max)), "output_len": str(int(lengths[1].max))}
            # a burst or poisson row's request carries its deployment and lengths; serve-sim runs it
            req = row_request(r, catalog.model(r["model"]), gpu, cfg, "max" if prompts else conc)
            out.append(
                HeldOutRow(
                    r["id"],
                    r["source"],
                    r["url"],
                    r["tag"],
                    r["engine"],
                    r["gpu"],
                    tp,
                    r["metric"],
                    float(r["value"]),
                    req,
                    prompts,
                    rate,
                    *lengths,
                )
            )
    return out


def _sim_lengths(r: dict[str, str]) -> tuple[Lengths, Lengths]:
    """A serve-sim row's input and output length distributions (serve-sim's syntax: ``2048`` fixed,
    ``1-1913`` uniform, ``exp:512``)."""
    return Lengths.parse(r["input_len"], "input_len"), Lengths.parse(r["output_len"], "output_len")


def _sim_load(r: dict) -> tuple[int | None, float | None]:
    """A row's serve-sim load from its ``concurrency``, ``num_prompts`` and ``rate`` cells:
    (None, None) for a steady-state row, (n, inf) for a burst, (n, rate) for a Poisson row; a
    missing or stray cell is a one-line error naming the field."""
    conc = r["concurrency"]
    prompts = (r.get("num_prompts") or "").strip()
    rate = (r.get("rate") or "").strip()
    sim = conc in ("burst", "poisson")
    if sim and not prompts:
        raise ValueError(f"{r['id']}: a `{conc}` row needs num_prompts (the benchmark's --num-prompts)")
    if conc == "poisson" and not rate:
        raise ValueError(f"{r['id']}: a `poisson` row needs rate (its --request-rate, requests/s)")
    if not sim and prompts:
        raise ValueError(f"{r['id']}: only a `burst` or `poisson` row has num_prompts; write it empty")
    if conc != "poisson" and rate:
        raise ValueError(f"{r['id']}: only a `poisson` row has rate; write it empty")
    if not sim:
        return None, None
    try:
        n = int(prompts)
        lam = float(rate) if rate else math.inf
    except ValueError:
        raise ValueError(
            f"{r['id']}: num_prompts must be an integer and rate a number, got {prompts!r}, {rate!r}"
        ) from None
    if n < 1:
        raise ValueError(f"{r['id']}: num_prompts must be at least 1, got {n}")
    if not lam > 0 or (conc == "poisson" and not math.isfinite(lam)):
        raise ValueError(f"{r['id']}: rate must be a positive finite number of requests/s, got {rate!r}")
    return n, lam


def predict_sim(row: HeldOutRow) -> float:
    """A burst or poisson row's metric from serve-sim: ``num_prompts`` requests of the row's
    lengths (fixed, or drawn from its distributions), all at t = 0 (burst) or Poisson at ``rate``,
    with seed ``SEED``, run to completion."""
    q = row.request
    lin, lout = row.input_lengths, row.output_lengths
    assert row.num_prompts is not None and row.rate is not None and lin is not None and lout is not None
    d = q.deployment()
    if math.isinf(row.rate):
        w = Workload.burst(row.num_prompts, lin, lout)
    else:
        w = Workload.poisson(row.rate, row.num_prompts, lin, lout, seed=SEED)
    doc = simulate(d, q.config, w, row.rate).to_dict()
    return {
        "output_tokens_per_s": doc["output_tokens_per_s"],
        "output_tokens_per_s_per_gpu": doc["output_tokens_per_s"] / (q.tp * q.pp),
        "ttft_ms": doc["ttft_s"]["mean"] * 1e3,
        "itl_ms": doc["tpot_s"]["mean"] * 1e3,
        "mean_itl_ms": doc["itl_s"]["mean"] * 1e3,
        "e2e_latency_ms": doc["e2e_s"]["mean"] * 1e3,
    }[row.metric]


def predict(row: HeldOutRow) -> float:
    if row.num_prompts is not None:
        return predict_sim(row)
    doc = to_dict(estimate_serving(row.request))
    return {
        "output_tokens_per_s": doc["output_tokens_per_s"],
        "output_tokens_per_s_per_gpu": doc["output_tokens_per_s_per_gpu"],
        "ttft_ms": doc["ttft_s"] * 1e3,
        "itl_ms": doc["tpot_s"] * 1e3,
        "e2e_latency_ms": doc["e2e_s"] * 1e3,
    }[row.metric]


def validate_held_out(path: Path = CSV) -> list[HeldOutCheck]:
    checks = []
    for row in load_rows(path):
        try:
            checks.append(HeldOutCheck(row, predict(row)))
        except GpuplanError as e:  # DoesNotFit included: the engine ran what gpuplan refuses
            checks.append(HeldOutCheck(row, None, f"{e.field}: {e.message}"))
    return checks


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list (validate_kv.py reads it too)."""
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _stats(checks: list[HeldOutCheck]) -> dict:
    errors = sorted(abs(e) for c in checks if (e := c.error) is not None)
    if not errors:
        return {"rows": len(checks), "refused": len(checks)}
    return {
        "rows": len(checks),
        "median_abs_error": statistics.median(errors),
        "p90_abs_error": percentile(errors, 0.9),
        "max_abs_error": errors[-1],
        "mean_signed_error": statistics.fmean(e for c in checks if (e := c.error) is not None),
        "refused": sum(c.predicted is None for c in checks),
    }


def summary(checks: list[HeldOutCheck]) -> dict:
    """All rows, then per engine, per GPU, per metric and per load (steady, burst, poisson), and the
    Poisson rows' TTFT and ITL apart (``poisson_by_metric``: the latency-vs-rate curves alone)."""
    groups: dict[str, dict[str, list[HeldOutCheck]]] = {"engine": {}, "gpu": {}, "metric": {}, "load": {}}
    curve: dict[str, list[HeldOutCheck]] = {}
    for c in checks:
        groups["load"].setdefault(c.row.load, []).append(c)
        if c.row.load == "poisson":
            curve.setdefault(c.row.metric, []).append(c)
        groups["engine"].setdefault(c.row.engine, []).append(c)
        groups["gpu"].setdefault(c.row.gpu, []).append(c)
        groups["metric"].setdefault(c.row.metric, []).append(c)
    return {
        **_stats(checks),
        "target": {"median_abs_error": 0.08, "p90_abs_error": 0.20},
        **{f"by_{k}": {name: _stats(cs) for name, cs in sorted(g.items())} for k, g in groups.items()},
        "poisson_by_metric": {name: _stats(cs) for name, cs in sorted(curve.items())},
    }


def to_rows(checks: list[HeldOutCheck]) -> list[dict]:
    return [
        {
            "id": c.row.id,
            "source": c.row.source,
            "url": c.row.url,
            "tag": c.row.tag,
            "engine": c.row.engine,
            "gpu": c.row.gpu,
            "tp": c.row.tp,
            "metric": c.row.metric,
            "load": c.row.load,
            "rate": None if c.row.rate is None or math.isinf(c.row.rate) else c.row.rate,
            "num_prompts": c.row.num_prompts,
            "measured": c.row.measured,
            "predicted": c.predicted,
            "error": c.error,
            "refusal": c.refusal or None,
        }
        for c in checks
    ]
