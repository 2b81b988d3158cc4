"""Fits that write the catalog: the tensor-core rate a GPU family sustains in long multi-GPU runs,
fitted over the published runs (``fit_sustained``), and the attention kernels' long-sequence rates
from ``scripts/measure_gpu.py``'s rows (``fit_attention_table``).

A GPU's datasheet peak and its measured short-burst matmul rate (MAMF, catalog/efficiency) are
both above what a training run sustains: dense GEMM load pulls the clocks below boost under the
power limit, and thousands of GPUs wait for the slowest. ``sustained`` (catalog/efficiency,
[gemm]) is that remaining fraction of the MAMF. It is one number per GPU family, fitted over
every published run of the family in the validation set (never per row): the value that
minimises the mean absolute step-time error, on a 0.01 grid. ``scripts/fit_sustained.py``
prints the fit and writes it into the catalog.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.estimate.validate import Row, load_rows

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


def _plateau(seq: np.ndarray, rate: np.ndarray, seq_half: float) -> float:
    """The long-sequence fraction ``a`` of ``a * s / (s + seq_half)`` closest to ``rate`` in
    relative terms: minimises sum((a r_i / y_i - 1)^2), whose solution is
    a = sum(r_i / y_i) / sum((r_i / y_i)^2)."""
    x = seq / (seq + seq_half) / rate
    return float(x.sum() / (x * x).sum())


def _relative_sse(seq: np.ndarray, rate: np.ndarray, seq_half: float) -> float:
    a = _plateau(seq, rate, seq_half)
    return float((((a * seq / (seq + seq_half)) / rate - 1.0) ** 2).sum())


def fit_attention_ramp(
    seq: list[float], fwd: list[float], bwd: list[float], peak_flops: float
) -> tuple[float, float, int]:
    """(flash_fwd, flash_bwd, seq_half) of ``kernels.flash_time``'s curve, rate = peak x fraction x
    s / (s + seq_half), fitted to published attention rates (FLOP/s at sequence lengths ``seq``):
    one ``seq_half`` shared by forward and backward (an integer number of tokens, 16 to 8192)
    minimising the summed squared relative error of both, each plateau then in closed form
    (``_plateau``). The rates are burst-clock rates; ``flash_time`` applies ``sustained``."""
    s = np.asarray(seq, dtype=float)
    f = np.asarray(fwd, dtype=float) / peak_flops
    b = np.asarray(bwd, dtype=float) / peak_flops
    if len(s) < 3 or not (len(s) == len(f) == len(b)) or (s <= 0).any() or (f <= 0).any() or (b <= 0).any():
        raise GpuplanError("attention", "a ramp fit needs at least three positive (seq, fwd, bwd) rates")
    half = min(range(16, 8193, 16), key=lambda h: _relative_sse(s, f, h) + _relative_sse(s, b, h))
    return round(_plateau(s, f, half), 3), round(_plateau(s, b, half), 3), half


def fit_attention_plateau(
    seq: list[float], fwd: list[float], bwd: list[float], peak_flops: float, seq_half: float
) -> tuple[float, float]:
    """(forward, backward) long-sequence fractions of another kernel on the same curve shape, with
    the family's ``seq_half`` held (the catalog has one ramp per GPU family)."""
    s = np.asarray(seq, dtype=float)
    return (
        round(_plateau(s, np.asarray(fwd, dtype=float) / peak_flops, seq_half), 3),
        round(_plateau(s, np.asarray(bwd, dtype=float) / peak_flops, seq_half), 3),
    )
