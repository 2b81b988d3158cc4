"""Gated DeltaNet's kernel time against FLA's published H200 timings
(measurements/published/flashqla-gdn): the catalog holds the fit of scripts/fit_gdn.py, and
``gated_delta_times`` reproduces the rows better than the bytes at the streaming rate alone."""

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.compute import gated_delta_times
from gpuplan.specs.hf import model_from_hf_config

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("fit_gdn", ROOT / "scripts" / "fit_gdn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(h_qk: int, h_v: int, d: int):
    return model_from_hf_config(
        dict(
            model_type="qwen3_next",
            hidden_size=2048,
            num_hidden_layers=4,
            num_attention_heads=16,
            num_key_value_heads=2,
            intermediate_size=512,
            linear_num_key_heads=h_qk,
            linear_num_value_heads=h_v,
            linear_key_head_dim=d,
            linear_value_head_dim=d,
        )
    )


def _errors(gpu) -> dict[str, np.ndarray]:
    """Relative error of every published row by direction (the benchmark ran under CUDA graphs:
    no launch gaps)."""
    overhead = efficiency(gpu).kernel_overhead_s
    out: dict[str, list[float]] = {"fwd": [], "bwd": []}
    for r in _script().load():
        m = _model(int(r["h_qk"]), int(r["h_v"]), int(r["head_dim"]))
        f, b = gated_delta_times(m, gpu, float(r["tokens"]) * int(r["h_v"]), int(r["longest"]), 2, "bf16")
        t = f - 6 * overhead if r["direction"] == "fwd" else b - 8 * overhead
        out[r["direction"]].append(t / (float(r["fla_ms"]) * 1e-3) - 1)
    return {k: np.array(v) for k, v in out.items()}


def test_the_catalog_holds_the_fit_of_the_published_fla_timings():
    fitted = _script().fit()
    e = efficiency(catalog.gpu("h200"))
    assert e.gdn_hbm_fwd == fitted["gdn_hbm_fwd"] and e.gdn_hbm_bwd == fitted["gdn_hbm_bwd"]
    assert e.gdn_chunk_fwd_s == pytest.approx(fitted["gdn_chunk_fwd_us"] * 1e-6)
    assert e.gdn_chunk_bwd_s == pytest.approx(fitted["gdn_chunk_bwd_us"] * 1e-6)
    # each direction's kernels reach less of the HBM peak than streaming copies do
    assert e.gdn_hbm_bwd < e.gdn_hbm_fwd < e.hbm


def test_the_transcription_holds_every_row_of_both_tables():
    rows = _script().load()
    assert sum(r["direction"] == "fwd" for r in rows) == 171
    assert sum(r["direction"] == "bwd" for r in rows) == 32
    one = next(r for r in rows if r["case"] == "35B/9B/4B TP1 1x32768")
    assert (one["h_qk"], one["h_v"], one["fla_ms"]) == ("16", "32", "1.89")


def test_the_fitted_kernel_time_beats_bytes_at_the_streaming_rate_in_both_directions():
    gpu = catalog.gpu("h200")
    fitted = _errors(gpu)
    e = efficiency(gpu)
    plain = dataclasses.replace(e, gdn_hbm_fwd=None, gdn_hbm_bwd=None, gdn_chunk_fwd_s=0.0, gdn_chunk_bwd_s=0.0)
    streaming = _errors(dataclasses.replace(gpu, efficiency=plain))
    for direction in ("fwd", "bwd"):
        assert np.mean(fitted[direction] ** 2) < np.mean(streaming[direction] ** 2)
        # the streaming rate alone is too fast on every row: FLA's kernels do not stream
        assert (streaming[direction] < 0).all()


def test_a_short_sequence_pays_fewer_chunk_steps_than_a_long_one_of_the_same_tokens():
    gpu, m = catalog.gpu("h200"), _model(4, 8, 128)
    e = efficiency(gpu)
    one = gated_delta_times(m, gpu, 32768 * 8, 32768, 2, "bf16")
    eight = gated_delta_times(m, gpu, 32768 * 8, 4096, 2, "bf16")
    chunks_saved = 32768 // 64 - 4096 // 64
    assert one[0] - eight[0] == pytest.approx(chunks_saved * e.gdn_chunk_fwd_s)
    assert one[1] - eight[1] == pytest.approx(2 * chunks_saved * e.gdn_chunk_bwd_s)
