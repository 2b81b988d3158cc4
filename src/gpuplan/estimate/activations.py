"""Activation memory: the tensors autograd keeps from forward for backward, per micro-batch.

Two implementation profiles:

``fused`` (Megatron-LM / TransformerEngine): Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4 and Table 2, generalised from GPT (MHA,
4h GeLU MLP, dropout) to GQA, gated MLPs, flash attention, MoE and MLA. For a GPT layer it gives
exactly sbh(34 + 5as/h) bytes, sbh(10 + 24/t + 5as/(ht)) with tensor parallelism and
sbh/t (34 + 5as/h) with sequence parallelism; selective recompute drops the 5as/h term.

``eager`` (plain PyTorch autograd running Hugging Face ``transformers`` modules): every tensor
that each op saves, read off the modules' forward code and checked with
``torch.autograd.graph.saved_tensors_hooks`` on small real models (tests/estimate/
test_activations.py). It differs from ``fused`` where eager PyTorch keeps more: RMSNorm keeps an
fp32 upcast, SwiGLU keeps four ffn-wide tensors instead of three, eager attention keeps an fp32
softmax, and the loss keeps fp32 log-probabilities over the vocabulary.

Units: bytes for one micro-batch on one GPU. Dropout masks follow CUDA's ``native_dropout``
(one byte per element); on CPU PyTorch saves a full-width noise tensor instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuplan.estimate.expert_bias import expert_bias_kept
from gpuplan.estimate.flops import GDN_CHUNK
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

FP32 = 4
INDEX = 8  # int64 token ids


@dataclass(frozen=True)
class ActivationBreakdown:
    """Bytes saved for backward by one micro-batch on one GPU."""

    dense_layer: float  # one transformer block with a dense MLP
    moe_layer: float  # one transformer block with an MoE MLP (0 for dense models)
    layer_checkpoint: float  # what one block keeps under full recompute (its input)
    embedding: float  # token ids and rotary tables saved at the input
    head: float  # final norm and the LM head's input
    loss_saved: float  # log-probabilities (and soft-capped logits) saved by the loss
    loss_transient: float  # logits and their gradients alive at the loss, beyond what is saved
    # per-op SAC (``per_op_sac``): what one dense block's re-run holds in its backward beyond what
    # the block keeps; 0 where nothing re-runs a whole block's forward
    layer_rerun: float = 0.0
    # a Gated DeltaNet block's token mixer minus a softmax block's attention (``_linear_saved``):
    # what a linear-attention layer keeps beyond (or short of) a softmax layer of its MLP kind
    linear_delta: float = 0.0

    def layer(self, moe: bool, linear: bool = False) -> float:
        return (self.moe_layer if moe else self.dense_layer) + (self.linear_delta if linear else 0.0)


def _norm_saved(m: ModelSpec, a: int, profile: str, feeds_linear: bool, g: float | None = None) -> float:
    """Bytes per token one norm saves (eager), including its output when a linear saves it.
    ``g``: bytes per element of that output as the linear keeps it (``gemm_input_bytes``)."""
    h = m.hidden_size
    g = a if g is None else g
    if profile == "fused":  # fused LN/RMSNorm kernels keep the input and, for the GEMM, the output
        return a * h + (g * h if feeds_linear else 0)
    if m.norm == "rmsnorm":  # x.float(); x * rsqrt(mean(x^2)+eps); weight * x.to(dtype)
        return FP32 * h + FP32 + a * h + (a * h if feeds_linear else 0)
    # Gemma: x.float() normalised, * (1 + weight) in fp32, then .type_as(x); OLMo 2: weight * x in fp32
    if m.norm in ("rmsnorm_gemma", "rmsnorm_fp32"):
        return FP32 * h + FP32 + FP32 * h + (a * h if feeds_linear else 0)
    if m.norm == "layernorm_fp32":  # Cohere's, in fp32 ops: x - mean twice, rsqrt, the normalised x
        return 3 * FP32 * h + FP32 + (a * h if feeds_linear else 0)
    # layernorm: native_layer_norm saves input, mean and rstd
    return a * h + 2 * FP32 + (a * h if feeds_linear else 0)


def _qk_norm_saved(m: ModelSpec, a: int, profile: str) -> float:
    """Bytes per token the query and key norms save (Qwen3, Gemma 3, OLMo 2, ...): their inputs are
    the projections' outputs, their outputs go on to rotary and attention, which keep their own.

    Per element as ``_norm_saved`` (the fused kernel keeps its input: Megatron-Core's qk_layernorm is
    TENorm, megatron/core/extensions/transformer_engine_spec_provider.py ``layer_norm(for_qk=True)``,
    whose RMSNorm op saves x and rstdevs, TransformerEngine ops/basic/rmsnorm.py; eager RMSNorm its fp32 upcast
    and the normalised tensor the weight multiplies; Gemma's two fp32 tensors; native LayerNorm its
    input), plus one fp32 statistic per normalised row: per head, or one per token for q and one
    for k where the norm spans all heads (``qk_norm_full``)."""
    if not m.qk_norm or m.is_mla:
        return 0.0
    width = m.num_heads * m.head_dim + m.num_kv_heads * m.head_dim
    rows = 2 if m.qk_norm_full else m.num_heads + m.num_kv_heads
    if profile == "fused":
        return a * width + FP32 * rows
    if m.norm == "rmsnorm":
        return (FP32 + a) * width + FP32 * rows
    if m.norm in ("rmsnorm_gemma", "rmsnorm_fp32"):
        return 2 * FP32 * width + FP32 * rows
    if m.norm == "layernorm_fp32":
        return 3 * FP32 * width + FP32 * rows
    return a * width + 2 * FP32 * rows  # layernorm: input, mean and rstd


def _indexer_saved(m: ModelSpec, cfg: TrainingConfig, a: int) -> float:
    """Bytes per token DSA's indexer keeps for its own loss (DeepSeek-V3.2): Megatron-Core's
    FusedDSAIndexerLoss saves the indexer's queries, keys and head weights and the top-k indices
    (megatron/core/transformer/experimental_attention_variant/dsa.py, ``ctx.save_for_backward(q,
    weights, k, query, key, topk_indices)``; query and key are the attention's own, detached), all
    duplicated over TP. transformers runs the indexer under no_grad: nothing under the eager profile."""
    if not m.index_heads or cfg.profile != "fused":
        return 0.0
    topk = min(m.index_topk, cfg.seq_len)
    return a * m.index_heads * m.index_head_dim + a * m.index_head_dim + FP32 * m.index_heads + INDEX * topk


def _mlp_saved(m: ModelSpec, a: int, profile: str, ffn: int, g: float | None = None) -> float:
    """Bytes per token saved inside one MLP (its input is the norm output, counted there);
    ``g``: bytes per element of the fc2 input as fc2 keeps it (``gemm_input_bytes``)."""
    g = a if g is None else g
    if m.gated_mlp:
        # fused swiglu: fc1 output (gate|up) + fc2 input; eager: gate, act(gate), up, product
        return (2 * a + g) * ffn if profile == "fused" else 4 * a * ffn
    if profile == "fused":
        return (a + g) * ffn  # activation input + fc2 input (Korthikanti: 8sbh + 8sbh at ffn = 4h)
    if m.activation == "xielu":
        # transformers' Python xIELU (the CUDA kernel is optional): torch.where(x > 0, alpha_p*x*x +
        # beta*x, (expm1(min(x, eps)) - x)*alpha_n + beta*x) keeps x, alpha_p*x, expm1's output,
        # expm1 - x and the 1-byte mask; fc2 keeps the output
        return (5 * a + 1) * ffn
    per_act = {
        "gelu": 2,
        "gelu_tanh": 2,  # F.gelu saves its input; fc2 saves the output
        "relu": 1,  # relu saves its output, the same tensor fc2 saves
        "relu2": 2,  # relu(x) ** 2: pow saves relu's output, fc2 the square (Nemotron's ReLUSquaredActivation)
        "bloom_gelu": 2,  # BLOOM's GeLUFunction saves its input
        "gelu_new": 5,  # 0.5*x*(1+tanh(c*(x+0.044715x^3))) in python ops: x, tanh, 0.5x, 1+tanh, output
        "silu": 2,
    }[m.activation]
    return per_act * a * ffn


def _attention_saved(m: ModelSpec, cfg: TrainingConfig, a: int, seq_keys: int) -> tuple[float, float]:
    """(bytes per token split by TP, bytes per token of the s x s score matrices split by TP).

    ``seq_keys``: keys per query held in a materialised score matrix (non-flash attention).
    """
    nh, hd, v = m.num_heads, m.qk_head_dim, m.v_dim
    eager = cfg.profile == "eager"
    q = a * nh * hd
    out = a * nh * v  # attention output, saved as the output projection's input
    if m.is_mla:
        kv = a * nh * (hd + v)  # kv_b_proj expands the latent into per-head K and V
        latent = a * (m.q_lora_rank * 2 + m.kv_lora_rank * 2)  # norm inputs/outputs on the low-rank path
        q += latent
    else:
        kv_heads = m.num_kv_heads
        if eager and cfg.attention == "eager" and nh != kv_heads:
            kv_heads = nh  # transformers' repeat_kv copies K and V to every query head
        kv = 2 * a * kv_heads * hd
    if m.attn_output_gate:
        # out = attention x sigmoid(gate) (Qwen3-Next): the product keeps both factors, the
        # ungated output and the gate's sigmoid (which the sigmoid's backward reads too)
        out += 2 * a * nh * v
    if cfg.attention == "flash":
        lse = FP32 * nh  # log-sum-exp per head, fp32
        return q + kv + out + lse, 0.0
    # Materialised scores: softmax output (fp32 in transformers, plus the cast back), dropout.
    if eager:
        softmax = (FP32 + (a if a != FP32 else 0)) if m.model_type != "gpt2" else a
        if m.attn_logit_softcap:
            softmax += a  # tanh soft-capping saves its output
    else:
        softmax = a
    if m.attention_dropout > 0:
        softmax += 1 + a  # dropout mask and dropout output (Korthikanti's 5as/h = 2 + 1 + 2)
    return q + kv + out, softmax * nh * seq_keys


def _linear_saved(m: ModelSpec, a: int, g: float) -> float:
    """Bytes per token (split by TP) a Gated DeltaNet (or Mamba-2, below) mixer keeps for backward, its input norm
    aside (as for attention): the conv's input (FLA's causal_conv1d keeps x and recomputes the
    SiLU); what FLA's chunked rule saves (fla/ops/gated_delta_rule/chunk.py,
    ChunkGatedDeltaRuleFunction: q and k L2-normalised with their fp32 rstd, v, the fp32 cumulated
    decay g, beta and the C-wide WY matrix A, per value head); the gated RMSNorm's inputs (the rule's
    output o and the gate z) and fp32 rstd; the output projection's input (``g`` per element); the
    gate's pre-activations (alpha and b, one each per value head)."""
    kd = m.linear_k_heads * m.linear_k_dim
    vd = m.linear_v_heads * m.linear_v_dim
    nv = m.linear_v_heads
    conv_in = a * (2 * kd + vd)
    if m.linear_kind == "mamba2":
        # mamba_chunk_scan_combined (mamba_ssm ssd_combined.py, MambaChunkScanCombinedFn) keeps
        # its output, x, B and C (the conv's output), dt and the cumulated decay (fp32 per head);
        # Megatron's MambaMixer then runs RMSNormGated(y, z): y, z and an fp32 rstd per group
        scan = a * (2 * kd + vd) + 2 * FP32 * nv + a * vd
        gated_norm = a * vd + FP32 * m.linear_k_heads
        return conv_in + scan + gated_norm + g * vd
    # the cumulated decay in fp32: per value head, or per channel under KDA (FLA's chunk_kda keeps g
    # of q's width); KDA's gates also keep their low-rank projections' inputs (head_dim each)
    decay = kd if m.linear_kind == "kda" else nv
    rule = a * (2 * kd + vd) + FP32 * 2 * m.linear_k_heads + FP32 * decay + a * nv + a * nv * GDN_CHUNK
    gated_norm = 2 * a * vd + FP32 * nv
    gates = a * (decay + nv) + (2 * a * m.linear_k_dim if m.linear_kind == "kda" else 0)
    return conv_in + rule + gated_norm + g * vd + gates


