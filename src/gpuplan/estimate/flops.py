"""FLOPs of training: forward, backward, recompute; model FLOPs (MFU) and hardware FLOPs (HFU).

Conventions (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 5; Chowdhery et al. 2022, PaLM, Appendix B):

* a matrix multiply of an activation by a weight costs 2 FLOPs per weight per token forward and
  twice that backward (input gradient and weight gradient): 6 FLOPs per weight per token;
* attention scores cost 2 * heads * (d_qk + d_v) FLOPs per token per key attended forward
  (QK^T and AV), again x3 with backward. ``causal=True`` counts the keys a causal mask keeps,
  (s+1)/2 on average, which is the work a causal flash kernel does; ``causal=False`` counts all s,
  the convention of PaLM's 6N + 12LHQT and Megatron's 96BsLh^2(1+s/6h+V/16Lh), and what
  ``torch.utils.flop_counter.FlopCounterMode`` counts for eager attention;
* MoE layers count the router and only the experts each token visits;
* model FLOPs exclude recompute (MFU); hardware FLOPs add the recomputed forward (HFU): the
  whole transformer-block forward for full recompute, the attention core for selective.
Elementwise work (norms, activations, softmax) is not counted, as in both references.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.estimate.params import count_params, layer_tensors, op_sac_kept
from gpuplan.specs.model import LayerKind, ModelSpec


def mean_context(seq_len: int, window: int | None, causal: bool, chunked: bool = False, document: int = 0) -> float:
    """Average number of keys a query attends to in a sequence of ``seq_len`` tokens.

    ``chunked``: the window is Llama 4's chunked attention, where a query sees only the keys of its
    own chunk of ``window`` tokens (transformers' ``create_chunked_causal_mask``).
    ``document``: the sequence packs documents of this many tokens and each query sees only its own
    document (a document or block-causal mask: Llama 3's, Dubey et al. 2024 section 3.2;
    torchtitan's flex attention "block_causal"; packed THD sequences in TransformerEngine), the
    window counted from each document's start; 0: one document."""
    if causal:
        return _packed_pairs(seq_len, window, chunked, document if document < seq_len else 0) / seq_len
    s = min(seq_len, document) if document else seq_len  # bidirectional: a query sees its document
    if chunked and window and window < s:  # every query sees its whole chunk
        full, rest = divmod(s, window)
        return (full * window * window + rest * rest) / s
    return float(min(s, window) if window else s)


def _keys_before(n: float, window: int | None, chunked: bool) -> float:
    """(query, key) pairs of a causal mask's first ``n`` query positions: position i sees i + 1
    keys, at most ``window`` (a sliding window), or (i mod window) + 1 (chunked attention)."""
    if not window:
        return n * (n + 1) / 2
    if chunked:
        full, rest = divmod(n, window)
        return full * window * (window + 1) / 2 + rest * (rest + 1) / 2
    if n <= window:
        return n * (n + 1) / 2
    return window * (window + 1) / 2 + (n - window) * window


def _packed_pairs(n: float, window: int | None, chunked: bool, document: int) -> float:
    """(query, key) pairs of the first ``n`` positions of a sequence packing ``document``-token
    documents under a document mask (0: one document)."""
    if not document:
        return _keys_before(n, window, chunked)
    docs, rest = divmod(n, document)
    return docs * _keys_before(document, window, chunked) + _keys_before(rest, window, chunked)


def cp_attention_imbalance(
    seq_len: int,
    cp: int,
    window: int | None = None,
    balanced: bool = True,
    chunked: bool = False,
    document: int = 0,
) -> float:
    """The busiest context-parallel rank's causal attention work over the mean rank's.

    Ring attention moves in lock step (each rank's next step waits for its neighbour's K and V),
    so a layer takes the busiest rank's time. A contiguous split (``balanced`` False: PyTorch's
    context parallel without its load balancer, ``_cp_options.enable_load_balance`` False) gives
    the last rank the most keys: 2 - 1/cp of the mean under a full causal mask. The load-balanced
    split cuts the sequence into 2 x cp chunks and gives rank r chunks r and 2cp - 1 - r
    (TransformerEngine's DualChunkSwap, context_parallel.py ``attn_forward_func_with_cp``;
    PyTorch's head-tail balancer; Liu et al. 2023's striping argument), which is exact for a full
    causal mask and near 1 under a window. ``document``: a document mask over packed documents of
    that many tokens (``mean_context``)."""
    if cp <= 1:
        return 1.0

    def pairs(a: float, b: float) -> float:
        return _packed_pairs(b, window, chunked, document) - _packed_pairs(a, window, chunked, document)

    if balanced:
        h = seq_len / (2 * cp)
        work = [pairs(r * h, (r + 1) * h) + pairs((2 * cp - 1 - r) * h, (2 * cp - r) * h) for r in range(cp)]
    else:
        c = seq_len / cp
        work = [pairs(r * c, (r + 1) * c) for r in range(cp)]
    mean = sum(work) / cp
    return max(work) / mean if mean > 0 else 1.0


# FLA's chunk_gated_delta_rule works on chunks of 64 tokens (chunk_size BT = 64 in
# fla/ops/gated_delta_rule/chunk.py), as Megatron-Core's GatedDeltaNet and transformers'
# torch_chunk_gated_delta_rule (chunk_size=64) run it
GDN_CHUNK = 64


def linear_attention_flops_per_token(m: ModelSpec, decode: bool = False) -> float:
    """Forward FLOPs per token of one linear-attention layer's token mixing, its projections aside
    (they are weights, counted with the matmuls); 0 without linear attention. Mamba-2's scan:
    ``ssd_flops_per_token``; Gated DeltaNet's as follows, and Kimi Delta Attention's the same (its
    decay per channel scales the operands of the same products: FLA's chunk_kda).

    The causal depthwise conv: 2 x taps x (2 key widths + the value width). The chunked gated
    delta rule (Yang, Kautz and Hatamizadeh 2025, section 3.3; Yang et al. 2024, "Parallelizing
    Linear Transformers with the Delta Rule over Sequence Length", section 3.2, the WY/UT form), per
    value head and chunk of C tokens, key width dk, value width dv: A = K_beta K^T and the masked
    Q K^T (2 C^2 dk each); the unit-lower-triangular inverse T = (I + A)^-1 by forward substitution
    (C^3 / 3); W = T K_beta and U = T V_beta (2 C^2 dk, 2 C^2 dv); per chunk against the state S
    (dk x dv): W S, Q S and the update K^T (U - W S) (2 C dk dv each) and the intra-chunk
    (Q K^T) (U - W S) (2 C^2 dv). Per token: 6 C dk + 4 C dv + 6 dk dv + C^2 / 3.
    Decoding one token (``decode``) runs the recurrence (FLA's fused_recurrent_gated_delta_rule):
    the decayed state's read k^T S, the rank-one update and the output q^T S: 2 dk dv each."""
    if not m.linear_layers:
        return 0.0
    dk, dv, heads = m.linear_k_dim, m.linear_v_dim, m.linear_v_heads
    conv = 2.0 * m.linear_conv * (2 * m.linear_k_heads * dk + heads * dv)
    if m.linear_kind == "mamba2":
        return conv + ssd_flops_per_token(m, decode)
    if decode:
        return conv + heads * 6.0 * dk * dv
    return conv + heads * gated_delta_flops_per_head(m)


def ssd_flops_per_token(m: ModelSpec, decode: bool = False) -> float:
    """Forward FLOPs per token of one Mamba-2 layer's chunked scan (Dao and Gu 2024, "Transformers
    are SSMs", section 6, the SSD algorithm as mamba_ssm's Triton kernels run it,
    ssd_combined.py): per group of B and C, C B^T within the chunk (2 Q N, _bmm_chunk_fwd); per
    head of P, the masked (C B^T) x (2 Q P, _chunk_scan_fwd), the chunk's state B^T x (2 N P,
    _chunk_state_fwd), the output from the carried state C h (2 N P) and the state passed on
    from chunk to chunk (2 N P per chunk of Q, _state_passing_fwd); Q = mamba_chunk_size, N =
    d_state. Decoding one token (selective_state_update): the state's decay, the rank-one
    update and the read C h, 5 N P per head."""
    n, p, q = m.linear_k_dim, m.linear_v_dim, m.linear_chunk
    if decode:
        return m.linear_v_heads * 5.0 * n * p
    return m.linear_k_heads * 2.0 * q * n + m.linear_v_heads * (2.0 * q * p + 4.0 * n * p + 2.0 * n * p / q)


def gated_delta_flops_per_head(m: ModelSpec) -> float:
    """The chunked rule's forward FLOPs per token and value head (``linear_attention_flops_per_token``
    derives them): 6 C dk + 4 C dv + 6 dk dv + C^2 / 3."""
    dk, dv, c = m.linear_k_dim, m.linear_v_dim, GDN_CHUNK
    return 6.0 * c * dk + 4.0 * c * dv + 6.0 * dk * dv + c * c / 3.0


def mla_absorbed_width(m: ModelSpec) -> int:
    """Per-head width of MLA run in its MQA (absorbed) mode, per key: the query absorbed into the
    latent and its rotary part against the latent and rotary key (kv_lora_rank + qk_rope_head_dim),
    then the output as a mix of latents (kv_lora_rank): 512 + 64 + 512 = 1,088 for DeepSeek-V3
    (DeepSeek-V2 paper, section 2.1.2, absorbing W^UK into W^Q and W^UV into W^O), where the
    unabsorbed form computes qk_head_dim + v_dim = 192 + 128. Decode kernels run it (FlashMLA), and
    DeepSeek Sparse Attention runs it everywhere: "we instantiate DSA based on the MQA mode of MLA"
    (DeepSeek-V3.2-Exp report, section 2.1); the sparse-MLA training kernels take a query of
    576 = 512 + 64 per head against one shared KV head and return 512 (Megatron-Core's DSA SparseMLA
    over TileLang's sparse_mla_fwd / sparse_mla_bwd)."""
    return 2 * m.kv_lora_rank + m.qk_rope_head_dim


def attention_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = True, document: int = 0) -> float:
    """Forward FLOPs of QK^T and AV per token, summed over layers (sliding-window layers see fewer
    keys), plus DeepSeek Sparse Attention's indexer (``indexer_flops_per_token``): under DSA each
    query's MLA attends only the ``index_topk`` keys the indexer picks (DeepSeek-V3.2-Exp report,
    section 2: core attention O(L k) instead of O(L^2)), the same count as a window of that size.
    Linear-attention layers (Gated DeltaNet) add their token mixing instead, whatever the length
    (``linear_attention_flops_per_token``). ``document``: packed documents of that many tokens
    under a document mask (``mean_context``)."""
    per_key = 2 * m.num_heads * (m.qk_head_dim + m.v_dim)
    full = m.num_attention_layers - m.num_sliding_layers
    linear = m.num_linear_layers * linear_attention_flops_per_token(m)
    ctx = full * mean_context(seq_len, m.index_topk or None, causal, document=document)
    if m.num_sliding_layers:
        ctx += m.num_sliding_layers * mean_context(seq_len, m.sliding_window, causal, m.attention_chunked, document)
    return per_key * ctx + indexer_flops_per_token(m, seq_len, causal, document) + linear


def indexer_flops_per_key(m: ModelSpec) -> float:
    """Forward FLOPs of DSA's lightning indexer per query token, key and layer: the key (one head of
    index_head_dim) against the token's index_heads queries, then the heads' ReLU'd scores weighted
    and summed: 2 x index_heads x (index_head_dim + 1) (DeepSeek-V3.2-Exp report, eq. 1;
    transformers' DeepseekV32Indexer); 0 without DSA. Its projections are weights, counted with the
    matmuls."""
    return 2.0 * m.index_heads * (m.index_head_dim + 1)


def indexer_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = True, document: int = 0) -> float:
    """Forward FLOPs per token of DSA's indexer scores over every earlier key, summed over layers."""
    return m.num_layers * indexer_flops_per_key(m) * mean_context(seq_len, None, causal, document=document)


