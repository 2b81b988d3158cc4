"""A cluster profile: efficiency overrides fitted from the user's own runs, with their provenance.

``gpuplan calibrate`` writes one (``write_profile``); ``--calibration PROFILE`` on ``train`` and
``search`` reads it (``load_profile``) and applies it to the GPU (``Profile.apply``) in place of
the catalog's values for that GPU family. The file is TOML::

    [profile]
    schema = 1
    gpu_family = "H100/H200/H800 SXM"   # catalog/efficiency name: the profile applies to these GPUs only
    gpus = ["h100-sxm"]
    runs = ["run1.toml", ...]
    fit_mean_abs_error = 0.021          # step time, the runs predicted by the fit to all of them
    loo_mean_abs_error = 0.034          # each run predicted by a fit to the others
    prior_mean_abs_error = 0.18         # with the catalog's values

    [efficiency]                        # Efficiency fields the fit changed
    sustained = 0.78
    attention_scale = 0.85
    ...

    [memory]
    allocator_fraction = 0.07           # only when runs reported peak allocated and reserved

    [factors.gemm_sustained]            # every factor: prior, value, identified, why not
    ...
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.inputs import checked_path
from gpuplan.specs.hardware import GPUSpec

SCHEMA = 1
# flash_fwd/flash_bwd: profiles written before attention_scale existed (it scales every kernel)
OVERRIDABLE = (
    "sustained",
    "attention_scale",
    "flash_fwd",
    "flash_bwd",
    "hbm",
    "intra_bus",
    "inter_bus",
    "step_overhead_s",
)


@dataclass(frozen=True)
class Profile:
    path: str
    family: str
    efficiency: dict[str, float]
    allocator_fraction: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def apply(self, gpu: GPUSpec) -> GPUSpec:
        """``gpu`` with the profile's efficiency; a GPU of another family is refused."""
        if gpu.efficiency is None or gpu.efficiency.name != self.family:
            have = gpu.efficiency.name if gpu.efficiency is not None else "no efficiency data"
            raise GpuplanError(
                "calibration",
                f"{self.path} is for {self.family} GPUs, `gpu={gpu.id}` is {have}",
                "calibrate on runs of this GPU, or drop `calibration`",
            )
        overrides: dict[str, Any] = dict(self.efficiency)
        return replace(gpu, efficiency=replace(gpu.efficiency, **overrides))

    def describe(self) -> dict[str, Any]:
        """What the JSON output says about the profile applied."""
        keys = ("runs", "fit_mean_abs_error", "loo_mean_abs_error", "prior_mean_abs_error")
        return {
            "path": self.path,
            "gpu_family": self.family,
            "efficiency": dict(self.efficiency),
            "allocator_fraction": self.allocator_fraction,
            **{k: self.provenance.get(k) for k in keys},
        }

    def summary(self) -> str:
        """One line for the human output."""
        parts = [f"{k} {v:.4g}" for k, v in self.efficiency.items()]
        if self.allocator_fraction is not None:
            parts.append(f"allocator_fraction {self.allocator_fraction:.3g}")
        runs = self.provenance.get("runs") or []
        loo = self.provenance.get("loo_mean_abs_error")
        fit = f", leave-one-out error {loo:.1%}" if isinstance(loo, float) else ""
        return f"calibrated with {self.path} ({len(runs)} run{'s' if len(runs) != 1 else ''}{fit}): {', '.join(parts)}"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string