def _dispatched_saved(a: int, g: float, h: int, etp: int) -> float:
    """Bytes per routed token copy, before the division by tp of the layer's other terms, that the
    dispatch keeps: the expert input (``g`` per element, as the first expert GEMM keeps it) and the
    expert output (``a``) over the hidden width.

    Megatron's MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py,
    dispatch_postprocess) all-gathers the tokens each rank received over the expert TP group after
    the EP all-to-all, so an expert-TP rank's experts read etp shares of copies at full width, and
    the grouped GEMM keeps that gathered input; the output is reduce-scattered back to one share
    (combine_preprocess) before the combine. The expert MLP's inner width is split by etp, which
    cancels the etp shares (``_mlp_saved`` per copy / tp). Megatron's default etp is tp
    (model_parallel_config.py __post_init__: ``expert_tensor_parallel_size`` None -> tp)."""
    return a * h + g * h * etp


def per_op_sac(m: ModelSpec, cfg: TrainingConfig) -> bool:
    """The config's selective recompute runs per op (``TrainingConfig.recomputed`` holds "op_sac":
    torchtitan), not Megatron's attention core (``per_op_sac_saved``). Dense blocks of standard
    attention only: an MoE block (grouped GEMMs, no ``aten.mm``) or an MLA one keeps here what it
    keeps without recompute, an over-count."""
    return "op_sac" in cfg.recomputed and not m.is_mla


