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


def test_large_all_reduce_time_approaches_volume_over_bus_bandwidth_without_nvlink_sharp():
    gpu = catalog.gpu("a100-sxm-80gb")  # NVLink3: NCCL's ring, no NVLS
    g = _group("tp", 8, 1, 8)
    size = 8e9
    t = collective_time("all-reduce", size, g, gpu)
    assert t == pytest.approx(2 * 7 / 8 * size / bus_bandwidth(g, gpu), rel=1e-3)
    assert collective_time("all-reduce", 1.0, g, gpu) > 0  # latency alone


def test_nvlink_sharp_beats_the_ring_bus_bandwidth_on_8_h100s():
    # NVLS: 2 B x 0.85 x 7/9 of bus bandwidth against the ring's B (estimate/nccl.py)
    gpu = catalog.gpu("h100-sxm")
    g = _group("tp", 8, 1, 8)
    size = 8e9
    ring = 2 * 7 / 8 * size / bus_bandwidth(g, gpu)
    assert collective_time("all-reduce", size, g, gpu) == pytest.approx(ring / (2 * 0.85 * 7 / 9), rel=1e-3)


def megatron_expert_group_of_rank_0(plan: ParallelPlan, dim: str) -> list[int]:
    """The ranks of the expert group holding rank 0, as Megatron-Core numbers them
    (megatron/core/parallel_state.py: RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order)
    with the order's cp slot followed by ep, e.g. tp-cp-ep-dp-pp; generate_masked_orthogonal_
    rank_groups gives group 0 of a token as index x (product of the sizes before it))."""
    order = plan.order.replace("cp", "cp-ep").split("-")
    sizes = {"tp": plan.expert_tp, "cp": 1, "ep": plan.ep, "dp": plan.expert_zero_group, "pp": plan.pp}
    token = {"etp": "tp", "ep": "ep", "edp": "dp"}[dim]
    stride = 1
    for d in order[: order.index(token)]:
        stride *= sizes[d]
    return [j * stride for j in range(sizes[token])]


@pytest.mark.parametrize(
    "degrees",
    [
        dict(dp=4, tp=2, ep=8, etp=1),  # EP 8 over TP 2 x DP 4: one 8-GPU node
        dict(dp=64, tp=2, pp=8, ep=64, etp=1),  # DeepSeek-V3 on 1024 H100s
        dict(dp=16, tp=2, pp=8, ep=32, etp=1),  # Qwen3-235B-A22B on 256 H100s
        dict(dp=8, tp=4, cp=2, ep=8, etp=2),
        # pp inside the order: Megatron needs the expert grid's pp groups to equal the dense ones
        dict(dp=8, tp=2, pp=4, ep=2, etp=1, order="tp-cp-pp-dp"),
    ],
)
def test_folded_expert_groups_sit_where_megatrons_rank_generator_puts_them(degrees):
    from gpuplan.estimate.comm import folded

    gpu = catalog.gpu("h100-sxm")  # 8 GPUs per NVLink domain
    plan = ParallelPlan(**degrees)
    groups = folded(plan, gpu, tuple(plan.order.split("-")))
    for dim in ("etp", "ep", "edp"):
        ranks = megatron_expert_group_of_rank_0(plan, dim)
        nodes = {r // 8 for r in ranks}
        g = groups[dim]
        assert (g.size, g.domains, g.per_domain) == (len(ranks), len(nodes), sum(r < 8 for r in ranks)), dim
    if degrees == dict(dp=4, tp=2, ep=8, etp=1):
        assert not groups["ep"].crosses_nodes and place(ParallelPlan(dp=8, tp=1, ep=8), gpu)["ep"].domains == 1


def test_a_send_receive_of_one_rank_is_refused_naming_ranks():
    # it reported a gigabyte sent to nobody in 2.9 ms; a collective of one rank is simply free
    from gpuplan.errors import GpuplanError
    from gpuplan.estimate.comm import collective_report

    h100 = catalog.gpu("h100-sxm")
    with pytest.raises(GpuplanError, match="two ranks") as e:
        collective_report("p2p", 2**30, 1, 1, h100)
    assert e.value.field == "ranks"
    assert collective_report("all-reduce", 2**30, 1, 1, h100)["time_s"] == 0.0
    assert collective_report("p2p", 2**30, 2, 1, h100)["time_s"] > 0


def test_a_stride_that_splits_ranks_unevenly_over_nodes_is_refused():
    # ranks 0, 3, ..., 21 fall 3, 3 and 2 on three 8-GPU nodes, not the 2 x 4 a group of equal
    # parts would give; strides that divide the node or are whole nodes place evenly
    from gpuplan.errors import GpuplanError
    from gpuplan.estimate.comm import collective_report

    h100 = catalog.gpu("h100-sxm")
    with pytest.raises(GpuplanError, match="do not fall evenly") as e:
        collective_report("all-reduce", 2**30, 8, 3, h100)
    assert e.value.field == "stride"
    two = collective_report("all-reduce", 2**30, 8, 2, h100)
    assert (two["nodes"], two["ranks_per_node"]) == (2, 4)
    whole = collective_report("all-reduce", 2**30, 8, 16, h100)
    assert (whole["nodes"], whole["ranks_per_node"]) == (8, 1)
