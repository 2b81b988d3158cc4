"""Fit what no datasheet gives: the tensor-core rate a GPU family holds in long multi-GPU runs.

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
