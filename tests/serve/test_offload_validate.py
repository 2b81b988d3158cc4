"""The offload validation set is read, predicted and its errors computed (not tuned)."""

import csv
import statistics

import pytest

from gpuplan import catalog
from gpuplan.serve.offload_validate import (
    CSV,
    HELD_OUT,
    flexgen_block,
    flexgen_placement,
    summary,
    validate_offload,
)


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


def test_flexgen_percent_places_whole_tensors_by_the_midpoint_of_their_bytes():
    # FlexGen's --percent: weights GPU, CPU; cache GPU, CPU; activations GPU, CPU; rest on disk.
    # Its runtime places whole tensors (flex_opt.py init_weight_list): a tensor goes to disk, CPU
    # or GPU by where the middle of its bytes falls in its list's running total. OPT's attention
    # list is q, bq, k, bk, v, bv, out, bout, ln, ln (4h^2 + 6h), its MLP list fc1 (4h x h), b1
    # (4h), fc2, b2, ln, ln (8h^2 + 7h); a layer is 12h^2 + 13h.
    opt30b, opt175b = catalog.model("opt-30b"), catalog.model("opt-175b")
    h = opt175b.hidden_size
    # "0 50": the disk holds q, bq, k, bk (their middles lie below 50%) and fc1, b1
    p = flexgen_placement("0 50 0 0 0 100", opt175b)
    disk = (2 * h * h + 2 * h) + (4 * h * h + 4 * h)
    assert p.weights_disk == pytest.approx(disk / (12 * h * h + 13 * h), rel=1e-12)
    assert p.weights_gpu == 0.0 and p.weights_cpu == pytest.approx(1 - p.weights_disk, rel=1e-12)
    assert (p.kv_gpu, p.kv_cpu, p.kv_disk) == (0.0, 0.0, 1.0)
    # "20 80": only out's middle (87.5% of the attention list) lies past 80%; fc2's middle is at
    # 75%; so the GPU holds out, bout and the four LayerNorm vectors and fc2's bias: h^2 + 6h,
    # 1/12 of the layer rather than 20%
    h = opt30b.hidden_size
    p = flexgen_placement("20 80 0 100 0 100", opt30b)
    assert p.weights_gpu == pytest.approx((h * h + 6 * h) / (12 * h * h + 13 * h), rel=1e-12)
    assert p.weights_disk == 0.0
    assert (p.kv_gpu, p.kv_cpu, p.kv_disk) == (0.0, 1.0, 0.0)
    # "10 90": out's middle at 87.5% is below 90%, so it stays on the CPU with the rest
    p = flexgen_placement("10 90 0 100 0 100", opt30b)
    assert p.weights_gpu == pytest.approx(6 * h / (12 * h * h + 13 * h), rel=1e-12)
    p = flexgen_placement("100 0 100 0 100 0", opt30b)
    assert (p.weights_gpu, p.weights_cpu, p.weights_disk) == (1.0, 0.0, 0.0)


def _row(row_id: str) -> dict:
    with open(CSV, newline="") as f:
        return next(x for x in csv.DictReader(f) if x["id"] == row_id)


def test_flexgen_opt30b_row_matches_the_cost_model_worked_by_hand():
    # FlexGen's OPT-30B run: --percent 20 80 (h^2 + 6h of each layer on the GPU, as its runtime
    # places whole tensors, the rest on the CPU) with the cache on the CPU, block 48 x 3, prompt 512,
    # 32 generated: the prefill yields the first token, 31 decode steps the rest (FlexGen's
    # cost_model.py T = Tpre * l + Tgen * (n - 1) * l). OPT-30B: 48 layers, h = 7168, a layer
    # 12h^2 + 13h parameters in fp16; KV 4h bytes per token and layer; machine rates from the row.
    r = _row("flexgen-opt30b-t4-512")
    h, L, b, s_in, n = 7168, 48, 144, 512, 32
    layer = 2 * (12 * h * h + 13 * h)
    on_cpu = 1 - (h * h + 6 * h) / (12 * h * h + 13 * h)
    kv_tok = 4 * h
    pcie, cpu_flops = float(r["pcie_gbps"]) * 1e9, float(r["cpu_tflops"]) * 1e12
    gemm = float(r["gemm_fraction"]) * float(r["gpu_tflops16"]) * 1e12
    hbm = 0.85 * float(r["hbm_gbps"]) * 1e9
    ctx = s_in + n / 2
    # decode, per layer: ctog + hop + (GPU matmul + CPU attention, one after the other on the
    # layer's dependency path: cost_model.py's compg adds them); a matmul weight is 2 FLOPs
    # per token per parameter (biases and norms are not matmuls: 12h^2 of the 12h^2 + 13h); the
    # block runs as 3 GPU batches of 48 (FlexGen's Algorithm 1), each reading the layer from HBM
    ctog = on_cpu * layer / pcie
    hop = b * 4 * h * 2 / pcie
    gpu_c = max(b * 2 * 12 * h * h / gemm, 3 * layer / hbm)
    cpu_c = b * ctx * 4 * h / cpu_flops
    vocab, embed = 50272, 7168
    head_flops = 2 * vocab * embed
    edge = 2 * (vocab * embed + 2048 * embed + 2 * embed + 2 * embed)  # tokens, positions, final norm
    head = max(b * head_flops / gemm, edge / 2 / hbm)
    step = L * (ctog + hop + gpu_c + cpu_c) + head
    # prefill, per layer: max(ctog, cache down over PCIe, GPU matmul + GPU attention)
    tokens = b * s_in
    pf_c = max(tokens * 2 * 12 * h * h / gemm, 3 * layer / hbm) + b * s_in * s_in / 2 * 4 * h / gemm
    gtoc = tokens * kv_tok / pcie
    prefill = L * max(ctog, gtoc, pf_c) + b * head_flops / gemm
    oracle = b * n / (prefill + (n - 1) * step)
    (check,) = [c for c in validate_offload() if c.id == "flexgen-opt30b-t4-512"]
    assert check.predicted == pytest.approx(oracle, rel=0.002)


