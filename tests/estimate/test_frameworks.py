"""Framework profiles: the defaults each sets, what each refuses, and that the search obeys them."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.search.plans import search
from gpuplan.specs.framework import ALL_SCHEDULES, FRAMEWORKS, check_plan, get
from gpuplan.specs.parallel import SCHEDULES, ParallelPlan
from gpuplan.specs.training import TrainingConfig


def test_generic_is_exactly_the_defaults_gpuplan_had():
    assert TrainingConfig.for_framework() == TrainingConfig()
    assert set(ALL_SCHEDULES) <= set(SCHEDULES)  # every schedule (aliases aside) is open to generic


def test_every_profile_names_its_source():
    for fw in FRAMEWORKS.values():
        assert fw.source and (fw.name == "generic" or "https://github.com/" in fw.source)


def test_megatron_reduces_bf16_gradients_in_fp32():
    # megatron/training/arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be
    # done in fp32" -> 4-byte main_grad
    cfg = TrainingConfig.for_framework("megatron", precision="bf16")
    assert cfg.profile == "fused" and cfg.grad_bytes == 4 and not cfg.tp_overlap
    assert TrainingConfig.for_framework("nemo").tp_overlap  # NeMo's performance recipes turn it on


def test_torchtitan_is_eager_fsdp2_with_fp32_reduce_and_torchao_fp8():
    # torchtitan Training.mixed_precision_reduce = "float32"; torchao Float8Linear keeps no FP8 copy
    cfg = TrainingConfig.for_framework("torchtitan", precision="fp8")
    assert cfg.profile == "eager" and cfg.grad_bytes == 4 and cfg.fp8_copy_bytes == 0
    assert TrainingConfig.for_framework("megatron", precision="fp8").fp8_copy_bytes == 2


def test_explicit_options_win_over_the_profile():
    cfg = TrainingConfig.for_framework("torchtitan", profile="fused", attention="eager", tp_overlap=True)
    assert (cfg.profile, cfg.attention, cfg.tp_overlap) == ("fused", "eager", True)


@pytest.mark.parametrize(
    "name,plan,field,hint",
    [
        ("deepspeed", ParallelPlan(pp=2, schedule="dualpipe"), "schedule", "`schedule` 1f1b"),
        ("megatron", ParallelPlan(pp=4, schedule="zb-v"), "schedule", "`schedule` 1f1b"),
        ("torchtitan", ParallelPlan(pp=4, schedule="dualpipe"), "schedule", "`schedule` 1f1b or zb or zb-v"),
        ("hf", ParallelPlan(pp=2), "pp", "`pp=1`"),
        ("deepspeed", ParallelPlan(pp=2, vp=2), "vp", "`vp=1`"),
        ("deepspeed", ParallelPlan(pp=2, dp=2, zero=3), "zero", "`zero` 0 or 1 with `pp` > 1"),
        ("torchtitan", ParallelPlan(dp=2, zero=1), "zero", "`zero` 0 or 2 or 3"),
    ],
)
def test_unsupported_layouts_are_refused_naming_the_profile_and_alternatives(name, plan, field, hint):
    with pytest.raises(GpuplanError) as exc:
        check_plan(get(name), plan)
    assert exc.value.field == field and name in str(exc.value) and hint in str(exc.value)


def test_unsupported_training_options_are_refused():
    with pytest.raises(GpuplanError, match="the hf profile has no selective recompute"):
        TrainingConfig.for_framework("hf", recompute="selective")
    with pytest.raises(GpuplanError, match="the deepspeed profile has no TP communication overlap"):
        TrainingConfig.for_framework("deepspeed", tp_overlap=True)
    with pytest.raises(GpuplanError, match="unknown framework"):
        TrainingConfig(framework="jax")


@pytest.mark.parametrize("name", ["megatron", "torchtitan", "deepspeed", "hf"])
def test_the_search_ranks_only_plans_the_framework_runs(name):
    m, gpu = catalog.model("llama-3.2-1b"), catalog.gpu("h100-sxm")
    base = TrainingConfig.for_framework(name, seq_len=4096, global_batch=64)
    result = search(m, gpu, 16, base, top=20)
    assert result.framework == name and result.ranked
    for c in result.ranked:
        check_plan(get(name), c.plan)  # raises if not
        assert c.config.framework == name and c.config.recompute in get(name).recompute


def test_torchtitan_fsdp2_holds_16_bytes_per_parameter_sharded():
    # FSDP2 + MixedPrecisionPolicy(param bf16, reduce fp32): fp32 sharded parameter (the master,
    # 4 B), fp32 sharded gradient (4 B), Adam exp_avg and exp_avg_sq (8 B); BF16 only while gathered
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.estimate.params import count_params

    m = catalog.model("llama-3.2-1b")
    cfg = TrainingConfig.for_framework("torchtitan")
    s = estimate_memory(m, cfg, ParallelPlan(dp=8, zero=3), catalog.gpu("h100-sxm")).per_gpu
    assert s.weights == 0 and s.model_states == pytest.approx(16 * count_params(m).total / 8)
    assert s.other["zero3_gather"] > 0  # the gathered BF16 blocks and their gradients
    generic = estimate_memory(m, TrainingConfig(), ParallelPlan(dp=8, zero=3), catalog.gpu("h100-sxm")).per_gpu
    assert generic.weights == 2 * count_params(m).total / 8
