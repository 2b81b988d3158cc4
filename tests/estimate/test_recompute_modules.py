"""Selective recompute by module (Megatron-Core's --recompute-modules): what each module frees,
what it costs again in the backward, and the FLOPs HFU counts for it."""

from __future__ import annotations

import json

import pytest
from cli_runner import run

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.activations import activation_breakdown
from gpuplan.estimate.compute import layer_times
from gpuplan.estimate.flops import module_matmul_flops_per_token, training_flops
from gpuplan.estimate.step_time import _shape
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

MOE = "qwen3-30b-a3b"  # top-8 of 128 experts, FFN 768, no shared experts
SHARED = "deepseek-v2-lite"  # MLA, shared experts, first layer dense


def _cfg(modules: tuple[str, ...] = (), **kw) -> TrainingConfig:
    return TrainingConfig(
        seq_len=4096, micro_batch=2, recompute="selective" if modules else "none", recompute_modules=modules, **kw
    )


def test_default_selective_is_the_attention_core():
    m = catalog.model("llama-3.1-8b")
    plan = ParallelPlan(dp=1, tp=2)
    default = activation_breakdown(m, TrainingConfig(recompute="selective"), plan)
    named = activation_breakdown(m, TrainingConfig(recompute="selective", recompute_modules=("core_attn",)), plan)
    assert default == named
    assert TrainingConfig(recompute="selective").recomputed == {"core_attn"}


def test_moe_act_frees_the_second_expert_gemm_input_per_routed_token():
    # hand count: each routed copy keeps the SwiGLU output, fc2's input, of moe_ffn elements
    m = catalog.model(MOE)
    plan = ParallelPlan(dp=8, ep=8)
    cfg = _cfg()
    tokens = cfg.micro_batch * cfg.seq_len
    base = activation_breakdown(m, cfg, plan).moe_layer
    freed = base - activation_breakdown(m, _cfg(("moe_act",)), plan).moe_layer
    assert freed == pytest.approx(tokens * m.experts_per_token * m.moe_ffn_size * cfg.activation_bytes)


def test_layernorm_frees_the_pre_mlp_norm_output_of_moe_layers_only():
    # Megatron fuses a dense layer's norms into the next TE linear (IdentityOp): nothing to free
    m = catalog.model(MOE)
    plan = ParallelPlan(dp=1, tp=2, sp=True)
    cfg = _cfg()
    tokens = cfg.micro_batch * cfg.seq_len
    after = activation_breakdown(m, _cfg(("layernorm",)), plan)
    before = activation_breakdown(m, cfg, plan)
    assert before.moe_layer - after.moe_layer == pytest.approx(tokens * m.hidden_size * 2 / plan.tp)
    assert before.dense_layer == after.dense_layer


def test_moe_recompute_keeps_only_the_layer_input_of_the_experts():
    m = catalog.model(SHARED)
    plan = ParallelPlan(dp=1)
    none, moe = activation_breakdown(m, _cfg(), plan), activation_breakdown(m, _cfg(("moe",)), plan)
    attention_only = activation_breakdown(m, _cfg(("mlp",)), plan).dense_layer  # a dense layer without its MLP
    # an MoE layer recomputing its MoE block keeps what a dense layer keeps without its MLP, plus the
    # pre-MLP norm's output (the checkpoint's input), which TE's LayerNormMLP would have dropped
    assert moe.moe_layer == pytest.approx(attention_only + 2 * m.hidden_size * 4096 * 2)
    assert moe.moe_layer < none.moe_layer / 3
    # "moe" already holds its activation and shared experts
    assert _cfg(("moe", "moe_act", "shared_experts")).recomputed == {"moe"}


def test_recompute_time_is_the_forward_of_the_named_modules():
    m = catalog.model(SHARED)
    gpu = catalog.gpu("h100-sxm")
    cfg = _cfg(("moe",))
    shape = _shape(m, cfg, ParallelPlan(dp=1))
    ops = layer_times(m, gpu, shape, True)
    # an MoE layer's forward = the attention part + the MoE block + the norms and residuals around
    assert 0 < ops.recompute("selective", frozenset({"moe_act"})) < ops.recompute("selective", frozenset({"moe"}))
    assert ops.recompute("selective", frozenset({"moe"})) < ops.fwd
    assert ops.recompute("full", frozenset()) == ops.fwd
    # the attention core reruns its forward only: less than its forward + backward, more than nothing
    assert 0 < ops.recompute("selective", frozenset({"core_attn"})) < ops.parts["attention"]
    dense = layer_times(m, gpu, shape, False)
    assert dense.recompute("selective", frozenset({"moe"})) == 0.0
    assert dense.recompute("selective", frozenset({"mlp"})) > 0.0


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _meta(model_id: str):
    from test_params import build_on_meta

    return build_on_meta(dict(catalog.model_entry(model_id)["config"]))


def test_mlp_recompute_flops_are_twice_the_dense_mlp_weights_per_token():
    hf = _meta("llama-3.1-8b")
    weights = sum(p.numel() for n, p in hf.named_parameters() if ".mlp." in n and n.endswith("weight"))
    assert weights
    assert module_matmul_flops_per_token(catalog.model("llama-3.1-8b"), "mlp") == 2 * weights


