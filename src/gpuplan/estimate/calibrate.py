"""Fit what no datasheet gives: the tensor-core rate a GPU family holds in long multi-GPU runs.

A GPU's datasheet peak and its measured short-burst matmul rate (MAMF, catalog/efficiency) are
both above what a training run sustains: dense GEMM load pulls the clocks below boost under the
power limit, and thousands of GPUs wait for the slowest. ``sustained`` (catalog/efficiency,
[gemm]) is that remaining fraction of the MAMF. It is one number per GPU family, fitted over
every published run of the family in the validation set (never per row): the value that
minimises the mean absolute step-time error, on a 0.01 grid. ``scripts/fit_sustained.py``
prints the fit and writes it into the catalog.

``calibrate_runs`` does the same for a user's own cluster from the user's own runs
(``gpuplan.runs``), over a few named factors at once (``FACTORS``: GEMM sustained fraction,
attention rate, HBM fraction, intra- and inter-node bus efficiency, per-step overhead), each within
physical bounds: it minimises the squared log relative errors of every run's step time (and of its
GEMM and attention kernel time where a profiler trace gives them) by bounded Levenberg-Marquardt
(Levenberg 1944; Marquardt 1963) on a numerical Jacobian. Only the factors the runs identify are
fitted: a factor no prediction is sensitive to, one whose effect the runs cannot tell from another
(Gram-Schmidt residual of its Jacobian column under ``MIN_INDEPENDENT``), or one the fit pins to
no better than ``MAX_STANDARD_ERROR`` (the Gauss-Newton covariance sigma^2 (J^T J)^-1) keeps the
catalog value and is reported with the reason. The allocator reserve is measured directly (peak
reserved over peak allocated). ``profile.py`` writes and applies the result.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.estimate.validate import Row, load_rows
from gpuplan.specs.hardware import Efficiency

if TYPE_CHECKING:
    from gpuplan.estimate.step_time import StepTime
    from gpuplan.runs.record import Resolved, Run

GRID = tuple(round(0.50 + 0.01 * i, 2) for i in range(51))  # 0.50 .. 1.00


def family_rows(family: str, rows: tuple[Row, ...] | None = None) -> list[Row]:
    """The validation rows run on GPUs of one efficiency family (e.g. ``h100-sxm``)."""
    from gpuplan import catalog

    name = catalog.efficiency(family).name
    return [
        r
        for r in (rows if rows is not None else load_rows())
        if getattr(catalog.gpu(r.gpu).efficiency, "name", None) == name
    ]


def errors_at(family: str, sustained: float, rows: list[Row]) -> list[float]:
    """Signed step-time errors of ``rows`` with the family's ``sustained`` set to a value."""
    from gpuplan import catalog
    from gpuplan.estimate.step_time import step_time

    out = []
    for r in rows:
        g = catalog.gpu(r.gpu)
        assert g.efficiency is not None  # family_rows only returns GPUs with efficiency data
        g = dataclasses.replace(g, efficiency=dataclasses.replace(g.efficiency, sustained=sustained))
        out.append(step_time(r.model, r.config, r.plan, g, r.microbatches).step_s / r.measured_step_s - 1)
    return out


def fit_sustained(family: str, rows: tuple[Row, ...] | None = None) -> tuple[float, float]:
    """(sustained, mean |error| there) minimising the family's mean absolute step-time error."""
    fam = family_rows(family, rows)
    if not fam:
        raise ValueError(f"no validation rows for GPU family {family!r}")
    best = min(GRID, key=lambda s: (sum(abs(e) for e in errors_at(family, s, fam)), -s))
    errs = errors_at(family, best, fam)
    return best, sum(abs(e) for e in errs) / len(errs)


# -- Fitting a cluster profile to the user's own runs ----------------------------------------------
#
# The same idea as ``fit_sustained`` generalised: several named factors of the performance model,
# each bounded by what is physical, fitted to every run the user gives (bounded Gauss-Newton with
# Levenberg damping on log relative errors), keeping only the factors the runs can pin down.


@dataclass(frozen=True)
class Factor:
    """One fitted number: its name, physical bounds and what it scales."""

    name: str
    lo: float
    hi: float
    doc: str
    additive: bool = False  # seconds (fitted on a linear scale), not a fraction (log scale)