@dataclass(frozen=True)
class Flops:
    forward_per_token: float  # model forward FLOPs per token
    matmul_forward_per_token: float
    attention_forward_per_token: float
    recompute_per_token: float  # extra forward work from activation recompute
    seq_len: int
    causal: bool

    @property
    def model_per_token(self) -> float:
        """Forward + backward (3x forward): the numerator of MFU."""
        return 3 * self.forward_per_token

    @property
    def hardware_per_token(self) -> float:
        """Model FLOPs plus the recomputed forward: the numerator of HFU."""
        return self.model_per_token + self.recompute_per_token


def module_matmul_flops_per_token(m: ModelSpec, module: str) -> float:
    """Forward GEMM FLOPs per token of one recomputable module summed over the layers
    (``TrainingConfig.recompute_modules``): "mlp" the dense MLPs, "moe" the router, the visited
    experts and the shared experts, "shared_experts" the shared experts; the others are
    elementwise (norms, activations) and count nothing, as elementwise work never does here."""
    return sum(layers * _block_module_flops(m, kind, module) for kind, layers in m.layer_kinds())


def _block_module_flops(m: ModelSpec, kind: LayerKind, module: str | None = None) -> float:
    """Forward GEMM FLOPs per token of one block of ``kind``: its weights of a recompute module,
    or all of them (``module`` None); a routed expert's weights count for the tokens routed to it."""
    frac = m.experts_per_token / m.num_experts if m.is_moe else 1.0
    return sum(
        2.0 * t.numel * (frac if t.expert else 1.0)
        for t in layer_tensors(m, *kind)
        if t.matmul and (module is None or module in t.recompute_modules)
    )


