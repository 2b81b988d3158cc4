"""Fit what no datasheet gives, from measured runs.

The catalog's fits over published runs (``fit_sustained``: the tensor-core rate a GPU family
holds in long multi-GPU runs) live in fit_catalog.py and are re-exported here.
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
from gpuplan.estimate.factors import (
    FACTOR_NAMES,
    FACTORS,
    KERNEL_KINDS,
    Factor,
    apply_factors,
    factor_bounds,
    factor_values,
    measured_kernel,
    predicted_kernel,
)
from gpuplan.estimate.fit_catalog import GRID, errors_at, family_rows, fit_attention_table, fit_sustained
from gpuplan.estimate.least_squares import Space, jacobian, least_squares
from gpuplan.estimate.validate import Row, load_rows
from gpuplan.specs.hardware import Efficiency

__all__ = [
    "FACTORS",
    "FACTOR_NAMES",
    "GRID",
    "KERNEL_KINDS",
    "Calibration",
    "Factor",
    "FactorFit",
    "Observation",
    "RunFit",
    "apply_factors",
    "calibrate_runs",
    "calibrated_validation",
    "errors_at",
    "factor_bounds",
    "factor_values",
    "family_rows",
    "fit_attention_table",
    "fit_sustained",
    "measured_kernel",
    "observations",
    "predicted_kernel",
    "resolve_runs",
]

if TYPE_CHECKING:
    from gpuplan.estimate.run_record import Resolved, Run
    from gpuplan.estimate.step_time import StepTime

# -- Fitting a cluster profile to the user's own runs ----------------------------------------------
#
# The same idea as ``fit_sustained`` generalised: several named factors of the performance model,
# each bounded by what is physical, fitted to every run the user gives (bounded Gauss-Newton with
# Levenberg damping on log relative errors), keeping only the factors the runs can pin down.

MIN_SENSITIVITY = 0.01  # RMS elasticity below which no run tells the factor apart from noise
MIN_INDEPENDENT = 0.20  # share of a factor's effect not explained by factors already chosen
# relative (log) standard error up to which a factor counts as identified (2 sigma = 5%), and above
# which it is not fitted at all
MAX_STANDARD_ERROR = 0.025
MAX_LOOSE_ERROR = 0.10


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
    space_all = Space(names, bounds, scale)
    start = dict(prior)

    def fun_for(space: Space):  # factors outside ``space`` stay at the prior
        return lambda u: _residuals(base, {**prior, **space.to_values(u)}, resolved, obs)

    u0 = space_all.to_u(start)
    r0 = fun_for(space_all)(u0)
    chosen, why = _choose(jacobian(fun_for(space_all), u0, r0, space_all), names, len(obs))
    values: dict[str, float] = dict(prior)
    se: dict[str, float] = {}
    for attempt in range(2):
        if not chosen:
            break
        space = Space(chosen, bounds, scale)
        fun = fun_for(space)
        u, r = least_squares(fun, space.to_u(start), space)
        values = {**prior, **space.to_values(u)}
        dof = len(obs) - len(chosen)
        if dof <= 0:  # an exact fit: nothing left to judge the spread with
            se = {}
            break
        J = jacobian(fun, u, r, space)
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
            raise exc.located(run.source) from None
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
    from gpuplan.estimate.run_record import Resolved

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