FACTORS = (
    Factor(
        "gemm_sustained",
        0.30,
        1.00,
        "tensor-core rate held over the measured MAMF (Efficiency.sustained); scales GEMMs and attention",
    ),
    Factor(
        "attention_scale",
        0.30,
        1.00,
        "attention kernels' rate relative to the catalog's, whichever kernel runs (Efficiency.attention_scale; "
        "upper bound: flash_fwd/flash_bwd reach 1)",
    ),
    Factor("hbm", 0.30, 1.00, "streaming kernels' bandwidth over the HBM peak (Efficiency.hbm)"),
    Factor("intra_bus", 0.20, 1.00, "NCCL bus bandwidth over the scale-up link (Efficiency.intra_bus)"),
    Factor("inter_bus", 0.10, 1.00, "NCCL bus bandwidth over the NIC rate (Efficiency.inter_bus)"),
    Factor(
        "step_overhead_s",
        0.0,
        60.0,
        "seconds per step outside the modelled kernels (Efficiency.step_overhead_s)",
        additive=True,
    ),
)
FACTOR_NAMES = tuple(f.name for f in FACTORS)
MIN_SENSITIVITY = 0.01  # RMS elasticity below which no run tells the factor apart from noise
MIN_INDEPENDENT = 0.20  # share of a factor's effect not explained by factors already chosen
# relative (log) standard error up to which a factor counts as identified (2 sigma = 5%), and above
# which it is not fitted at all
MAX_STANDARD_ERROR = 0.025
MAX_LOOSE_ERROR = 0.10
# What a profiler trace measures (gpuplan.runs.trace categories) that the model predicts: GEMM and
# attention kernels, the other kernels (elementwise, norms, the optimizer step: memory-bound), and
# the NCCL all-reduce/all-gather/reduce-scatter kernels (send/recv also carries pipeline waits)
KERNEL_KINDS = ("gemm", "attention", "elementwise", "nccl")
NCCL_MEASURED = ("nccl_all_gather", "nccl_reduce_scatter", "nccl_all_reduce")
NCCL_MODELLED = ("all-reduce", "all-gather", "reduce-scatter")


def measured_kernel(kernels_s: dict[str, float], kind: str) -> float:
    """A trace's seconds per step for one of ``KERNEL_KINDS``."""
    if kind == "nccl":
        return sum(kernels_s.get(k, 0.0) for k in NCCL_MEASURED)
    return kernels_s.get(kind, 0.0)


def predicted_kernel(st: StepTime, kind: str) -> float:
    """The model's seconds per step for one of ``KERNEL_KINDS`` on the critical stage (kernels as
    run once: recompute is not in ``StepTime.ops``, so runs with recompute give no kernel terms)."""
    if kind in ("gemm", "attention"):
        return st.ops.get(kind, 0.0)
    if kind == "elementwise":
        return sum(v for k, v in st.ops.items() if k not in ("gemm", "attention")) + st.breakdown.get("optimizer", 0.0)
    # NCCL kernels run for the whole collective, hidden or not; a dimension's time is split over its
    # collective kinds by the bytes each sends
    total = 0.0
    for line in st.comm.values():
        sent = sum(line.collectives.values())
        if sent:
            total += line.time * sum(line.collectives.get(k, 0.0) for k in NCCL_MODELLED) / sent
    return total


def factor_values(eff: Efficiency) -> dict[str, float]:
    """The factors' values in an efficiency."""
    return {
        "gemm_sustained": eff.sustained,
        "attention_scale": eff.attention_scale,
        "hbm": eff.hbm,
        "intra_bus": eff.intra_bus,
        "inter_bus": eff.inter_bus,
        "step_overhead_s": eff.step_overhead_s,
    }


def factor_bounds(base: Efficiency) -> dict[str, tuple[float, float]]:
    """Physical bounds; attention's upper bound keeps both flash fractions at most 1."""
    out = {f.name: (f.lo, f.hi) for f in FACTORS}
    out["attention_scale"] = (0.30, 1.0 / max(base.flash_fwd, base.flash_bwd))
    return out


def apply_factors(base: Efficiency, values: dict[str, float]) -> Efficiency:
    """``base`` with the given factors (missing ones unchanged)."""
    v = {**factor_values(base), **values}
    return dataclasses.replace(
        base,
        sustained=v["gemm_sustained"],
        attention_scale=v["attention_scale"],  # every kernel's rate (Efficiency.attention_fractions)
        hbm=v["hbm"],
        intra_bus=v["intra_bus"],
        inter_bus=v["inter_bus"],
        step_overhead_s=v["step_overhead_s"],
    )


