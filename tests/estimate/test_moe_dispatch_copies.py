"""The copies Megatron-Core's dropless dispatchers make of the routed tokens a GPU receives, beyond
the permutation on the sending side (moe_dispatch.dispatcher_copy_passes). Oracles: the passes read
from Megatron-Core (0d8e0714) and TransformerEngine (v2.9) source, and one layer's extra seconds
worked out by hand from the HBM bandwidth."""

import pytest

from gpuplan import catalog
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.compute import LayerShape, layer_times
from gpuplan.estimate.moe_dispatch import dispatcher_copy_passes
from gpuplan.estimate.step_time import step_time
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


@pytest.mark.parametrize(
    ("dispatcher", "local", "dtype", "passes"),
    [
        # sort by local expert after the all-to-all and unsort before the combine (token_dispatcher.py
        # lines 740, 775), each a row copy (read + write): 2 x 2 bytes per byte each way;
        # _moe_chunk_sort: make_chunk_sort_map + sort_chunks_by_map forward, sort_chunks_by_map backward
        ("alltoall", 16, "bf16", (4, 4, 4, 2)),
        ("alltoall", 1, "bf16", (0, 0, 0, 0)),  # one local expert: nothing to sort
        # FP8: TEGroupedMLP's Fp8Padding (fc1 input) and Fp8Unpadding (fc2 output) on top, one
        # kernel each, mirrored backward
        ("alltoall", 16, "fp8", (8, 6, 8, 4)),
        ("alltoall", 4, "mxfp8", (8, 6, 8, 4)),
        ("allgather", 16, "fp8", (4, 2, 4, 2)),  # permutes after its gather: no chunk sort
        ("allgather", 16, "bf16", (0, 0, 0, 0)),
        ("flex", 16, "mxfp8", (0, 0, 0, 0)),  # HybridEP pads and permutes inside its dispatch
        ("", 16, "fp8", (0, 0, 0, 0)),  # not stated
    ],
)
def test_the_dispatcher_copies_each_received_routed_row_as_megatron_does(dispatcher, local, dtype, passes):
    assert dispatcher_copy_passes(dispatcher, local, dtype) == passes


def test_an_alltoall_fp8_layer_pays_its_extra_row_copies_at_hbm_bandwidth():
    # Qwen3-30B-A3B on H100, EP 8: 4096 tokens x top-8 = 32,768 routed rows of 2048 x 2 bytes land
    # on each GPU (16 local experts of 2048 rows); 8 passes forward and 8 backward over them, in
    # 6 + 4 kernels
    m, gpu = catalog.model("qwen3-30b-a3b"), catalog.gpu("h100-sxm")
    kw = dict(tokens=4096, seq=4096, micro_batch=1, tp=1, cp=1, ep=8, sp=False, dtype="fp8", act_bytes=2)
    kw["attention"] = "flash"
    base = layer_times(m, gpu, LayerShape(**kw), True)
    a2a = layer_times(m, gpu, LayerShape(moe_dispatcher="alltoall", **kw), True)
    e = efficiency(gpu)
    rows_bytes = 32768 * 2048 * 2
    by_hand = 16 * rows_bytes / (gpu.hbm_bytes_per_s * e.hbm) + 10 * e.kernel_overhead_s
    assert a2a.parts["moe_permute"] - base.parts["moe_permute"] == pytest.approx(by_hand, rel=1e-9)
    assert a2a.fwd - base.fwd == pytest.approx(8 * rows_bytes / (gpu.hbm_bytes_per_s * e.hbm) + 6 * e.kernel_overhead_s)


def test_the_copies_follow_the_busiest_gpus_rows_under_imbalance():
    m, gpu = catalog.model("qwen3-30b-a3b"), catalog.gpu("b200")
    kw = dict(tokens=4096, seq=4096, micro_batch=1, tp=1, cp=1, ep=8, sp=False, dtype="bf16", act_bytes=2)
    kw["attention"] = "flash"

    def extra(imbalance: float) -> float:
        with_d = layer_times(m, gpu, LayerShape(moe_dispatcher="alltoall", expert_imbalance=imbalance, **kw), True)
        without = layer_times(m, gpu, LayerShape(expert_imbalance=imbalance, **kw), True)
        return with_d.parts["moe_permute"] - without.parts["moe_permute"]

    gap = 6 * efficiency(gpu).kernel_overhead_s  # 4 + 2 kernels, the same at any load
    assert extra(1.5) - gap == pytest.approx(1.5 * (extra(1.0) - gap))


def test_the_dispatcher_reaches_the_step_only_for_expert_parallel_moe():
    m, gpu = catalog.model("qwen3-30b-a3b"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=8, ep=8)
    cfg = dict(seq_len=4096, precision="fp8", global_batch=64)
    stated = step_time(m, TrainingConfig(moe_dispatcher="alltoall", **cfg), plan, gpu, 8)
    unstated = step_time(m, TrainingConfig(**cfg), plan, gpu, 8)
    assert stated.ops["moe_permute"] > unstated.ops["moe_permute"]
    dense = catalog.model("qwen3-8b")
    d_plan = ParallelPlan(dp=8)
    a = step_time(dense, TrainingConfig(moe_dispatcher="alltoall", **cfg), d_plan, gpu, 8)
    b = step_time(dense, TrainingConfig(**cfg), d_plan, gpu, 8)
    assert a.step_s == b.step_s
