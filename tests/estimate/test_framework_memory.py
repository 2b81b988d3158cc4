"""Memory as Megatron-Bridge / NeMo allocate it: the loss, the optimizer state's dtype, the
allocator's expandable segments and the FP8 weight copies on Blackwell, each against an oracle
outside gpuplan (torch's own tensors, or counts read from the framework's source)."""

import dataclasses

import pytest
import torch

from gpuplan import catalog
from gpuplan.estimate.activations import activation_breakdown
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.memory_terms import optimizer_bytes_per_param, reserved
from gpuplan.estimate.validate import HELD_OUT, load_rows
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig
from gpuplan.units import GiB

MIB = 2**20


class _TECrossEntropy(torch.autograd.Function):
    """TransformerEngine's CrossEntropyFunction (transformer_engine/pytorch/cross_entropy.py, v2.9)
    with its triton kernels' effect written in torch: the loss from an fp32 softmax computed row
    by row, the gradient written over the input, the input the only tensor saved."""

    @staticmethod
    def forward(ctx, logits, target):
        loss = torch.empty(logits.shape[:-1], dtype=torch.float32)
        for i in range(logits.shape[0]):  # the kernel's rows: fp32 in registers only
            row = logits[i].float()
            p = torch.softmax(row, dim=-1)
            loss[i] = -torch.log(p.gather(-1, target[i : i + 1]))
            p[target[i]] -= 1
            logits[i].copy_(p.to(logits.dtype))  # cross_entropy_kernel writes X_ptr in place
        ctx.save_for_backward(logits.detach())
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad * grad_output[:, None].to(grad.dtype), None


class _MegatronCrossEntropy(torch.autograd.Function):
    """Megatron-Core's VocabParallelCrossEntropy on one rank (megatron/core/tensor_parallel/
    cross_entropy.py): the logits upcast to fp32, max subtracted, exponentiated and normalised in
    place; the softmax, the target mask and the masked targets saved."""

    @staticmethod
    def forward(ctx, logits, target):
        logits = logits.float()
        logits -= logits.max(dim=-1, keepdim=True).values
        exp = logits.exp_()
        exp.div_(exp.sum(dim=-1, keepdim=True))
        mask = target < 0
        masked = target.clone()
        loss = -torch.log(exp.gather(-1, masked[:, None]).squeeze(-1))
        ctx.save_for_backward(exp, mask, masked)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        exp, _, masked = ctx.saved_tensors
        exp[torch.arange(exp.shape[0]), masked] -= 1
        return exp * grad_output[:, None], None


def _saved_bytes(fn, tokens: int, vocab: int) -> int:
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True).clone()
    target = torch.randint(0, vocab, (tokens,))
    seen: dict[int, int] = {}

    def pack(t):
        seen.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn.apply(logits, target).sum().backward()
    return sum(seen.values())


@pytest.mark.parametrize("in_place", [True, False])
def test_the_loss_keeps_what_its_cross_entropy_saves(in_place):
    m = catalog.model("llama-3.1-8b")
    tokens, vocab = 64, m.vocab_size
    cfg = TrainingConfig(seq_len=tokens, precision="bf16", cross_entropy_in_place=in_place)
    a = activation_breakdown(m, cfg, ParallelPlan())
    measured = _saved_bytes(_TECrossEntropy if in_place else _MegatronCrossEntropy, tokens, vocab)
    # the targets' mask and copy (9 bytes a token) are below the model's grain
    assert a.loss_saved == pytest.approx(measured, rel=1e-4)
    # the in-place loss holds a third of what the upcasting one does at its peak
    assert in_place == (a.loss_saved + a.loss_transient < 2.01 * tokens * vocab)


def test_bf16_optimizer_state_is_what_torch_keeps_for_bf16_parameters():
    # Apex's DistributedFusedAdam with dtype bf16 keeps exp_avg and exp_avg_sq in BF16 and updates
    # the BF16 parameters in place (no master), as torch's AdamW does for BF16 parameters
    params = [torch.nn.Parameter(torch.randn(300, 7, dtype=torch.bfloat16))]
    opt = torch.optim.AdamW(params)
    params[0].grad = torch.randn_like(params[0])
    opt.step()
    state = opt.state[params[0]]
    moment_bytes = sum(state[k].nbytes for k in ("exp_avg", "exp_avg_sq")) / params[0].numel()
    apex = TrainingConfig(precision="bf16", optimizer_dtype="bf16", master_dtype="bf16")
    assert optimizer_bytes_per_param(apex) == moment_bytes == 4
    assert apex.master_bytes == 0
    assert TrainingConfig(precision="bf16").master_bytes == 4 and optimizer_bytes_per_param(TrainingConfig()) == 8