@dataclass(frozen=True)
class Observation:
    """One measured number of one run the model predicts: the step time, or a kernel category's
    seconds per step from a trace (``KERNEL_KINDS``)."""

    run: int  # index into the runs
    kind: str  # "step" or a kernel kind
    measured: float


def _predict(resolved: Resolved, eff: Efficiency) -> StepTime:
    from gpuplan.estimate.step_time import step_time

    gpu = dataclasses.replace(resolved.gpu, efficiency=eff)
    return step_time(resolved.model, resolved.config, resolved.plan, gpu, resolved.microbatches)


def observations(runs: list[Run], resolved: list[Resolved]) -> list[Observation]:
    """What each run measured that the model predicts."""
    out = []
    for i, (run, res) in enumerate(zip(runs, resolved)):
        step = run.measured_step_s(res)
        if step is None:
            raise GpuplanError(run.source, "has no step time or tokens/s to fit", "give a log with either")
        out.append(Observation(i, "step", step))
        if res.config.recompute != "none":  # the trace holds recomputed kernels the model's ops do not
            continue
        for kind in KERNEL_KINDS:
            value = measured_kernel(run.kernels_s, kind)
            if value > 0:
                out.append(Observation(i, kind, value))
    return out


def _residuals(
    base: Efficiency, values: dict[str, float], resolved: list[Resolved], obs: list[Observation]
) -> np.ndarray:
    """ln(predicted / measured) of every observation: relative errors, symmetric in over/under."""
    eff = apply_factors(base, values)
    cache: dict[int, StepTime] = {}
    out = []
    for o in obs:
        if o.run not in cache:
            cache[o.run] = _predict(resolved[o.run], eff)
        st = cache[o.run]
        pred = st.step_s if o.kind == "step" else predicted_kernel(st, o.kind)
        out.append(math.log(max(pred, 1e-12) / o.measured))
    return np.array(out)


class _Space:
    """Fitted coordinates: ln(value) for fractions, value / typical step for seconds, so that a
    unit step means about the same relative change for every factor."""

    def __init__(self, names: list[str], bounds: dict[str, tuple[float, float]], step_scale: float):
        self.names, self.bounds, self.scale = names, bounds, step_scale
        self.additive = {f.name for f in FACTORS if f.additive}

    def to_u(self, values: dict[str, float]) -> np.ndarray:
        return np.array([values[n] / self.scale if n in self.additive else math.log(values[n]) for n in self.names])

    def to_values(self, u: np.ndarray) -> dict[str, float]:
        return {n: (float(x) * self.scale if n in self.additive else math.exp(float(x))) for n, x in zip(self.names, u)}

    def clip(self, u: np.ndarray) -> np.ndarray:
        lo = self.to_u(
            {n: self.bounds[n][0] if n in self.additive else max(self.bounds[n][0], 1e-9) for n in self.names}
        )
        hi = self.to_u({n: self.bounds[n][1] for n in self.names})
        return np.clip(u, lo, hi)


def _jacobian(fun, u: np.ndarray, r0: np.ndarray, space: _Space, h: float = 1e-3) -> np.ndarray:
    """One-sided differences (the model is piecewise smooth: max() of overlapped times), stepping
    back from an upper bound so that no fraction goes past 1."""
    hi = space.clip(np.full(len(u), np.inf))
    J = np.zeros((len(r0), len(u)))
    for k in range(len(u)):
        step = -h if u[k] + h > hi[k] else h
        du = u.copy()
        du[k] += step
        J[:, k] = (fun(du) - r0) / step
    return J


