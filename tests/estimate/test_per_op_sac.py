"""torchtitan's per-op selective activation checkpointing: what a block keeps, against torch's own SAC."""

import functools
import gc
import weakref

import pytest

from gpuplan import catalog
from gpuplan.estimate.activations import activation_breakdown, per_op_sac_saved
from gpuplan.estimate.flops import op_sac_matmul_flops_per_token
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

torch = pytest.importorskip("torch")
F = torch.nn.functional

B, S, H, HEADS, KV, HD, FFN = 2, 32, 64, 4, 2, 16, 160


def _block_and_policy():
    """One Llama block (torchtitan's TransformerBlock without rotary, which re-runs either way),
    its input and weights, and torchtitan's per-op SAC policy as a checkpoint context."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    # torchtitan's _save_list (matmuls, attention kernels); the CPU flash kernel is the CUDA one's twin
    save = {
        aten.mm.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
    }

    def context():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):  # torchtitan's _get_custom_policy
            mode = "recompute" if ctx.is_recompute else "forward"
            if func == aten.mm.default:
                count[mode] += 1
            keep = func in save and not (func == aten.mm.default and count[mode] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    torch.manual_seed(0)
    shapes = dict(
        wq=(HEADS * HD, H), wk=(KV * HD, H), wv=(KV * HD, H), wo=(H, HEADS * HD),
        w1=(FFN, H), w3=(FFN, H), w2=(H, FFN), n1=(H,), n2=(H,),
    )  # fmt: skip
    w = {n: torch.randn(*s, requires_grad=True) for n, s in shapes.items()}

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g

    def heads(t, n):  # (tokens, n x HD) -> (B, HEADS, S, HD), GQA heads repeated
        return t.view(B, S, n, HD).transpose(1, 2).repeat_interleave(HEADS // n, 1)

    def block(x):
        y = rms(x, w["n1"])
        q, k, v = y @ w["wq"].t(), y @ w["wk"].t(), y @ w["wv"].t()
        o = F.scaled_dot_product_attention(heads(q, HEADS), heads(k, KV), heads(v, KV), is_causal=True)
        x = x + o.transpose(1, 2).reshape(B * S, HEADS * HD) @ w["wo"].t()
        z = rms(x, w["n2"])
        return x + (F.silu(z @ w["w1"].t()) * (z @ w["w3"].t())) @ w["w2"].t()

    return block, torch.randn(B * S, H, requires_grad=True), w, context


def _kept_by_torch_sac() -> int:
    """Bytes torch's selective checkpoint keeps for the block under torchtitan's policy: every
    storage an op made in forward that is still alive afterwards, less input, output, weights."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import checkpoint

    class Made(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.storages = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for o in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(o, torch.Tensor):
                    self.storages.append(weakref.ref(o.untyped_storage()))
            return out

    block, x, w, context = _block_and_policy()
    made = Made()
    with made:
        out = checkpoint(block, x, use_reentrant=False, context_fn=functools.partial(context))
    gc.collect()
    alive = {id(s): s for r in made.storages if (s := r()) is not None}
    mine = {id(t.untyped_storage()) for t in (x, out, *w.values())}
    return sum(s.nbytes() for k, s in alive.items() if k not in mine)


def _recomputed_matmul_flops_by_torch_sac() -> float:
    """Matmul FLOPs the backward adds under the policy: FLOPs of a backward through the
    checkpointed block less those of a plain backward (torch's FlopCounterMode)."""
    from torch.utils.checkpoint import checkpoint
    from torch.utils.flop_counter import FlopCounterMode

    def backward_flops(sac: bool) -> int:
        block, x, _, context = _block_and_policy()
        out = checkpoint(block, x, use_reentrant=False, context_fn=context) if sac else block(x)
        counter = FlopCounterMode(display=False)
        with counter:
            out.sum().backward()
        return counter.get_total_flops()

    return backward_flops(True) - backward_flops(False)


def test_per_op_sac_keeps_what_torchs_selective_checkpoint_keeps():
    m = ModelSpec(
        name="tiny-llama", model_type="llama", vocab_size=128, hidden_size=H, num_layers=1,
        num_heads=HEADS, num_kv_heads=KV, head_dim=HD, ffn_size=FFN,
    )  # fmt: skip
    fp32 = 4
    # the formula counts the block's input too, which the checkpoint holds as its argument
    assert per_op_sac_saved(m, fp32, 1, False) * B * S - fp32 * H * B * S == _kept_by_torch_sac()


def test_torchtitan_selective_keeps_about_a_third_of_a_llama_8b_block():
    m = catalog.model("llama-3.1-8b")
    plan = ParallelPlan(dp=8, zero=3)
    titan = TrainingConfig.for_framework("torchtitan", seq_len=8192, recompute="selective")
    megatron = TrainingConfig.for_framework("megatron", seq_len=8192, recompute="selective")
    none = TrainingConfig.for_framework("torchtitan", seq_len=8192)
    t, mg, every = (activation_breakdown(m, c, plan) for c in (titan, megatron, none))
    assert 0.25 * every.dense_layer < t.dense_layer < 0.35 * every.dense_layer
    # what is not kept is re-run in one block's backward: kept + re-run = everything
    assert t.dense_layer + t.layer_rerun == pytest.approx(every.dense_layer)
    assert mg.layer_rerun == 0.0


def test_per_op_sac_reruns_the_matmuls_torchs_selective_checkpoint_reruns():
    m = ModelSpec(
        name="tiny-llama", model_type="llama", vocab_size=128, hidden_size=H, num_layers=1,
        num_heads=HEADS, num_kv_heads=KV, head_dim=HD, ffn_size=FFN,
    )  # fmt: skip
    # wk, wo and w3 re-run; the attention kernel's output was kept, so attention does not
    assert op_sac_matmul_flops_per_token(m) * B * S == _recomputed_matmul_flops_by_torch_sac()
    assert TrainingConfig.for_framework("torchtitan", seq_len=S, recompute="selective").recomputed == {"op_sac"}