def test_flexgen_opt175b_row_is_bound_by_the_disk_read_of_its_cache_and_half_its_weights():
    # FlexGen's OPT-175B run (--percent 0 50 0 0 0 100, block 32 x 8 = 256, prompt 512): every
    # decode step reads each layer's whole cache and its disk half of the weights back from the
    # SSD (FlexGen's cost_model.py dtocg = (4 bls (s + n/2) h1 cn + wi wn) / dtoc_bdw), at the
    # 2 GB/s read the paper measured on this machine (section 6); the CPU->GPU load of the
    # layer's weights comes before it (Tgen = ctogg + max(dtocg, ...)). OPT-175B: 96 layers,
    # h = 12288, a layer 12h^2 + 13h parameters; KV 4h bytes per token and layer.
    r = _row("flexgen-opt175b-t4-512")
    h, L, b, s_in, n = 12288, 96, 256, 512, 32
    layer = 2 * (12 * h * h + 13 * h)
    on_disk = (6 * h * h + 6 * h) / (12 * h * h + 13 * h)  # q, k, fc1 and their biases
    read, pcie = float(r["disk_read_gbps"]) * 1e9, float(r["pcie_gbps"]) * 1e9
    assert read == 2e9
    ctx = s_in + n / 2
    dtoc = (on_disk * layer + b * ctx * 4 * h) / read
    ctog = layer / pcie
    hop = b * 4 * h * 2 / pcie
    decode = (n - 1) * L * (ctog + hop + dtoc)  # the disk binds: compute and CPU attention hide under it
    (check,) = [c for c in validate_offload() if c.id == "flexgen-opt175b-t4-512"]
    tokens = b * n
    # the prefill (GPU-bound, ~22 s a layer) and the LM head are the rest: within 1% of the
    # decode-only bound plus a compute-bound prefill worked the same way
    gemm = float(r["gemm_fraction"]) * float(r["gpu_tflops16"]) * 1e12
    prefill = L * (b * s_in * 2 * 12 * h * h / gemm)
    assert check.predicted == pytest.approx(tokens / (prefill + decode), rel=0.01)


def test_gpuplan_search_is_no_slower_than_flexgen_s_own_placement_by_the_model():
    # the target: the placement chosen is no slower than the published system's on the
    # same machine; each FlexGen row's placement is timed by the same cost model as the search
    checks = [c for c in validate_offload() if c.search_margin is not None]
    assert len(checks) == 6
    assert summary(validate_offload())["min_search_margin"] >= 0


def _held_out_rows() -> list[dict]:
    with open(HELD_OUT, newline="") as f:
        return list(csv.DictReader(f))


def test_the_held_out_set_shares_no_published_run_with_the_shared_set_and_names_its_sources():
    with open(CSV, newline="") as f:
        shared = list(csv.DictReader(f))
    held = _held_out_rows()
    assert {r["id"] for r in held}.isdisjoint(r["id"] for r in shared)
    seen = {
        (r["model"], r["input_len"], r["output_len"], r["system"], r["percent"], r["block"], r["metric"])
        for r in shared
    }
    for r in held:
        assert r["tag"] in ("S", "S2", "D") and r["url"].startswith("https://") and r["source"], r["id"]
        assert r["system"] in ("flexgen", "zero-inference", "flexgen-best", "baseline"), r["id"]
        if r["system"] in ("flexgen", "zero-inference"):  # the system's own placement, stated
            assert r["percent"] and "x" in r["block"], r["id"]
        # the same run under the same metric is not in the shared set (disk rates aside: Table 24's runs)
        key = (r["model"], r["input_len"], r["output_len"], r["system"], r["percent"], r["block"], r["metric"])
        assert key not in seen or r["disk_read_gbps"] != "2", r["id"]


def test_validate_offload_held_out_reports_each_row_and_its_summary():
    rows = _held_out_rows()
    checks = validate_offload(HELD_OUT)
    assert [c.id for c in checks] == [r["id"] for r in rows]
    for c, r in zip(checks, rows):
        assert c.measured == float(r["value"]) and c.error == c.predicted / c.measured - 1
    s = summary(checks)
    own = [abs(c.error) for c in checks if c.kind != "baseline"]
    assert s["median_abs_error"] == statistics.median(own) and s["max_abs_error"] == max(own)
    # visible guards of what the rows say now (not tuned): the median is within the 20%;
    # gpuplan's searched placement is no slower than FlexGen's own placement timed by the same
    # model, nor than any published baseline
    assert s["median_abs_error"] < 0.12  # 10.4% now
    assert s["min_search_margin"] >= 0 and s["min_baseline_margin"] >= 0
    # rows the model does not match say why in their note
    for c, r in zip(checks, rows):
        if c.kind != "baseline" and abs(c.error) > 0.2:
            assert r["note"].startswith("NOT MATCHED"), c.id


def test_a_flexgen_block_written_gxk_is_g_times_k_sequences_in_gpu_batches_of_g():
    assert flexgen_block("48x3") == (144, 48)
    assert flexgen_block("12x12") == (144, 12)
    assert flexgen_block("7") == (7, 7)