def mtp_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = True, document: int = 0) -> tuple[float, float]:
    """(GEMM, attention) forward FLOPs per token of one multi-token-prediction depth: its block
    (``ModelSpec.mtp_kind``, softmax attention over the whole causal context), the 2h -> h
    projection and its pass through the shared LM head (Megatron-LM's num_floating_point_operations
    adds the same: the block as one more layer, 2 h^2 for eh_proj and one more logit term per depth;
    the norms' 3h it also counts are elementwise and count nothing here)."""
    per_key = 2 * m.num_heads * (m.qk_head_dim + m.v_dim)
    window = m.index_topk or None  # DeepSeek Sparse Attention's MLA attends the indexer's top-k
    attn = per_key * mean_context(seq_len, window, causal, document=document)
    attn += indexer_flops_per_key(m) * mean_context(seq_len, None, causal, document=document)  # every earlier key
    h = m.hidden_size
    gemm = _block_module_flops(m, m.mtp_kind) + 2.0 * (2 * h * h) + 2.0 * m.vocab_size * (m.embed_proj_dim or h)
    return gemm, attn


def op_sac_matmul_flops_per_token(m: ModelSpec) -> float:
    """Forward GEMM FLOPs per token torchtitan's per-op SAC runs again (estimate/activations.py
    ``per_op_sac_saved``): the matmul outputs its policy does not keep (params.op_sac_kept: the 2nd,
    4th, ... ``aten.mm`` of a block), and the routed experts' grouped GEMMs whole."""
    frac = m.experts_per_token / m.num_experts if m.is_moe else 1.0
    total = 0.0
    for kind, layers in m.layer_kinds():
        kept = op_sac_kept(m, *kind)
        for t in layer_tensors(m, *kind):
            if t.matmul and len(t.shape) >= 2:
                share = frac if t.expert else 1.0 - kept[t.name]
                total += layers * 2.0 * t.numel * share
    return total


