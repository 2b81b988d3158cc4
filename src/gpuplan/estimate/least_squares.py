"""Bounded Levenberg-Marquardt (Levenberg 1944; Marquardt 1963) on a numerical Jacobian, in
coordinates where a unit step is about the same relative change for every factor (calibrate.py)."""

from __future__ import annotations

import math

import numpy as np

from gpuplan.estimate.factors import FACTORS


class Space:
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


def jacobian(fun, u: np.ndarray, r0: np.ndarray, space: Space, h: float = 1e-3) -> np.ndarray:
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


def least_squares(fun, u0: np.ndarray, space: Space, iterations: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Bounded Levenberg-Marquardt (Marquardt 1963) with the step clipped to the bounds."""
    u = space.clip(u0)
    r = fun(u)
    lam = 1e-3
    for _ in range(iterations):
        J = jacobian(fun, u, r, space)
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
