"""Compute and memory time of one transformer block on one GPU (the embedding and the head:
``model_ends.py``): the kernels a layer launches, each timed by the primitives in ``kernels.py``.

* GEMMs against the layer's weights after tensor/expert parallelism (forward, input gradient,
  weight gradient), FP8 casts around them; attention by kernel (FlashAttention rates, or eager
  attention as two batched GEMMs and a softmax over s^2 scores, Megatron's fused
  scale-mask-softmax).
* Memory-bound ops (norms, activations, rotary, residual adds, dropout, softmax, cross-entropy,
  the optimizer step): bytes read and written over the achievable HBM bandwidth. The fused
  profile counts one fused kernel per op (TransformerEngine, Apex); the eager profile counts each
  PyTorch op that transformers' modeling code launches (``eager_norm_bytes`` and the rotary and
  SwiGLU chains in ``layer_times``), and torch.autocast over fp32 parameters (the Hugging Face
  Trainer) adds its casts of weights, GEMM inputs and weight gradients and an fp32 residual
  stream. Measured on one H100 (measurements/h100-sxm-2026-11-23: profiler traces of eager
  Hugging Face steps), these memory-bound kernels are 45-70% of a 0.5-1.4B model's GPU time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from gpuplan.estimate.activations import FP32
from gpuplan.estimate.comm import efficiency
from gpuplan.estimate.expert_bias import expert_bias_passes
from gpuplan.estimate.flops import (
    GDN_CHUNK,
    cp_attention_imbalance,
    gated_delta_flops_per_head,
    indexer_flops_per_key,
    mean_context,
    mla_absorbed_width,
    ssd_flops_per_token,
)
from gpuplan.estimate.kernels import (
    dtype_bytes,
    eager_memory_time,
    flash_time,
    fp8_cast_times,
    gemm_time,
    high_precision,
    memory_time,
    scale_swizzle_times,
)
from gpuplan.estimate.moe_dispatch import dispatcher_copy_passes
from gpuplan.estimate.moe_host import te_stream_chain
from gpuplan.estimate.params import Tensor, layer_tensors, op_sac_kept
from gpuplan.estimate.stage_params import _local_shape
from gpuplan.estimate.torch_ring import torch_ring_bytes
from gpuplan.estimate.unfused_ops import glu_clamp_passes, yarn_rope_passes
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.training import LOW_PRECISION

# transformers model types whose attention projects q, k and v with one Linear (GPTNeoX's
# query_key_value, GPT-2's c_attn, Phi-3's qkv_proj, MPT's Wqkv, BLOOM's and Falcon's
# query_key_value, GPTBigCode's c_attn), and whose gate and up projections are one (Phi-3's gate_up_proj)
FUSED_QKV = frozenset({"gpt_neox", "gpt2", "phi3", "mpt", "bloom", "falcon", "gpt_bigcode"})
FUSED_GATE_UP = frozenset({"phi3", "glm4"})


def autocast_input_casts(m: ModelSpec, moe: bool) -> int:
    """Per token of a layer: how many times autocast casts an fp32 residual-stream input to bf16,
    once per Linear that reads it (autocast caches only leaf tensors, the weights). A routed
    token is cast again for each of its experts' gate and up projections."""
    attn = 2 if m.is_mla else 1 if m.model_type in FUSED_QKV else 3  # MLA: q (or q_a) and kv_a
    one_or_two = 1 if (not m.gated_mlp or m.model_type in FUSED_GATE_UP) else 2
    if moe:
        mlp = 1 + one_or_two * m.experts_per_token + (one_or_two if m.shared_expert_ffn_size else 0)
    else:
        mlp = one_or_two
    return attn + mlp


def eager_norm_bytes(norm: str, r: float) -> tuple[float, float, int, int]:
    """(forward bytes, backward bytes, forward kernels, backward kernels) per normalised element of
    one norm as transformers' modeling code runs it eagerly, on a stream of ``r`` bytes per element
    (fp32 under autocast over fp32 parameters, else the activation width).

    RMSNorm (``LlamaRMSNorm`` and its copies): ``x.to(float32)``; ``x.pow(2).mean(-1)``;
    ``x * rsqrt(var + eps)``; ``.to(input_dtype)``; ``weight * x``: each op a kernel that reads its
    inputs and writes its output (the casts vanish when the stream is already fp32). Gemma's
    ``(1 + weight)`` multiplies in fp32 before the cast back. The backward is autograd's mirror:
    the weight product's two gradients, the casts, the product rule through ``x * rsqrt`` and
    ``pow``, and the sum of the two paths into ``x``. LayerNorm is ``F.layer_norm``, one fused
    kernel each way (autocast runs it in fp32)."""
    if norm == "layernorm":
        return 2 * r, 3 * r, 1, 1
    up = 0.0 if r == FP32 else r + FP32  # x.to(float32), and its gradient's cast back
    down = 0.0 if r == FP32 else FP32 + r
    casts = (up > 0) + (down > 0)
    w = r if norm == "rmsnorm" else FP32  # weight * y in the stream's dtype, or in fp32 (Gemma, OLMo 2)
    fwd = up + 2 * FP32 + FP32 + 2 * FP32 + down + 2 * w  # cast, pow, mean, x * rsqrt, cast, weight
    # d(weight * y): g * w and g * y then the sum over tokens (6 w); through x * rsqrt: dz * x,
    # dz * rsqrt and the row sum (3 + 2 + 1 fp32 widths); through mean(x^2): the expanded division,
    # pow, the scale by 2 and the product (2 + 2 + 2 + 3); the two paths summed (3)
    bwd = 6 * w + up + down + (6 + 9 + 3) * FP32
    return fwd, bwd, 6 + casts, 13 + casts


