"""gpt-oss's elementwise chains as Megatron runs them (estimate/unfused_ops.py, expert_bias.py),
seen from a layer's time. The bytes themselves are checked against torch's own ops in
test_eager_kernels.py."""

import dataclasses

import pytest

from gpuplan import catalog
from gpuplan.estimate.compute import LayerShape, layer_times
from gpuplan.estimate.kernels import eager_memory_time, memory_time

GPU = catalog.gpu("gb200")
SHAPE = dict(tokens=16384, seq=4096, micro_batch=4, tp=1, cp=1, ep=64, sp=False, dtype="bf16", act_bytes=2)


def _layer(m, **kw):
    return layer_times(m, GPU, LayerShape(attention="flash", **{**SHAPE, **kw}), True)


def test_yarn_with_an_attention_factor_rotates_q_and_k_in_megatrons_unfused_ops():
    oss = catalog.model("gpt-oss-120b")
    plain = dataclasses.replace(oss, rope_attention_factor=1.0)
    qk = SHAPE["tokens"] * (oss.num_heads + oss.num_kv_heads) * oss.head_dim
    # fused: one read and one write each way; unfused: 12 a in 12 kernels forward, 14 a in 7 back
    assert _layer(plain).parts["rotary"] == pytest.approx(2 * memory_time(GPU, 2 * 2 * qk, 2))
    unfused = eager_memory_time(GPU, 24 * qk, 24) + eager_memory_time(GPU, 28 * qk, 14)
    assert _layer(oss).parts["rotary"] == pytest.approx(unfused)


def test_the_activation_clamp_is_paid_unless_te_op_fuser_clamps_in_its_kernel():
    oss = catalog.model("gpt-oss-120b")
    unclamped = dataclasses.replace(oss, glu_clamp=None)
    routed_out = SHAPE["tokens"] * oss.moe_ffn_size * oss.experts_per_token
    extra = _layer(oss).parts["activation"] - _layer(unclamped).parts["activation"]
    assert extra == pytest.approx(
        eager_memory_time(GPU, 16 * routed_out, 3) + eager_memory_time(GPU, 30 * routed_out, 9)
    )
    fuser = _layer(oss, te_op_fuser=True).parts["activation"]
    assert fuser == pytest.approx(_layer(unclamped, te_op_fuser=True).parts["activation"])
    # and recompute of the experts' activation (moe_act) runs the clamps' forward again
    assert _layer(oss).modules["moe_act"] - _layer(unclamped).modules["moe_act"] == pytest.approx(
        eager_memory_time(GPU, 16 * routed_out, 3)
    )


def test_the_expert_bias_runs_in_bf16_unless_the_dispatcher_upcasts_the_probs():
    oss = catalog.model("gpt-oss-120b")
    alltoall = _layer(oss, moe_dispatcher="alltoall").parts["expert_bias"]
    hybridep = _layer(oss, moe_dispatcher="hybridep").parts["expert_bias"]
    assert alltoall < hybridep


def test_eager_frameworks_pay_neither_megatron_chain_compiled_or_not():
    # torchtitan or transformers run their own rotary and activation; these chains are Megatron's
    oss = catalog.model("gpt-oss-120b")
    plain = dataclasses.replace(oss, rope_attention_factor=1.0, glu_clamp=None)
    for compiled in (False, True):
        got, want = _layer(oss, eager=True, compiled=compiled), _layer(plain, eager=True, compiled=compiled)
        assert got.parts["rotary"] == want.parts["rotary"]
        assert got.parts["activation"] == want.parts["activation"]