def test_bf16_moments_keep_fp32_masters_as_megatrons_precision_aware_optimizer():
    # Megatron-Core's precision-aware optimizer (--exp-avg-dtype/--exp-avg-sq-dtype bf16, main
    # params fp32; DeepSeek-V3 report 3.3.2): the moments as torch keeps BF16 ones, beside an FP32
    # master copy of every parameter
    params = [torch.nn.Parameter(torch.randn(300, 7, dtype=torch.bfloat16))]
    opt = torch.optim.AdamW(params)
    params[0].grad = torch.randn_like(params[0])
    opt.step()
    moments = sum(opt.state[params[0]][k].nbytes for k in ("exp_avg", "exp_avg_sq")) / params[0].numel()
    master = params[0].detach().float().element_size()
    cfg = TrainingConfig(precision="bf16", optimizer_dtype="bf16")
    assert (optimizer_bytes_per_param(cfg), cfg.master_bytes) == (moments, master) == (4, 4)
    # the whole per-parameter state a data-parallel rank shards: 12 bytes -> 8
    assert optimizer_bytes_per_param(cfg) + cfg.master_bytes == 8
    with pytest.raises(Exception, match="master_dtype"):
        TrainingConfig(master_dtype="fp16")


def test_a_bf16_state_for_an_optimizer_that_has_none_is_refused():
    with pytest.raises(Exception, match="optimizer_dtype"):
        TrainingConfig(optimizer="adafactor", optimizer_dtype="bf16")


def test_expandable_segments_leave_no_allocator_reserve():
    allocated = 100 * GiB
    plain = TrainingConfig()
    assert reserved(plain, allocated)[0] == pytest.approx(plain.allocator_fraction * allocated)
    assert reserved(TrainingConfig(expandable_segments=True), allocated) == (0.0, plain.cuda_context_bytes)


@pytest.mark.parametrize(
    "gpu, one_copy",
    [("h100-sxm", False), ("h200", False), ("a100-sxm-80gb", False), ("b200", True), ("gb200", True), ("b300", True)],
)
def test_fp8_gemm_layouts_follow_transformer_engine_rule(gpu, one_copy):
    # nvte_is_non_tn_fp8_gemm_supported (transformer_engine/common/transformer_engine.cpp, v2.9):
    # compute capability 10.x, or 13.0 and later; the quantizers allocate no transpose there
    assert catalog.gpu(gpu).fp8_any_layout is one_copy


@pytest.mark.parametrize("precision, ratio", [("fp8", 0.5), ("mxfp8", 1.0)])
def test_blackwell_keeps_one_per_tensor_fp8_copy_and_both_block_scaled_ones(precision, ratio):
    m = catalog.model("llama-3.1-8b")
    cfg = TrainingConfig.for_framework("megatron", precision=precision)
    plan = ParallelPlan(dp=8)
    # a Hopper-layout GPU with block-scaled tensor cores does not exist: compare GB200 with itself
    # as if its FP8 GEMMs took the TN layout only (compute capability 9.0, Hopper's rule)
    gb200 = catalog.gpu("gb200")
    tn_only = dataclasses.replace(gb200, compute_capability=9.0)
    hopper_rule = estimate_memory(m, cfg, plan, tn_only).per_gpu.other["fp8_weight_copies"]
    blackwell = estimate_memory(m, cfg, plan, gb200).per_gpu.other["fp8_weight_copies"]
    assert blackwell == pytest.approx(ratio * hopper_rule)


def test_gb200_holds_what_nvidia_smi_reports():
    assert catalog.gpu("gb200").memory_bytes == 189471 * MIB
    assert catalog.gpu("b200").memory_bytes == 183359 * MIB


def test_megatron_bridge_rows_take_the_in_place_loss_and_nemo_2407_rows_do_not():
    rows = load_rows(HELD_OUT)
    bridge = [r for r in rows if r.source.startswith("Megatron-Bridge")]
    assert bridge and all(r.config.cross_entropy_in_place for r in bridge)
    assert not any(r.config.cross_entropy_in_place for r in rows if r.source.startswith("NeMo 24.07"))
