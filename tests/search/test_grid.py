"""The vectorised grid agrees with the scalar memory model, and its time bound never exceeds a step."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.step_time import step_time
from gpuplan.search.grid import Grid
from gpuplan.search.plans import RECOMPUTE_ORDER
from gpuplan.search.space import valid_layouts as _layouts
from gpuplan.specs.training import BLOCK_SCALED, TrainingConfig

CASES = [
    ("llama-3.1-8b", 16, TrainingConfig(seq_len=4096, global_batch=64)),
    ("mixtral-8x7b", 32, TrainingConfig(seq_len=4096, global_batch=64)),  # MoE: ep, expert ZeRO group
    ("deepseek-v3", 256, TrainingConfig(seq_len=4096, global_batch=256)),  # MLA, leading dense layers, 61 layers
    # Gated DeltaNet hybrid: three linear-attention layers to one softmax, stages cutting the pattern
    ("qwen3-next-80b-a3b", 32, TrainingConfig(seq_len=4096, global_batch=256)),
    ("gemma-2-9b", 8, TrainingConfig(seq_len=4096, global_batch=32, optimizer="adafactor")),
    ("llama-3.1-70b", 64, TrainingConfig(seq_len=8192, global_batch=512, precision="fp16", profile="eager")),
    ("qwen2.5-7b", 16, TrainingConfig(seq_len=4096, global_batch=64, precision="fp8")),  # TE's FP8 weight copies
    ("llama-3.2-1b", 16, TrainingConfig.for_framework("torchtitan", seq_len=4096, global_batch=64)),  # FSDP2 shards
    # NVFP4 on B200: block-scaled copies and a per-tensor scale per (expert) weight matrix
    ("mixtral-8x7b", 16, TrainingConfig(seq_len=4096, global_batch=64, precision="nvfp4")),
]
# DeepSeek-V3 with its multi-token-prediction depth: one more MoE block, projection and head beside the head
MTP = ("deepseek-v3", 256, TrainingConfig(seq_len=4096, global_batch=256, mtp_layers=1))
CASES.append(MTP)


def _grid(name, gpus, base, gpu_id=None):
    from collections import Counter

    gpu_id = gpu_id or ("b200" if base.precision in BLOCK_SCALED else "h100-sxm")
    m, gpu = catalog.model(name), catalog.gpu(gpu_id)
    layouts, _ = _layouts(m, gpu, gpus, base, 4, 1, Counter())
    return m, gpu, Grid(m, base, layouts, (1, 2, 4), (0, 1, 2, 3), RECOMPUTE_ORDER, gpu)


def _samples(grid, mb, n, seed):
    rng = np.random.default_rng(seed)
    dualpipe = np.array([lo.schedule == "dualpipe" for lo in grid.layouts])[:, None]
    pp = np.array([lo.pp for lo in grid.layouts])[:, None]
    li, mi = np.nonzero((mb > 0) & ~(dualpipe & ((mb < 2 * pp) | (mb % 2 != 0))))
    pick = rng.choice(len(li), size=min(n, len(li)), replace=False)
    return [(li[k], mi[k], rng.integers(len(grid.zero)), rng.integers(len(grid.rec))) for k in pick]


@pytest.mark.parametrize("name,gpus,base", CASES, ids=[c[0] for c in CASES])
def test_peak_memory_matches_the_scalar_model_on_every_sampled_plan(name, gpus, base):
    m, gpu, grid = _grid(name, gpus, base)
    mb, _ = grid.microbatches()
    peak = grid.peak_memory(np.maximum(mb, 1))
    for li, mi, zi, ri in _samples(grid, mb, 120, 0):
        plan = grid.layouts[li].plan(int(grid.zero[zi]))
        cfg = grid.configs[mi][ri]
        scalar = estimate_memory(m, cfg, plan, gpu, int(mb[li, mi]))  # every stage
        assert peak[li, mi, zi, ri] == pytest.approx(scalar.per_gpu.total, rel=1e-9), (
            plan,
            cfg.micro_batch,
            cfg.recompute,
        )


@pytest.mark.parametrize("name,gpus,base", [*CASES[:4], MTP], ids=[*(c[0] for c in CASES[:4]), "deepseek-v3-mtp"])
def test_compute_bound_never_exceeds_the_step_time(name, gpus, base):
    m, gpu, grid = _grid(name, gpus, base)
    mb, _ = grid.microbatches()
    bound = grid.compute_bound(gpu, np.maximum(mb, 1))
    for li, mi, zi, ri in _samples(grid, mb, 40, 1):
        plan = grid.layouts[li].plan(int(grid.zero[zi]))
        st = step_time(m, grid.configs[mi][ri], plan, gpu, int(mb[li, mi]))
        assert bound[li, mi, ri] <= st.step_s * (1 + 1e-12)


@pytest.mark.parametrize("name,gpus,base", CASES[:4], ids=[c[0] for c in CASES[:4]])
def test_zb_v_plans_put_the_head_on_rank_0_in_the_grid_as_in_the_scalar_model(name, gpus, base):
    m, gpu, grid = _grid(name, gpus, base)
    mb, _ = grid.microbatches()
    peak = grid.peak_memory(np.maximum(mb, 1))
    bound = grid.compute_bound(gpu, np.maximum(mb, 1))
    zbv = [s for s in _samples(grid, mb, 10_000, 2) if grid.layouts[s[0]].schedule == "zb-v"][:40]
    assert zbv
    for li, mi, zi, ri in zbv:
        plan = grid.layouts[li].plan(int(grid.zero[zi]))
        cfg = grid.configs[mi][ri]
        scalar = estimate_memory(m, cfg, plan, gpu, int(mb[li, mi]))
        assert peak[li, mi, zi, ri] == pytest.approx(scalar.per_gpu.total, rel=1e-9)
        assert bound[li, mi, ri] <= step_time(m, cfg, plan, gpu, int(mb[li, mi])).step_s * (1 + 1e-12)


@pytest.mark.parametrize("name,gpus", [("qwen3-30b-a3b", 16), ("deepseek-v3", 256)])
def test_folded_plans_get_the_scalar_memory_and_a_bound_below_their_step(name, gpus):
    # MoE parallel folding (etp set): expert params by etp, expert states over EDP, activations of
    # the expert-TP-gathered tokens, all in the grid as in estimate_memory / step_time
    base = TrainingConfig(seq_len=4096, global_batch=256)
    m, gpu, grid = _grid(name, gpus, base)
    mb, _ = grid.microbatches()
    peak = grid.peak_memory(np.maximum(mb, 1))
    bound = grid.compute_bound(gpu, np.maximum(mb, 1))
    folded = [s for s in _samples(grid, mb, 10_000, 3) if grid.layouts[s[0]].etp is not None][:40]
    assert len(folded) == 40
    for li, mi, zi, ri in folded:
        plan = grid.layouts[li].plan(int(grid.zero[zi]))
        cfg = grid.configs[mi][ri]
        scalar = estimate_memory(m, cfg, plan, gpu, int(mb[li, mi]))
        assert peak[li, mi, zi, ri] == pytest.approx(scalar.per_gpu.total, rel=1e-9), plan
        assert bound[li, mi, ri] <= step_time(m, cfg, plan, gpu, int(mb[li, mi])).step_s * (1 + 1e-12)


def test_fp8_parameter_plans_get_the_scalar_memory_below_zero3():
    base = TrainingConfig(seq_len=4096, global_batch=64, precision="fp8", fp8_params=True)
    m, gpu, grid = _grid("qwen2.5-7b", 16, base)
    mb, _ = grid.microbatches()
    peak = grid.peak_memory(np.maximum(mb, 1))
    checked = 0
    for li, mi, zi, ri in _samples(grid, mb, 200, 4):
        if grid.zero[zi] == 3:
            continue  # refused (Reason.FP8_PARAMS_ZERO3)
        plan, cfg = grid.layouts[li].plan(int(grid.zero[zi])), grid.configs[mi][ri]
        scalar = estimate_memory(m, cfg, plan, gpu, int(mb[li, mi]))
        assert peak[li, mi, zi, ri] == pytest.approx(scalar.per_gpu.total, rel=1e-9), plan
        checked += 1
    assert checked >= 100


def test_per_tensor_fp8_on_blackwell_keeps_one_weight_copy_in_the_grid_as_in_the_scalar_model():
    # GPUSpec.fp8_any_layout: one FP8 copy serves both GEMM layouts on B200; the grid reads the GPU
    base = TrainingConfig(seq_len=4096, global_batch=64, precision="fp8")
    m, gpu, grid = _grid("qwen2.5-7b", 16, base, "b200")
    assert gpu.fp8_any_layout
    mb, _ = grid.microbatches()
    peak = grid.peak_memory(np.maximum(mb, 1))
    for li, mi, zi, ri in _samples(grid, mb, 120, 5):
        plan, cfg = grid.layouts[li].plan(int(grid.zero[zi])), grid.configs[mi][ri]
        scalar = estimate_memory(m, cfg, plan, gpu, int(mb[li, mi]))
        assert peak[li, mi, zi, ri] == pytest.approx(scalar.per_gpu.total, rel=1e-9), plan
