"""Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5): linear-attention layers beside gated softmax ones.

Oracles: transformers' own models (parameter counts on the meta device, FLOPs under
FlopCounterMode over its chunked rule, its cache after a forward pass); the rest are derived
properties (a linear layer's mixing cost grows with the tokens, not the context).
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.compute import LayerShape, layer_times
from gpuplan.estimate.flops import GDN_CHUNK, training_flops
from gpuplan.estimate.params import count_params
from gpuplan.estimate.stage_params import stage_params
from gpuplan.serve.formats import kv_format
from gpuplan.serve.kv import kv_bytes_per_sequence, state_bytes_per_layer
from gpuplan.specs import validity
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.parallel import ParallelPlan

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from cache_oracle import cache_after_forward, padded_conv_flops  # noqa: E402

SMALL = dict(
    model_type="qwen3_next",
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=96,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=8,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
    pad_token_id=0,
)


def _hf(config: dict, **kw):
    cfg = transformers.AutoConfig.for_model(**config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cfg, transformers.AutoModelForCausalLM.from_config(cfg, **kw)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"full_attention_interval": 2, "decoder_sparse_step": 2, "mlp_only_layers": [0]},
        {"layer_types": ["linear_attention", "full_attention", "full_attention", "linear_attention"]},
        {"model_type": "qwen3_5_text", "num_experts": 0},
        {"model_type": "qwen3_5_moe_text", "linear_num_value_heads": 6},
    ],
)
def test_parameters_equal_transformers_layer_by_layer(extra):
    config = {**SMALL, **extra}
    with torch.device("meta"):
        _, model = _hf(config)
    m = model_from_hf_config(config)
    counts = count_params(m)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.per_layer == tuple(sum(p.numel() for p in b.parameters()) for b in model.model.layers)
    kinds = [type(b.linear_attn if hasattr(b, "linear_attn") else b.self_attn).__name__ for b in model.model.layers]
    assert [("GatedDeltaNet" in k) for k in kinds] == [m.is_linear_layer(i) for i in range(m.num_layers)]


def test_pipeline_stages_hold_exactly_their_layers_weights():
    m = model_from_hf_config({**SMALL, "num_hidden_layers": 8})
    counts = count_params(m)
    held = 0.0
    for stage, first in enumerate((0, 3, 6)):  # uneven stages that cut through the 3:1 pattern
        n = (3, 3, 2)[stage]
        sp = stage_params(m, 3, stage, first, n, 1, 1)
        held += sp.dense + sp.expert
        assert sp.n_linear == sum(m.is_linear_layer(i) for i in range(first, first + n))
    assert held == counts.total


def test_forward_flops_equal_flop_counter_on_transformers_chunked_rule():
    batch, seq = 2, 2 * GDN_CHUNK
    torch.manual_seed(0)
    cfg, model = _hf(SMALL, attn_implementation="eager", experts_implementation="eager")
    from torch.utils import flop_counter

    with torch.no_grad(), flop_counter.FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, SMALL["vocab_size"], (batch, seq)))
    m = model_from_hf_config(SMALL)
    predicted = training_flops(m, seq, causal=False).forward_per_token * batch * seq
    c, dk, dv, heads = GDN_CHUNK, SMALL["linear_key_head_dim"], SMALL["linear_value_head_dim"], 4
    # transformers solves the two triangular systems (torch.linalg.solve_triangular, which the
    # counter does not count) where FLA forms (I + A)^-1 and multiplies: W, U and the inverse
    fla_only = m.num_linear_layers * heads * (2 * c * dk + 2 * c * dv + c * c / 3) * batch * seq
    padded = m.num_linear_layers * padded_conv_flops(2 * 2 * dk + heads * dv, m.linear_conv, batch)
    assert predicted - fla_only + padded == pytest.approx(counter.get_total_flops(), rel=1e-12)


def test_the_cache_holds_kv_for_softmax_layers_and_a_fixed_state_for_linear_ones():
    config = {**SMALL, "mamba_ssm_dtype": "float32"}  # transformers keeps the state in fp32
    cfg, model = _hf(config)
    context = 100
    kv, states = cache_after_forward(model, context)
    m = model_from_hf_config(config)
    assert m.num_linear_layers * state_bytes_per_layer(m) == states
    # vLLM's default for a config without the key: the state in the model's 16-bit type
    assert model_from_hf_config(SMALL).linear_state_bytes == 2
    assert kv_bytes_per_sequence(m, kv_format("bf16"), context) == kv + states


def test_a_linear_layer_mixes_at_a_cost_per_token_while_softmax_grows_with_the_context():
    m = model_from_hf_config(
        {
            "model_type": "qwen3_next",
            "hidden_size": 2048,
            "num_hidden_layers": 48,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "intermediate_size": 5120,
            "vocab_size": 151936,
        }
    )
    gpu = catalog.gpu("h100-sxm")

    def mixing(seq: int, linear: bool) -> float:
        shape = LayerShape(seq, seq, 1, 1, 1, 1, False, "bf16", 2, "flash")
        parts = layer_times(m, gpu, shape, True, linear).parts
        return parts["linear_attention" if linear else "attention"]

    # the chunked rule's bytes grow with the tokens: each 4096 more add the same time (the kernel
    # launches are fixed); causal softmax attention's FLOPs grow with the square: successive
    # increments in the ratio of their causal key counts, which the flash kernel's ramp
    # (s / (s + seq_half), rising with s) departs from by less than seq_half / 4096
    lengths = (4096, 8192, 12288)
    a, b, c = (mixing(n, True) for n in lengths)
    assert c - b == pytest.approx(b - a, rel=1e-9)
    sa, sb, sc = (mixing(n, False) for n in lengths)
    keys = [n * (n + 1) for n in lengths]  # causal (query, key) pairs, x 2
    half = efficiency(gpu).seq_half
    assert (sc - sb) / (sb - sa) == pytest.approx((keys[2] - keys[1]) / (keys[1] - keys[0]), rel=half / lengths[0])


def test_plans_that_split_the_linear_heads_unevenly_or_use_context_parallelism_are_refused():
    m = model_from_hf_config(SMALL)  # 2 linear key heads, 4 attention heads, 2 KV heads
    validity.require_valid(m, ParallelPlan(dp=1, tp=2), 128)
    with pytest.raises(GpuplanError, match="linear_num_key_heads"):
        validity.require_valid(dataclasses.replace(m, num_kv_heads=4), ParallelPlan(dp=1, tp=4), 128)
    validity.require_valid(m, ParallelPlan(dp=1, cp=2), 128)  # one key head per CP rank
    with pytest.raises(GpuplanError, match="tp x cp = 4 does not divide linear_num_key_heads=2"):
        validity.require_valid(m, ParallelPlan(dp=1, tp=2, cp=2), 128)
    with pytest.raises(GpuplanError, match="linear_num_value_heads"):
        model_from_hf_config({**SMALL, "linear_num_value_heads": 3})
    # serving splits the (value) heads and replicates the key heads that do not divide, as vLLM
    validity.require_serving(dataclasses.replace(m, num_kv_heads=4), 4)
    with pytest.raises(GpuplanError, match="does not divide the 4 linear-attention heads"):
        validity.require_serving(dataclasses.replace(m, num_heads=8, num_kv_heads=8), 8)


def test_state_splits_with_the_heads_over_tp():
    m = model_from_hf_config(SMALL)
    assert state_bytes_per_layer(m, 2) == state_bytes_per_layer(m) / 2
    no_linear = dataclasses.replace(m, linear_layers=())
    assert state_bytes_per_layer(no_linear) == 0.0


def test_vllm_enlarges_the_attention_block_until_a_page_holds_a_linear_layers_state():
    from gpuplan.serve.formats import weight_format
    from gpuplan.serve.memory import ServeConfig, block_tokens, state_blocks
    from gpuplan.serve.timing import Deployment

    m, gpu = catalog.model("qwen3-next-80b-a3b"), catalog.gpu("h100-sxm")
    d = Deployment(m, gpu, weight_format("bf16", gpu), kv_format("bf16", gpu), tp=4)
    # per GPU: one of the 2 KV heads (replicated over 4 ranks), K and V of 256 in 16 bits per
    # token and layer; the state: 32 / 4 value heads of 128 x 128 (16 bits: the config has no
    # mamba_ssm_dtype) and the conv's last 3 inputs over (2 x 16 + 32) x 128 / 4 channels
    per_token = 1 * 2 * 256 * 2
    state = 8 * 128 * 128 * 2 + (2 * 16 * 128 + 32 * 128) // 4 * 3 * 2
    assert state_bytes_per_layer(m, 4) == state
    vllm = ServeConfig(engine="vllm")
    assert block_tokens(d, vllm) == 16 * -(-state // (16 * per_token)) == 272
    # one padded page per linear layer: 36 linear layers over 12 softmax layers' blocks
    assert state_blocks(d, vllm) == 3.0
    # an engine that keeps exact bytes: the configured block and the state's own bytes
    generic = ServeConfig()
    assert block_tokens(d, generic) == 16
    assert state_blocks(d, generic) == pytest.approx(36 * state / (16 * 12 * per_token))


def test_context_parallel_linear_layers_exchange_their_projections_in_all_to_alls():
    from gpuplan.estimate.step_time import step_time
    from gpuplan.specs.training import TrainingConfig

    m, gpu = catalog.model("qwen3-next-80b-a3b"), catalog.gpu("h100-sxm")
    cfg = TrainingConfig(seq_len=32768, global_batch=64)
    plan = ParallelPlan(dp=8, tp=2, cp=4, ep=32, pp=1)
    st = step_time(m, cfg, plan, gpu, microbatches=8)
    # Megatron's GDN: per linear layer and micro-batch, the input projection's output to heads and
    # the gated norm's output back, forward and backward: (cp - 1) / cp of each buffer per rank
    tokens = cfg.seq_len // plan.cp
    widths = (2 * 16 * 128 + 2 * 32 * 128 + 2 * 32) + 32 * 128
    buffer = tokens * widths / plan.tp * 2
    expected = m.num_linear_layers * 8 * 2 * buffer * (plan.cp - 1) / plan.cp
    assert st.comm["cp"].collectives["all-to-all"] == pytest.approx(expected)
    # the softmax layers still pass K and V around the ring
    assert st.comm["cp"].collectives["p2p"] > 0


# -- Kimi-Linear: Kimi Delta Attention layers beside MLA ---------------------------------------------
KIMI = dict(
    model_type="kimi_linear",
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=96,
    linear_num_heads=4,
    linear_head_dim=16,
    kv_lora_rank=32,
    qk_rope_head_dim=8,
    qk_nope_head_dim=16,
    v_head_dim=16,
    num_local_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    layer_types=["linear_attention", "full_attention"],
)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"layer_types": None, "num_hidden_layers": 9},  # the class default: full at 4 and 8
        {
            "layer_types": None,
            "num_hidden_layers": 4,
            "linear_attn_config": {"full_attn_layers": [2], "kda_layers": [1, 3, 4], "head_dim": 8, "num_heads": 2},
            "q_lora_rank": 24,
            "first_k_dense_replace": 2,
        },
        # the keys KimiLinearConfig saves (and the Hub's config.json uses), not their aliases
        {
            "num_local_experts": None,
            "num_experts_per_tok": None,
            "num_experts": 8,
            "num_experts_per_token": 3,
            "num_shared_experts": 2,
        },
    ],
)
def test_kimi_linear_parameters_equal_transformers_layer_by_layer(extra):
    config = {k: v for k, v in {**KIMI, **extra}.items() if v is not None}
    with torch.device("meta"):
        _, model = _hf(config)
    m = model_from_hf_config(config)
    counts = count_params(m)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.per_layer == tuple(sum(p.numel() for p in b.parameters()) for b in model.model.layers)
    assert m.is_mla and m.linear_kind == "kda"


def test_kda_forward_flops_equal_flop_counter_once_its_elementwise_products_are_counted():
    from torch.utils import flop_counter

    batch, seq = 2, 2 * GDN_CHUNK
    _, model = _hf(KIMI, attn_implementation="eager", experts_implementation="eager")
    with torch.no_grad(), flop_counter.FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, KIMI["vocab_size"], (batch, seq)))
    m = model_from_hf_config(KIMI)
    predicted = training_flops(m, seq, causal=False).forward_per_token * batch * seq
    c, d, heads = GDN_CHUNK, 16, 4
    # transformers' torch_chunk_kda forms K_beta K^T and Q K^T with the per-channel decay as
    # broadcast products and sums, and inverts (I + A) row by row: none is a matmul the counter
    # sees, where FLA's chunk_kda runs them on decayed operands
    elementwise = heads * (2 * c * d + 2 * c * d + c * c / 3) * batch * seq
    padded = padded_conv_flops(3 * heads * d, 4, batch)
    assert predicted - elementwise + padded == pytest.approx(counter.get_total_flops(), rel=1e-12)


def test_kimi_linear_caches_the_mla_latent_and_a_kda_state():
    config = {**KIMI, "mamba_ssm_dtype": "float32"}  # transformers keeps the state in fp32
    _, model = _hf(config)
    context = 50
    kv, states = cache_after_forward(model, context)  # MLA: the latent and the rotary key
    m = model_from_hf_config(config)
    assert m.num_linear_layers * state_bytes_per_layer(m) == states
    assert kv_bytes_per_sequence(m, kv_format("bf16"), context) == kv + states