def test_moe_recompute_flops_count_the_router_and_visited_experts():
    # Mixtral on meta: router (gate) and experts; each token visits experts_per_token of num_experts
    m = catalog.model("mixtral-8x7b")
    hf = _meta("mixtral-8x7b")
    params = dict(hf.named_parameters())
    router = sum(p.numel() for n, p in params.items() if n.endswith("mlp.gate.weight"))
    experts = sum(p.numel() for n, p in params.items() if ".mlp.experts." in n)  # stacked (experts, out, in)
    assert router and experts
    expected = 2 * (router + experts * m.experts_per_token / m.num_experts)
    assert module_matmul_flops_per_token(m, "moe") == pytest.approx(expected)
    flops = training_flops(m, 4096, "selective", modules=frozenset({"core_attn", "moe"}))
    core = training_flops(m, 4096, "selective")
    assert flops.recompute_per_token == pytest.approx(core.recompute_per_token + expected)


def test_modules_need_selective_recompute_and_known_names():
    with pytest.raises(GpuplanError, match="recompute_modules"):
        TrainingConfig(recompute="full", recompute_modules=("moe_act",))
    with pytest.raises(GpuplanError, match="unknown module 'attn'"):
        TrainingConfig(recompute="selective", recompute_modules=("attn",))
    with pytest.raises(GpuplanError, match="the torchtitan profile has no recompute by module"):
        TrainingConfig.for_framework("torchtitan", recompute="selective", recompute_modules=("moe_act",))


def test_cli_recompute_modules_imply_selective_and_reach_the_json(capsys):
    args = ["train", MOE, "--gpu", "h100-sxm", "--gpus", "32", "--ep", "8", "--zero", "1"]
    args += ["--recompute-modules", "layernorm,moe_act"]
    code, out, _ = run([*args, "--json"], capsys)
    doc = json.loads(out)
    assert code == 0
    assert doc["training"]["recompute"] == "selective"
    assert doc["training"]["recompute_modules"] == ["layernorm", "moe_act"]


def test_cli_unknown_module_is_one_line_exit_2(capsys):
    code, out, err = run(["train", MOE, "--gpus", "8", "--ep", "8", "--recompute-modules", "everything"], capsys)
    assert code == 2
    assert "recompute_modules" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_search_refuses_modules_when_its_recompute_modes_leave_out_selective(capsys):
    args = ["search", MOE, "--gpus", "16", "--global-batch", "64", "--recompute", "none,full"]
    code, _, err = run([*args, "--recompute-modules", "moe_act"], capsys)
    assert code == 2
    assert err.startswith("error: recompute_modules") and len(err.strip().splitlines()) == 1


def test_mla_up_proj_frees_the_query_key_and_value_the_attention_core_saves():
    # Megatron-Core's recompute_up_proj frees the storage of the up-projection's outputs once the
    # attention core has run (CheckpointWithoutOutput.discard_output_and_register_recompute:
    # untyped_storage().resize_(0)). Those outputs, built as qkv_up_proj_and_rope_apply builds them
    # (multi_latent_attention.py: q split into its nope and rope parts, k's one rope head expanded
    # over the heads and concatenated, both made contiguous), measured here in bf16:
    m = catalog.model(SHARED)
    seq, nh, rope, bf16 = 16, m.num_heads, m.qk_rope_head_dim, torch.bfloat16
    q_nope, q_pe = torch.randn(seq, 1, nh, m.head_dim + rope, dtype=bf16).split([m.head_dim, rope], -1)
    k_nope, value = torch.randn(seq, 1, nh, m.head_dim + m.v_head_dim, dtype=bf16).split([m.head_dim, m.v_head_dim], -1)
    k_pe = torch.randn(seq, 1, 1, rope, dtype=bf16).expand(-1, -1, nh, -1)
    outputs = (
        torch.cat([q_nope, q_pe], -1).contiguous(),
        torch.cat([k_nope, k_pe], -1).contiguous(),
        value.contiguous(),
    )
    freed_per_token = sum(t.untyped_storage().nbytes() for t in outputs) / seq

    plan = ParallelPlan(dp=1)
    cfg = _cfg(("core_attn",))
    tokens = cfg.micro_batch * cfg.seq_len
    for layer in ("dense_layer", "moe_layer"):
        before = getattr(activation_breakdown(m, cfg, plan), layer)
        after = getattr(activation_breakdown(m, _cfg(("core_attn", "mla_up_proj")), plan), layer)
        assert (before - after) / tokens == freed_per_token
    # a model without MLA has no up-projection to recompute
    dense = catalog.model("llama-3.1-8b")
    assert activation_breakdown(dense, _cfg(("mla_up_proj",)), plan) == activation_breakdown(dense, _cfg(), plan)


def test_mla_up_proj_reruns_the_up_projections_forward():
    hf = _meta(SHARED)  # DeepSeek-V2-Lite: q without a low-rank path (q_proj), kv through kv_b_proj
    weights = sum(
        p.numel()
        for n, p in hf.named_parameters()
        if n.endswith(("self_attn.q_proj.weight", "self_attn.kv_b_proj.weight"))
    )
    assert weights
    m = catalog.model(SHARED)
    assert module_matmul_flops_per_token(m, "mla_up_proj") == 2 * weights
    gpu = catalog.gpu("h100-sxm")
    ops = layer_times(m, gpu, _shape(m, _cfg(("mla_up_proj",)), ParallelPlan(dp=1)), False)
    gemms = sum(ops.gemms[n][0] for n in ("attn.q_proj.weight", "attn.kv_b_proj.weight"))
    assert gemms < ops.recompute("selective", frozenset({"mla_up_proj"})) < ops.fwd  # and the rotary
