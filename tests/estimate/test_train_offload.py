"""Training offload against hand-computed bytes and times (ZeRO-Offload, Ren et al. 2021, sections
4-5). OPT-125m has 125,239,296 parameters (its model card)."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.offload import OffloadTrainRequest, check_fits, estimate_offload_training
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

N = 125_239_296
FAST = 1e18


def gpu(memory=80e9, per_node=8):
    return GPUSpec(
        id="t",
        name="test",
        memory_bytes=memory,
        hbm_bytes_per_s=2e12,
        peak_flops={"bf16": FAST},
        interconnect="nvlink",
        interconnect_bytes_per_s=600e9,
        pcie_bytes_per_s=50e9,
        gpus_per_node=per_node,
        tdp_w=1,
    )


def host(memory=1e12, cpu_bw=100e9, pcie=10e9, disk=0.0, disk_bw=0.0, shared=1):
    return HostSpec(
        name="h",
        cpu_memory_bytes=memory,
        cpu_memory_bytes_per_s=cpu_bw,
        pcie_bytes_per_s=pcie,
        pcie_shared_by=shared,
        disk_bytes=disk,
        disk_read_bytes_per_s=disk_bw,
        disk_write_bytes_per_s=disk_bw,
        cpu_flops=FAST,
    )


def estimate(dp=1, **kw):
    g, h = kw.pop("gpu", gpu()), kw.pop("host", host())
    return estimate_offload_training(
        OffloadTrainRequest(
            model=catalog.model("opt-125m"),
            gpu=g,
            host=h,
            plan=ParallelPlan(dp=dp),
            config=TrainingConfig(seq_len=512),
            **kw,
        )
    )


def test_zero_offload_puts_14_bytes_per_parameter_on_the_cpu_and_2_on_the_gpu():
    e = estimate()
    assert e.params == N
    assert e.cpu_bytes == pytest.approx(14 * N)
    assert e.gpu_bytes["weights"] == pytest.approx(2 * N)


def test_data_parallel_ranks_on_one_node_hold_one_copy_of_the_states_between_them():
    assert estimate(dp=8).cpu_bytes == pytest.approx(14 * N)


def test_nvme_holds_the_optimizer_states_and_the_cpu_the_gradients():
    e = estimate(host=host(disk=1e12, disk_bw=5e9), device="nvme")
    assert e.disk_bytes == pytest.approx(12 * N)
    assert e.cpu_bytes == pytest.approx(2 * N)


def test_step_adds_grads_down_cpu_adam_and_params_up():
    # GPU compute vanishes at 1e18 FLOP/s: the step is 2N/pcie + 28N/cpu_bw + 2N/pcie
    e = estimate()
    assert e.step_s == pytest.approx(2 * N / 10e9 + 28 * N / 100e9 + 2 * N / 10e9, rel=1e-5)


def test_delayed_update_overlaps_the_cpu_step_with_the_next_forward_and_backward():
    e = estimate(delayed_update=True)
    # max(fwd + max(bwd, grads down), cpu step + params up), compute ~ 0
    assert e.step_s == pytest.approx(max(2 * N / 10e9, 28 * N / 100e9 + 2 * N / 10e9), rel=1e-5)


def test_gpus_behind_one_switch_share_pcie():
    # 8 ranks, 2 per switch: each moves 2N/8 bytes each way at 5 GB/s; the node's CPU updates all N
    e = estimate(dp=8, host=host(shared=2))
    assert e.pcie_down_s == pytest.approx(2 * N / 8 / 5e9)
    assert e.cpu_step_s == pytest.approx(28 * N / 100e9)


def test_largest_model_is_gpu_bound_for_zero_offload():
    e = estimate()
    fixed = e.gpu_total - e.gpu_bytes["weights"]
    assert e.max_params == pytest.approx((80e9 - fixed) / 2)


def test_too_little_cpu_memory_names_cpu_memory_and_too_small_a_disk_names_disk():
    with pytest.raises(GpuplanError) as err:
        check_fits(estimate(host=host(memory=1e9)))
    assert err.value.field == "cpu_memory" and "\n" not in str(err.value)
    with pytest.raises(GpuplanError) as err:
        check_fits(estimate(host=host(disk=1e9, disk_bw=5e9), device="nvme"))
    assert err.value.field == "disk"


def test_nvme_without_a_disk_is_refused():
    with pytest.raises(GpuplanError) as err:
        estimate(device="nvme")
    assert err.value.field == "disk"


def test_optimizer_and_params_on_nvme_keep_all_sixteen_bytes_on_the_drives():
    # ZeRO-Infinity's offload engine takes every partitioned model state to NVMe: 2 (fp16 params)
    # + 2 (fp16 grads) + 12 (fp32 params, momentum, variance) bytes per parameter, none in DRAM
    e = estimate(host=host(disk=1e12, disk_bw=5e9), device="nvme", offload="optimizer+params")
    assert e.disk_bytes == pytest.approx(16 * N)
    assert e.cpu_bytes == 0.0


@pytest.mark.parametrize("zero", [1, 2])
def test_offloading_parameters_under_zero_1_or_2_is_refused_as_deepspeed_refuses_it(zero):
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="^zero: .*partitions the parameters as ZeRO-3"):
        OffloadTrainRequest(
            model=catalog.model("opt-125m"),
            gpu=gpu(),
            host=host(),
            plan=ParallelPlan(dp=2, zero=zero),
            config=TrainingConfig(seq_len=512),
            offload="optimizer+params",
        )
    assert estimate(dp=2, offload="optimizer+params").params == N  # unset (0) or 3: as ZeRO-3


def test_an_offload_plan_that_does_not_fit_is_exit_code_3_not_bad_input():
    from gpuplan.errors import DoesNotFit

    big = estimate_offload_training(
        OffloadTrainRequest(
            model=catalog.model("llama-3.1-70b"),
            gpu=gpu(),
            host=host(),
            plan=ParallelPlan(dp=1),
            config=TrainingConfig(seq_len=512),
        )
    )
    with pytest.raises(DoesNotFit) as err:
        check_fits(big)
    assert err.value.field == "offload" and err.value.exit_code == 3
