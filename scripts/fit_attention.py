"""Fit PyTorch SDPA's cuDNN attention rates by head dim from a measured GPU (scripts/measure_gpu.py)
and, with --write, store them in catalog/efficiency/h100-sxm.toml ([attention.sdpa_cudnn]).

    python scripts/fit_attention.py [--write]

The fractions are over peak x the clock the kernels ran at: one GPU back to back, its
``solo_sustained`` (the measured rate, catalog/efficiency/h100-sxm.toml); a multi-GPU run scales
them by its ``sustained`` like every other kernel. tests/estimate/test_measured_h100.py checks that
the catalog holds exactly this fit.
"""

import json
import re
import sys
from pathlib import Path

from gpuplan import catalog
from gpuplan.estimate.calibrate import fit_attention_table

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "measurements" / "h100-sxm-2026-11-23" / "kernels" / "attention.json"
TOML = ROOT / "src" / "gpuplan" / "catalog" / "efficiency" / "h100-sxm.toml"


def fit() -> tuple[tuple[int, float, float], ...]:
    gpu = catalog.gpu("h100-sxm")
    e = gpu.efficiency
    return fit_attention_table(json.loads(MEASURED.read_text()), gpu.peak("bf16"), e.solo_sustained or e.sustained)


def table_text(table: tuple[tuple[int, float, float], ...]) -> str:
    return (
        "[attention.sdpa_cudnn]\n"
        "# PyTorch SDPA's cuDNN backend (PyTorch 2.11, cuDNN 9.19), causal, >= 4K tokens: measured rate over\n"
        "# peak x solo_sustained (the clock they ran at) by head dim (measurements/h100-sxm-2026-11-23,\n"
        "# scripts/fit_attention.py)\n"
        f"head_dim = {[d for d, _, _ in table]}\n"
        f"fwd = {[f for _, f, _ in table]}\n"
        f"bwd = {[b for _, _, b in table]}\n"
    )


def main() -> None:
    table = fit()
    print(table_text(table), end="")
    if "--write" in sys.argv:
        text = TOML.read_text()
        block = re.compile(r"(?ms)^\[attention\.sdpa_cudnn\]\n.*?(?=^\[|\Z)")
        new = table_text(table) + "\n"
        text = block.sub(new, text) if block.search(text) else text.replace("\n[memory]", "\n" + new + "[memory]")
        TOML.write_text(text)


if __name__ == "__main__":
    main()
