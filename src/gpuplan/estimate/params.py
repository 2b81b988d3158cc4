"""Parameters as tensors: every weight of the model with its shape and how parallelism splits it.

Counting from shapes, rather than from a closed form such as 12*L*h^2, keeps the count exact for
every family (biases, GQA, MLA, gated MLPs, shared experts, tied embeddings) and gives the
optimizer model the matrix shapes it needs (Adafactor factors rows and columns). The oracle is
``transformers`` itself: tests/estimate/test_params.py builds each catalog model on the ``meta``
device and compares counts exactly.

``split`` says how tensor parallelism shards a tensor (Megatron-LM, Shoeybi et al. 2019):
``col`` splits the output dimension, ``row`` the input dimension, ``vocab`` the vocabulary rows,
``none`` replicates it (norms, row-parallel biases, routers).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from gpuplan.specs.model import ModelSpec


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    split: str = "none"
    expert: bool = False  # routed-expert weight: sharded by expert parallelism
    matmul: bool = True  # multiplies activations (False: embedding lookups, norms, biases)
    mla: bool = False  # multi-latent attention's up-projection (recompute module "mla_up_proj")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def recompute_modules(self) -> tuple[str, ...]:
        """The selective-recompute modules (``TrainingConfig.recompute_modules``) this weight
        belongs to: a dense MLP's to "mlp"; an MoE layer's router and experts to "moe", its shared
        experts to "moe" and "shared_experts"; multi-latent attention's up-projections (and its q
        projection where q has no low-rank path: Megatron runs it inside the same checkpoint) to
        "mla_up_proj"."""
        if self.mla:
            return ("mla_up_proj",)
        if self.name.startswith("mlp."):
            return ("mlp",)
        if self.name.startswith("moe.shared."):
            return ("moe", "shared_experts")
        if self.name.startswith("moe."):
            return ("moe",)
        return ()


def _linear(name: str, n_in: int, n_out: int, split: str, bias: bool, **kw) -> list[Tensor]:
    out = [Tensor(f"{name}.weight", (n_out, n_in), split, **kw)]
    if bias:
        # a column-parallel bias is split with its outputs; a row-parallel bias is added after the
        # all-reduce, so every rank holds all of it
        out.append(
            Tensor(
                f"{name}.bias",
                (n_out,),
                "col" if split == "col" else "none",
                expert=kw.get("expert", False),
                matmul=False,
            )
        )
    return out


def _norm(m: ModelSpec, name: str, width: int, split: str = "none") -> list[Tensor]:
    out = [Tensor(f"{name}.weight", (width,), split, matmul=False)]
    if m.norm == "layernorm" and m.norm_bias:
        out.append(Tensor(f"{name}.bias", (width,), split, matmul=False))
    return out


def _attention(m: ModelSpec) -> list[Tensor]:
    h = m.hidden_size
    if m.is_mla:  # DeepSeek-V2/V3 multi-head latent attention (DeepSeek-V2 report, section 2.1)
        t: list[Tensor] = []
        if m.q_lora_rank:
            t += _linear("attn.q_a_proj", h, m.q_lora_rank, "none", m.qkv_bias)
            t += _norm(m, "attn.q_a_layernorm", m.q_lora_rank)
            t += _linear("attn.q_b_proj", m.q_lora_rank, m.q_size, "col", False, mla=True)
        else:
            t += _linear("attn.q_proj", h, m.q_size, "col", False, mla=True)
        t += _linear("attn.kv_a_proj_with_mqa", h, m.kv_lora_rank + m.qk_rope_head_dim, "none", m.qkv_bias)
        t += _norm(m, "attn.kv_a_layernorm", m.kv_lora_rank)
        t += _linear(
            "attn.kv_b_proj", m.kv_lora_rank, m.num_heads * (m.head_dim + m.v_head_dim), "col", False, mla=True
        )
        t += _linear("attn.o_proj", m.num_heads * m.v_head_dim, h, "row", m.o_bias)
        if m.index_heads:  # DSA's lightning indexer (DeepSeek-V3.2), replicated over TP
            d = m.index_head_dim
            t += _linear("attn.indexer.wq_b", m.q_lora_rank, m.index_heads * d, "none", False)
            t += _linear("attn.indexer.wk", h, d, "none", False)
            t += [Tensor("attn.indexer.k_norm.weight", (d,), matmul=False)]
            t += [Tensor("attn.indexer.k_norm.bias", (d,), matmul=False)]  # nn.LayerNorm
            t += _linear("attn.indexer.weights_proj", h, m.index_heads, "none", False)
        return t
    kv = m.num_kv_heads * m.head_dim
    q = 2 * m.q_size if m.attn_output_gate else m.q_size  # the output gate is projected beside q
    t = _linear("attn.qkv", h, q + 2 * kv, "col", m.qkv_bias) + _linear("attn.o", m.q_size, h, "row", m.o_bias)
    if m.qk_norm_full:  # one weight over all query (key) heads, split with them under TP
        t += _norm(m, "attn.q_norm", m.q_size, "col") + _norm(m, "attn.k_norm", kv, "col")
    elif m.qk_norm:  # one weight over head_dim, shared by all heads: every TP rank holds it
        t += _norm(m, "attn.q_norm", m.head_dim) + _norm(m, "attn.k_norm", m.head_dim)
    if m.attn_sinks:  # a logit per head, split with the heads
        t.append(Tensor("attn.sinks", (m.num_heads,), "col", matmul=False))
    return t


def _linear_attention(m: ModelSpec) -> list[Tensor]:
    """A Gated DeltaNet block's mixer (transformers' Qwen3NextGatedDeltaNet; Megatron-Core's
    GatedDeltaNet, ssm/gated_delta_net/gdn.py): one input projection to q, k (key heads), v and the
    output gate z (value heads) and the per-value-head beta and alpha, as Megatron fuses them
    (Qwen3.5's separate in_proj_qkv, in_proj_z, in_proj_b, in_proj_a hold the same weights); a
    depthwise causal conv over q, k and v; per-head decay (A_log) and step bias (dt_bias); a
    gated RMSNorm over each value head (one head_v_dim weight); the output projection. Heads split
    over TP, the conv's channels with them."""
    h = m.hidden_size
    kd, vd, nv = m.linear_k_heads * m.linear_k_dim, m.linear_v_heads * m.linear_v_dim, m.linear_v_heads
    conv = 2 * kd + vd
    if m.linear_kind == "mamba2":
        # Mamba-2 (GraniteMoeHybridMambaLayer, BambaMixer; Megatron-Core MambaMixer): in_proj to z, x,
        # B, C and dt; the conv over x, B and C (optionally biased); dt_bias, A_log and D per head;
        # a gated RMSNorm over d_inner (its weight split with the heads); out_proj
        t = _linear("linear_attn.in_proj", h, m.linear_in_proj_width, "col", m.linear_bias)
        t.append(Tensor("linear_attn.conv1d.weight", (conv, 1, m.linear_conv), "col", matmul=False))
        if m.linear_conv_bias:
            t.append(Tensor("linear_attn.conv1d.bias", (conv,), "col", matmul=False))
        t += [Tensor(f"linear_attn.{n}", (nv,), "col", matmul=False) for n in ("dt_bias", "A_log", "D")]
        t.append(Tensor("linear_attn.norm.weight", (vd,), "col", matmul=False))
        return t + _linear("linear_attn.out_proj", vd, h, "row", m.linear_bias)
    if m.linear_kind == "kda":
        # Kimi Delta Attention (transformers' KimiLinearDeltaAttention): q, k, v and b fused here;
        # the conv over q, k and v; the per-channel forget gate and the output gate each a low-rank
        # pair, hidden -> head_dim (replicated over TP) -> q width (split); dt_bias per channel,
        # A_log per head; a gated RMSNorm over each head (one head_dim weight)
        d = m.linear_k_dim
        t = _linear("linear_attn.in_proj", h, m.linear_in_proj_width, "col", False)
        t.append(Tensor("linear_attn.conv1d.weight", (conv, 1, m.linear_conv), "col", matmul=False))
        for gate in ("f", "g"):
            t += _linear(f"linear_attn.{gate}_a_proj", h, d, "none", False)
            t += _linear(f"linear_attn.{gate}_b_proj", d, kd, "col", False)
        t.append(Tensor("linear_attn.dt_bias", (kd,), "col", matmul=False))
        t.append(Tensor("linear_attn.A_log", (nv,), "col", matmul=False))
        t.append(Tensor("linear_attn.norm.weight", (d,), matmul=False))
        return t + _linear("linear_attn.out_proj", vd, h, "row", False)
    return [
        *_linear("linear_attn.in_proj", h, m.linear_in_proj_width, "col", False),
        Tensor("linear_attn.conv1d.weight", (conv, 1, m.linear_conv), "col", matmul=False),
        Tensor("linear_attn.dt_bias", (nv,), "col", matmul=False),
        Tensor("linear_attn.A_log", (nv,), "col", matmul=False),
        Tensor("linear_attn.norm.weight", (m.linear_v_dim,), matmul=False),
        *_linear("linear_attn.out_proj", vd, h, "row", False),
    ]


def _mlp(m: ModelSpec, name: str, width: int, bias: bool, expert: bool = False) -> list[Tensor]:
    h = m.hidden_size
    up = 2 * width if m.gated_mlp else width  # gate and up projections fused
    t = _linear(f"{name}.up", h, up, "col", bias, expert=expert) + _linear(
        f"{name}.down", width, h, "row", bias, expert=expert
    )
    if m.activation == "xielu":  # XIELUActivation's alpha_p and alpha_n (transformers activations.py)
        t += [Tensor(f"{name}.act.alpha_p", (1,), matmul=False), Tensor(f"{name}.act.alpha_n", (1,), matmul=False)]
    return t


def _moe(m: ModelSpec) -> list[Tensor]:
    h = m.hidden_size
    t = [Tensor("moe.router", (m.num_experts, h))]
    if m.router_bias:
        t.append(Tensor("moe.router_bias", (m.num_experts,), matmul=False))
    per_expert = _mlp(m, "moe.expert", m.moe_ffn_size, m.mlp_bias, expert=True)
    t += [Tensor(x.name, (m.num_experts, *x.shape), x.split, expert=True, matmul=x.matmul) for x in per_expert]
    if m.shared_expert_ffn_size:
        t += _mlp(m, "moe.shared", m.shared_expert_ffn_size, m.mlp_bias)
        if m.shared_expert_gate:  # sigmoid(Linear(hidden, 1)) scales the shared expert's output
            t.append(Tensor("moe.shared.gate.weight", (1, h)))
    return t


@functools.lru_cache(maxsize=1024)  # keyed on the whole ModelSpec
def layer_tensors(m: ModelSpec, moe: bool, linear: bool = False) -> tuple[Tensor, ...]:
    """The tensors of one transformer block of a kind (``ModelSpec.layer_kinds``): a dense or MoE
    MLP after softmax or linear attention."""
    h = m.hidden_size
    t: list[Tensor] = []
    for i in range(m.pre_norms_per_layer + m.post_norms_per_layer):
        t += _norm(m, f"norm{i}", h)
    t += _linear_attention(m) if linear else _attention(m)
    t += _moe(m) if moe else _mlp(m, "mlp", m.ffn_size, m.mlp_bias)
    return tuple(t)


@functools.lru_cache(maxsize=1024)  # keyed on the whole ModelSpec
def embedding_tensors(m: ModelSpec) -> tuple[Tensor, ...]:
    width = m.embed_proj_dim or m.hidden_size
    t = [Tensor("embed.tokens", (m.vocab_size, width), "vocab", matmul=False)]
    if m.position_embeddings:
        t.append(Tensor("embed.positions", (m.position_embeddings, m.hidden_size), matmul=False))
    if m.embed_proj_dim:  # OPT-350m projects embeddings up to the hidden size
        t.append(Tensor("embed.project_in", (m.hidden_size, m.embed_proj_dim), "none"))
    if m.embedding_norm:
        t += _norm(m, "embed.norm", m.hidden_size)
    return tuple(t)


@functools.lru_cache(maxsize=1024)  # keyed on the whole ModelSpec
def head_tensors(m: ModelSpec) -> tuple[Tensor, ...]:
    """Final norm, output projection and the LM head (absent when tied to the embedding)."""
    t: list[Tensor] = []
    if m.final_norm:
        t += _norm(m, "final_norm", m.hidden_size)
    if m.embed_proj_dim:
        t.append(Tensor("head.project_out", (m.embed_proj_dim, m.hidden_size), "none"))
    if not m.tied_embeddings:
        t.append(Tensor("lm_head", (m.vocab_size, m.embed_proj_dim or m.hidden_size), "vocab"))
    if m.lm_head_bias:
        t.append(Tensor("lm_head.bias", (m.vocab_size,), "vocab", matmul=False))
    return tuple(t)


@functools.lru_cache(maxsize=1024)  # keyed on the whole ModelSpec
def mtp_tensors(m: ModelSpec) -> tuple[Tensor, ...]:
    """One multi-token-prediction module's own tensors beside its block (``layer_tensors`` of
    ``ModelSpec.mtp_kind``): the norms of the shifted token's embedding and of the previous depth's
    hidden state, the projection of their concatenation from 2h back to h, and the norm before the
    shared LM head (DeepSeek-V3 report, section 2.2, eq. 21-23: RMSNorm, M_k in R^{d x 2d}; Megatron-Core
    MultiTokenPredictionLayer: enorm, hnorm, eh_proj a column-parallel linear without bias,
    final_layernorm; DeepSeek-V3's checkpoint: enorm, hnorm, eh_proj, shared_head.norm). The
    embedding and the LM head are the model's own, shared."""
    h = m.hidden_size
    t = _norm(m, "mtp.enorm", h) + _norm(m, "mtp.hnorm", h)
    t += _linear("mtp.eh_proj", 2 * h, h, "col", False)
    t += _norm(m, "mtp.final_norm", h)
    return tuple(t)


@functools.lru_cache(maxsize=1024)  # keyed on the whole ModelSpec
def vision_tensors(m: ModelSpec) -> tuple[Tensor, ...]:
    """A multimodal model's vision tower and projector (specs/vision.py), replicated over tensor
    parallelism; ``matmul=False`` keeps them out of the per-text-token FLOPs (images are not
    modelled)."""
    if m.vision is None:
        return ()
    return tuple(Tensor(f"vision.{name}", shape, "none", matmul=False) for name, shape in m.vision.tensors)


def _sum(tensors, pred=lambda t: True) -> int:
    return sum(t.numel for t in tensors if pred(t))


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int  # used for each token: routed experts count only experts_per_token of num_experts
    embedding: int  # token (and position) embedding tables
    lm_head: int  # 0 when tied
    per_layer: tuple[int, ...]  # one entry per transformer block
    matmul_active: int  # active weights that multiply activations (2 FLOPs each per token)
    vision: int = 0  # a multimodal model's vision tower and projector (in total, not in active)

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding


@functools.lru_cache(maxsize=1024)  # keyed on the whole ModelSpec
def count_params(m: ModelSpec) -> ParamCounts:
    """Exact parameter counts, as ``transformers`` builds the model (Hugging Face modeling_*.py).

    ``total`` includes a multimodal model's vision tower; ``active`` (what each text token uses,
    the 6ND count) does not."""
    emb, head = embedding_tensors(m), head_tensors(m)
    per_layer = tuple(_sum(layer_tensors(m, m.is_moe_layer(i), m.is_linear_layer(i))) for i in range(m.num_layers))
    vision = _sum(vision_tensors(m))
    total = _sum(emb) + _sum(head) + sum(per_layer) + vision

    # Each token visits experts_per_token routed experts of num_experts.
    frac = m.experts_per_token / m.num_experts if m.is_moe else 1.0

    def matmul(ts):
        return _sum(ts, lambda t: t.matmul and not t.expert) + frac * _sum(ts, lambda t: t.matmul and t.expert)

    kinds = [(layer_tensors(m, *kind), n) for kind, n in m.layer_kinds()]
    inactive = round(sum(n * _sum(ts, lambda t: t.expert) * (1 - frac) for ts, n in kinds))
    # A tied embedding is a lookup at the input but still multiplies at the output.
    tied_head = m.vocab_size * (m.embed_proj_dim or m.hidden_size) if m.tied_embeddings else 0
    matmul_active = round(sum(n * matmul(ts) for ts, n in kinds) + matmul(emb) + matmul(head) + tied_head)
    return ParamCounts(
        total=total,
        active=total - vision - inactive,
        embedding=_sum(emb, lambda t: t.name in ("embed.tokens", "embed.positions")),
        lm_head=_sum(head, lambda t: t.name == "lm_head"),
        per_layer=per_layer,
        matmul_active=matmul_active,
        vision=vision,
    )


def mtp_params(m: ModelSpec, depths: int) -> int:
    """Parameters that training ``depths`` multi-token-prediction modules adds to the model as
    ``count_params`` counts it: per depth one block of ``ModelSpec.mtp_kind`` and ``mtp_tensors``
    (the embedding and the LM head are shared: DeepSeek-V3's checkpoint stores a copy of each in
    its MTP layer, which its 14B of MTP weights count and training does not)."""
    if not depths:
        return 0
    return depths * (_sum(layer_tensors(m, *m.mtp_kind)) + _sum(mtp_tensors(m)))


def op_sac_kept(m: ModelSpec, moe: bool, linear: bool = False) -> dict[str, float]:
    """Share of each dense weight's matmul output torchtitan's per-op SAC keeps in one block.

    Its policy (torchtitan/distributed/activation_checkpoint.py ``_get_custom_policy``) keeps the
    1st, 3rd, ... ``aten.mm`` of a block in forward order and re-runs the others. torchtitan runs
    separate wq, wk, wv and w1, w3 where these tensors fuse them (``attn.qkv``: q, k, v; a gated
    ``up``: gate, up), so a fused tensor counts as its parts. Routed experts (grouped GEMMs, no
    ``aten.mm``) are not in it: they re-run whole."""
    kept: dict[str, float] = {}
    count = 0
    for t in layer_tensors(m, moe, linear):
        if not t.matmul or len(t.shape) < 2 or t.expert:
            continue
        n_out = t.shape[-2]
        if t.name == "attn.qkv.weight" and not m.is_mla:
            kv = m.num_kv_heads * m.head_dim
            parts: list[float] = [n_out - 2 * kv, kv, kv]
        elif t.name.endswith("up.weight") and m.gated_mlp:
            parts = [n_out / 2, n_out / 2]
        else:
            parts = [n_out]
        keep = 0.0
        for width in parts:
            count += 1
            keep += width if count % 2 == 1 else 0.0
        kept[t.name] = keep / sum(parts)
    return kept
