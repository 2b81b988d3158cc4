"""Fit each calibrated GPU family's sustained tensor-core fraction (gpuplan.estimate.calibrate)
over the validation rows and, with --write, store it in catalog/efficiency/FAMILY.toml.

    python scripts/fit_sustained.py [--write]
"""

import re
import sys
from pathlib import Path

from gpuplan.estimate.calibrate import family_rows, fit_sustained

FAMILIES = ("a100-sxm", "h100-sxm")  # the families with published runs in catalog/validation
CATALOG = Path(__file__).resolve().parent.parent / "src" / "gpuplan" / "catalog" / "efficiency"


def main() -> None:
    for family in FAMILIES:
        value, mean = fit_sustained(family)
        print(f"{family}: sustained = {value:.2f} (mean |error| {mean:.1%} over {len(family_rows(family))} runs)")
        if "--write" in sys.argv:
            path = CATALOG / f"{family}.toml"
            text = re.sub(r"(?m)^sustained = [0-9.]+", f"sustained = {value:.2f}", path.read_text())
            path.write_text(text)


if __name__ == "__main__":
    main()