def write_profile(cal: Any, path: str | Path) -> str:
    """Write a ``gpuplan.estimate.calibrate.Calibration`` as a profile; returns the text."""
    base_fields = {f: getattr(cal.efficiency, f) for f in OVERRIDABLE}
    from gpuplan import catalog

    prior = catalog.gpu(cal.gpus[0]).efficiency
    changed = {k: v for k, v in base_fields.items() if getattr(prior, k) != v}
    lines = [
        "# gpuplan calibration profile: written by `gpuplan calibrate`; apply with --calibration",
        "",
        "[profile]",
        f"schema = {SCHEMA}",
        f"gpu_family = {_toml_value(cal.family)}",
        f"gpus = {_toml_value(list(cal.gpus))}",
        f"runs = {_toml_value([r.source for r in cal.runs])}",
    ]
    for key, which in (("fit", "fitted"), ("loo", "loo"), ("prior", "prior")):
        err = cal.mean_abs_error(which)
        if err is not None:
            lines.append(f"{key}_mean_abs_error = {err!r}")
    lines += ["", "[efficiency]"] + [f"{k} = {v!r}" for k, v in changed.items()]
    if cal.allocator_fraction.identified:
        lines += ["", "[memory]", f"allocator_fraction = {cal.allocator_fraction.value!r}"]
    for f in (*cal.factors, cal.allocator_fraction):
        lines += [
            "",
            f"[factors.{f.name}]",
            f"prior = {f.prior!r}",
            f"value = {f.value!r}",
            f"identified = {_toml_value(f.identified)}",
            f"fitted = {_toml_value(f.fitted or f.identified)}",
        ]
        if f.standard_error is not None:
            lines.append(f"standard_error = {f.standard_error!r}")
        if f.reason:
            lines.append(f"why = {_toml_value(f.reason)}")
    text = "\n".join(lines) + "\n"
    Path(path).write_text(text)
    return text


def load_profile(path: str | Path) -> Profile:
    """Read a profile written by ``write_profile``; anything else is refused in one line."""
    p = checked_path(path, "calibration")
    if not p.is_file():
        raise GpuplanError("calibration", f"no such file: {path}", "write one with `gpuplan calibrate RUN... --out`")
    try:
        doc = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GpuplanError("calibration", f"{path} is not TOML ({exc})") from None
    head = doc.get("profile")
    if not isinstance(head, dict) or head.get("schema") != SCHEMA or "gpu_family" not in head:
        raise GpuplanError(
            "calibration",
            f"{path} is not a gpuplan calibration profile (schema {SCHEMA})",
            "write one with `gpuplan calibrate RUN... --out`",
        )
    eff = doc.get("efficiency", {})
    for k, v in eff.items():
        if k not in OVERRIDABLE:
            raise GpuplanError(
                "calibration", f"{path}: efficiency.{k} is not a calibrated field", f"use {', '.join(OVERRIDABLE)}"
            )
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise GpuplanError(
                "calibration",
                f"{path}: efficiency.{k} must be a finite number from 0 up, got {v!r}",
                "write the profile again with `gpuplan calibrate RUN... --out`",
            )
    gpus = head.get("gpus", [])
    if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
        raise GpuplanError(
            "calibration", f"{path}: profile.gpus must be a list of GPU ids, got {gpus!r}", 'e.g. gpus = ["h100-sxm"]'
        )
    frac = doc.get("memory", {}).get("allocator_fraction")
    if frac is not None and not (isinstance(frac, int | float) and 0 <= frac < 1):
        raise GpuplanError("calibration", f"{path}: memory.allocator_fraction must be in [0, 1), got {frac!r}")
    return Profile(
        str(path),
        str(head["gpu_family"]),
        {k: float(v) for k, v in eff.items()},
        None if frac is None else float(frac),
        dict(head),
    )


def calibrated(
    hw: GPUSpec, calibration: str | None, allocator_fraction: float | None
) -> tuple[GPUSpec, Profile | None, float | None]:
    """(GPU, profile, allocator reserve) with a calibration profile applied: its efficiency for
    the GPU, its reserve unless ``allocator_fraction`` was given (None: the config's default)."""
    if not calibration:
        return hw, None, allocator_fraction
    prof = load_profile(calibration)
    if allocator_fraction is None:
        allocator_fraction = prof.allocator_fraction
    return prof.apply(hw), prof, allocator_fraction