@dataclass
class OpTimes:
    """Seconds of one piece of work: forward, backward for inputs (B), backward for weights (W).

    ``modules``: forward seconds of each module selective recompute can run again
    (``TrainingConfig.recompute_modules``: "core_attn" is the attention core).
    """

    fwd: float = 0.0
    bwd_input: float = 0.0
    bwd_weight: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # forward+backward seconds by kind
    modules: dict[str, float] = field(default_factory=dict)  # forward seconds by recomputable module
    # (forward, backward-input, backward-weight) seconds of each weight's GEMM, by tensor name: what a
    # tensor-parallel collective overlapped with that GEMM can hide behind (layer_comm.tp_partners)
    gemms: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def add(
        self,
        kind: str,
        fwd: float = 0.0,
        b: float = 0.0,
        w: float = 0.0,
        core: bool = False,
        modules: tuple[str, ...] = (),
    ) -> None:
        self.fwd += fwd
        self.bwd_input += b
        self.bwd_weight += w
        for mod in ("core_attn", *modules) if core else modules:
            self.credit(mod, fwd)
        self.parts[kind] = self.parts.get(kind, 0.0) + fwd + b + w

    @property
    def bwd(self) -> float:
        return self.bwd_input + self.bwd_weight

    def credit(self, module: str, fwd: float) -> None:
        """Count ``fwd`` seconds (already in ``fwd``) as part of ``module``'s forward."""
        self.modules[module] = self.modules.get(module, 0.0) + fwd

    @property
    def attn_core(self) -> float:
        """Forward seconds of the attention core (what Megatron's default selective recompute reruns)."""
        return self.modules.get("core_attn", 0.0)

    def recompute(self, recompute: str, modules: frozenset[str]) -> float:
        """Forward seconds run again in the backward: the whole forward under full recompute, the
        recomputed modules' forwards under selective (``TrainingConfig.recomputed``)."""
        if recompute == "full":
            return self.fwd
        return sum(self.modules.get(mod, 0.0) for mod in modules)


