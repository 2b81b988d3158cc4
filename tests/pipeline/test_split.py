"""Uneven pipeline splits: Megatron's first/last stage layer counts, in memory, time, grid and CLI.

The oracle is Llama 3 405B as Meta ran it (Llama 3 report, section 3.3.2): 126 layers on 16
pipeline stages, 7 on the first and the last, 8 on each of the 14 middle ones; its parameter
counts come by hand from the published config (hidden 16384, 128 query and 8 KV heads of 128,
SwiGLU 53248, vocabulary 128256, untied embeddings).
"""

from dataclasses import replace

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.compute import layer_times
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.model_ends import embedding_times, head_times
from gpuplan.estimate.step_time import _shape, step_time
from gpuplan.estimate.train import TrainRequest, validate
from gpuplan.search.grid import Grid, Layout
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import stage_layers, suggest_split
from gpuplan.specs.training import TrainingConfig

H100 = catalog.gpu("h100-sxm")  # Llama 3 405B trained on H100s (Dubey et al. 2024, section 3.3)

H, FFN, V, KV = 16384, 53248, 128256, 8 * 128
LAYER_MATRICES = H * H + 2 * H * KV + H * H + 3 * H * FFN  # q, k and v, o; gate, up, down
LAYER_NORMS = 2 * H  # two RMSNorm weights, replicated over TP
TP = 8
PER_GPU_LAYER = LAYER_MATRICES // TP + LAYER_NORMS
EMBED = V * H // TP  # vocabulary-parallel embedding; the output layer has the same shape


@pytest.fixture(scope="module")
def m405():
    return catalog.model("llama-3.1-405b")


def llama3_plan(**kw):
    return ParallelPlan(tp=TP, pp=16, first_stage_layers=7, last_stage_layers=7, **kw)


def test_llama3_405b_split_is_7_then_14_stages_of_8_then_7(m405):
    assert stage_layers(m405, llama3_plan()) == [7] + [8] * 14 + [7]
    assert suggest_split(126, 16) == (7, 7, 8)  # the split Meta chose is the one gpuplan suggests


def test_llama3_405b_stage_parameters_and_model_states_match_the_hand_count(m405):
    cfg = TrainingConfig(seq_len=8192, precision="bf16", profile="fused")  # 2 + 4 (fp32 main_grad) + 4 + 8 B
    r = estimate_memory(m405, cfg, llama3_plan(), H100, microbatches=64)
    first = 7 * PER_GPU_LAYER + EMBED
    middle = 8 * PER_GPU_LAYER
    last = 7 * PER_GPU_LAYER + EMBED + H  # output layer and the final norm
    assert [s.params for s in r.stages] == [first] + [middle] * 14 + [last]
    assert r.stages[1].model_states == 18 * middle
    # the even split (later stages take the remainder) leaves 8 layers and the output layer on the last
    even = estimate_memory(m405, cfg, ParallelPlan(tp=TP, pp=16), H100, microbatches=64)
    assert even.stages[-1].params == 8 * PER_GPU_LAYER + EMBED + H


def test_activations_follow_1f1b_in_flight_counts_on_uneven_stages(m405):
    cfg = TrainingConfig(seq_len=8192, recompute="selective")
    r = estimate_memory(m405, cfg, llama3_plan(), H100, microbatches=64)
    a = r.activation
    # 1F1B: stage s holds pp - s micro-batches of its own layers (Narayanan et al. 2021)
    assert r.stages[0].activations == pytest.approx(16 * (7 * a.layer(False) + a.embedding))
    assert r.stages[1].activations == pytest.approx(15 * 8 * a.layer(False))
    assert r.stages[15].activations == pytest.approx(1 * (7 * a.layer(False) + a.head))
    assert r.per_gpu.stage == 1  # 15 micro-batches of 8 layers outweigh 16 of 7 plus the embedding