def per_op_sac_saved(m: ModelSpec, a: float, t: int, sp: bool) -> float:
    """Bytes per token one dense block keeps under torchtitan's per-op SAC.

    torchtitan (torchtitan/distributed/activation_checkpoint.py, ``_apply_op_sac``: the policy
    ``_get_custom_policy`` over ``_save_list``) checkpoints each block and, re-running it in backward,
    keeps only: the block's input; the outputs of every other matmul (``aten.mm``: the 1st, 3rd, ...
    of the block in forward order, a per-block count); the attention kernel's output and logsumexp
    (``_scaled_dot_product_{flash,efficient,cudnn}_attention``); and the reduce-scatters of sequence
    parallelism (``_c10d_functional.reduce_scatter_tensor``). Norms, rotary and the MLP's
    activation run again. Matmul order is the model code's: wq, wk, wv, wo, then w1, w3, w2
    (``Attention.forward``, ``FeedForward.forward``: w2(silu(w1(x)) * w3(x))). Under tensor
    parallelism the column-parallel outputs are 1/t wide and the row-parallel ones (wo, w2) are
    full-width partial sums over the whole sequence; the sequence-parallel tensors are 1/t of it.
    """
    h = m.hidden_size
    q, kv = m.num_heads * m.head_dim / t, m.num_kv_heads * m.head_dim / t
    rep = t if sp and t > 1 else 1
    if m.gated_mlp:
        mlp = [m.ffn_size / t, m.ffn_size / t, h]  # w1 (gate), w3 (up), w2
    else:
        mlp = [m.ffn_size / t, h]  # fc1, fc2
    mms = [q, kv, kv, h] + mlp  # one block's matmul outputs, in forward order
    kept_mms = sum(mms[0::2])  # counts 1, 3, 5, ...: the odd ones are saved
    sdpa = a * m.num_heads * m.v_dim / t + FP32 * m.num_heads / t
    scatters = 2 * a * h / t if sp and t > 1 else 0.0  # after the attention and after the MLP
    return a * h / rep + a * kept_mms + sdpa + scatters


