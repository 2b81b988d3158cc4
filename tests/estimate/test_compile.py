"""torch.compile over a block (TrainingConfig.compile): fused elementwise kernels and what they save."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.activations import _mlp_saved, _norm_saved, activation_breakdown
from gpuplan.estimate.step_time import step_time
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

T, H, FFN = 64, 64, 160


def _saved_per_token(compiled: bool) -> float:
    """Activation bytes per token an RMSNorm + SwiGLU MLP block saves for backward, in fp32, with
    and without torch.compile (saved-tensor hooks see what AOTAutograd's compiled forward saves)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    torch.manual_seed(0)
    w1, w3, w2 = (torch.randn(*s, requires_grad=True) for s in ((FFN, H), (FFN, H), (H, FFN)))
    g = torch.randn(H, requires_grad=True)
    weights = {id(t) for t in (w1, w3, w2, g)}

    def block(x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g
        return x + (F.silu(y @ w1.t()) * (y @ w3.t())) @ w2.t()

    fn = torch.compile(block) if compiled else block
    total = 0

    def pack(t):
        nonlocal total
        if id(t) not in weights and t.data_ptr() not in {w.data_ptr() for w in (w1, w3, w2, g)}:
            total += t.numel() * t.element_size()
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(torch.randn(T, H, requires_grad=True))
    except Exception as e:  # no C++ compiler for Inductor's CPU backend
        pytest.skip(f"torch.compile unavailable here: {type(e).__name__}")
    return total / T


def test_a_compiled_block_saves_what_fused_norm_and_activation_kernels_keep():
    m = ModelSpec(
        name="tiny", model_type="llama", vocab_size=128, hidden_size=H, num_layers=1,
        num_heads=4, num_kv_heads=4, head_dim=16, ffn_size=FFN,
    )  # fmt: skip
    fp32 = 4
    fused = _norm_saved(m, fp32, "fused", True) + _mlp_saved(m, fp32, "fused", FFN)
    # AOTAutograd keeps the norm's fp32 rstd per token beside the fused kernel's tensors
    assert _saved_per_token(True) == pytest.approx(fused, rel=0.01)
    assert _saved_per_token(False) > 1.4 * fused  # eager keeps every op's inputs


def test_compile_fuses_the_eager_profiles_elementwise_work_and_saves_less():
    m, h100 = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=8, zero=3)
    eager = TrainingConfig.for_framework("torchtitan", seq_len=8192, micro_batch=2, global_batch=16)
    compiled = TrainingConfig.for_framework("torchtitan", seq_len=8192, micro_batch=2, global_batch=16, compile=True)
    a, b = step_time(m, eager, plan, h100, 1), step_time(m, compiled, plan, h100, 1)
    assert b.step_s < a.step_s
    assert b.ops["gemm"] == pytest.approx(a.ops["gemm"]) and b.ops["attention"] == pytest.approx(a.ops["attention"])
    assert b.ops["norm"] < 0.5 * a.ops["norm"]
    assert activation_breakdown(m, compiled, plan).dense_layer < activation_breakdown(m, eager, plan).dense_layer


def test_compile_is_refused_where_the_kernels_are_fused_already():
    with pytest.raises(GpuplanError, match="megatron profile") as e:
        TrainingConfig.for_framework("megatron", seq_len=4096, compile=True)
    assert e.value.field == "compile"
    with pytest.raises(GpuplanError, match="fused cross-entropy") as e:
        TrainingConfig.for_framework("nemo", seq_len=4096, compile_loss=True)
    assert e.value.field == "compile_loss"


def _loss_saved_per_logit(compiled: bool) -> float:
    """Bytes per logit torchtitan's loss (cross_entropy over ``pred.float()``, components/loss.py)
    saves for backward over bf16 logits, eager and under torch.compile; each storage once."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rows, vocab = 128, 1024

    def loss(pred, labels):
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

    fn = torch.compile(loss) if compiled else loss
    pred = torch.randn(2, rows // 2, vocab, dtype=torch.bfloat16, requires_grad=True)
    kept: dict[int, int] = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(pred, torch.randint(0, vocab, (2, rows // 2)))
    except Exception as e:  # no C++ compiler for Inductor's CPU backend
        pytest.skip(f"torch.compile unavailable here: {type(e).__name__}")
    out.backward()
    assert pred.grad.dtype == torch.bfloat16  # the gradient comes back in the logits' dtype
    return sum(kept.values()) / (rows * vocab)


def test_a_compiled_loss_keeps_the_bf16_logits_not_an_fp32_log_softmax():
    from gpuplan.estimate.activations import FP32, INDEX

    m = catalog.model("llama-3.1-8b")
    plan = ParallelPlan(dp=8, zero=3)
    kw = dict(seq_len=4096, micro_batch=1, global_batch=8)
    blocks = TrainingConfig.for_framework("torchtitan", compile=True, compile_loss=False, **kw)
    both = TrainingConfig.for_framework("torchtitan", compile=True, **kw)
    assert both.compiled_loss and not blocks.compiled_loss
    eager, fused = activation_breakdown(m, blocks, plan), activation_breakdown(m, both, plan)
    tokens, vocab = 4096, m.vocab_size
    # torch's own saved tensors, per logit: eager keeps the fp32 log-softmax (4 bytes), compiled the
    # bf16 logits (2) and per row two floats and the target
    assert _loss_saved_per_logit(False) == pytest.approx(FP32, rel=0.01)
    assert _loss_saved_per_logit(True) == pytest.approx(2, rel=0.02)
    assert eager.loss_saved == pytest.approx(tokens * (FP32 * vocab + INDEX))
    assert fused.loss_saved == pytest.approx(tokens * (2 * vocab + 2 * FP32 + INDEX))
    # and the backward writes one bf16 gradient where eager holds fp32 buffers beside the logits
    assert fused.loss_transient == tokens * 2 * vocab < eager.loss_transient