def training_flops(
    m: ModelSpec,
    seq_len: int,
    recompute: str = "none",
    causal: bool = True,
    modules: frozenset[str] = frozenset(),
    document: int = 0,
    mtp: int = 0,
) -> Flops:
    """``modules``: what selective recompute reruns (``TrainingConfig.recomputed``; empty under
    selective means the attention core, Megatron's default); ``document``: packed documents of
    that many tokens under a document mask (0: one per sequence); ``mtp``: multi-token-prediction
    depths trained (``mtp_flops_per_token`` each)."""
    params = count_params(m)
    matmul = 2.0 * params.matmul_active
    attn = attention_flops_per_token(m, seq_len, causal, document)
    mtp_gemm, mtp_attn = mtp_flops_per_token(m, seq_len, causal, document) if mtp else (0.0, 0.0)
    mtp_block = _block_module_flops(m, m.mtp_kind) if mtp else 0.0
    if recompute == "full":  # every block's forward runs again (an MTP depth's block too); the ends do not
        head = 2.0 * m.vocab_size * (m.embed_proj_dim or m.hidden_size)
        recompute_flops = matmul - head + attn + mtp * (mtp_block + mtp_attn)
    elif recompute == "selective":  # the attention core (QK^T, softmax, AV) and any other modules named
        mods = modules or frozenset({"core_attn"})
        recompute_flops = (attn + mtp * mtp_attn if "core_attn" in mods else 0.0) + sum(
            op_sac_matmul_flops_per_token(m)
            if x == "op_sac"
            else module_matmul_flops_per_token(m, x) + mtp * _block_module_flops(m, m.mtp_kind, x)
            for x in mods
        )
    else:
        recompute_flops = 0.0
    matmul += mtp * mtp_gemm
    attn += mtp * mtp_attn
    return Flops(
        forward_per_token=matmul + attn,
        matmul_forward_per_token=matmul,
        attention_forward_per_token=attn,
        recompute_per_token=recompute_flops,
        seq_len=seq_len,
        causal=causal,
    )


def six_nd(m: ModelSpec, tokens: float) -> float:
    """The 6*N*D rule (Kaplan et al. 2020, eq. 2.1) with N the active parameters."""
    return 6.0 * count_params(m).active * tokens
