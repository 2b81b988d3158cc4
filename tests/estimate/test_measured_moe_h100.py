"""MoE experts' grouped GEMMs against one H100 measured by scripts/measure_moe_gpu.py
(measurements/h100-sxm-2026-11-27/kernels/moe.json: torch._grouped_mm over the fc1 and fc2 of five
MoE models, 1-256 local experts, 128-8192 rows per expert, even and routed row counts).

The bounds are what the model achieves on this data, kept as regression guards."""

import json
import math
import random
import statistics
from pathlib import Path

import pytest

from gpuplan import catalog
from gpuplan.estimate.kernels import gemm_time, row_tiles
from gpuplan.specs.hardware import for_job

MOE = Path(__file__).resolve().parents[2] / "measurements" / "h100-sxm-2026-11-27" / "kernels" / "moe.json"


def _errors(counts: str, ragged: bool) -> list[float]:
    """Predicted over measured seconds - 1 of the forward and input-gradient grouped GEMMs (the two
    whose row tiles follow the tokens per expert) for rows with ``counts`` balanced or routed."""
    gpu = for_job(catalog.gpu("h100-sxm"), 1)  # timed alone on one GPU
    out = []
    for r in json.loads(MOE.read_text())["grouped"]:
        if r["counts"] != counts:
            continue
        experts, n, k = r["experts"], r["n"], r["k"]
        mean = sum(r["rows_per_expert"]) / experts
        for op, (n_, k_) in {"fwd": (n, k), "dgrad": (k, n)}.items():
            predicted = gemm_time(gpu, "bf16", mean, n_, k_, experts, ragged)
            out.append(predicted / r[f"grouped_mm_{op}_s"] - 1)
    return out


def test_a_ragged_gemm_pays_half_a_row_tile_more_on_average_than_its_mean_rows_fill():
    # oracle: counts spread over several tiles, each GEMM's tiles counted one by one
    rng = random.Random(0)
    for tm in (64, 128, 256):
        for mean in (300.0, 1000.0, 5000.0):
            counts = [rng.uniform(mean - 2 * tm, mean + 2 * tm) for _ in range(20000)]
            tiles = statistics.mean(math.ceil(c / tm) for c in counts)
            assert row_tiles(mean, tm, ragged=True) == pytest.approx(tiles, rel=0.01)
    # a GEMM with rows pays at least one tile; one that is not ragged pays whole tiles of its rows
    assert row_tiles(10.0, 128, ragged=True) == 1.0
    assert row_tiles(0.25, 128, ragged=True) == 0.25  # a quarter of the GEMMs have a row at most
    assert row_tiles(129.0, 128, ragged=False) == 2


def test_grouped_gemms_over_even_counts_are_predicted_from_whole_row_tiles():
    errors = _errors("balanced", ragged=False)
    assert len(errors) == 108
    assert abs(statistics.median(errors)) <= 0.02  # measured: +0.4%
    assert statistics.mean(map(abs, errors)) <= 0.10  # 9.5%


def test_grouped_gemms_over_routed_counts_pay_each_experts_part_filled_tile():
    # whole tiles of the mean count read routed GEMMs 13% fast; half a tile per expert more is right
    plain, ragged = _errors("routed", ragged=False), _errors("routed", ragged=True)
    assert statistics.median(plain) < -0.10  # measured: -13.3%
    assert abs(statistics.median(ragged)) <= 0.03  # -2.0%
    assert statistics.mean(map(abs, ragged)) <= 0.16  # 15.2%
    assert statistics.mean(map(abs, ragged)) < statistics.mean(map(abs, plain))


UNFUSED = MOE.parent / "unfused.json"


def _eager_rates() -> list[tuple[str, float, float]]:
    """(op, bytes, seconds) of each forward and backward of Megatron's unfused chains as measured."""
    out = []
    for r in json.loads(UNFUSED.read_text())["rows"]:
        out.append((r["op"], r["fwd_bytes"], r["fwd_s"]))
        out.append((r["op"], r["bwd_bytes"], r["fwd_bwd_s"] - r["fwd_s"]))
    return out


def test_the_catalogs_eager_elementwise_rate_is_the_measured_chains_median():
    gpu = catalog.gpu("h100-sxm")
    rates = [nbytes / s for _, nbytes, s in _eager_rates()]
    assert gpu.efficiency.eager_hbm == round(statistics.median(rates) / gpu.hbm_bytes_per_s, 2)


def test_megatrons_unfused_chains_are_predicted_from_the_bytes_they_move_at_the_eager_rate():
    from gpuplan.estimate.kernels import eager_memory_time, memory_time

    gpu = for_job(catalog.gpu("h100-sxm"), 1)
    kernels = {"rope_q": 12, "rope_k": 12, "glu_clamp": 3}  # forward; backward 7 / 9 (unfused_ops)
    eager, streaming = [], []
    for i, (op, nbytes, s) in enumerate(_eager_rates()):
        k = kernels[op] if i % 2 == 0 else {"rope_q": 7, "rope_k": 7, "glu_clamp": 9}[op]
        eager.append(eager_memory_time(gpu, nbytes, k) / s - 1)
        streaming.append(memory_time(gpu, nbytes, k) / s - 1)
    assert statistics.median(streaming) < -0.3  # at a streaming copy's rate they read 35-40% fast
    # at the eager rate: median +5.1% (the launch gaps a CUDA graph removed), max 14.9%
    assert max(map(abs, eager)) <= 0.16 and abs(statistics.median(eager)) <= 0.06
