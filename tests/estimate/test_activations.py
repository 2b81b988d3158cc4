"""Activation bytes against the oracle: what autograd saves on small real transformers models.

The eager profile is checked per family, dtype and attention kernel within 5%. Combinations not
listed are not claimed: on CPU, transformers' Falcon and DeepSeek SDPA paths fall back to the
math kernel (fp32 upcast), which CUDA does not do, and GPT-NeoX's fused QKV with partial rotary
keeps extra copies the model does not track yet.
"""

import pytest

from gpuplan.estimate.activations import activation_breakdown
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from activation_oracle import saved_bytes  # noqa: E402
from small_models import CONFIGS  # noqa: E402

F32, BF16 = "fp32", "bf16"
CASES = [
    (name, prec, attn)
    for name in ("llama", "qwen2", "mistral-mqa", "gpt2", "opt")
    for prec in (F32, BF16)
    for attn in ("sdpa", "eager")
]
# the newer Llama-shaped families: q/k norms (per head, full width), norms after the blocks, fp32
# norms (OLMo 2, Cohere), parallel blocks, GELU and squared-ReLU MLPs; SDPA for those with full
# rotary (partial rotary's concatenated q/k take another copy on the CPU SDPA path)
CASES += [
    (name, prec, attn)
    for name in ("qwen3", "olmo2", "exaone4", "cohere-qk", "starcoder2", "arcee", "apertus")
    for prec in (F32, BF16)
    for attn in ("sdpa", "eager")
]
CASES += [(name, prec, "eager") for name in ("nemotron", "phi", "glm4") for prec in (F32, BF16)]
# MoE: routed copies, router probabilities, shared experts and Qwen2-MoE's gated shared expert
CASES += [(name, prec, "sdpa") for name in ("mixtral", "qwen2-moe", "olmoe") for prec in (F32, BF16)]
# gated softmax attention (Qwen3-Next): the product keeps the ungated output and the gate's sigmoid
CASES += [("qwen3-next-softmax", prec, "eager") for prec in (F32, BF16)]
CASES += [
    ("gemma2", F32, "eager"),
    ("gemma2", BF16, "eager"),
    ("bloom", F32, "eager"),
    ("bloom", BF16, "eager"),
    ("falcon", F32, "eager"),
    ("deepseek-mla", F32, "eager"),
    ("deepseek-mla", BF16, "eager"),
]


def predicted_saved_bytes(config, precision, attention, batch, seq):
    m = model_from_hf_config(config)
    cfg = TrainingConfig(
        seq_len=seq,
        micro_batch=batch,
        precision=precision,
        profile="eager",
        attention="flash" if attention == "sdpa" else "eager",
    )
    act = activation_breakdown(m, cfg, ParallelPlan())
    layers = sum(act.layer(m.is_moe_layer(i), m.is_linear_layer(i)) for i in range(m.num_layers))
    return act.embedding + layers + act.head + act.loss_saved


@pytest.mark.parametrize("name,precision,attention", CASES)
def test_eager_profile_matches_saved_tensors(name, precision, attention):
    batch, seq = 2, 96
    dtype = torch.float32 if precision == F32 else torch.bfloat16
    measured = saved_bytes(CONFIGS[name], dtype, attention, batch, seq)
    assert predicted_saved_bytes(CONFIGS[name], precision, attention, batch, seq) == pytest.approx(measured, rel=0.05)


def test_llama_eager_activations_are_exact_to_the_byte():
    # the formula names every saved tensor; only the loss's 4-byte scalar is left out
    measured = saved_bytes(CONFIGS["llama"], torch.bfloat16, "sdpa", 2, 96)
    assert measured - predicted_saved_bytes(CONFIGS["llama"], BF16, "sdpa", 2, 96) == 4


def test_activations_scale_linearly_with_micro_batch():
    m = model_from_hf_config(CONFIGS["llama"])
    one = activation_breakdown(m, TrainingConfig(seq_len=512, micro_batch=1), ParallelPlan())
    four = activation_breakdown(m, TrainingConfig(seq_len=512, micro_batch=4), ParallelPlan())
    assert four.dense_layer == pytest.approx(4 * one.dense_layer)


def test_sequence_parallel_shards_what_tensor_parallel_replicates():
    m = model_from_hf_config(CONFIGS["llama"])
    cfg = TrainingConfig(seq_len=512)
    tp1 = activation_breakdown(m, cfg, ParallelPlan(tp=1)).dense_layer
    with_sp = activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=1, sp=True)).dense_layer
    without_sp = activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=1, sp=False)).dense_layer
    assert with_sp == pytest.approx(tp1 / 4)
    assert tp1 / 4 < without_sp < tp1


@pytest.mark.parametrize("etp", [1, 2, 4])
def test_folded_experts_keep_the_tokens_gathered_over_expert_tensor_parallel_ranks(etp):
    # Megatron's all-to-all dispatcher with etp > 1 all-gathers the received token copies over the
    # expert TP group before the grouped GEMMs, which keep that gathered input (k copies per token,
    # etp shares of 1/tp of the tokens, hidden wide); the expert MLP's inner tensors are 1/etp as
    # wide, so only the gathered input grows with etp. Hand count for tp 4, 512 tokens, bf16.
    m = model_from_hf_config(CONFIGS["mixtral"])
    cfg = TrainingConfig(seq_len=512)
    folded = activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=8, ep=2, etp=etp)).moe_layer
    at_one = activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=8, ep=2, etp=1)).moe_layer
    k, h, tokens = m.experts_per_token, m.hidden_size, 512
    assert folded - at_one == pytest.approx(tokens / 4 * k * (etp - 1) * 2 * h)
    # etp unset is Megatron's default etp = tp (model_parallel_config.py __post_init__)
    unset = activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=8, ep=2)).moe_layer
    assert unset == activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=8, ep=2, etp=4)).moe_layer
    assert activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=8, ep=2, etp=etp)).dense_layer == (
        activation_breakdown(m, cfg, ParallelPlan(tp=4, dp=8, ep=2)).dense_layer
    )
