"""The MoE expert loop's host launches, exposed after the token dispatcher's host synchronisation
(estimate/moe_host.py). Oracles: counts read from Megatron-Core and TransformerEngine source."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.moe_host import HOST_LAUNCH_S, SYNCS, expert_launches, moe_host_exposed, te_stream_chain
from gpuplan.estimate.step_time import step_time
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


def test_each_dispatcher_synchronises_once_per_moe_layer_forward():
    # read from megatron/core/transformer/moe at Megatron-Bridge v0.2.0's Megatron-LM (0d8e0714):
    # alltoall: self.d2h_event.synchronize() (token_dispatcher.py:907); flex: DeepEP's dispatch
    # waits on the host for the received counts (fused_a2a.py:103-123), HybridEP copies them to the
    # host (fused_a2a.py:357-361); allgather: local_map.sum(dim=0).long().cpu() (token_dispatcher.py:302)
    assert SYNCS == {"alltoall": 1, "flex": 1, "deepep": 1, "hybridep": 1, "allgather": 1}


@pytest.mark.parametrize(
    ("precision", "current", "fwd", "bwd"),
    [
        # per expert and GroupedLinear (fc1, fc2): forward GEMM + quantize, backward dgrad + wgrad + quantize
        ("bf16", False, 2 * 16 * 1, 2 * 16 * 2),  # torch.split views: no quantize kernel
        ("mxfp8", False, 2 * 16 * 2, 2 * 16 * 3),  # one cast per split
        ("fp8", True, 2 * 16 * 4, 2 * 16 * 5),  # current scaling: amax, scale, cast per split
        ("fp8", False, 2 * 16 * 2, 2 * 16 * 3),  # delayed scaling: one cast
    ],
)
def test_expert_loop_launches_one_gemm_per_local_expert(precision, current, fwd, bwd):
    # cublaslt_gemm.cu at TE v2.9: multi_stream_cublas_gemm loops over num_gemms (one cuBLASLt
    # call per expert); grouped_linear.py:127 split_quantize quantizes each expert's slice
    assert expert_launches(16, precision, current) == (fwd, bwd)


def test_host_time_past_the_loop_gpu_time_is_exposed_after_a_sync():
    host_f = 2 * 16 * 2 * HOST_LAUNCH_S  # mxfp8, 16 local experts: 0.64 ms
    r = moe_host_exposed("alltoall", False, 16, "mxfp8", False, 0.2e-3, 1.0e-3, 10e-3, 2e-6)
    assert r.syncs == 1 and r.host_fwd == pytest.approx(host_f)
    # the loop's 0.2 ms of GPU work hides 0.2 ms of host time; the sync costs a launch and a gap
    assert r.exposed == pytest.approx(host_f - 0.2e-3 + HOST_LAUNCH_S + 2e-6)


def test_a_gpu_bound_loop_exposes_only_the_sync():
    r = moe_host_exposed("flex", False, 4, "bf16", False, 5e-3, 8e-3, 16e-3, 2e-6)
    assert r.exposed == pytest.approx(HOST_LAUNCH_S + 2e-6)


def test_a_full_iteration_cuda_graph_or_an_unstated_dispatcher_adds_nothing():
    assert moe_host_exposed("flex", True, 16, "mxfp8", False, 0.0, 0.0, 0.0, 2e-6).exposed == 0
    assert moe_host_exposed("", False, 16, "mxfp8", False, 0.0, 0.0, 0.0, 2e-6).exposed == 0


def test_backward_host_time_past_the_layer_backward_is_exposed():
    r = moe_host_exposed("alltoall", False, 64, "fp8", True, 1.0, 1.0, 1e-3, 0.0)
    host_b = 2 * 64 * 5 * HOST_LAUNCH_S
    assert r.exposed == pytest.approx(HOST_LAUNCH_S + host_b - 1e-3)


def _qwen3_step(**cfg):
    m = catalog.model("qwen3-30b-a3b")
    config = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64, precision="mxfp8", **cfg)
    return step_time(m, config, ParallelPlan(dp=8, ep=8), catalog.gpu("b200"), 8)


def test_a_synchronising_dispatcher_adds_a_moe_host_line_to_the_step():
    # flex: one sync and no extra row copies (the alltoall dispatcher's sort and FP8 padding copies
    # add GPU time of their own: test_moe_dispatch_copies.py)
    # (the flex dispatcher also sends fewer bytes than an unstated one: test_ep_dispatch.py; so the
    # base is flex under a full-iteration graph, which has no host line)
    base, synced = _qwen3_step(moe_dispatcher="flex", full_cuda_graph=True), _qwen3_step(moe_dispatcher="flex")
    assert base.breakdown["moe_host_sync"] == 0
    assert "moe_host_sync" not in _qwen3_step().breakdown
    extra = synced.breakdown["moe_host_sync"]
    assert extra > 0
    assert synced.step_s == pytest.approx(base.step_s + extra)
    # 48 MoE layers x 8 micro-batches, each at least the sync (one launch) and at most the whole
    # forward loop's and backward loop's host launches plus the sync
    per = extra / (48 * 8)
    assert HOST_LAUNCH_S <= per <= (2 * 16 * 2 + 2 * 16 * 3 + 1) * HOST_LAUNCH_S + 1e-5


def test_full_cuda_graph_removes_the_moe_host_line():
    graphed = _qwen3_step(moe_dispatcher="alltoall", full_cuda_graph=True)
    assert graphed.breakdown["moe_host_sync"] == 0
    eager = _qwen3_step(moe_dispatcher="alltoall")
    assert graphed.step_s == pytest.approx(eager.step_s - eager.breakdown["moe_host_sync"])


def test_an_unknown_dispatcher_is_refused_naming_the_field():
    with pytest.raises(GpuplanError, match="moe_dispatcher"):
        TrainingConfig(seq_len=4096, moe_dispatcher="deepspeed")


def test_held_out_moe_rows_state_their_dispatcher():
    from gpuplan.estimate.validation_rows import load_rows
    from gpuplan.estimate.validation_sources import HELD_OUT

    rows = load_rows(HELD_OUT)
    moe = [r for r in rows if r.plan.ep > 1]
    assert moe and all(r.config.moe_dispatcher for r in moe)
    assert not any(r.config.moe_dispatcher for r in rows if r.plan.ep == 1)
    graphed = {r.id for r in moe if r.config.full_cuda_graph}
    # the 26.08 page's recipes and the verification cards' GB200/GB300 runs capture full iterations
    cards = {r.id for r in moe if r.id.startswith("mbcard-gb") and r.id != "mbcard-gb200-gpt-oss-120b-bf16"}
    assert len(cards) == 9
    assert (
        graphed
        == {"mb2608-gb200-gpt-oss-120b-mxfp8", "mb2608-gb200-qwen3-30b-a3b", "mb2608-gb200-qwen3-235b-a22b"} | cards
    )


@pytest.mark.parametrize(("experts", "chain"), [(1, 1), (2, 1), (4, 1), (5, 2), (16, 4), (17, 5), (128, 32)])
def test_te_runs_per_expert_kernels_round_robin_on_four_streams(experts, chain):
    # multi_stream.cpp:53 num_compute_streams = 4; cublaslt_gemm.cu:941-965 stream i % 4
    assert te_stream_chain(experts) == chain


def test_the_fused_profile_pays_a_kernel_gap_per_expert_kernel_on_each_stream():
    from gpuplan.estimate.compute import LayerShape, layer_times
    from gpuplan.estimate.kernels import efficiency

    m, gpu = catalog.model("qwen3-30b-a3b"), catalog.gpu("b200")
    kw = dict(tokens=4096, seq=4096, micro_batch=1, tp=1, cp=1, sp=False, dtype="bf16", act_bytes=2)
    kw["attention"] = "flash"

    def gemms(ep: int, eager: bool) -> float:
        return layer_times(m, gpu, LayerShape(ep=ep, eager=eager, **kw), True).parts["gemm"]

    gap = efficiency(gpu).kernel_overhead_s
    # bf16: two GroupedLinears x (fwd, dgrad, wgrad) x 3 more kernels per stream at 16 local
    # experts (ep 8) than at 4 (ep 32, one kernel each); the eager profile's one grouped kernel
    # pays the same GEMM work (16 experts of 4x fewer tokens each, their part-filled row tiles)
    # and no per-expert gap
    fused, eager = gemms(8, False) - gemms(32, False), gemms(8, True) - gemms(32, True)
    assert fused - eager == pytest.approx(2 * 3 * 3 * gap, rel=1e-6)


def test_every_dispatcher_a_config_accepts_has_its_sync_count():
    from gpuplan.estimate.moe_host import SYNCS
    from gpuplan.specs.training import MOE_DISPATCHERS

    assert set(SYNCS) == set(MOE_DISPATCHERS) - {""}