def test_step_time_runs_each_stage_on_its_own_layers_and_paces_on_the_slowest(m405):
    gpu = catalog.gpu("h100-sxm")
    cfg = TrainingConfig(seq_len=8192, global_batch=64)
    plan = llama3_plan()
    st = step_time(m405, cfg, plan, gpu, 64)
    shape = _shape(m405, cfg, plan)
    lay, emb, head = (
        layer_times(m405, gpu, shape, False),
        embedding_times(m405, gpu, shape),
        head_times(m405, gpu, shape),
    )
    assert [s.layers for s in st.stages] == [7] + [8] * 14 + [7]
    assert st.stages[0].fwd == pytest.approx(7 * lay.fwd + emb.fwd)
    assert st.stages[1].fwd == pytest.approx(8 * lay.fwd)
    assert st.stages[15].fwd == pytest.approx(7 * lay.fwd + head.fwd)
    crit = max(st.stages, key=lambda s: s.total)
    assert st.critical_stage == crit.stage and st.breakdown["compute"] == pytest.approx(64 * crit.compute)
    # the even split's last stage carries 8 layers and the output layer: a slower pipeline
    even = step_time(m405, cfg, ParallelPlan(tp=TP, pp=16), gpu, 64)
    assert even.step_s > st.step_s


@pytest.mark.parametrize(
    "first,last,pp,vp,message",
    [
        (60, 60, 16, 1, "a stage would hold no layer"),
        (8, None, 16, 1, "do not divide over the 15 other stages"),
        (60, 60, 2, 1, "pp = 2 has no middle stage"),
        (6, 6, 8, 4, "do not make vp = 4 equal chunks"),
    ],
)
def test_impossible_splits_are_refused_naming_one_that_works(m405, first, last, pp, vp, message):
    plan = ParallelPlan(tp=TP, pp=pp, vp=vp, first_stage_layers=first, last_stage_layers=last)
    with pytest.raises(GpuplanError, match=message) as exc:
        stage_layers(m405, plan)
    if pp == 16:
        assert "`first_stage_layers=7` `last_stage_layers=7`" in str(exc.value)
    if pp == 2:
        assert "`first_stage_layers=63` `last_stage_layers=63`" in str(exc.value)


def test_interleaving_that_does_not_divide_is_refused_with_a_split_or_the_vp_that_works(m405):
    # 126 = 16 + 14 + 6 x 16 on pp 8 x vp 2: every count a multiple of 2
    with pytest.raises(GpuplanError, match="`first_stage_layers=16` `last_stage_layers=14`"):
        stage_layers(m405, ParallelPlan(tp=TP, pp=8, vp=2))
    assert stage_layers(m405, ParallelPlan(tp=TP, pp=8, vp=2, first_stage_layers=16, last_stage_layers=14)) == [16] + [
        16
    ] * 6 + [14]
    with pytest.raises(GpuplanError, match=r"no split of 126 layers works with pp=8 x vp=8.*`vp=1, 2, 3"):
        stage_layers(m405, ParallelPlan(tp=TP, pp=8, vp=8))


def test_bad_values_and_schedules_are_refused():
    with pytest.raises(GpuplanError, match="first_stage_layers"):
        ParallelPlan(pp=4, first_stage_layers=0)
    with pytest.raises(GpuplanError, match="needs pipeline parallelism"):
        ParallelPlan(pp=1, last_stage_layers=3)
    with pytest.raises(GpuplanError, match="zb-v"):
        stage_layers(catalog.model("llama-3.1-8b"), ParallelPlan(pp=4, schedule="zb-v", first_stage_layers=6))


def test_validate_refuses_through_the_same_split(m405):
    cfg = TrainingConfig(seq_len=8192, global_batch=16)
    req = TrainRequest(
        m405, catalog.gpu("h100-sxm"), ParallelPlan(tp=TP, pp=16, first_stage_layers=60, last_stage_layers=60), cfg
    )
    with pytest.raises(GpuplanError, match="no layer"):
        validate(req)