def _least_squares(fun, u0: np.ndarray, space: _Space, iterations: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Bounded Levenberg-Marquardt (Marquardt 1963) with the step clipped to the bounds."""
    u = space.clip(u0)
    r = fun(u)
    lam = 1e-3
    for _ in range(iterations):
        J = _jacobian(fun, u, r, space)
        H, g = J.T @ J, J.T @ r
        improved = False
        for _ in range(8):
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-12), -g)
            u_new = space.clip(u + step)
            r_new = fun(u_new)
            if r_new @ r_new < r @ r:
                gain = r @ r - r_new @ r_new
                u, r, lam, improved = u_new, r_new, max(lam / 3, 1e-7), True
                break
            lam *= 4
        if not improved or gain < 1e-12 * max(1.0, float(r @ r)):
            break
    return u, r


@dataclass(frozen=True)
class FactorFit:
    name: str
    prior: float  # the catalog's value
    value: float  # fitted, or the prior when not identified
    identified: bool
    reason: str = ""  # why not identified
    standard_error: float | None = None  # relative (for step_overhead_s: seconds)
    at_bound: bool = False
    fitted: bool = False  # fitted (identified or not): the profile carries it


@dataclass(frozen=True)
class RunFit:
    source: str
    measured_step_s: float
    prior_step_s: float  # predicted with the catalog's efficiency
    fitted_step_s: float  # predicted with the fitted factors
    loo_step_s: float | None = None  # predicted by a fit to the other runs


@dataclass(frozen=True)
class Calibration:
    family: str
    gpus: tuple[str, ...]
    factors: tuple[FactorFit, ...]
    efficiency: Efficiency  # the family's efficiency with the identified factors fitted
    allocator_fraction: FactorFit
    runs: tuple[RunFit, ...]

    def mean_abs_error(self, which: str) -> float | None:
        errs = []
        for r in self.runs:
            pred = {"prior": r.prior_step_s, "fitted": r.fitted_step_s, "loo": r.loo_step_s}[which]
            if pred is None:
                return None
            errs.append(abs(pred / r.measured_step_s - 1))
        return sum(errs) / len(errs)


def _choose(J: np.ndarray, names: list[str], n_obs: int) -> tuple[list[str], dict[str, str]]:
    """Factors the observations can tell apart: greedy (rates by sensitivity, then the overhead),
    skipping one whose effect is (nearly) a combination of those already chosen (Gram-Schmidt
    residual)."""
    rms = np.sqrt((J**2).mean(axis=0))
    chosen: list[int] = []
    why: dict[str, str] = {}
    # rates first, by sensitivity; the per-step overhead last: a fixed number of seconds explains
    # any one run as well as a rate does, but does not carry over to runs of another size
    additive = {f.name for f in FACTORS if f.additive}
    for k in sorted(range(len(names)), key=lambda k: (names[k] in additive, -rms[k])):
        col = J[:, k]
        if rms[k] < MIN_SENSITIVITY:
            why[names[k]] = "no run is sensitive to it (a 1% change moves no prediction by 0.01%)"
            continue
        if len(chosen) >= n_obs:
            why[names[k]] = f"more factors than measurements ({n_obs})"
            continue
        if chosen:
            A = J[:, chosen]
            resid = col - A @ np.linalg.lstsq(A, col, rcond=None)[0]
            if np.linalg.norm(resid) < MIN_INDEPENDENT * np.linalg.norm(col):
                cos = [abs(col @ J[:, j]) / (np.linalg.norm(col) * np.linalg.norm(J[:, j])) for j in chosen]
                partner = names[chosen[int(np.argmax(cos))]]
                why[names[k]] = f"collinear with {partner}: these runs move both the same way"
                continue
        chosen.append(k)
    return [names[k] for k in sorted(chosen)], why


def _fit_factors(
    base: Efficiency, resolved: list[Resolved], obs: list[Observation], only: tuple[str, ...] | None = None
) -> tuple[dict[str, float], dict[str, FactorFit]]:
    """Fit the identifiable factors; the rest keep the prior, each with its reason."""
    prior = factor_values(base)
    bounds = factor_bounds(base)
    names = list(only or FACTOR_NAMES)
    scale = float(np.median([o.measured for o in obs if o.kind == "step"]))
    space_all = _Space(names, bounds, scale)
    start = dict(prior)

    def fun_for(space: _Space):  # factors outside ``space`` stay at the prior
        return lambda u: _residuals(base, {**prior, **space.to_values(u)}, resolved, obs)

    u0 = space_all.to_u(start)
    r0 = fun_for(space_all)(u0)
    chosen, why = _choose(_jacobian(fun_for(space_all), u0, r0, space_all), names, len(obs))
    values: dict[str, float] = dict(prior)
    se: dict[str, float] = {}
    for attempt in range(2):
        if not chosen:
            break
        space = _Space(chosen, bounds, scale)
        fun = fun_for(space)
        u, r = _least_squares(fun, space.to_u(start), space)
        values = {**prior, **space.to_values(u)}
        dof = len(obs) - len(chosen)
        if dof <= 0:  # an exact fit: nothing left to judge the spread with
            se = {}
            break
        J = _jacobian(fun, u, r, space)
        cov = float(r @ r) / dof * np.linalg.pinv(J.T @ J)
        se = {n: math.sqrt(max(cov[i, i], 0.0)) for i, n in enumerate(chosen)}
        # a factor the runs barely pin would wander to wherever noise puts it: it keeps the prior
        # and the others are fitted again, once (dropping one at a time would let the misfit it
        # leaves inflate every other error in turn)
        loose = [n for n in chosen if se[n] > MAX_LOOSE_ERROR]
        if not loose or attempt:
            break
        for n in loose:
            pinned = f"{se[n] * scale * 1e3:.3g} ms" if n in space_all.additive else f"{se[n]:.0%}"
            why[n] = f"these runs pin it only to ±{pinned}: kept at the catalog value"
        chosen = [n for n in chosen if n not in loose]
        values, se = dict(prior), {}
    fits = {}
    for n in FACTOR_NAMES:
        if n in chosen:
            lo, hi = bounds[n]
            v, e = values[n], se.get(n)
            edge = abs(v - lo) <= 1e-6 * max(1.0, hi) or abs(v - hi) <= 1e-6 * max(1.0, hi)
            if n in space_all.additive and e is not None:  # seconds: judged against its own value
                e *= scale
                ok = e <= MAX_STANDARD_ERROR * v
                reason = "" if ok else f"fitted, but these runs pin it only to ±{e * 1e3:.3g} ms"
            else:
                ok = e is None or e <= MAX_STANDARD_ERROR
                reason = "" if ok else f"fitted, but these runs pin it only to ±{e:.1%} (relative standard error)"
            fits[n] = FactorFit(n, prior[n], v, ok, reason, standard_error=e, at_bound=edge, fitted=True)
        else:
            values[n] = prior[n]
            fits[n] = FactorFit(n, prior[n], prior[n], False, why.get(n, "not fitted"))
    return values, fits


def _allocator_fraction(runs: list[Run], prior: float) -> FactorFit:
    """The caching allocator's reserve over what is allocated, measured directly: peak reserved over
    peak allocated minus one (PyTorch's memory_reserved vs memory_allocated), the median over runs."""
    ratios = [
        r.peak_reserved_bytes / r.peak_allocated_bytes - 1
        for r in runs
        if r.peak_reserved_bytes and r.peak_allocated_bytes
    ]
    if not ratios:
        return FactorFit(
            "allocator_fraction", prior, prior, False, "no run reports both peak allocated and peak reserved memory"
        )
    value = min(max(float(np.median(ratios)), 0.0), 0.99)
    return FactorFit("allocator_fraction", prior, value, True)


def _check_family(runs: list[Run], resolved: list[Resolved]) -> Efficiency:
    effs = {res.gpu.efficiency.name for res in resolved if res.gpu.efficiency is not None}
    if len(effs) != 1:
        raise GpuplanError("runs", f"span GPU families {sorted(effs)}", "calibrate each GPU family on its own runs")
    base = resolved[0].gpu.efficiency
    assert base is not None
    if base.step_overhead_s:
        base = dataclasses.replace(base, step_overhead_s=0.0)
    return base


def resolve_runs(runs: list[Run]) -> list[Resolved]:
    out = []
    for run in runs:
        if run.plan is None:
            raise GpuplanError(
                run.source, "carries no plan", "give a run .toml with a [plan] table, or telemetry with a plan record"
            )
        try:
            out.append(run.plan.resolve())
        except GpuplanError as exc:
            raise GpuplanError(f"{run.source}: {exc.field}", exc.message, exc.fix) from None
    return out


def calibrate_runs(runs: list[Run], leave_one_out: bool = True) -> Calibration:
    """Fit the factors (``FACTORS``) to every run given; report what the runs could not identify,
    and (``leave_one_out``) each run's prediction by a fit to the others."""
    if not runs:
        raise GpuplanError("runs", "none given", "pass one or more run files")
    resolved = resolve_runs(runs)
    base = _check_family(runs, resolved)
    obs = observations(runs, resolved)
    values, fits = _fit_factors(base, resolved, obs)
    fitted = apply_factors(base, values)
    out_runs = []
    for i, (run, res) in enumerate(zip(runs, resolved)):
        measured = run.measured_step_s(res)
        assert measured is not None
        loo = None
        if leave_one_out and len(runs) > 1:
            keep = [j for j in range(len(runs)) if j != i]
            sub_obs = [Observation(keep.index(o.run), o.kind, o.measured) for o in obs if o.run != i]
            v, _ = _fit_factors(base, [resolved[j] for j in keep], sub_obs)
            loo = _predict(res, apply_factors(base, v)).step_s
        out_runs.append(RunFit(run.source, measured, _predict(res, base).step_s, _predict(res, fitted).step_s, loo))
    prior_fraction = resolved[0].config.allocator_fraction
    return Calibration(
        base.name,
        tuple(sorted({r.gpu.id for r in resolved})),
        tuple(fits[n] for n in FACTOR_NAMES),
        fitted,
        _allocator_fraction(runs, prior_fraction),
        tuple(out_runs),
    )


def calibrated_validation(rows: tuple[Row, ...] | None = None) -> dict[str, dict]:
    """Calibrate on one published run of a GPU family, predict the family's other runs; every run
    in turn (leave-one-in). Per family, the mean |error| of those predictions beside:

    * uncalibrated: the physics and measured kernel rates alone (the catalog with ``sustained``
      at 1, i.e. before any fit to runs), the starting point of a user's calibration too;
    * catalog: the catalog's ``sustained``, fitted over *all* these rows by ``fit_sustained``
      (in-sample: it saw the runs it predicts), for reference.
    """
    from gpuplan import catalog
    from gpuplan.runs.record import Resolved

    rows = rows if rows is not None else load_rows()
    families: dict[str, list[Row]] = {}
    for r in rows:
        eff = catalog.gpu(r.gpu).efficiency
        if eff is not None:
            families.setdefault(eff.name, []).append(r)
    out: dict[str, dict] = {}
    for name, fam in families.items():
        res = [Resolved(r.model, catalog.gpu(r.gpu), r.plan, r.config, r.microbatches) for r in fam]
        in_catalog = res[0].gpu.efficiency
        assert in_catalog is not None
        base = dataclasses.replace(in_catalog, sustained=1.0)
        prior = [_predict(x, base).step_s / r.measured_step_s - 1 for x, r in zip(res, fam)]
        cat = [_predict(x, in_catalog).step_s / r.measured_step_s - 1 for x, r in zip(res, fam)]
        per_run: list[dict] = []
        pairs: dict[str, list[float]] = {"calibrated": [], "uncalibrated": [], "catalog": []}
        for i, r in enumerate(fam):
            values, fits = _fit_factors(base, [res[i]], [Observation(0, "step", r.measured_step_s)])
            eff = apply_factors(base, values)
            errs = [_predict(res[j], eff).step_s / fam[j].measured_step_s - 1 for j in range(len(fam)) if j != i]
            pairs["calibrated"] += errs
            pairs["uncalibrated"] += [prior[j] for j in range(len(fam)) if j != i]
            pairs["catalog"] += [cat[j] for j in range(len(fam)) if j != i]
            fitted = [f.name for f in fits.values() if f.fitted or f.identified]
            per_run.append(
                {
                    "calibrated_on": r.id,
                    "factors": {n: values[n] for n in fitted},
                    "mean_abs_error": sum(map(abs, errs)) / max(1, len(errs)),
                }
            )
        n = max(1, len(pairs["calibrated"]))
        out[name] = {
            "runs": len(fam),
            **{f"{k}_mean_abs_error": sum(map(abs, v)) / n for k, v in pairs.items()},
            "catalog_sustained": in_catalog.sustained,
            "per_run": per_run,
        }
    return out


def fit_attention_table(
    rows: list[dict], peak_flops: float, sustained: float, backend: str = "cudnn", min_seq: int = 4096
) -> tuple[tuple[int, float, float], ...]:
    """(head_dim, forward, backward) long-sequence rates of one SDPA backend over
    ``peak_flops x sustained``, from ``scripts/measure_gpu.py``'s attention rows (causal, at least
    ``min_seq`` tokens: past the ramp ``seq_half`` models; the median over those lengths). The
    kernels ran back to back, at the power-capped clock that ``sustained`` stands for; backward
    FLOPs are 2.5x forward, FlashAttention's convention that ``flash_time`` uses."""
    by_dim: dict[int, tuple[list[float], list[float]]] = {}
    for r in rows:
        if r.get("backend") != backend or not r.get("causal") or r["seq"] < min_seq or "fwd_s" not in r:
            continue
        f, b = by_dim.setdefault(int(r["d"]), ([], []))
        f.append(r["flops_fwd"] / r["fwd_s"])
        b.append(2.5 * r["flops_fwd"] / (r["fwd_bwd_s"] - r["fwd_s"]))
    if not by_dim:
        raise GpuplanError("attention", f"no causal {backend} rows of at least {min_seq} tokens")
    scale = peak_flops * sustained
    return tuple(
        (d, round(float(np.median(f)) / scale, 3), round(float(np.median(b)) / scale, 3))
        for d, (f, b) in sorted(by_dim.items())
    )
