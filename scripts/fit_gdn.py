"""Fit the Hopper family's Gated DeltaNet kernel time (catalog/efficiency/h100-sxm.toml,
[linear_attention]) from the FLA kernel timings Qwen published with FlashQLA
(measurements/published/flashqla-gdn) and, with --write, store them.

    python scripts/fit_gdn.py [--transcribe BENCHMARK_RESULTS_H200.txt] [--write]

--transcribe reads FlashQLA's benchmark/benchmark_results_H200.txt (QwenLM/FlashQLA) and writes
its FLA columns (flash-linear-attention 0.5.1's chunk_gated_delta_rule, forward and backward, on
one H200, head dim 128) to the CSV; nothing is typed in by hand.

The model (gpuplan.estimate.compute.gated_delta_times): each direction moves the bytes FLA's
kernels read and write (compute.gated_delta_bytes) at its own share of the HBM peak
(``gdn_hbm_fwd``, ``gdn_hbm_bwd``: the backward's kernels reach less of it), plus its state
passes, which walk a sequence's chunks one after another: ``gdn_chunk_fwd_us`` per chunk forward (one
pass, chunk_gated_delta_rule_fwd_h) and ``gdn_chunk_bwd_us`` per chunk and pass backward (two: the
recomputed forward pass and chunk_gated_delta_rule_bwd_dhu). Four numbers, fitted by linear least
squares on relative error over every row (171 forward, 32 backward).
tests/estimate/test_published_gdn.py checks that the catalog holds exactly this fit.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "measurements" / "published" / "flashqla-gdn" / "fla_gdn_h200.csv"
TOML = ROOT / "src" / "gpuplan" / "catalog" / "efficiency" / "h100-sxm.toml"
SOURCE = "QwenLM/FlashQLA benchmark/benchmark_results_H200.txt"
COMMIT = "6e5d2ea1536f50485746caf7ff7fb4b846a85040"
FIELDS = ("direction", "case", "sequences", "tokens", "longest", "h_qk", "h_v", "head_dim", "fla_ms")


def _lengths(case: str) -> list[int]:
    """Sequence lengths of a forward case: "1x32768", "8192x4" (4 of 8192), "28672+4096"."""
    if "+" in case:
        return [int(x) for x in case.split("+")]
    first, n = (int(x) for x in case.split("x"))
    return [n] if first == 1 else [first] * n


def transcribe(path: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    direction = ""
    for line in path.read_text().splitlines():
        if "FORWARD BENCHMARKS" in line:
            direction = "fwd"
        elif "BACKWARD BENCHMARKS" in line:
            direction = "bwd"
        fwd = re.match(r"^(.+?)\s{2,}(\d+x\d+|\d+\+\d+)\s+(\d+)\s+(\d+)\s+\S+ms\s+\S+ms\s+(\S+)ms", line)
        bwd = re.match(r"^(hk\d+_hv\d+)\s+(\d+)k_(\d+)seq\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+ms\s+(\S+)ms", line)
        if direction == "fwd" and fwd:
            lengths = _lengths(fwd.group(2))
            rows.append(
                dict(
                    direction="fwd",
                    case=f"{fwd.group(1).strip()} {fwd.group(2)}",
                    sequences=len(lengths),
                    tokens=sum(lengths),
                    longest=max(lengths),
                    h_qk=int(fwd.group(3)),
                    h_v=int(fwd.group(4)),
                    head_dim=128,
                    fla_ms=float(fwd.group(5)),
                )
            )
        elif direction == "bwd" and bwd:
            tokens, n = int(bwd.group(2)) * 1024, int(bwd.group(3))
            rows.append(
                dict(
                    direction="bwd",
                    case=f"{bwd.group(1)} {bwd.group(2)}k_{n}seq",
                    sequences=n,
                    tokens=tokens,
                    longest=tokens // n,
                    h_qk=int(bwd.group(4)),
                    h_v=int(bwd.group(5)),
                    head_dim=128,
                    fla_ms=float(bwd.group(7)),
                )
            )
    return rows


def load() -> list[dict[str, str]]:
    with open(PUBLISHED, newline="") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def design(row: dict[str, str]) -> tuple[float, float, float, float]:
    """The row's time as coefficients of (1 / (gdn_hbm_fwd x peak), chunk_fwd_s,
    1 / (gdn_hbm_bwd x peak), chunk_bwd_s)."""
    from gpuplan.estimate.compute import gated_delta_bytes
    from gpuplan.estimate.flops import GDN_CHUNK

    d = int(row["head_dim"])
    fwd_b, bwd_b = gated_delta_bytes(d, d, 2)
    work = float(row["tokens"]) * int(row["h_v"])
    chunks = -(-int(row["longest"]) // GDN_CHUNK)
    if row["direction"] == "fwd":
        return work * fwd_b, chunks, 0.0, 0.0
    return 0.0, 0.0, work * bwd_b, 2.0 * chunks


def fit(rows: list[dict[str, str]] | None = None) -> dict[str, float]:
    from gpuplan import catalog

    rows = load() if rows is None else rows
    peak = catalog.gpu("h200").hbm_bytes_per_s
    a = np.array([design(r) for r in rows], dtype=np.float64)
    t = np.array([float(r["fla_ms"]) * 1e-3 for r in rows])
    # relative error: each row's equation divided by its measured time
    x, *_ = np.linalg.lstsq(a / t[:, None], np.ones(len(rows)), rcond=None)
    inv_fwd, chunk_fwd, inv_bwd, chunk_bwd = (float(v) for v in x)
    return {
        "gdn_hbm_fwd": round(1.0 / (inv_fwd * peak), 3),
        "gdn_chunk_fwd_us": round(chunk_fwd * 1e6, 3),
        "gdn_hbm_bwd": round(1.0 / (inv_bwd * peak), 3),
        "gdn_chunk_bwd_us": round(chunk_bwd * 1e6, 3),
    }


def main() -> None:
    if "--transcribe" in sys.argv:
        src = Path(sys.argv[sys.argv.index("--transcribe") + 1])
        rows = transcribe(src)
        PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
        with open(PUBLISHED, "w", newline="") as fh:
            fh.write(f"# {SOURCE} at {COMMIT}: the FLA columns (flash-linear-attention 0.5.1), H200\n")
            w = csv.DictWriter(fh, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        print(f"{len(rows)} rows -> {PUBLISHED}")
    values = fit()
    for key, value in values.items():
        print(f"{key} = {value}")
    if "--write" in sys.argv:
        text = TOML.read_text()
        for key, value in values.items():
            text, n = re.subn(rf"(?m)^{key} = [0-9.]+", f"{key} = {value}", text)
            if n != 1:
                raise SystemExit(f"{TOML}: expected one '{key} = ' line, found {n}")
        TOML.write_text(text)


if __name__ == "__main__":
    main()
