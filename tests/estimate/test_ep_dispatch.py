"""DeepEP / HybridEP dispatch: destinations a token reaches, the published kernel rates, the link
bound against DeepEP V2's published rates, and a profiled Megatron-Bridge run's split of its step."""

import dataclasses

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.estimate.comm import place
from gpuplan.estimate.ep_dispatch import distinct_units, flex_time, published_rate, rates
from gpuplan.estimate.step_time import step_time
from gpuplan.estimate.validate import HELD_OUT
from gpuplan.estimate.validation_rows import load_rows
from gpuplan.specs.parallel import ParallelPlan


def _sampled_units(experts: int, top_k: int, units: int, tokens: int = 20000) -> float:
    # a balanced router: every token's top-k of uniform random scores, experts laid out in
    # contiguous blocks per unit as Megatron places them (expert i on rank i // (E / ep))
    rng = np.random.default_rng(0)
    top = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k]
    unit = top // (experts // units)
    return float(np.mean([len(set(row)) for row in unit]))


@pytest.mark.parametrize(
    ("experts", "top_k", "units"), [(128, 8, 2), (128, 8, 16), (128, 4, 8), (256, 8, 4), (64, 6, 8)]
)
def test_distinct_units_matches_sampled_balanced_routing(experts, top_k, units):
    assert distinct_units(experts, top_k, units) == pytest.approx(_sampled_units(experts, top_k, units), rel=0.01)


def test_distinct_units_edge_cases():
    assert distinct_units(128, 8, 1) == 1.0  # one unit holds every expert
    assert distinct_units(128, 1, 16) == pytest.approx(1.0)  # one expert: one unit
    assert distinct_units(16, 4, 16) == pytest.approx(4.0)  # one expert per unit: k units


def test_published_rates_are_read_as_the_readme_gives_them():
    h100 = catalog.gpu("h100-sxm")
    r = published_rate("hybridep", h100, "rdma", 16)
    assert (r.ranks, r.dispatch_bf16, r.combine) == (16, 54.47e9, 53.35e9)
    assert published_rate("hybridep", h100, "rdma", 24).ranks == 16  # nearest; a tie to the smaller
    assert published_rate("hybridep", catalog.gpu("gb200"), "nvlink", 64).ranks == 36  # past the table: its largest
    assert published_rate("hybridep", h100, "nvlink", 8) is None  # none published: the link bound
    # a DeepEP row measured with FP8 dispatch only carries that rate for BF16
    dv1 = published_rate("deepep", h100, "rdma", 32)
    assert dv1.dispatch_bf16 == dv1.dispatch_fp8 == 58e9
    assert all(r.scope in ("rdma", "nvlink") and r.ranks >= 8 for r in rates())


def _ep_group(gpu, ep):
    return place(ParallelPlan(dp=ep, ep=ep), gpu)["ep"]


@pytest.mark.parametrize(("nodes", "published_gbps"), [(2, 90.0), (4, 61.0)])
def test_link_bound_reproduces_deepep_v2_logical_rates(nodes, published_gbps):
    # DeepEP README at dd758ca, "Performance": SM90 with CX7, EP 8 x 2 and 8 x 4, DeepSeek-V3's
    # shape (8K tokens, hidden 7168, 256 experts, top-8, FP8 dispatch): 90 and 61 GB/s logical,
    # the local node's traffic counted. V2 runs at the NIC's limit, as the link bound assumes.
    gpu = catalog.gpu("h100-sxm")
    g = _ep_group(gpu, 8 * nodes)
    d = flex_time("flex", gpu, g, 8192, 7168, 256, 8, 1, combine=False)
    assert d.source == "link bound"
    assert d.logical_bytes / d.seconds / 1e9 == pytest.approx(published_gbps, rel=0.06)


def test_deduplication_sends_fewer_bytes_than_the_alltoall_dispatcher_s_copies():
    # Qwen3-30B-A3B over 16 H100s: a token's 8 routed copies reach about 2 nodes
    gpu = catalog.gpu("h100-sxm")
    d = flex_time("hybridep", gpu, _ep_group(gpu, 16), 4096, 2048, 128, 8, 2, combine=False)
    copies = 4096 * 8 * 2048 * 2
    assert d.logical_bytes / copies == pytest.approx(distinct_units(128, 8, 2) / 8)
    assert d.source == "published hybridep EP16"