def _local_gemm(t: Tensor, tp: int, ep: int, etp: int | None = None) -> tuple[int, int, int]:
    """(experts on this GPU, out, in) of a weight after tensor and expert parallelism; a routed
    expert's weight is split by ``etp`` (None: tp)."""
    *lead, n_out, n_in = _local_shape(t, (tp if etp is None else etp) if t.expert else tp)
    experts = lead[0] if lead else 1
    return (max(1, experts // ep) if t.expert else experts), n_out, n_in


@dataclass(frozen=True)
class LayerShape:
    """What one GPU computes for one micro-batch of a layer."""

    tokens: int  # tokens through this GPU's GEMMs: micro_batch x seq / cp
    seq: int
    micro_batch: int
    tp: int
    cp: int
    ep: int
    sp: bool
    dtype: str
    act_bytes: int
    attention: str  # flash or eager
    attention_kernel: str = "fa3"  # flash kernels: fa3 (FlashAttention-3/cuDNN) or fa2 (SDPA, flash_attn 2)
    eager: bool = False  # PyTorch ops as transformers' modeling code runs them, not fused kernels
    compiled: bool = False  # torch.compile: the block's elementwise ops fused (TrainingConfig.compile)
    compiled_loss: bool = False  # torch.compile over the loss (TrainingConfig.compiled_loss)
    autocast: bool = False  # torch.autocast over fp32 parameters: fp32 residual stream and casts
    expert_imbalance: float = 1.0  # routed tokens on the busiest expert-parallel GPU over the mean
    etp: int | None = None  # expert tensor parallelism (MoE parallel folding); None: the experts split by tp
    fused_ce: bool = True  # the cross-entropy's elementwise passes fused (TrainingConfig.fused_cross_entropy)
    fp8_current: bool = False  # per-tensor FP8 with current scaling: an amax pass before each cast
    moe_dispatcher: str = ""  # the MoE token dispatcher (TrainingConfig.moe_dispatcher; "" not stated)
    te_op_fuser: bool = False  # TransformerEngine's op fuser runs the experts' MLP (TrainingConfig.te_op_fuser)
    full_cuda_graph: bool = False  # the whole step one CUDA graph: token counts stay on the device
    cp_comm: str = "p2p"  # context parallelism's K,V exchange (TrainingConfig.cp_comm)
    cp_balanced: bool = True  # head-tail load-balanced sequence chunks (TrainingConfig.cp_load_balance)
    document: int = 0  # tokens per packed document under a document mask (TrainingConfig.document_len)


def gated_delta_bytes(dk: int, dv: int, a: float) -> tuple[float, float]:
    """(forward, backward) bytes per token and value head that FLA's chunked gated delta rule moves
    (fla/ops/gated_delta_rule/chunk.py, chunk_gated_delta_rule_fwd and _bwd), kernel by kernel: each
    reads its inputs and writes its outputs once; ``a`` bytes per q, k, v element, g in fp32, the
    per-chunk states h (dk x dv every chunk of C tokens) and the C-wide WY matrix A in ``a``.
    Key heads are shared by num_v_heads / num_k_heads value heads: counted per value head, as the
    kernels index them (an upper bound on q and k traffic under grouping)."""
    c = GDN_CHUNK
    h = a * dk * dv / c  # one chunk state per C tokens
    g = FP32
    fwd = [
        2 * g,  # chunk_local_cumsum(g)
        a * dk + a + g + FP32 * c,  # chunk_scaled_dot_kkt_fwd: k, beta, g -> A (fp32)
        FP32 * c + a * c,  # solve_tril: A -> (I + A)^-1
        a * dk + a * dv + a + a * c + g + a * dk + a * dv,  # recompute_w_u_fwd: -> w, u
        2 * a * dk + a * dv + g + h + a * dv,  # chunk_gated_delta_rule_fwd_h: -> h, v_new
        2 * a * dk + a * dv + h + g + a * dv,  # chunk_fwd_o: -> o
    ]
    bwd = [
        a * dk + a * dv + a + a * c + g + a * dk + a * dv,  # recompute_w_u_fwd
        2 * a * dk + a * dv + g + h + a * dv,  # chunk_gated_delta_rule_fwd_h (recomputed)
        2 * a * dk + a * dv + g + a * dv,  # chunk_bwd_dv_local: q, k, do -> dv
        3 * a * dk + 2 * a * dv + g + h + a * dv,  # chunk_gated_delta_rule_bwd_dhu: -> dh, dv
        3 * a * dk + 3 * a * dv + 2 * h + g + 3 * a * dk + g,  # chunk_bwd_dqkwg: -> dq, dk, dw, dg
        2 * a * dk + 2 * a * dv + a * c + a + g + a * dk + a * dv + a + g,  # prepare_wy_repr_bwd
        3 * a * dk + 2 * g,  # dk += dk2, dg reverse cumsum
    ]
    return sum(fwd), sum(bwd)


def gated_delta_flops(m: ModelSpec) -> tuple[float, float]:
    """(forward, backward) FLOPs per token and value head of the chunked rule (the conv aside):
    forward as ``flops.gated_delta_flops_per_head`` counts it; backward two gradients of
    every product, plus what FLA's backward recomputes first (chunk_gated_delta_rule_bwd:
    recompute_w_u_fwd, W = T K_beta and U = T V_beta at 2 C dk and 2 C dv, and
    chunk_gated_delta_rule_fwd_h, W S and the state update at 2 dk dv each)."""
    dk, dv, c = m.linear_k_dim, m.linear_v_dim, GDN_CHUNK
    fwd = gated_delta_flops_per_head(m)
    return fwd, 2.0 * fwd + 2.0 * c * (dk + dv) + 4.0 * dk * dv


def gated_delta_times(
    m: ModelSpec, gpu: GPUSpec, head_tokens: float, longest: int, a: float, dtype: str
) -> tuple[float, float]:
    """(forward, backward) seconds of FLA's chunked gated delta rule over ``head_tokens`` (tokens x
    value heads on this GPU), the longest sequence ``longest`` tokens: the bytes its kernels move
    (``gated_delta_bytes``) at the GPU family's fitted rates for them, plus the state passes that
    walk a sequence's chunks one after another, one forward and two backward (the recomputed
    forward pass and chunk_gated_delta_rule_bwd_dhu), at the fitted time per chunk; each bound
    below by the rule's FLOPs at the sustained tensor rate. Fitted (scripts/fit_gdn.py) on FLA
    0.5.1's published H200 timings (measurements/published/flashqla-gdn); a family without the
    fit moves the bytes at its streaming rate and pays no chain."""
    e = efficiency(gpu)
    fwd_b, bwd_b = gated_delta_bytes(m.linear_k_dim, m.linear_v_dim, a)
    fwd_f, bwd_f = gated_delta_flops(m)
    chunks = math.ceil(longest / GDN_CHUNK)
    rate_f = gpu.hbm_bytes_per_s * (e.gdn_hbm_fwd or e.hbm)
    rate_b = gpu.hbm_bytes_per_s * (e.gdn_hbm_bwd or e.hbm)
    peak = gpu.peak(dtype) * e.sustained
    fwd = max(head_tokens * fwd_b / rate_f + chunks * e.gdn_chunk_fwd_s, head_tokens * fwd_f / peak)
    bwd = max(head_tokens * bwd_b / rate_b + 2 * chunks * e.gdn_chunk_bwd_s, head_tokens * bwd_f / peak)
    return fwd + 6 * e.kernel_overhead_s, bwd + 8 * e.kernel_overhead_s


def ssd_bytes(m: ModelSpec, a: float) -> tuple[float, float]:
    """(forward, backward) bytes per token and head that mamba_ssm's chunked SSD kernels move
    (mamba_ssm/ops/triton/ssd_combined.py, _mamba_chunk_scan_combined_fwd and _bwd), kernel by
    kernel, each reading its inputs and writing its outputs once: x (P per head) and the output in
    ``a``; B and C (N per group, a head's share of its group); dt, its cumulated decay and the
    per-chunk states (N x P every chunk of Q tokens) in fp32; C B^T (Q per group) in fp32. The
    backward recomputes the states and C B^T, passes the states' gradients back chunk to chunk,
    and writes dx, dB, dC and ddt."""
    n, p, q = m.linear_k_dim, m.linear_v_dim, m.linear_chunk
    g = m.linear_k_heads / m.linear_v_heads  # a head's share of its group's B, C and C B^T
    st = FP32 * n * p / q  # one chunk state per Q tokens
    bc, cb = a * n * g, FP32 * q * g
    fwd = [
        3 * FP32,  # _chunk_cumsum_fwd: dt -> dt (softplus'd) and dA_cumsum
        bc + a * p + 2 * FP32 + st,  # _chunk_state_fwd: B, x, dt, dA -> states
        2 * st,  # _state_passing_fwd
        2 * bc + cb,  # _bmm_chunk_fwd: C, B -> C B^T
        cb + a * p + 2 * FP32 + bc + st + a * p,  # _chunk_scan_fwd: -> out
    ]
    bwd = [
        *fwd[1:4],  # the states and C B^T recomputed
        bc + a * p + st,  # _chunk_scan_bwd_dstates: C, dout -> dstates
        2 * st,  # _state_passing_bwd
        a * p + cb + a * p + st + bc + 2 * FP32 + a * p + FP32,  # _chunk_scan_chunk_state_bwd_dx: -> dx, ddt
        2 * a * p + 2 * bc,  # _bmm_chunk_bwd over the chunk: -> d(C B^T) into dC, dB
        a * p + st + FP32 + bc,  # _chunk_state_bwd_db: -> dB
        st + a * p + bc + bc,  # _chunk_scan_bwd_dC: -> dC
        3 * FP32,  # _chunk_cumsum_bwd
    ]
    return sum(fwd), sum(bwd)


def ssd_times(m: ModelSpec, gpu: GPUSpec, head_tokens: float, a: float, dtype: str) -> tuple[float, float]:
    """(forward, backward) seconds of Mamba-2's chunked scan over ``head_tokens`` (tokens x heads on
    this GPU): the bytes its kernels move (``ssd_bytes``) at the streaming rate, or its FLOPs
    (flops.ssd_flops_per_token; backward twice the forward's products, plus the recomputed states
    and C B^T) at the sustained tensor rate, whichever binds. No published rate calibrates it
    (validate.uncalibrated_features)."""
    e = efficiency(gpu)
    fwd_b, bwd_b = ssd_bytes(m, a)
    n, p, q = m.linear_k_dim, m.linear_v_dim, m.linear_chunk
    g = m.linear_k_heads / m.linear_v_heads
    fwd_f = ssd_flops_per_token(m) / m.linear_v_heads
    bwd_f = 2 * fwd_f + 2 * q * n * g + 2 * n * p + 2 * n * p / q
    peak = gpu.peak(dtype) * e.sustained
    fwd = max(memory_time(gpu, head_tokens * fwd_b, 5), head_tokens * fwd_f / peak)
    bwd = max(memory_time(gpu, head_tokens * bwd_b, 10), head_tokens * bwd_f / peak)
    return fwd, bwd


def linear_scan_times(
    m: ModelSpec, gpu: GPUSpec, head_tokens: float, longest: int, a: float, dtype: str
) -> tuple[float, float]:
    """(forward, backward) seconds of a linear-attention layer's chunked scan over ``head_tokens``
    (tokens x heads on this GPU), the longest sequence ``longest`` tokens: Mamba-2's SSD kernels
    (``ssd_times``), else FLA's chunked delta rule (``gated_delta_times``, Kimi Delta Attention's
    kernels timed as Gated DeltaNet's). Training and serving's prefill both read it."""
    if m.linear_kind == "mamba2":
        return ssd_times(m, gpu, head_tokens, a, dtype)
    return gated_delta_times(m, gpu, head_tokens, longest, a, dtype)


def _linear_attention(m: ModelSpec, gpu: GPUSpec, s: LayerShape, out: OpTimes) -> None:
    """A linear-attention layer's token mixing on this GPU (its projections are GEMMs above): the
    causal depthwise conv with SiLU over q, k, v (a read and a write each way; backward reads the
    gradient too), q and k L2-normalised, the gates (softplus, sigmoid: per head), the chunked
    delta rule at HBM speed or its FLOPs at the sustained tensor rate, whichever binds
    (``gated_delta_bytes``), and the gated RMSNorm norm(o) x SiLU(z) before the output projection.
    Heads split over TP; Mamba-2 has neither the q/k norms nor separate gate kernels. The scan's
    time: ``linear_scan_times``; no published training run checks the whole layer: a plan with
    linear attention says so (validate.uncalibrated_features)."""
    a, T, tp = s.act_bytes, s.tokens, s.tp
    kd = m.linear_k_heads * m.linear_k_dim / tp
    vd = m.linear_v_heads * m.linear_v_dim / tp
    heads = m.linear_v_heads / tp
    conv = 2 * kd + vd
    out.add("conv", fwd=memory_time(gpu, 2 * a * T * conv), b=memory_time(gpu, 3 * a * T * conv, 2))
    if m.linear_kind != "mamba2":  # Mamba-2: no q/k norm; dt's softplus runs inside the scan's cumsum kernel
        out.add("norm", fwd=memory_time(gpu, 2 * a * T * 2 * kd, 2), b=memory_time(gpu, 3 * a * T * 2 * kd, 2))
        # the decay's softplus/exp and beta's sigmoid: per head (Gated DeltaNet) or per channel (KDA)
        width = kd if m.linear_kind == "kda" else heads
        out.add("gates", fwd=memory_time(gpu, 4 * FP32 * T * width, 2), b=memory_time(gpu, 6 * FP32 * T * width, 2))
    fwd, bwd = linear_scan_times(m, gpu, T * heads, s.seq, a, high_precision(s.dtype))
    out.add("linear_attention", fwd=fwd, b=bwd, core=True)
    out.add("norm", fwd=memory_time(gpu, 3 * a * T * vd), b=memory_time(gpu, 5 * a * T * vd))


@functools.lru_cache(maxsize=4096)  # keyed on every argument (GPUSpec hashes its efficiency)
def layer_times(m: ModelSpec, gpu: GPUSpec, shape: LayerShape, moe: bool, linear: bool = False) -> OpTimes:
    """Compute and memory time of one transformer block of a kind (``ModelSpec.layer_kinds``; no
    communication)."""
    s = shape
    T, tp, a = s.tokens, s.tp, s.act_bytes
    h = m.hidden_size
    out = OpTimes()
    # GEMMs against weights: forward (T x in) @ (in x out); backward dX = dY @ W and dW = dY^T @ X
    routed_tokens = T * m.experts_per_token * s.ep / m.num_experts * s.expert_imbalance if moe else 0
    etp = tp if s.etp is None else s.etp
    if moe and etp != tp:
        # MoE parallel folding: each rank routes its 1/tp share of the tokens (sequence parallel)
        # and gathers etp shares over the expert TP group (Megatron's MoEAlltoAllTokenDispatcher,
        # token_dispatcher.py dispatch_postprocess): T/tp x etp tokens' copies per expert-TP rank
        routed_tokens = routed_tokens * etp / tp
    kept, saved_mm = op_sac_kept(m, moe, linear), 0.0  # per-op SAC: the matmul outputs it keeps, their forwards
    for t in layer_tensors(m, moe, linear):
        if not t.matmul or len(t.shape) < 2:
            continue
        experts, n_out, n_in = _local_gemm(t, tp, s.ep, etp)
        rows = routed_tokens if t.expert else T
        if rows <= 0:
            continue
        kind = "gemm"
        mods = t.recompute_modules
        # the MoE router stays in high precision (Megatron's TopKRouter is not a TE module)
        d = high_precision(s.dtype) if t.name.endswith("router") else s.dtype
        # TransformerEngine's GroupedLinear launches one GEMM (and one quantization) per local expert
        # on 4 compute streams: each stream pays the kernel gap once per kernel it runs, where the
        # batched GEMM below pays it once (moe_host.te_stream_chain); eager frameworks' grouped
        # GEMM is one kernel
        gap = (te_stream_chain(experts) - 1) * efficiency(gpu).kernel_overhead_s if t.expert and not s.eager else 0.0
        # routed experts' row counts differ expert to expert: each GEMM's last row tile is part
        # filled (kernels.row_tiles); the weight gradient reduces over the rows, so its tiles do not
        ragged = t.expert
        fwd_g = gemm_time(gpu, d, rows, n_out, n_in, experts, ragged) + gap
        b_g = gemm_time(gpu, d, rows, n_in, n_out, experts, ragged) + gap
        w_g = gemm_time(gpu, d, n_out, n_in, rows, experts) + gap
        out.add(kind, fwd=fwd_g, b=b_g, w=w_g, modules=mods)
        out.gemms[t.name] = (fwd_g, b_g, w_g)
        if t.expert:  # the routed-expert loop's GPU work (estimate/moe_host.py)
            out.credit("expert_loop", fwd_g)
        else:
            saved_mm += fwd_g * kept[t.name]
        if d in LOW_PRECISION:
            # per-tensor FP8 on Blackwell writes no transpose; block-scaled formats write both
            # scalings (fp8_cast_times, ``copies``)
            copies = 1 if d == "fp8" and gpu.fp8_any_layout else 2
            fwd_c, bwd_c = fp8_cast_times(
                gpu, rows * n_in * experts, rows * n_out * experts, a, dtype_bytes(d), s.fp8_current, copies
            )
            cast_gap = gap * (3 if s.fp8_current else 1)  # kernels per quantization (fp8_cast_times)
            # block-scaled formats: the scale-factor swizzle before each GEMM (kernels.scale_swizzle_times)
            fwd_z, bwd_z = scale_swizzle_times(gpu, d, rows, n_in, n_out, experts)
            fwd_c, bwd_c = fwd_c + fwd_z, bwd_c + bwd_z
            out.add("fp8_cast", fwd=fwd_c + cast_gap, b=bwd_c + cast_gap, modules=mods)
            if t.expert:
                out.credit("expert_loop", fwd_c + cast_gap)

    # FP8 recipes run the attention core in BF16 (TransformerEngine's FP8 dot-product attention is
    # opt-in, fp8_dpa=False; torchao converts only nn.Linear)
    attn_dtype = high_precision(s.dtype)
    heads = m.num_heads // tp
    kv_heads = max(1, m.num_kv_heads // tp) if not m.is_mla else heads
    window = m.sliding_window if m.num_sliding_layers else None
    # attention core: queries on this GPU (seq/cp of each sequence) against the whole sequence
    if linear:
        _linear_attention(m, gpu, s, out)
    elif s.attention == "flash":
        # per layer kind, its share of the layers, the keys a query block walks (the kernel's
        # ramp: a sliding-window or chunked layer's kernel runs at the rate of its window, a
        # full layer's at the sequence's), the mean context its FLOPs cover and its mask's window
        kinds: list[tuple[float, int, float, int | None, bool]] = [
            (1.0, s.seq, mean_context(s.seq, None, True, document=s.document), None, False)
        ]
        # per head and key: the query/key and value widths. The model FLOPs that MFU counts keep
        # these, the architecture's unabsorbed form (flops.attention_flops_per_token)
        dims = m.qk_head_dim + m.v_dim
        if m.index_topk and not s.eager:
            # DSA: a sparse MLA kernel (FlashMLA's) walks the index_topk keys the indexer picked, in
            # MLA's MQA mode over the latent (flops.mla_absorbed_width: 1,088 where DeepSeek-V3's
            # unabsorbed form does 320); transformers' eager and SDPA paths mask a dense, unabsorbed
            # attention instead (DeepseekV32Indexer)
            if m.is_mla:
                dims = mla_absorbed_width(m)
            kinds = [
                (
                    1.0,
                    min(s.seq, m.index_topk),
                    mean_context(s.seq, m.index_topk, True, document=s.document),
                    m.index_topk,
                    False,
                )
            ]
        if m.num_sliding_layers:
            frac = m.num_sliding_layers / m.num_attention_layers
            kinds = [
                (1.0 - frac, *kinds[0][1:]),
                (
                    frac,
                    min(s.seq, window or s.seq),
                    mean_context(s.seq, window, True, m.attention_chunked, s.document),
                    window,
                    m.attention_chunked,
                ),
            ]
        per_ctx = 2.0 * s.micro_batch * heads * dims * s.seq / s.cp
        fwd = bwd = 0.0
        for share, span, ctx, mask_window, chunked in kinds:
            if share > 0:
                # ring attention (p2p) runs one kernel per step on a chunk of s / cp keys; the
                # all-gather's local query chunks walk the gathered keys, and the all-to-all's
                # kernel the whole sequence on heads / cp: both ramp as one kernel over the sequence.
                # Under a document mask the kernel skips the blocks outside a query's document
                # (varlen / block-sparse kernels): it walks at most the document
                kernel_span = span / s.cp if s.cp_comm == "p2p" else span
                if s.document:
                    kernel_span = min(kernel_span, s.document)
                f, b = flash_time(gpu, attn_dtype, per_ctx * ctx, kernel_span, s.attention_kernel, m.qk_head_dim)
                # the sequence-split exchanges wait on the busiest rank's keys (the a2a's head split
                # gives every rank the same work)
                if s.cp > 1 and s.cp_comm != "a2a":
                    imbalance = cp_attention_imbalance(s.seq, s.cp, mask_window, s.cp_balanced, chunked, s.document)
                    f, b = f * imbalance, b * imbalance
                fwd, bwd = fwd + share * f, bwd + share * b
        out.add("attention", fwd=fwd, b=bwd, core=True)
        if s.eager and s.cp > 1 and s.cp_comm == "p2p":
            # PyTorch's ring attention merges each step's output and gradients in fp32 eager ops
            # (torch_ring.py); its SDPA sees K and V repeated to every query head (torchtitan's and
            # transformers' repeat_kv)
            rows = s.micro_batch * heads * s.seq / s.cp
            f_b, f_k, b_b, b_k = torch_ring_bytes(
                rows * m.qk_head_dim, rows * (m.qk_head_dim + m.v_dim), rows * m.v_dim, dtype_bytes(attn_dtype), s.cp
            )
            out.add("cp_merge", fwd=eager_memory_time(gpu, f_b, f_k), b=eager_memory_time(gpu, b_b, b_k), core=True)
    else:
        bh = s.micro_batch * heads
        q, keys = s.seq // s.cp, s.seq
        scores = bh * q * keys
        d = attn_dtype
        fwd = gemm_time(gpu, d, q, keys, m.qk_head_dim, bh) + gemm_time(gpu, d, q, m.v_dim, keys, bh)
        bwd = (
            gemm_time(gpu, d, q, m.qk_head_dim, keys, bh)
            + gemm_time(gpu, d, keys, m.qk_head_dim, q, bh)
            + gemm_time(gpu, d, q, keys, m.v_dim, bh)
            + gemm_time(gpu, d, keys, m.v_dim, q, bh)
        )
        out.add("attention", fwd=fwd, b=bwd, core=True)
        # softmax reads the scores and writes probabilities; dropout adds a pass and a 1-byte mask
        attn_drop = m.attention_dropout > 0
        sm_f = scores * (2 * a + ((2 * a + 1) if attn_drop else 0))
        sm_b = scores * (3 * a + ((2 * a + 1) if attn_drop else 0))
        out.add(
            "softmax",
            fwd=memory_time(gpu, sm_f, 2 if attn_drop else 1),
            b=memory_time(gpu, sm_b, 2 if attn_drop else 1),
            core=True,
        )
    if m.index_heads:
        # DSA's indexer scores every earlier key (flops.indexer_flops_per_token): an MQA-shaped QK^T
        # (index_heads queries, one key head) without AV, timed as an attention kernel of its head
        # dim over the whole sequence; its heads are replicated over TP. Its backward serves its own
        # loss (Megatron-Core's FusedDSAIndexerLoss); transformers runs it under no_grad
        per_ctx_idx = s.micro_batch * indexer_flops_per_key(m) * s.seq / s.cp
        ctx_idx = mean_context(s.seq, None, True)
        f_idx, b_idx = flash_time(
            gpu, attn_dtype, per_ctx_idx * ctx_idx, s.seq / s.cp, s.attention_kernel, m.index_head_dim
        )
        out.add("attention", fwd=f_idx, b=0.0 if s.eager else b_idx)

    # elementwise work on the residual stream: sequence-parallel regions hold T/tp tokens
    t_res = T / tp if s.sp else T
    r = FP32 if s.autocast else a  # the residual stream's bytes per element
    norms = m.pre_norms_per_layer + m.post_norms_per_layer
    # torch.compile fuses each norm (its upcast, reduction and scaling) into one kernel each way, as
    # the fused profile's norm kernels are: what separates the eager profile's elementwise work
    pointwise_eager = s.eager and not s.compiled
    if pointwise_eager:
        nf, nb, kf, kb = eager_norm_bytes(m.norm, r)
    else:
        nf, nb, kf, kb = 2 * a, 3 * a, 1, 1
    norm_f = memory_time(gpu, norms * nf * t_res * h, norms * kf)
    out.add("norm", fwd=norm_f, b=memory_time(gpu, norms * nb * t_res * h, norms * kb))
    one_norm = norm_f / max(1, norms)
    # norms that are modules of their own (an MoE layer's pre-MLP norm, the input norm before MLA)
    # and the one TE fuses into a dense MLP (LayerNormMLP): what "layernorm" and "mlp" rerun
    own = (1 if moe else 0) + (1 if m.is_mla else 0)
    out.credit("layernorm", own * one_norm)
    if not moe:
        out.credit("mlp", one_norm)
    # RMSNorm over every query and key head (Qwen3, Gemma 3), on the projections' bf16 output
    if m.qk_norm and not linear:
        qk_width = (heads + kv_heads) * m.head_dim
        qf, qb, qkf, qkb = eager_norm_bytes(m.norm, a) if pointwise_eager else (2 * a, 3 * a, 1, 1)
        out.add(
            "norm",
            fwd=memory_time(gpu, qf * T * qk_width, 2 * qkf),
            b=memory_time(gpu, qb * T * qk_width, 2 * qkb),
        )
    adds = 1 if m.parallel_attn else 2
    drop = 1 if m.dropout > 0 else 0
    if s.autocast:
        # fp32 stream + bf16 branch output -> fp32; the backward casts each branch's gradient to bf16
        res_f, res_b = 2 * FP32 + a + drop, FP32 + a
    else:
        res_f = res_b = 3 * a + drop
    out.add(
        "residual",
        fwd=memory_time(gpu, adds * res_f * t_res * h, adds),
        b=memory_time(gpu, adds * res_b * t_res * h, adds),
    )
    if m.attn_output_gate and not linear:
        # sigmoid(gate) x the attention output (Qwen3-Next): reads both, writes one; the backward
        # reads them and the gradient and writes two
        o = T * heads * m.v_dim
        out.add("gate", fwd=memory_time(gpu, 3 * a * o), b=memory_time(gpu, 5 * a * o))
    if m.rotary and not linear:
        # MLA's rotary runs inside the up-projection's checkpoint (recompute module "mla_up_proj")
        rope_mods = ("mla_up_proj",) if m.is_mla else ()
        qk = (
            (heads * m.qk_head_dim + kv_heads * (m.qk_rope_head_dim or m.head_dim))
            if not m.is_mla
            else heads * m.qk_rope_head_dim + m.qk_rope_head_dim
        )
        if pointwise_eager:
            # transformers' apply_rotary_pos_emb: q * cos, rotate_half (neg of one half, cat),
            # * sin, add: 10 a per element forward; backward the two products' gradients, neg,
            # two slice_backward fills and two sums: 14 a. Under autocast cos and sin are fp32, so
            # the products and the sum are fp32 and SDPA casts q and k back to bf16: 6 a + 24
            # forward, 13 a + 28 backward (each gradient cast back to q's dtype)
            rf, rb, rkf, rkb = (6 * a + 24, 13 * a + 28, 6, 9) if s.autocast else (10 * a, 14 * a, 5, 7)
            out.add(
                "rotary",
                fwd=memory_time(gpu, rf * T * qk, 2 * rkf),
                b=memory_time(gpu, rb * T * qk, 2 * rkb),
                modules=rope_mods,
            )
        elif m.rope_attention_factor != 1.0 and not s.eager:
            # YaRN with an attention factor: Megatron rotates q and k in unfused torch ops
            # (unfused_ops.yarn_rope_passes), one call each
            (yf, ykf), (yb, ykb) = yarn_rope_passes(a)
            out.add(
                "rotary",
                fwd=eager_memory_time(gpu, yf * T * qk, 2 * ykf),
                b=eager_memory_time(gpu, yb * T * qk, 2 * ykb),
                modules=rope_mods,
            )
        else:
            out.add(
                "rotary",
                fwd=memory_time(gpu, 2 * a * T * qk, 2),
                b=memory_time(gpu, 2 * a * T * qk, 2),
                modules=rope_mods,
            )
    if s.eager and s.attention == "flash" and not linear:
        # attn_output.transpose(1, 2).contiguous() before the output projection, and its gradient
        o = T * heads * m.v_dim
        out.add("transpose", fwd=memory_time(gpu, 2 * a * o), b=memory_time(gpu, 2 * a * o))
    # MLP activation: GeLU reads and writes ffn; SwiGLU reads 2 ffn and writes one; eager SwiGLU is
    # act_fn(gate) * up, two kernels forward (5 a) and three backward (9 a)
    width = (m.moe_ffn_size * m.experts_per_token + m.shared_expert_ffn_size) if moe else m.ffn_size
    f_local = T * width / tp
    if m.gated_mlp:
        rw, kernels = ((5, 9), (2, 3)) if pointwise_eager else ((3, 5), (1, 1))
    else:
        rw, kernels = (2, 3), (1, 1)
    act_f = memory_time(gpu, rw[0] * a * f_local, kernels[0])
    out.add("activation", fwd=act_f, b=memory_time(gpu, rw[1] * a * f_local, kernels[1]))
    if moe and m.glu_clamp is not None and not s.eager and not s.te_op_fuser:
        # Megatron clamps the experts' gate and linear halves in eager ops before its fused
        # activation (unfused_ops.glu_clamp_passes); TE's op fuser clamps inside its kernel
        (cf, ckf), (cb, ckb) = glu_clamp_passes(a)
        routed_out = T * m.moe_ffn_size * m.experts_per_token / tp
        clamp_f = eager_memory_time(gpu, cf * routed_out, ckf)
        out.add("activation", fwd=clamp_f, b=eager_memory_time(gpu, cb * routed_out, ckb), modules=("moe_act", "moe"))
        out.credit("expert_loop", clamp_f)
    if moe:  # the experts' and the shared experts' parts of that pass
        routed_width = m.moe_ffn_size * m.experts_per_token
        for mod, part in (("moe_act", routed_width), ("shared_experts", m.shared_expert_ffn_size)):
            out.credit(mod, act_f * part / width)
        out.credit("expert_loop", act_f * routed_width / width)
        out.credit("moe", act_f)
    else:
        out.credit("mlp", act_f)
    if s.autocast:
        # torch.autocast casts each GEMM's fp32 weight to bf16 once per forward (its weight cache
        # lasts one autocast region: again in a full recompute) and each fp32 input from the
        # residual stream per GEMM (activations are not cached); the backward casts the weight
        # gradients and those inputs' gradients back to fp32 and sums the input gradients
        weights = sum(math.prod(_local_gemm(t, tp, s.ep, etp)) for t in layer_tensors(m, moe, linear) if t.matmul)
        readers = autocast_input_casts(m, moe)
        cast = FP32 + a
        out.add(
            "autocast_cast",
            fwd=memory_time(gpu, cast * (weights + readers * t_res * h), 1 + readers),
            b=memory_time(gpu, cast * readers * t_res * h + (readers - 1) * 3 * FP32 * t_res * h, 2 * readers),
            w=memory_time(gpu, cast * weights, 1),
        )
    if moe:
        # permute tokens to experts and back (read and write each routed copy), and the router
        # softmax; with folding a rank holds T/tp x etp tokens' copies after the expert-TP gather
        routed: float = T * m.experts_per_token * h * a
        if etp != tp:
            routed = routed * etp / tp
        out.add("moe_permute", fwd=memory_time(gpu, 4 * routed, 2), b=memory_time(gpu, 4 * routed, 2), modules=("moe",))
        local = max(1, m.num_experts // s.ep)
        fwd_b, kf, bwd_b, kb = dispatcher_copy_passes(s.moe_dispatcher, local, s.dtype)
        if fwd_b:  # over the copies this GPU received (the busiest's under imbalance, etp's gather):
            # ``routed_tokens`` is one local expert's rows
            rows_h = routed_tokens * local * h * a
            out.add(
                "moe_permute",
                fwd=memory_time(gpu, fwd_b * rows_h, kf),
                b=memory_time(gpu, bwd_b * rows_h, kb),
                modules=("moe",),
            )
        if m.mlp_bias and not s.eager and not s.te_op_fuser:
            # Megatron adds biased experts' fc2 bias outside the GEMM, weighted by each copy's
            # routing prob, in the probs' type (``expert_bias_passes``); TE's op fuser keeps it in the GEMM
            rows_h = routed_tokens * local * h
            fp32_probs = s.moe_dispatcher in ("flex", "deepep", "hybridep")  # they upcast the probs
            (bf, kf), (bb, kb) = expert_bias_passes(local, s.full_cuda_graph, fp32_probs)
            out.add(
                "expert_bias",
                fwd=eager_memory_time(gpu, bf * rows_h, kf),  # torch ops in a Python loop
                b=eager_memory_time(gpu, bb * rows_h, kb),
                modules=("moe",),
            )
    # torchtitan's per-op SAC (activations.per_op_sac_saved) re-runs the block's forward but for the
    # attention kernel and the matmul outputs it kept: the other matmuls and every elementwise pass
    out.credit("op_sac", out.fwd - out.attn_core - saved_mm)
    return out
