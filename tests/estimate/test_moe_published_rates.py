"""The token-proportional pieces of an MoE layer against published kernel and collective
measurements (issue 14): the expert grouped GEMMs against DeepGEMM's H800 tables, the expert
all-to-all against NCCL's maintainers' and DeepEP's published rates. These are regression bounds
on pieces gpuplan already had; they show the 2-3x misses of the fine-grained MoE rows in the
held-out set are not in these rates."""

import pytest

from gpuplan import catalog
from gpuplan.estimate.comm import collective_report, efficiency
from gpuplan.estimate.kernels import gemm_time

GB = 1e9

# deepseek-ai/DeepGEMM README at 55ab91f (2025-03-25), "Grouped GEMMs for MoE models": FP8 with
# fine-grained scaling on H800 SXM5 (the H100 SXM's 132 SMs and FP8 tensor rate; only NVLink is cut)
# (groups, m per group, n, k, TFLOPS); "contiguous layout" is the training forward's
CONTIGUOUS = [
    (4, 8192, 4096, 7168, 1346),
    (4, 8192, 7168, 2048, 1214),
    (8, 4096, 4096, 7168, 1346),
    (8, 4096, 7168, 2048, 1214),
]
MASKED = [
    (1, 1024, 4096, 7168, 1233),
    (1, 1024, 7168, 2048, 925),
    (2, 512, 4096, 7168, 1040),
    (2, 512, 7168, 2048, 916),
    (4, 256, 4096, 7168, 932),
    (4, 256, 7168, 2048, 815),
]


def _tflops(groups: int, m: int, n: int, k: int) -> float:
    t = gemm_time(catalog.gpu("h100-sxm"), "fp8", m, n, k, groups)
    return 2 * groups * m * n * k / t / 1e12


@pytest.mark.parametrize(("groups", "m", "n", "k", "published"), CONTIGUOUS)
def test_expert_grouped_gemms_are_no_faster_than_deepgemm_and_within_25_percent(groups, m, n, k, published):
    # DeepGEMM is 1.2-1.3x its authors' CUTLASS 3.6 baseline on these shapes (the table's speedup
    # column), so a cuBLAS/CUTLASS grouped GEMM (TransformerEngine's) sits below it: gpuplan gives 83-85%
    assert 0.75 * published <= _tflops(groups, m, n, k) <= published


@pytest.mark.parametrize(("groups", "m", "n", "k", "published"), MASKED)
def test_small_expert_batches_stay_within_a_fifth_of_deepgemm(groups, m, n, k, published):
    # 256-1024 rows per expert: gpuplan's tile-and-wave model reads 0.85-1.19x DeepGEMM's masked
    # layout (most optimistic at 256 rows and k = 2048); the held-out MoE rows run 1,000-4,000 rows
    # per local expert
    assert 0.8 * published <= _tflops(groups, m, n, k) <= 1.25 * published


def test_intra_node_all_to_all_runs_at_nccl_effective_nvlink_rate():
    # NVIDIA/nccl-tests issue #212 (sjeaugey, 2024-05-06): on H100 "NCCL can get an effective NVLink
    # bandwidth of 370GB/s, which you can observe as BusBw when running non-allreduce operations";
    # a Qwen3-30B-A3B dispatch of 8,192 tokens x top-8 x 2048 x 2 bytes over EP 8 in one node
    r = collective_report("all-to-all", 8192 * 8 * 2048 * 2, 8, 1, catalog.gpu("h100-sxm"))
    assert r["bus_bandwidth_bytes_per_s"] == pytest.approx(370 * GB, rel=0.05)


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_cross_node_all_to_all_runs_at_one_nic_per_gpu(nodes):
    # NVIDIA/nccl-tests issue #130 (sjeaugey, 2023-02-03): across nodes the all-to-all bus bandwidth
    # is N/(N-1) x the network bandwidth per GPU (2x on 2 nodes, falling to 1x), and issue #267
    # (2024-11-19): "Alltoall cannot aggregate the bandwidth of multiple NICs"; CX7 NDR reaches
    # 48-49 GB/s per NIC (AddyLaddy, #267)
    gpu = catalog.gpu("h100-sxm")
    r = collective_report("all-to-all", 256e6, 8 * nodes, 1, gpu)
    per_nic = r["bus_bandwidth_bytes_per_s"] * (nodes - 1) / nodes
    assert 40 * GB <= per_nic <= 49 * GB


def test_nvlink_efficiency_matches_deepeps_intranode_dispatch():
    # deepseek-ai/DeepEP docs/legacy.md (V1 README), "Normal kernels": intranode EP 8 dispatch
    # 153 GB/s and combine 158 GB/s on H800, whose NVLink carries 200 GB/s each way (8 links of
    # 25 GB/s, a cut H100): 77-79% of the link, where gpuplan's H100 all-to-all uses intra_bus
    e = efficiency(catalog.gpu("h100-sxm"))
    assert 153 / 200 * 0.95 <= e.intra_bus <= 158 / 200 * 1.1