# Megatron-Bridge main at 067f987d, skills/nemo-mbridge-perf-moe-comm-overlap/card.yaml: the
# profiled baseline (no EP overlap) of Qwen3-30B-A3B on 16 H100s, BF16, EP16, HybridEP
PROFILED_COMM_OVERLAP_S = 9.079e-3  # communication kernels overlapped with compute
PROFILED_COMM_HIDDEN_FRACTION = 0.0011  # that, as a share of all communication kernel time
PROFILED_GPU_ACTIVE_S = 22.820667  # union of all kernels


def test_profiled_megatron_bridge_run_splits_into_exchange_and_compute_as_predicted():
    (row,) = [r for r in load_rows(HELD_OUT) if r.id == "mbcard-h100-qwen3-30b-a3b-bf16-ep16"]
    st = step_time(row.model, row.config, row.plan, catalog.gpu(row.gpu), row.microbatches)
    comm = PROFILED_COMM_OVERLAP_S / PROFILED_COMM_HIDDEN_FRACTION  # about 8.25 s of dispatch/combine
    other = PROFILED_GPU_ACTIVE_S - comm  # about 14.6 s of every other kernel
    assert st.comm["ep"].exposed == pytest.approx(st.comm["ep"].time)  # no overlap asked
    # the rounding of the 0.11% share leaves the exchange to +-5%; the rest is the model's
    assert st.comm["ep"].time == pytest.approx(comm, rel=0.15)
    # the other kernels +10.1% (+5.7% before 2026-11-28): the profile sums kernel time, while the
    # H100 fit's sustained fraction (0.77, was 0.81) also carries what runs lose between kernels
    assert sum(st.ops.values()) == pytest.approx(other, rel=0.12)
    # sent per copy, as the alltoall dispatcher does, the same exchange would take twice as long
    alltoall = dataclasses.replace(row.config, moe_dispatcher="alltoall")
    copies = step_time(row.model, alltoall, row.plan, catalog.gpu(row.gpu), row.microbatches)
    assert copies.comm["ep"].time > 2 * comm


def _sampled_group_limited(experts, top_k, units, groups, per_token, group_score, tokens=20000):
    # DeepSeek's router on uniform scores: score each group (V3 noaux_tc: the sum of its top 2;
    # V2 group_limited_greedy: its max), keep the best per_token groups, top-k inside them
    rng = np.random.default_rng(0)
    s = rng.random((tokens, experts))
    g = s.reshape(tokens, groups, experts // groups)
    gs = np.sort(g, axis=2)[:, :, -2:].sum(2) if group_score == "top2" else g.max(2)
    keep = np.zeros((tokens, groups), bool)
    np.put_along_axis(keep, np.argsort(gs, axis=1)[:, -per_token:], True, axis=1)
    s = np.where(np.repeat(keep, experts // groups, axis=1), s, -1.0)
    unit = np.argsort(s, axis=1)[:, -top_k:] // (experts // units)
    return float(np.mean([len(set(row)) for row in unit]))


@pytest.mark.parametrize(
    ("experts", "top_k", "groups", "per_token", "score", "units"),
    [(256, 8, 8, 4, "top2", u) for u in (4, 8, 16, 64)] + [(160, 6, 8, 3, "max", u) for u in (8, 16, 32)],
)
def test_group_limited_routing_reach_matches_deepseek_s_router(experts, top_k, groups, per_token, score, units):
    sampled = _sampled_group_limited(experts, top_k, units, groups, per_token, score)
    assert distinct_units(experts, top_k, units, groups, per_token) == pytest.approx(sampled, rel=0.02)


def test_deepseek_v3_reaches_at_most_four_nodes_and_its_config_says_so():
    m = catalog.model("deepseek-v3")
    assert (m.expert_groups, m.expert_groups_per_token) == (8, 4)  # n_group, topk_group
    assert distinct_units(256, 8, 8, 8, 4) == pytest.approx(4.0)  # EP 64 over 8 nodes: 4, not 5.3
    assert distinct_units(256, 8, 8) > 5.2
    assert catalog.model("deepseek-v2-lite").expert_groups == 1  # topk_method greedy: no limit
