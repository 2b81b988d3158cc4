"""Mamba-2 hybrids (Granite 4.0-H, Bamba): Mamba-2 layers read as linear attention (SSD's C, B, x
as queries, keys and values) beside softmax layers.

Oracles: transformers' own models (parameters on the meta device, FLOPs under FlopCounterMode over
its chunked scan, the cache after a forward pass)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.compute import LayerShape, layer_times
from gpuplan.estimate.flops import training_flops
from gpuplan.estimate.params import count_params
from gpuplan.estimate.validate import uncalibrated_features
from gpuplan.serve.formats import kv_format
from gpuplan.serve.kv import kv_bytes_per_sequence, state_bytes_per_layer
from gpuplan.specs import validity
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.parallel import ParallelPlan

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from cache_oracle import cache_after_forward, padded_conv_flops  # noqa: E402

_TEXT = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=96,
    mamba_d_state=16,
    pad_token_id=0,
)
CONFIGS = {
    "granite-moe": dict(
        _TEXT,
        model_type="granitemoehybrid",
        mamba_n_heads=4,
        mamba_n_groups=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=48,
        layer_types=["mamba", "attention", "mamba", "mamba"],  # the Hub's legacy names
    ),
    "granite-dense-biased": dict(
        _TEXT,
        model_type="granitemoehybrid",
        mamba_n_heads=8,
        num_local_experts=0,
        shared_intermediate_size=48,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        mamba_conv_bias=False,
        mamba_proj_bias=True,
    ),
    "bamba": dict(_TEXT, model_type="bamba", mamba_n_heads=4, attn_layer_indices=[1]),
    "bamba-head-dim": dict(_TEXT, model_type="bamba", mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=2),
}


def _hf(config: dict, **kw):
    cfg = transformers.AutoConfig.for_model(**config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_config(cfg, **kw)


@pytest.mark.parametrize("name", CONFIGS)
def test_parameters_equal_transformers_layer_by_layer(name):
    config = CONFIGS[name]
    with torch.device("meta"):
        model = _hf(config)
    m = model_from_hf_config(config)
    counts = count_params(m)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.per_layer == tuple(sum(p.numel() for p in b.parameters()) for b in model.model.layers)
    assert [getattr(b, "mamba", None) is not None for b in model.model.layers] == [
        m.is_linear_layer(i) for i in range(m.num_layers)
    ]


def test_forward_flops_equal_flop_counter_on_transformers_chunked_scan():
    # groups = heads, so transformers' C B^T per head (B and C repeated) is mamba_ssm's per group
    config = dict(CONFIGS["bamba"], mamba_d_head=32, mamba_n_groups=4, mamba_chunk_size=32)
    batch, seq = 2, 128
    from torch.utils import flop_counter

    model = _hf(config, attn_implementation="eager")
    with torch.no_grad(), flop_counter.FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, config["vocab_size"], (batch, seq)))
    m = model_from_hf_config(config)
    predicted = training_flops(m, seq, causal=False).forward_per_token * batch * seq
    heads, p, n, q, taps = 4, 32, 16, 32, 4
    chunks = seq // q
    # transformers passes the state as a (chunks + 1)^2 matrix product where mamba_ssm's
    # _state_passing_fwd steps chunk to chunk (2 N P per chunk)
    torch_states = 2 * batch * (chunks + 1) ** 2 * heads * p * n
    kernel_states = batch * seq * heads * 2 * n * p / q
    # nn.Conv1d pads by taps - 1 on both sides and transformers drops the extra outputs
    padded = padded_conv_flops(heads * p + 2 * 4 * n, taps, batch)
    per_layer = torch_states - kernel_states + padded
    assert predicted + m.num_linear_layers * per_layer == pytest.approx(counter.get_total_flops(), rel=1e-12)


def test_the_cache_holds_kv_for_attention_layers_and_a_state_for_mamba_ones():
    config = dict(CONFIGS["bamba-head-dim"], attn_layer_indices=[1], mamba_ssm_dtype="float32")
    context = 50
    kv, states = cache_after_forward(_hf(config), context)
    m = model_from_hf_config(config)
    assert m.num_linear_layers * state_bytes_per_layer(m) == states
    assert kv_bytes_per_sequence(m, kv_format("bf16"), context) == kv + states


def test_tp_splits_whole_groups_in_training_and_replicates_them_in_serving():
    m = model_from_hf_config(CONFIGS["granite-dense-biased"])  # one group of B and C, 8 heads
    with pytest.raises(GpuplanError, match="mamba_n_groups=1"):
        validity.require_valid(m, ParallelPlan(dp=1, tp=2), 128)
    validity.require_serving(m, 2)  # vLLM replicates the group to both ranks
    with pytest.raises(GpuplanError, match="mamba_n_heads"):
        model_from_hf_config(dict(CONFIGS["bamba"], mamba_n_heads=3))  # 3 does not divide 2 x 64


def test_a_mamba_layer_mixes_at_a_cost_per_token_and_says_it_is_uncalibrated():
    m = model_from_hf_config(
        dict(CONFIGS["bamba"], hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
             intermediate_size=14336, mamba_n_heads=128, mamba_d_state=128, attn_layer_indices=[9, 18, 27])
    )  # fmt: skip
    gpu = catalog.gpu("h100-sxm")

    def mixing(seq: int) -> float:
        shape = LayerShape(seq, seq, 1, 1, 1, 1, False, "bf16", 2, "flash")
        return layer_times(m, gpu, shape, False, True).parts["linear_attention"]

    a, b, c = mixing(4096), mixing(8192), mixing(12288)
    assert c - b == pytest.approx(b - a, rel=1e-9)
    assert any("Mamba-2" in f for f in uncalibrated_features(m))
    assert dataclasses.replace(m, linear_layers=()).num_linear_layers == 0