def activation_breakdown(m: ModelSpec, cfg: TrainingConfig, plan: ParallelPlan) -> ActivationBreakdown:
    """Bytes saved for backward by one micro-batch on one GPU, by part of the model."""
    a = cfg.activation_bytes
    g = cfg.gemm_input_bytes  # GEMM inputs kept for backward: a, or TE's FP8 copy
    t, profile = plan.tp, cfg.profile
    # torch.compile'd blocks (TrainingConfig.compile): AOTAutograd's min-cut partitioner saves what
    # a fused norm or activation kernel keeps and recomputes the cheap pointwise ops, so a block's
    # norms and MLP keep the fused profile's tensors; the loss and the rotary tables stay eager
    block = "fused" if cfg.compile else profile
    tokens = cfg.micro_batch * cfg.seq_len / plan.cp  # tokens of a micro-batch on this GPU
    h = m.hidden_size
    sp = plan.sp and t > 1
    # Without SP the norm inputs/outputs and dropout masks are replicated on every TP rank.
    rep_div = t if sp else 1
    drop = 2 * h if m.dropout > 0 else 0  # masks after attention and after the MLP

    norms = m.pre_norms_per_layer * _norm_saved(m, a, block, True, g) + m.post_norms_per_layer * _norm_saved(
        m, a, block, False
    )
    # a block whose first linear reads the residual stream itself, no norm before it (OLMo 2's and
    # EXAONE 4's norms sit after attention and the MLP): that linear keeps its raw input
    norms += max(0, (1 if m.parallel_attn else 2) - m.pre_norms_per_layer) * g * h
    attn, scores = _attention_saved(m, cfg, a, cfg.seq_len)
    attn += _qk_norm_saved(m, a, block)
    if g != a:  # the attention kernel keeps its BF16 output; the output projection its own FP8 copy
        attn += g * m.num_heads * m.v_dim
    mods = cfg.recomputed  # selective recompute by module (TrainingConfig.recompute_modules)
    if "mla_up_proj" in mods and m.is_mla:
        # the up-projections' outputs, which the attention core saved as its q, k and v, are
        # discarded after its forward and rebuilt before its backward (the low-rank latents the
        # up-projections read stay: they are the checkpoint's inputs)
        attn -= a * m.num_heads * (2 * m.qk_head_dim + m.v_dim)
    if "core_attn" in mods:  # recompute the attention core: drop the s^2 tensors
        scores = 0.0
        if cfg.attention == "flash":
            attn -= FP32 * m.num_heads
    # "layernorm" discards the output of each norm that is a module of its own, rerunning it
    # before the backward: the input norm before MLA and an MoE layer's pre-MLP norm (Megatron-Core
    # transformer_layer.py: only norms that are not IdentityOp; TE fuses the rest into a linear)
    own_norm = g * h if "layernorm" in mods and profile == "fused" else 0.0
    replicated = norms + drop - (own_norm if m.is_mla else 0.0)
    mlp = 0.0 if "mlp" in mods else _mlp_saved(m, a, block, m.ffn_size, g)
    if "mlp" in mods and profile == "fused":  # the checkpoint holds TE's LayerNormMLP: its norm output too
        replicated_dense = replicated - g * h
    else:
        replicated_dense = replicated
    indexer = _indexer_saved(m, cfg, a) if "core_attn" not in mods else 0.0
    dense = replicated_dense / rep_div + (attn + scores + mlp) / t + indexer

    moe = 0.0
    if m.is_moe:
        k = m.experts_per_token
        expert_mlp = _mlp_saved(m, a, block, m.moe_ffn_size, g)
        if "moe_act" in mods:  # the activation's output, which is the second GEMM's input
            expert_mlp -= g * m.moe_ffn_size
        # dispatched in/out + expert MLP, router probabilities
        routed = k * (_dispatched_saved(a, g, h, plan.expert_tp) + expert_mlp) + FP32 * m.num_experts
        if m.mlp_bias and profile == "fused" and not cfg.te_op_fuser:
            # Megatron's fp32 weighted fc2 bias: under a CUDA graph its multiply keeps the bias
            # repeated over every routed copy, in fp32, for the probs' gradient (estimate/expert_bias.py)
            routed += k * expert_bias_kept(cfg.full_cuda_graph) * h
        shared = _mlp_saved(m, a, block, m.shared_expert_ffn_size, g) if m.shared_expert_ffn_size else 0.0
        if m.shared_expert_gate:  # sigmoid(gate(x)) * shared(x): the product keeps both factors
            shared += a * h + a
        if "shared_experts" in mods:
            shared = 0.0
        if "moe" in mods:  # the MoE layer keeps only its input, the pre-MLP norm's output
            routed = shared = 0.0
        moe = (replicated - own_norm * (not m.is_mla)) / rep_div + (attn + scores + routed + shared) / t + indexer

    linear_delta = 0.0
    if m.linear_layers:  # the mixer's bytes in place of the attention's (q/k norms, scores and all)
        linear_delta = (_linear_saved(m, a, g) - attn - scores) / t

    rerun = 0.0
    if per_op_sac(m, cfg):  # the block keeps what the policy saves; its re-run, the rest
        everything = activation_breakdown(m, replace(cfg, recompute="none"), plan).dense_layer / tokens
        dense = min(everything, per_op_sac_saved(m, a, t, sp))
        rerun = everything - dense
    checkpoint = a * h / rep_div  # full recompute keeps each block's input
    embedding = INDEX  # token ids saved by the embedding's backward
    head = _norm_saved(m, a, profile, True) / rep_div if m.final_norm else a * h / rep_div
    vocab = m.vocab_size / t  # vocab-parallel LM head and cross-entropy
    if profile == "eager" and cfg.compiled_loss:
        # Inductor's fused cross-entropy keeps the logits as they are, each row's max and
        # log-sum-exp and the targets; its backward writes the gradient in the logits' dtype
        # (tests/estimate/test_compile.py: torch.compile's saved tensors)
        loss_saved = a * vocab + 2 * FP32 + INDEX
        loss_transient = a * vocab
    elif profile == "eager":
        loss_saved = FP32 * vocab + INDEX  # log_softmax output in fp32, targets
        if m.final_logit_softcap:
            loss_saved += a * vocab  # tanh soft-capping of the logits saves its output
        loss_transient = a * vocab + 2 * FP32 * vocab  # logits kept in the output, fp32 grad buffers
    elif cfg.cross_entropy_in_place:
        # TransformerEngine's parallel_cross_entropy (transformer_engine/pytorch/cross_entropy.py,
        # triton/cross_entropy.py cross_entropy_forward): the kernel writes the gradient over the
        # BF16 logits, which are all it saves; beside them an fp32 loss and (max, sum, target logit)
        # per token, all-gathered over the tp ranks
        loss_saved = a * vocab
        loss_transient = FP32 * (1 + 3 + (3 * t if t > 1 else 0))
    else:
        loss_saved = FP32 * vocab  # Megatron's vocab-parallel CE keeps fp32 softmax (grad in place)
        loss_transient = a * vocab  # the logits
    if cfg.mtp_layers:
        # each multi-token-prediction depth (DeepSeek-V3 report, section 2.2; Megatron-Core's
        # MultiTokenPredictionLayer) keeps the shifted token ids, what its two input norms save,
        # eh_proj's 2h input (a column-parallel linear: under SP its sequence shard, gathered again
        # in backward) and its final norm's; its block counts as a layer (stage_params), and its
        # LM head and loss save what the main one does, all alive until backward
        norm = _norm_saved(m, a, profile, False) / rep_div  # enorm, hnorm: their outputs are concatenated
        head += cfg.mtp_layers * (head + 2 * norm + 2 * a * h / rep_div + INDEX)
        loss_saved *= 1 + cfg.mtp_layers
    rotary = 0.0
    if profile == "eager" and m.rotary:  # cos and sin tables, shared by all layers and the batch
        rotary = 2 * a * cfg.seq_len * (m.qk_rope_head_dim if m.is_mla else m.head_dim)
    return ActivationBreakdown(
        dense_layer=dense * tokens,
        moe_layer=moe * tokens,
        layer_checkpoint=checkpoint * tokens,
        embedding=embedding * tokens + rotary,
        head=head * tokens,
        loss_saved=loss_saved * tokens,
        loss_transient=loss_transient * tokens,
        layer_rerun=rerun * tokens,
        linear_delta=linear_delta * tokens,
    )
