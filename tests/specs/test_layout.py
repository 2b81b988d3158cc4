"""Megatron-Core's pipeline layout strings: parsed as Megatron parses them, refused where it (or
gpuplan) cannot run them, and estimated as the first/last split they are equal to."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.step_time import step_time
from gpuplan.specs import layout
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import stage_layers
from gpuplan.specs.training import TrainingConfig


def test_megatrons_docstring_example_parses_to_its_stages():
    # parse_str_to_list: "Ettt|(tt|)*29,m|L" -> [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]
    lay = layout.parse("Ettt|(tt|)*29,m|L")
    assert lay.layers == (3,) + (2,) * 29 + (0, 0)
    assert lay.mtp == (0,) * 30 + (1, 0)


@pytest.mark.parametrize(
    "text,pp,ranks",
    [
        # Megatron-Bridge's DeepSeek-V3 layouts (recipes/deepseek/h100/deepseek_v3.py layout_map)
        ("Et*4|(t*4|)*14tmL", 4, (16, 16, 16, 13)),  # (4, 4): rank r holds stages r, r+4, r+8, r+12
        ("Et*4|(t*4|)*14tmL", 8, (8, 8, 8, 8, 8, 8, 8, 5)),  # (8, 2)
        ("Et*4|(t*4|)*14tmL", 16, (4,) * 15 + (1,)),  # (16, 1)
        ("Et*16|t*16|t*16|t*13mL", 4, (16, 16, 16, 13)),  # (4, 1)
    ],
)
def test_ranks_hold_the_sum_of_their_chunks(text, pp, ranks):
    assert layout.parse(text).rank_layers(pp) == ranks
    vp = len(layout.parse(text).layers) // pp
    assert tuple(stage_layers(catalog.model("deepseek-v3"), ParallelPlan(dp=1, pp=pp, vp=vp, layout=text))) == ranks


@pytest.mark.parametrize(
    "text,pp,vp,field,hint",
    [
        ("t*61|EL", 2, 1, "pipeline_layout", "start with the embedding"),
        ("Et*61|L|L", 3, 1, "pipeline_layout", "end with the loss"),
        ("Et*30|mt*31L", 2, 1, "pipeline_layout", "after an MTP layer"),
        ("Et*30|t*30m|m|tL", 4, 1, "pipeline_layout", "after an MTP layer"),
        ("Et*30|t*30L", 2, 1, "pipeline_layout", "60 transformer layers; the model has 61"),
        ("Et*61|L", 2, 1, "pipeline_layout", "rank 1 holds no transformer layer"),
        ("E|t*61|mL", 3, 1, "pipeline_layout", "rank 0 holds no transformer layer"),
        ("Et*4|(t*4|)*14tmL", 4, 2, "pipeline_layout", "use `vp=4`"),
        ("Et*4|(t*4|)*14tmLq", 4, 4, "pipeline_layout", "unknown character"),
    ],
)
def test_layouts_megatron_or_gpuplan_cannot_run_are_refused_naming_the_fix(text, pp, vp, field, hint):
    with pytest.raises(GpuplanError) as err:
        stage_layers(catalog.model("deepseek-v3"), ParallelPlan(dp=1, pp=pp, vp=vp, layout=text))
    assert err.value.field == field and hint in str(err.value)


def test_a_layout_and_first_last_counts_together_are_refused():
    with pytest.raises(GpuplanError, match="drop `first_stage_layers`"):
        ParallelPlan(dp=1, pp=2, layout="Et*30|t*31L", first_stage_layers=30)


def test_mtp_layers_in_a_stage_of_their_own_are_refused_as_not_modelled():
    with pytest.raises(GpuplanError, match="mtp_standalone"):
        # pp 2 x vp 2: the MTP layer in the third stage (rank 0's second chunk), the loss in the fourth
        layout.check("Et*20|t*20|t*21m|L", 2, 61)


@pytest.mark.parametrize(
    "text,vp,first,last",
    [
        ("Et*7|(t*8|)*14t*7L", 1, 7, 7),  # Llama 3 405B on pp 16 (Llama 3 report, 3.3.2)
        ("Et*3|(t*4|)*30t*3L", 2, 7, 7),  # and on pp 16 x vp 2: 7 = 3 + 4 on both ends
    ],
)
def test_a_layout_estimates_as_the_first_last_split_it_equals(text, vp, first, last):
    m, gpu = catalog.model("llama-3.1-405b"), catalog.gpu("h100-sxm")
    cfg = TrainingConfig(seq_len=8192, global_batch=128, recompute="full")
    a = ParallelPlan(dp=4, tp=8, pp=16, vp=vp, layout=text)
    b = ParallelPlan(dp=4, tp=8, pp=16, vp=vp, first_stage_layers=first, last_stage_layers=last)
    assert stage_layers(m, a) == stage_layers(m, b)
    assert step_time(m, cfg, a, gpu, 32).step_s == step_time(m, cfg, b, gpu, 32).step_s
    assert estimate_memory(m, cfg, a, gpu, 32).per_gpu.total == estimate_memory(m, cfg, b, gpu, 32).per_gpu.total