@pytest.mark.parametrize(
    "name,layouts",
    [
        (
            "llama-3.1-405b",
            [
                Layout(8, 1, 16, 1, 1, "1f1b", 1, 7, 7),
                Layout(8, 1, 8, 2, 1, "1f1b", 2, 16, 14),
                Layout(8, 1, 16, 1, 1, "zb", 1, 6, None),
            ],
        ),
        ("deepseek-v3", [Layout(8, 1, 8, 4, 4, "1f1b", 1, 7, 6)]),  # 61 = 7 + 6 x 8 + 6; 3 leading dense layers
    ],
)
def test_grid_agrees_with_the_scalar_model_on_uneven_splits(name, layouts):
    m, gpu = catalog.model(name), catalog.gpu("h100-sxm")
    base = TrainingConfig(seq_len=4096, global_batch=64)
    grid = Grid(m, base, layouts, (1, 2), (0, 1, 3), ("none", "selective", "full"), gpu)
    mb, _ = grid.microbatches()
    peak = grid.peak_memory(np.maximum(mb, 1))
    bound = grid.compute_bound(gpu, np.maximum(mb, 1))
    for li, lo in enumerate(layouts):
        for mi in range(2):
            for zi, zero in enumerate(grid.zero):
                for ri in range(3):
                    plan, cfg = lo.plan(int(zero)), grid.configs[mi][ri]
                    scalar = estimate_memory(m, cfg, plan, gpu, int(mb[li, mi]))
                    assert peak[li, mi, zi, ri] == pytest.approx(scalar.per_gpu.total, rel=1e-9)
            st = step_time(m, grid.configs[mi][0], lo.plan(0), gpu, int(mb[li, mi]))
            assert bound[li, mi, 0] <= st.step_s * (1 + 1e-12)


def test_an_end_may_count_its_embedding_or_loss_as_a_layer_of_its_chunk(m405):
    # Llama 3 405B's 126 layers on pp 16 x vp 2 as 7 / 8 x 14 / 7; Megatron-Core states it with
    # --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split
    plan = ParallelPlan(tp=TP, pp=16, vp=2, first_stage_layers=7, last_stage_layers=7)
    assert stage_layers(m405, plan) == [7] + [8] * 14 + [7]


@pytest.mark.parametrize(
    "layers,pp,vp,mtp,split",
    [
        (126, 16, 1, 0, (7, 7)),  # Llama 3 405B (Llama 3 report, 3.3.2)
        (126, 16, 2, 0, (7, 7)),  # and interleaved: 3 + 4 on both ends
        (61, 16, 1, 1, (3, 2)),  # NeMo's DeepSeek-V3 recipe: 64/pp - 1 and 64/pp - 2
        (61, 8, 1, 1, (7, 6)),
        (61, 4, 1, 1, (15, 14)),
        (80, 8, 1, 0, None),  # 82 slots do not make 8 equal stages
        (30, 2, 1, 0, None),  # 15 / 15: the even split already
        (61, 16, 2, 1, None),  # Megatron's flags do not count MTP; 63 slots do not make 32 chunks
    ],
)
def test_the_accounted_split_gives_the_ends_a_layers_place_each(layers, pp, vp, mtp, split):
    from gpuplan.specs.split import accounted_split

    assert accounted_split(layers, pp, vp, mtp) == split


def test_train_names_the_accounted_split_where_it_is_faster():
    from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict

    m, gpu = catalog.model("deepseek-v3"), catalog.gpu("h100-sxm")
    cfg = TrainingConfig.for_framework("megatron", seq_len=4096, global_batch=1024, recompute="full", mtp_layers=1)
    plan = ParallelPlan(dp=16, pp=16, ep=16)
    est = estimate_training(TrainRequest(m, gpu, plan, cfg))
    fs = est.faster_split
    # the even split puts 4 layers beside the head, the MTP block and its second head on the last stage
    assert fs is not None and (fs["first_stage_layers"], fs["last_stage_layers"]) == (3, 2)
    assert fs["step_s"] < est.step.step_s and fs["speedup"] == pytest.approx(est.step.step_s / fs["step_s"])
    assert to_dict(est)["faster_split"] == fs
    given = estimate_training(TrainRequest(m, gpu, replace(plan, first_stage_layers=3, last_stage_layers=2), cfg))
    assert given.faster_split is None  # a split given is not second-guessed
    assert given.step.step_s == pytest.approx(fs["step_s"])
