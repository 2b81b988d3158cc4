"""FSDP2 under pipeline parallelism keeps the stage's whole gradient in fp32: checked on torch's FSDP2."""

import subprocess
import sys
import textwrap

import pytest

from gpuplan.estimate.memory_terms import pp_grad_accumulator
from gpuplan.specs.training import TrainingConfig

pytest.importorskip("torch")

# One process, gloo: FSDP2 with torchtitan's mixed precision, the gradient sync turned off as
# torch's PipelineStage does for every micro-batch but the last; two micro-batches' backwards.
_FSDP = textwrap.dedent(
    """
    import os, socket, torch, torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_state import _get_module_fsdp_state
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128, bias=False), torch.nn.Linear(128, 64, bias=False))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.set_requires_gradient_sync(False)
    model.set_reshard_after_backward(False)
    model.set_is_last_backward(False)
    for _ in range(2):
        model(torch.randn(8, 64)).sum().backward()
    held = sum(
        p.unsharded_accumulated_grad.numel() * p.unsharded_accumulated_grad.element_size()
        for layer in model
        for p in _get_module_fsdp_state(layer)._fsdp_param_group.fsdp_params
    )
    print(held, sum(p.numel() for p in model.parameters()))
    dist.destroy_process_group()
    """
)


def test_fsdp2_under_pipelining_holds_every_parameters_gradient_in_fp32():
    out = subprocess.run([sys.executable, "-c", _FSDP], capture_output=True, text=True, timeout=120, check=True)
    held, params = map(int, out.stdout.split())
    titan = TrainingConfig.for_framework("torchtitan", seq_len=64)
    assert pp_grad_accumulator(titan, 2, 3, params) == held


def test_only_torchtitan_under_pipelining_with_sharded_gradients_holds_it():
    titan = TrainingConfig.for_framework("torchtitan", seq_len=64)
    megatron = TrainingConfig.for_framework("megatron", seq_len=64)
    assert pp_grad_accumulator(titan, 1, 3, 1e9) is None  # no pipeline: every backward reduces
    assert pp_grad_accumulator(titan, 4, 1, 1e9) is None  # replicated gradients accumulate anyway
    assert pp_grad_accumulator(megatron, 4, 3, 1e9) is None  # Megatron's buffers are counted as gradients
    assert pp_grad_accumulator(titan, 4, 2, 1e9) == 4e9


def test_torchtitan_fsdp_under_pipelining_holds_what_zero_2_holds():
    # torchtitan does not reshard after forward when pipelining and PipelineStage keeps the weights
    # through every micro-batch's backward: its ZeRO-3 is ZeRO-2 in memory
    from gpuplan import catalog
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.specs.parallel import ParallelPlan

    m, g = catalog.model("llama-3.1-70b"), catalog.gpu("h100-sxm")
    cfg = TrainingConfig.for_framework("torchtitan", seq_len=8192, micro_batch=1, global_batch=64, recompute="full")

    def total(pp, zero):
        plan = ParallelPlan(dp=64 // (8 * pp), tp=8, pp=pp, zero=zero)
        return estimate_memory(m, cfg, plan, g, 64 // plan.dp, all_stages=False).per_gpu.total

    assert total(4, 3) == total(4, 2)
    assert total(1, 3) < total(1, 2)  # without a pipeline FSDP reshards after forward
