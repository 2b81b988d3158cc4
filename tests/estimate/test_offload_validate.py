"""The offload validation set is read, predicted and its errors computed (not tuned)."""

import csv
import statistics

import pytest

from gpuplan.estimate.offload_validate import CSV, flexgen_placement, summary, validate_offload


def test_every_row_is_predicted_and_its_error_is_predicted_over_measured_minus_one():
    with open(CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    checks = validate_offload()
    assert [c.id for c in checks] == [r["id"] for r in rows]
    for c, r in zip(checks, rows):
        assert r["source"] and c.measured == float(r["value"])
        assert c.predicted > 0
        assert c.error == c.predicted / float(r["value"]) - 1
    own = [
        abs(c.predicted / c.measured - 1)
        for c, r in zip(checks, rows)
        if c.kind != "baseline" and r["compare"] == "point"
    ]
    s = summary(checks)
    assert s["median_abs_error"] == statistics.median(own)
    assert s["min_baseline_margin"] >= 0  # the placement chosen is no slower than the baselines'
    assert s["min_bound_margin"] >= 0  # a published lower bound (ZeRO-Infinity's 1T on a DGX-2) is met


def test_every_row_names_where_its_value_was_read_and_how():
    with open(CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        assert r["tag"] in ("S", "S2", "D"), r["id"]
        assert r["url"].startswith("https://"), r["id"]
        if r["tag"] == "D":
            assert "=" in r["note"], f"{r['id']}: a derived value carries its formula"


def test_flexgen_percent_reads_as_weights_and_cache_shares_with_the_rest_on_disk():
    # FlexGen's --percent: weights GPU, CPU; cache GPU, CPU; activations GPU, CPU; rest on disk
    p = flexgen_placement("0 50 0 0 0 100")
    assert (p.weights_gpu, p.weights_cpu, p.weights_disk) == (0.0, 0.5, 0.5)
    assert (p.kv_gpu, p.kv_cpu, p.kv_disk) == (0.0, 0.0, 1.0)
    p = flexgen_placement("20 80 0 100 0 100")
    assert (p.weights_gpu, p.weights_cpu, p.weights_disk) == (0.2, 0.8, 0.0)
    assert (p.kv_gpu, p.kv_cpu, p.kv_disk) == (0.0, 1.0, 0.0)


def test_flexgen_opt30b_row_matches_the_cost_model_worked_by_hand():
    # FlexGen's OPT-30B run: 20% of the weights on the GPU, the rest and the cache on the CPU,
    # block 144, prompt 512, 32 generated. OPT-30B: 48 layers, h = 7168, a layer 12h^2 + 13h
    # parameters in fp16; KV 4h bytes per token and layer; machine rates from the row.
    with open(CSV, newline="") as f:
        r = next(x for x in csv.DictReader(f) if x["id"] == "flexgen-opt30b-t4-512")
    h, L, b, s_in, n = 7168, 48, 144, 512, 32
    layer = 2 * (12 * h * h + 13 * h)
    kv_tok = 4 * h
    pcie, cpu_flops = float(r["pcie_gbps"]) * 1e9, float(r["cpu_tflops"]) * 1e12
    gemm = float(r["gemm_fraction"]) * float(r["gpu_tflops16"]) * 1e12
    hbm = 0.85 * float(r["hbm_gbps"]) * 1e9
    ctx = s_in + n / 2
    # decode, per layer: ctog + hop + (GPU matmul + CPU attention, one after the other on the
    # layer's dependency path: cost_model.py's compg adds them); a matmul weight is 2 FLOPs
    # per token per parameter (biases and norms are not matmuls: 12h^2 of the 12h^2 + 13h)
    ctog = 0.8 * layer / pcie
    hop = b * 4 * h * 2 / pcie
    gpu_c = max(b * 2 * 12 * h * h / gemm, layer / hbm)
    cpu_c = b * ctx * 4 * h / cpu_flops
    vocab, embed = 50272, 7168
    head_flops = 2 * vocab * embed
    edge = 2 * (vocab * embed + 2048 * embed + 2 * embed + 2 * embed)  # tokens, positions, final norm
    head = max(b * head_flops / gemm, edge / 2 / hbm)
    step = L * (ctog + hop + gpu_c + cpu_c) + head
    # prefill, per layer: max(ctog, cache down over PCIe, GPU matmul + GPU attention)
    tokens = b * s_in
    pf_c = max(tokens * 2 * 12 * h * h / gemm, layer / hbm) + b * s_in * s_in / 2 * 4 * h / gemm
    gtoc = tokens * kv_tok / pcie
    prefill = L * max(ctog, gtoc, pf_c) + b * head_flops / gemm
    oracle = b * n / (prefill + n * step)
    (check,) = [c for c in validate_offload() if c.id == "flexgen-opt30b-t4-512"]
    assert check.predicted == pytest.approx(oracle, rel=0.002)
