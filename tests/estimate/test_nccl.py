"""NCCL's cost model (estimate/nccl.py) against published nccl-tests measurements
(tests/data/collectives/README.md names their sources): bus bandwidth by algorithm and GPU count,
time by message size."""

import csv
from pathlib import Path

import pytest

from gpuplan import catalog
from gpuplan.estimate.comm import _group, nccl_choice, nccl_fabric
from gpuplan.estimate.nccl import choose

DATA = Path(__file__).resolve().parent.parent / "data" / "collectives"
MiB = 2**20
BIG = 4 * 2**30  # the issues' 2-4 GiB messages: latency is < 1% of the time


def _rows(name):
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(f))


def _busbw(kind, size, n, gpu_id, algorithm=None):
    """nccl-tests' bus bandwidth of NCCL's pick (or of ``algorithm``'s best protocol), bytes/s."""
    gpu = catalog.gpu(gpu_id)
    g = _group("tp", n, 1, gpu.fast_domain)
    if algorithm is None:
        c = nccl_choice(kind, size, g, gpu)
    else:
        from gpuplan.estimate.nccl import candidates

        fabric = nccl_fabric(g, gpu)
        c = min((x for x in candidates(kind, size, n, 1, fabric) if x.algorithm == algorithm), key=lambda x: x.time_s)
    factor = 2 * (n - 1) / n if kind == "all-reduce" else (n - 1) / n
    return size / c.time_s * factor, c


def test_nvls_and_ring_bus_bandwidth_match_published_peaks_by_gpu_count():
    for r in _rows("nccl_nvls_busbw.csv"):
        low, _, high = r["busbw_gbps"].partition("-")
        measured = (float(low) + float(high or low)) / 2 * 1e9
        bw, c = _busbw("all-reduce", BIG, int(r["ranks"]), r["gpu"], r["algorithm"])
        assert c.algorithm == r["algorithm"]
        assert bw == pytest.approx(measured, rel=0.06), r


def test_nccl_picks_nvls_for_large_all_reduces_from_4_gpus_and_the_ring_on_2_or_3():
    # issue #1455: NVLS's bus bandwidth is the ring's at 2-4 H100s and above it from 5
    for n, algo in ((2, "ring"), (3, "ring"), (5, "nvls"), (8, "nvls")):
        assert _busbw("all-reduce", BIG, n, "h100-sxm")[1].algorithm == algo, n
    # no NVLS without NVLink4 and an NVSwitch: A100 (compute capability 8.0) runs the ring
    assert _busbw("all-reduce", BIG, 8, "a100-sxm-80gb")[1].algorithm == "ring"


def test_nccl_model_times_nccl_tests_by_size_on_an_8_gpu_h100_node():
    # dgxc-benchmarking all_reduce_perf on 8 H100s: ring LL up to 1 MiB, NVLS above
    for r in _rows("nccl_tests_h100_8gpu.csv"):
        size, measured = int(r["size_bytes"]), float(r["time_us"]) * 1e-6
        if size < 8 * 1024:
            continue
        _, c = _busbw("all-reduce", size, 8, "h100-sxm")
        if size <= MiB:
            assert c.name == "nccl ring LL" and c.time_s == pytest.approx(measured, rel=0.25), size
        elif size >= 16 * MiB:
            assert c.name == "nccl nvls Simple" and c.time_s == pytest.approx(measured, rel=0.15), size
        else:  # 2-8 MiB: NVLS is still ramping up, slower than even its corrected model
            assert 0.65 * measured <= c.time_s <= measured, size


def test_reduce_scatter_and_all_gather_stay_on_the_ring_in_one_node():
    # issue #1047: on one H100 node reduce-scatter's ring beats NVLS; NCCL's model agrees
    for kind in ("all-gather", "reduce-scatter"):
        assert _busbw(kind, BIG, 8, "h100-sxm")[1].algorithm == "ring"


def test_across_nodes_nccl_uses_nvls_tree_on_hopper_and_the_tree_for_mid_sizes_at_scale():
    gpu = catalog.gpu("h100-sxm")
    two_nodes = _group("dp", 16, 1, 8)
    assert nccl_choice("all-reduce", BIG, two_nodes, gpu).algorithm == "nvls_tree"
    a100 = catalog.gpu("a100-sxm-80gb")
    wide = _group("dp", 1024, 1, 8)  # 128 nodes: the ring's 2046 steps of latency dominate
    assert nccl_choice("all-reduce", 64 * MiB, wide, a100).algorithm == "tree"
    assert nccl_choice("all-reduce", 64 * MiB, _group("dp", 16, 1, 8), a100).algorithm == "ring"


def test_ring_latency_grows_with_the_ring_length():
    gpu = catalog.gpu("a100-sxm-80gb")
    small = [nccl_choice("all-reduce", 1024, _group("tp", n, 1, 8), gpu).time_s for n in (2, 4, 8)]
    assert small[0] < small[1] < small[2]


def test_model_rejects_a_collective_it_does_not_time():
    fabric = nccl_fabric(_group("tp", 8, 1, 8), catalog.gpu("h100-sxm"))
    with pytest.raises(ValueError, match="all-to-all"):
        choose("all-to-all", 1e6, 8, 1, fabric)
