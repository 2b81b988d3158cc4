"""A communication line's hidden time (what compute covers) is never below zero."""

from gpuplan import catalog
from gpuplan.estimate.layer_comm import CommLine


def test_hidden_time_is_never_negative_when_exposed_rounds_above_the_time():
    line = CommLine(0.0, 0.3, 0.3 * (1 + 1e-15), {})
    assert line.exposed > line.time and line.hidden == 0.0
    assert CommLine(0.0, 1.0, 0.25, {}).hidden == 0.75


def test_train_json_has_no_negative_hidden_communication():
    # gemma-3-12b at tp=8, pp=2 had a TP line of -3.5e-18 s hidden from floating-point rounding
    from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig

    req = TrainRequest(
        model=catalog.model("gemma-3-12b"),
        gpu=catalog.gpu("h100-sxm"),
        plan=ParallelPlan(dp=4, tp=8, pp=2, zero=1),
        config=TrainingConfig(recompute="full"),
    )
    comm = to_dict(estimate_training(req))["performance"]["comm"]
    assert all(line["hidden_s"] >= 0 for line in comm.values())


def _tp_line(model: str, framework: str, seq: int, tp_overlap: bool, tokens: int = 32768):
    """The TP CommLine of one step at ``seq`` tokens per sequence, ``tokens`` per micro-batch."""
    from gpuplan.estimate.step_time import step_time
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig

    mb = tokens // seq
    cfg = TrainingConfig.for_framework(
        framework, seq_len=seq, micro_batch=mb, global_batch=mb, tp_overlap=tp_overlap, attention="flash"
    )
    st = step_time(catalog.model(model), cfg, ParallelPlan(dp=1, tp=8, sp=True), catalog.gpu("h100-sxm"), 1)
    return st.comm["tp"]


def test_overlapped_tp_collectives_hide_behind_their_gemms_not_the_attention_core():
    # the same tokens in longer sequences: the GEMMs and the collectives stay the same size and only
    # the attention core grows (quadratic in the sequence). A collective pipelined with the GEMM
    # it feeds or drains (TE userbuffers, PyTorch async TP) gains nothing from the longer core, so
    # its exposed time does not fall; a share of the whole layer would have hidden it all.
    short = _tp_line("llama-3.1-70b", "torchtitan", 2048, True)
    long = _tp_line("llama-3.1-70b", "torchtitan", 32768, True)
    assert short.time == long.time
    assert long.exposed > 0 and long.exposed == short.exposed


def test_megatron_gathers_a_sequence_parallel_input_again_for_the_weight_gradient():
    # Korthikanti et al. 2022, section 4.2.2 and Megatron's LinearWithGradAccumulationAndAsync-
    # Communication.backward: each column-parallel GEMM's input is all-gathered in the forward and
    # again in the backward, so per block three all-gathers (input, the output gradient, the input
    # again) to two reduce-scatters; PyTorch's DTensor TP keeps the gathered input: two and two.
    fused = _tp_line("llama-3.1-8b", "megatron", 4096, False).collectives
    eager = _tp_line("llama-3.1-8b", "torchtitan", 4096, False).collectives
    assert fused["all-gather"] == 1.5 * fused["reduce-scatter"]
    assert eager["all-gather"] == eager["reduce-scatter"]
    assert eager["reduce-scatter"] == fused["reduce-scatter"]


def test_megatron_hides_the_backward_reduce_scatter_behind_the_weight_gradient_without_overlap():
    # the async backward collectives need no userbuffers: without tp_overlap the forward's and the
    # output gradient's collectives stay exposed, the input gradient's reduce-scatter and the
    # gather again run beside GEMMs (Megatron's layers.py), so less is exposed than the eager
    # profile's four collectives each way
    fused = _tp_line("llama-3.1-8b", "megatron", 4096, False)
    eager = _tp_line("llama-3.1-8b", "torchtitan", 4096, False)
    assert eager.exposed == eager.time
    assert fused.exposed < fused.time and fused.exposed < eager.exposed


def test_a_parallel_attention_block_hides_its_one_collective_pair_behind_both_branches():
    # Falcon / GPT-J / Pythia: attention and MLP read the same input, so one all-gather feeds
    # both column-parallel GEMMs and one reduce-scatter drains both row-parallel ones
    from gpuplan.estimate.compute import layer_times
    from gpuplan.estimate.layer_comm import tp_partners
    from gpuplan.estimate.step_time import _shape
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig

    m = catalog.model("falcon-7b")
    plan = ParallelPlan(dp=1, tp=8, sp=True)
    ops = layer_times(m, catalog.gpu("h100-sxm"), _shape(m, TrainingConfig(seq_len=2048), plan), False)
    (col, row) = tp_partners(m, False, ops, sp=True)
    g = ops.gemms
    assert col == tuple(g["attn.qkv.weight"][i] + g["mlp.up.weight"][i] for i in range(3))
    assert row == tuple(g["attn.o.weight"][i] + g["mlp.down.weight"][i] for i in range(3))


def test_torchtitans_per_op_sac_runs_the_all_gathers_again_but_not_the_reduce_scatters():
    # torchtitan's _save_list keeps reduce_scatter_tensor's output and not all_gather's, so the
    # block's recompute gathers its sequence-parallel input again: per block the forward
    # all-gather runs twice, the reduce-scatter once (the backward's transposes once each)
    from gpuplan.estimate.step_time import step_time
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig

    def tp(recompute: str) -> dict[str, float]:
        cfg = TrainingConfig.for_framework(
            "torchtitan", seq_len=4096, micro_batch=1, global_batch=1, recompute=recompute
        )
        plan = ParallelPlan(dp=1, tp=8, sp=True)
        return step_time(catalog.model("llama-3.1-8b"), cfg, plan, catalog.gpu("h100-sxm"), 1).comm["tp"].collectives

    none, sac = tp("none"), tp("selective")
    assert sac["reduce-scatter"] == none["reduce-scatter"]
    assert sac["all-gather"] == 1.5 * none["all-gather"]


def test_a_paired_exchange_hidden_behind_its_partner_is_never_negative_time():
    # with no exchange, or one shorter than every phase's compute, every phase is its compute and
    # the exposure is 0 but for rounding, which must not make it a negative time (-1e-16 s)
    import random

    from gpuplan.estimate.compute import OpTimes
    from gpuplan.estimate.layer_comm import paired_exposure

    rng = random.Random(0)
    for _ in range(2000):
        f, bi, bw = (rng.uniform(1e-5, 1e-2) for _ in range(3))
        ops = OpTimes(fwd=f, bwd_input=bi, bwd_weight=bw, modules={"moe": rng.uniform(0, f)})
        tiny = rng.uniform(0, 1e-9)
        assert paired_exposure(ops, tiny, tiny) >= 0.0
        assert 0.0 <= paired_exposure(ops, 0.0, 0.0) < 1e-15
