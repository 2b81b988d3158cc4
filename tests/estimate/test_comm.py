"""Collective volumes against a simulated ring, and group placement on nodes."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.estimate.comm import _group, bus_bandwidth, bytes_sent_per_rank, collective_time, place
from gpuplan.specs.parallel import ParallelPlan


def simulate_ring_all_reduce(n: int, elements: int) -> tuple[np.ndarray, int]:
    """A literal ring all-reduce (reduce-scatter then all-gather over n chunks): the result each
    rank ends with, and the elements each rank sent."""
    data = [np.arange(elements, dtype=np.float64) * (r + 1) for r in range(n)]
    chunks = [np.array_split(d.copy(), n) for d in data]
    sent = 0
    for step in range(n - 1):  # reduce-scatter: rank r sends chunk (r - step) to r + 1
        msgs = [(r, (r - step) % n, chunks[r][(r - step) % n].copy()) for r in range(n)]
        for r, c, payload in msgs:
            chunks[(r + 1) % n][c] += payload
        sent += len(msgs[0][2])
    for step in range(n - 1):  # all-gather: rank r passes on the reduced chunk (r + 1 - step)
        msgs = [(r, (r + 1 - step) % n, chunks[r][(r + 1 - step) % n].copy()) for r in range(n)]
        for r, c, payload in msgs:
            chunks[(r + 1) % n][c] = payload
        sent += len(msgs[0][2])
    return np.concatenate(chunks[0]), sent


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_buffer(n):
    elements = 64 * n
    result, sent = simulate_ring_all_reduce(n, elements)
    expected = np.arange(elements) * sum(range(1, n + 1))
    assert np.allclose(result, expected)  # the simulation really all-reduces
    assert bytes_sent_per_rank("all-reduce", elements, n) == pytest.approx(sent)
    assert sent == pytest.approx(2 * (n - 1) / n * elements)


def test_gathers_and_scatters_send_n_minus_1_over_n():
    assert bytes_sent_per_rank("all-gather", 800, 8) == pytest.approx(700)
    assert bytes_sent_per_rank("reduce-scatter", 800, 8) == pytest.approx(700)
    assert bytes_sent_per_rank("p2p", 800, 8) == 800


def test_tensor_parallel_stays_in_the_node_and_data_parallel_crosses_nodes():
    gpu = catalog.gpu("h100-sxm")
    g = place(ParallelPlan(dp=8, tp=8), gpu)
    assert not g["tp"].crosses_nodes and g["tp"].per_domain == 8
    assert g["dp"].crosses_nodes and g["dp"].per_domain == 1 and g["dp"].domains == 8
    # tp=2 leaves four DP ranks in each node
    g = place(ParallelPlan(dp=32, tp=2), gpu)
    assert g["dp"].per_domain == 4 and g["dp"].domains == 8


def test_bus_bandwidth_uses_one_nic_per_rank_in_the_node():
    gpu = catalog.gpu("a100-sxm-80gb")  # 8 x 200 Gb/s NICs: 25 GB/s per GPU
    e = gpu.efficiency
    one = _group("dp", 16, 8, gpu.gpus_per_node)
    four = _group("dp", 16, 2, gpu.gpus_per_node)
    assert bus_bandwidth(one, gpu) == pytest.approx(25e9 * e.inter_bus)
    assert bus_bandwidth(four, gpu) == pytest.approx(4 * 25e9 * e.inter_bus)
    inside = _group("tp", 8, 1, gpu.gpus_per_node)
    assert bus_bandwidth(inside, gpu) == pytest.approx(300e9 * e.intra_bus)


def test_large_all_reduce_time_approaches_volume_over_bus_bandwidth():
    gpu = catalog.gpu("h100-sxm")
    g = _group("tp", 8, 1, 8)
    size = 8e9
    t = collective_time("all-reduce", size, g, gpu)
    assert t == pytest.approx(2 * 7 / 8 * size / bus_bandwidth(g, gpu), rel=1e-3)
    assert collective_time("all-reduce", 1.0, g, gpu) > 0  # latency alone
