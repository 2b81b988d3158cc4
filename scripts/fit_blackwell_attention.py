"""Fit the B200 / GB200 family's attention rates (catalog/efficiency/b200.toml, [attention]) from
NVIDIA's published cuDNN-frontend SDPA benchmark (measurements/published/cudnn-frontend-sdpa) and,
with --write, store them.

    python scripts/fit_blackwell_attention.py [--write]

- flash_fwd, flash_bwd, seq_half: the best fused kernel on Blackwell (cuDNN, which
  TransformerEngine's fused attention and PyTorch SDPA's cuDNN backend run), causal, head dim 128,
  fitted over cuDNN 9.19 and 9.27 on GB200 (2K to 32K tokens, over GB200's BF16 peak);
- fa2_fwd, fa2_bwd: PyTorch SDPA's flash backend (FlashAttention-2) on B200, same ramp;
- [attention.sdpa_cudnn]: what SDPA picks on sm100 with a bundled cuDNN > 9.15 (PyTorch >= 2.11),
  the same cuDNN kernels: head dim 128 only is published, so the table has one row (held for
  every head dim).
tests/estimate/test_published_blackwell_attention.py checks that the catalog holds exactly this fit.
"""

import csv
import re
import sys
from pathlib import Path

from gpuplan import catalog
from gpuplan.estimate.fit_catalog import fit_attention_plateau, fit_attention_ramp

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "measurements" / "published" / "cudnn-frontend-sdpa" / "sdpa_training_blackwell.csv"
TOML = ROOT / "src" / "gpuplan" / "catalog" / "efficiency" / "b200.toml"
TFLOPS = 1e12


def rows(gpu: str, backend: str, min_cudnn: int = 0) -> list[dict[str, str]]:
    with open(PUBLISHED, newline="") as fh:
        return [
            r
            for r in csv.DictReader(fh)
            if r["gpu"] == gpu
            and r["backend"] == backend
            and r["causal"] == "yes"
            and r["dtype"] == "bf16"
            and (not min_cudnn or int(r["cudnn"]) >= min_cudnn)
        ]


def columns(rs: list[dict[str, str]]) -> tuple[list[float], list[float], list[float]]:
    return (
        [float(r["seq"]) for r in rs],
        [float(r["fwd_tflops"]) * TFLOPS for r in rs],
        [float(r["bwd_tflops"]) * TFLOPS for r in rs],
    )


def fit() -> dict[str, float]:
    cudnn = columns(rows("gb200", "cudnn", min_cudnn=91900))
    fwd, bwd, half = fit_attention_ramp(*cudnn, catalog.gpu("gb200").peak("bf16"))
    fa2_fwd, fa2_bwd = fit_attention_plateau(
        *columns(rows("b200", "pyt_flash_attention")), catalog.gpu("b200").peak("bf16"), half
    )
    return {"flash_fwd": fwd, "flash_bwd": bwd, "seq_half": half, "fa2_fwd": fa2_fwd, "fa2_bwd": fa2_bwd}


def main() -> None:
    values = fit()
    for key, value in values.items():
        print(f"{key} = {value}")
    if "--write" in sys.argv:
        text = TOML.read_text()
        for key, value in values.items():
            text, n = re.subn(rf"(?m)^{key} = [0-9.]+", f"{key} = {value}", text)
            if n != 1:
                raise SystemExit(f"{TOML}: expected one '{key} = ' line, found {n}")
        text = re.sub(r"(?m)^head_dim = \[.*\]$", "head_dim = [128]", text)
        text = re.sub(r"(?m)^fwd = \[.*\]$", f"fwd = [{values['flash_fwd']}]", text)
        text = re.sub(r"(?m)^bwd = \[.*\]$", f"bwd = [{values['flash_bwd']}]", text)
        TOML.write_text(text)


if __name__ == "__main__":
    main()
