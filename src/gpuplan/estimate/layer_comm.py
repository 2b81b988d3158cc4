"""Communication of one transformer block and one micro-batch on each parallel dimension, and
what overlap hides of it.

Tensor parallelism: with sequence parallelism an all-gather in and a reduce-scatter out of each
block, forward and mirrored backward (Korthikanti et al. 2022, section 4.2.2), Megatron gathering
the input once more for the weight gradient; without it one all-reduce per block each way (Shoeybi
et al. 2019, the f and g operators). Overlap (TransformerEngine's userbuffers, PyTorch's async TP)
hides each behind the GEMM it feeds or drains (``tp_partners``), never the attention core.
Context parallelism by its exchange (TrainingConfig.cp_comm): ring attention's KV hops, cp-1
steps each hidden behind one chunk's attention (Liu et al. 2023); the all-gather of K,V and the
reduce-scatter of their gradients (Llama 3), or the all-to-alls of DeepSpeed-Ulysses, exposed.
Experts: the all-to-all dispatcher's collectives
(``_moe_dispatch_comm``). FSDP / ZeRO-3: the layer's weights gathered for forward and backward,
its gradients reduce-scattered, prefetched behind the neighbouring layer. ``CommLine`` records a
dimension's collectives over a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuplan.estimate.comm import Group, bytes_sent_per_rank, collective_time, efficiency
from gpuplan.estimate.compute import LayerShape, OpTimes
from gpuplan.estimate.ep_dispatch import DEDUPLICATING, flex_time
from gpuplan.estimate.params import layer_tensors
from gpuplan.estimate.stage_params import _per_gpu
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


@dataclass
class CommLine:
    """One dimension's communication over a step, on the critical stage."""

    bytes_per_gpu: float = 0.0  # bytes each GPU sends
    time: float = 0.0  # seconds if nothing overlapped
    exposed: float = 0.0  # seconds on the critical path
    collectives: dict[str, float] = field(default_factory=dict)  # kind -> bytes sent per GPU
    # hidden seconds of the transfers that state the SMs they hold, and those seconds x SMs
    # (``overlap_contention``; the rest hold NCCL's channels)
    stated_hidden: float = 0.0
    sm_hidden: float = 0.0

    @property
    def hidden(self) -> float:
        # exposed is at most time; a difference of rounding (-1e-17 s) is no negative time
        return max(0.0, self.time - self.exposed)

    def add(
        self, kind: str, size: float, group: Group, gpu: GPUSpec, count: float, exposed: float | None = None
    ) -> float:
        """Record ``count`` collectives of ``size`` bytes; returns the seconds of one."""
        t = collective_time(kind, size, group, gpu)
        self.record(kind, bytes_sent_per_rank(kind, size, group.size), t, count, exposed)
        return t

    def record(
        self,
        kind: str,
        sent: float,
        seconds: float,
        count: float,
        exposed: float | None = None,
        sms: int | None = None,
    ) -> None:
        """Record ``count`` transfers of ``sent`` bytes per GPU taking ``seconds`` each; ``sms``:
        the SMs each holds while it runs (None: NCCL's channels)."""
        self.bytes_per_gpu += sent * count
        self.collectives[kind] = self.collectives.get(kind, 0.0) + sent * count
        self.time += seconds * count
        exposed = (seconds * count) if exposed is None else exposed
        self.exposed += exposed
        if sms is not None:
            hidden = max(0.0, seconds * count - exposed)
            self.stated_hidden += hidden
            self.sm_hidden += hidden * sms


# SMs each TransformerEngine userbuffers overlap holds (transformer_engine/pytorch/module/base.py,
# initialize_ub get_default_config, unchanged since 5ee981757, 2024-07): the all-gathers feeding a
# GEMM (qkv_fprop, fc1_fprop and, backward, proj_dgrad, fc2_dgrad) are "ring_exchange" on the copy
# engine with num_sm 1; the reduce-scatters after a GEMM (proj_fprop, fc2_fprop) are "pipeline"
# and the backward's gather again and dgrad reduce-scatter (qkv/fc1_dgrad, qkv/fc1_wgrad) "bulk",
# both num_sm 16. Megatron runs them only with sequence parallelism (megatron/training/arguments.py:
# "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled")
UB_SMS = {"all-gather": 1, "reduce-scatter": 16, "bulk": 16}
# the collective a forward one's backward runs
TRANSPOSE = {"all-gather": "reduce-scatter", "reduce-scatter": "all-gather", "all-reduce": "all-reduce"}


def layer_comm(
    m: ModelSpec,
    cfg: TrainingConfig,
    plan: ParallelPlan,
    gpu: GPUSpec,
    groups: dict[str, Group],
    shape: LayerShape,
    ops: OpTimes,
    moe: bool,
    comm: dict[str, CommLine],
    count: float,
    dualpipe: bool,
    linear: bool = False,
) -> dict[str, float]:
    """Exposed communication seconds of one layer and micro-batch by dimension (forward, backward
    and recompute together); records ``count`` copies (layers x micro-batches) into ``comm``.
    A linear-attention layer (``linear``) communicates as a softmax one over TP: its heads split,
    its input and output projections a column- and a row-parallel GEMM (Megatron-Core GatedDeltaNet)."""
    a, h, T = cfg.activation_bytes, m.hidden_size, shape.tokens
    out: dict[str, float] = {}
    full = cfg.recompute == "full"  # full recompute re-runs the forward's collectives
    if plan.tp > 1:
        g = groups["tp"]
        blocks = 1 if m.parallel_attn else 2  # attention and MLP each start and end with a collective
        if moe and not m.shared_expert_ffn_size:
            # the MoE block takes the attention's sequence-parallel tokens as they are (the
            # dispatcher routes each rank's 1/tp share; its gather runs over the expert TP group,
            # below); only a shared expert, a TP-split MLP, gathers over tp (Megatron
            # shared_experts.py, pre_forward_comm / post_forward_comm)
            blocks = 1
        size: float = T * h * a
        if shape.sp:  # all-gather in, reduce-scatter out; the backward mirrors them
            per = [("all-gather", size), ("reduce-scatter", size)] * blocks
        else:  # one all-reduce per block forward (g operator) and one backward (f operator)
            per = [("all-reduce", size)] * blocks
        # selective recompute of the MLP (or the MoE layer) reruns that block's collectives
        rerun_mlp = ("moe" if moe else "mlp") in cfg.recomputed and blocks == 2
        partners = tp_partners(m, moe, ops, shape.sp)[: len(per)]
        if len(partners) != len(per):  # no plain GEMM pairs (MLA): a share of the layer each
            partners = [(ops.fwd / len(per), ops.bwd_input / len(per), ops.bwd_weight / len(per))] * len(per)
        # Megatron and TransformerEngine run a column-parallel GEMM's backward collectives async
        # beside its own GEMMs, overlap or not (megatron/core/tensor_parallel/layers.py,
        # LinearWithGradAccumulationAndAsyncCommunication.backward: "async_op=True" on each): with
        # sequence parallelism they keep only the local share of the input and gather it again
        # for the weight gradient while the dgrad GEMM runs (Korthikanti et al. 2022, section
        # 4.2.2), then reduce-scatter the dgrad while the wgrad GEMM runs; without it the dgrad's
        # all-reduce runs beside the wgrad GEMM. PyTorch's DTensor TP keeps the gathered input.
        async_bwd = cfg.profile == "fused" if cfg.tp_async_backward is None else cfg.tp_async_backward
        ub = cfg.tp_overlap and cfg.profile == "fused" and shape.sp  # TransformerEngine's userbuffers: their SMs
        op_sac = "op_sac" in cfg.recomputed
        exposed = 0.0
        for i, (kind, sz) in enumerate(per):
            pf, pb, pw = partners[i]
            # torchtitan's per-op SAC saves the reduce-scatters' outputs and re-runs every other
            # collective in the block's recompute (its _save_list: reduce_scatter_tensor, not
            # all_gather; models/llama3/parallelize_llama.py at 820504e, distributed/
            # activation_checkpoint.py since)
            rerun = full or (rerun_mlp and i >= len(per) // 2) or (op_sac and kind != "reduce-scatter")
            fwd_runs = 2 if rerun else 1
            # with overlap (TransformerEngine userbuffers, PyTorch's async TP) a collective hides
            # behind the GEMM it feeds or drains, forward and backward (``tp_partners``); the
            # backward runs each forward collective's transpose
            t, sent = collective_time(kind, sz, g, gpu), bytes_sent_per_rank(kind, sz, g.size)
            e = fwd_runs * (max(0.0, t - pf) if cfg.tp_overlap else t)
            sms = UB_SMS[kind] if ub else None
            comm["tp"].record(kind, sent, t, count * fwd_runs, exposed=count * e, sms=sms)
            if async_bwd and kind == "all-gather":  # the input gathered again beside the dgrad GEMM
                regather = max(0.0, t - pb)
                comm["tp"].record(kind, sent, t, count, exposed=count * regather, sms=UB_SMS["bulk"] if ub else None)
                e += regather
            back = TRANSPOSE[kind]
            t, sent = collective_time(back, sz, g, gpu), bytes_sent_per_rank(back, sz, g.size)
            if async_bwd and kind != "reduce-scatter":  # the dgrad's reduce-scatter or all-reduce beside wgrad
                e_b, sms = max(0.0, t - pw), (UB_SMS["bulk"] if ub else None)
            else:
                e_b, sms = (max(0.0, t - pb) if cfg.tp_overlap else t), (UB_SMS[back] if ub else None)
            comm["tp"].record(back, sent, t, count, exposed=count * e_b, sms=sms)
            e += e_b
            exposed += e
        out["tp"] = exposed
    if plan.cp > 1 and linear:
        # linear attention under CP (Megatron-Core gated_delta_net/gdn.py a2a_cp_to_hp and
        # a2a_hp_to_cp; ssm/mamba_context_parallel.py for Mamba-2): an all-to-all turns the input
        # projection's output (this rank's tokens) from sequence-split to head-split, the conv and
        # the scan run over the whole sequence on heads / cp, and another returns the gated norm's
        # output; the backward mirrors both. Nothing runs beside them: on the path
        g = groups["cp"]
        e_f = e_b = 0.0
        for width in (m.linear_in_proj_width, m.linear_v_heads * m.linear_v_dim):
            size = T * width / plan.tp * a
            t = collective_time("all-to-all", size, g, gpu)
            comm["cp"].add(
                "all-to-all", size, g, gpu, count * (3 if full else 2), exposed=count * t * (3 if full else 2)
            )
            e_f, e_b = e_f + t, e_b + t
        out["cp"] = (2 if full else 1) * e_f + e_b
    elif plan.cp > 1:
        g = groups["cp"]
        # K and V per token (MLA: its per-head keys and values), and the forward's passes (again in
        # the recompute of the attention core)
        kv = m.num_heads * (m.qk_head_dim + m.v_dim) if m.is_mla else 2 * m.num_kv_heads * m.head_dim
        passes = 2 if full or "core_attn" in cfg.recomputed else 1
        size = T * kv / plan.tp * a  # this rank's K and V
        if cfg.cp_exchange == "all_gather":
            # TransformerEngine's AttnFuncWithCPAndKVAllGather (context_parallel.py): K and V of the
            # whole sequence gathered over the CP group before the local query chunks' kernels,
            # again at the start of the backward, which reduce-scatters dK and dV back; nothing
            # computes while they run (Dubey et al. 2024, the Llama 3 paper, section 3.3.2: "the
            # all-gather communication latency is exposed in the critical path", small under GQA)
            whole = plan.cp * size  # the gathered K and V (the collective's whole buffer)
            t_ag = comm["cp"].add("all-gather", whole, g, gpu, count * (passes + 1))
            t_rs = comm["cp"].add("reduce-scatter", whole, g, gpu, count)
            out["cp"] = (passes + 1) * t_ag + t_rs
        elif cfg.cp_exchange == "a2a":
            # DeepSpeed-Ulysses (Jacobs et al. 2023, section 3.1; TransformerEngine's
            # AttnFuncWithCPAndQKVOA2A): all-to-alls turn Q, K, V from a sequence split into a head
            # split before the kernel and the output back after it; the backward mirrors them (dO
            # in, dQ, dK, dV out). Each rank exchanges (cp - 1) / cp of its tensors with nothing to
            # hide behind: the attention needs them all.
            qkv = size + T * m.num_heads * m.qk_head_dim / plan.tp * a
            o = T * m.num_heads * m.v_dim / plan.tp * a
            t_in = comm["cp"].add("all-to-all", qkv, g, gpu, count * (passes + 1))
            t_out = comm["cp"].add("all-to-all", o, g, gpu, count * (passes + 1))
            out["cp"] = (passes + 1) * (t_in + t_out)
        else:
            # ring attention: cp-1 steps, each sending this rank's K,V chunk while computing on the
            # previous one; the backward also passes dK, dV (Liu et al. 2023; Megatron-Core CP)
            steps = plan.cp - 1
            chunk_f = ops.attn_core / plan.cp
            chunk_b = ops.parts.get("attention", 0.0) / plan.cp - chunk_f
            e_f = steps * max(0.0, collective_time("p2p", size, g, gpu) - chunk_f)
            e_b = steps * max(0.0, collective_time("p2p", 2 * size, g, gpu) - max(0.0, chunk_b))
            comm["cp"].add("p2p", size, g, gpu, count * steps * passes, exposed=count * e_f * passes)
            comm["cp"].add("p2p", 2 * size, g, gpu, count * steps, exposed=count * e_b)
            out["cp"] = passes * e_f + e_b
    if moe and (plan.ep > 1 or plan.expert_tp > 1):
        out["ep"] = _moe_dispatch_comm(m, cfg, plan, gpu, groups, shape, ops, comm, count, dualpipe or cfg.ep_overlap)
    if plan.zero == 3 and groups["dp_cp"] is not None and groups["dp_cp"].size > 1:
        # FSDP: gather the layer's weights for forward and again for backward, reduce-scatter its
        # gradients; prefetch hides them behind the neighbouring layer's compute
        g = groups["dp_cp"]
        w = sum(_per_gpu(t, plan) for t in layer_tensors(m, moe, linear))
        ag = collective_time("all-gather", w * cfg.weight_bytes, g, gpu)
        rs = collective_time("reduce-scatter", w * cfg.grad_bytes, g, gpu)
        e_f = max(0.0, ag - ops.fwd)
        e_b = max(0.0, ag + rs - ops.bwd)
        comm["dp"].add("all-gather", w * cfg.weight_bytes, g, gpu, 2 * count, exposed=count * e_f)
        comm["dp"].add("reduce-scatter", w * cfg.grad_bytes, g, gpu, count, exposed=count * e_b)
        out["dp"] = e_f + e_b
    return out


def tp_partners(m: ModelSpec, moe: bool, ops: OpTimes, sp: bool) -> list[tuple[float, float, float]]:
    """(forward, dgrad, wgrad) seconds of the GEMM each tensor-parallel collective of a block can hide
    behind, in ``layer_comm``'s order; empty where the block's GEMMs are not the plain pairs.

    A TP collective overlaps only the GEMM that consumes or produces its tensor, split into
    chunks that pipeline with the transfer. TransformerEngine's userbuffers (transformer_engine/
    pytorch/module/base.py, initialize_ub: the default methods) overlap the all-gather with the
    column-parallel GEMM it feeds (qkv_fprop, fc1_fprop: ring_exchange), the reduce-scatter with
    the row-parallel GEMM that produces it (proj_fprop, fc2_fprop: pipeline), the output
    gradient's all-gather with the row-parallel dgrad (proj_dgrad, fc2_dgrad), and the input's
    second gather and the dgrad's reduce-scatter with the column-parallel dgrad and wgrad
    (qkv_dgrad, qkv_wgrad: bulk; ``layer_comm``). PyTorch's async TP fuses the same forward and
    output-gradient pairs (``fused_all_gather_matmul``, ``fused_matmul_reduce_scatter``; Wang et
    al. 2023, "Overlap Communication with Dependent Computation via Decomposition in Large Deep
    Learning Models", ASPLOS), the input gradient's reduce-scatter with the column-parallel dgrad.
    The attention core and the elementwise kernels between the two GEMMs hide nothing. Without
    sequence parallelism the block's forward all-reduce follows the row-parallel GEMM and its
    backward one the column-parallel dgrad.
    """
    if m.is_mla:  # MLA's latent projections gather a compressed tensor: no plain pair
        return []
    g = ops.gemms
    # (column-parallel GEMMs, row-parallel GEMMs) each collective pair sits around
    mixer = (
        (("linear_attn.in_proj.weight",), ("linear_attn.out_proj.weight",))  # Gated DeltaNet
        if "linear_attn.in_proj.weight" in g
        else (("attn.qkv.weight",), ("attn.o.weight",))
    )
    pairs: list[tuple[tuple[str, ...], tuple[str, ...]]] = [mixer]
    if not moe:
        pairs.append((("mlp.up.weight",), ("mlp.down.weight",)))
    elif m.shared_expert_ffn_size:
        pairs.append((("moe.shared.up.weight",), ("moe.shared.down.weight",)))
    if any(t not in g for cols, rows in pairs for t in cols + rows):
        return []
    if m.parallel_attn and len(pairs) == 2:  # attention and MLP side by side: one pair around both
        pairs = [(pairs[0][0] + pairs[1][0], pairs[0][1] + pairs[1][1])]
    out: list[tuple[float, float, float]] = []
    for cols, rows in pairs:
        cf, cb, cw = (sum(g[t][i] for t in cols) for i in range(3))
        rf, rb, rw = (sum(g[t][i] for t in rows) for i in range(3))
        out += [(cf, cb, cw), (rf, rb, rw)] if sp else [(rf, cb, cw)]
    return out


def _moe_dispatch_comm(
    m: ModelSpec,
    cfg: TrainingConfig,
    plan: ParallelPlan,
    gpu: GPUSpec,
    groups: dict[str, Group],
    shape: LayerShape,
    ops: OpTimes,
    comm: dict[str, CommLine],
    count: float,
    overlap: bool,
) -> float:
    """Exposed seconds of one MoE layer's dispatch and combine, one micro-batch (forward, backward
    and a recompute's forward); records ``count`` copies into ``comm["ep"]``.

    Megatron's MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py)
    with expert TP etp (tp when unset): each rank permutes the routed copies of its own tokens (the attention's 1/tp
    sequence-parallel share: no collective over the attention TP group), all-to-alls them over
    the EP group (token_dispatch), then all-gathers the received copies over the expert TP group
    (dispatch_postprocess, gather_from_sequence_parallel_region on pg_collection.expt_tp); the
    combine mirrors it: reduce-scatter over the expert TP group (combine_preprocess), all-to-all
    back (token_combine). The backward runs each collective's transpose. All-to-all size: the
    busiest rank's routed copies, T/tp x k x hidden; expert-TP all-gather and reduce-scatter: etp
    such shares (the whole gathered buffer). The flex dispatcher (DeepEP, HybridEP) instead sends a
    token once per destination node or rank, then forwards it over NVLink (``ep_dispatch.py``).
    DualPipe and Megatron's EP overlap run
    one micro-batch's forward chunk beside another's backward chunk, each exchange beside its
    partner computation (``paired_exposure``); the rest is exposed."""
    a, h = cfg.activation_bytes, m.hidden_size
    passes_fwd = 2 if cfg.recompute == "full" or "moe" in cfg.recomputed else 1  # a rerun dispatches again
    tokens = shape.tokens / plan.tp * cfg.expert_imbalance
    local = tokens * m.experts_per_token * h * a
    n = passes_fwd + 1  # dispatch and combine each run once per forward and once in backward
    # (kind, bytes sent per rank, seconds of one, direction): DeepEP and HybridEP send a token once
    # per destination (ep_dispatch.py); the alltoall dispatcher every routed copy. The backward runs
    # each transpose: a combine's backward moves what a dispatch does, and the reverse.
    parts: list[tuple[str, float, float, str]] = []
    g_ep = groups["ep"]
    if g_ep.size > 1 and cfg.moe_dispatcher in DEDUPLICATING:
        for combine in (False, True):
            d = flex_time(
                cfg.moe_dispatcher,
                gpu,
                g_ep,
                tokens,
                h,
                m.num_experts,
                m.experts_per_token,
                a,
                combine,
                m.expert_groups,
                m.expert_groups_per_token,
            )
            parts.append(("combine" if combine else "dispatch", d.logical_bytes, d.seconds, "c" if combine else "d"))
    elif g_ep.size > 1:
        sent = bytes_sent_per_rank("all-to-all", local, g_ep.size)
        t = collective_time("all-to-all", local, g_ep, gpu)
        parts += [("all-to-all", sent, t, "d"), ("all-to-all", sent, t, "c")]
    g_etp = groups["etp"]
    if g_etp.size > 1:
        for kind, way in (("all-gather", "d"), ("reduce-scatter", "c")):
            size = local * plan.expert_tp
            parts.append(
                (kind, bytes_sent_per_rank(kind, size, g_etp.size), collective_time(kind, size, g_etp, gpu), way)
            )
    t_d = sum(t for _, _, t, way in parts if way == "d")
    t_c = sum(t for _, _, t, way in parts if way == "c")
    total = n * (t_d + t_c)
    if overlap:
        # a recompute's rerun dispatches outside the pairing: its exchange stays on the path
        exposed = paired_exposure(ops, t_d, t_c) + (passes_fwd - 1) * (t_d + t_c)
    else:
        exposed = total
    for kind, sent, t, _ in parts:
        share = t * n / total if total else 0.0
        comm["ep"].record(kind, sent, t, count * n, exposed=count * exposed * share)
    return exposed


def paired_exposure(ops: OpTimes, t_dispatch: float, t_combine: float) -> float:
    """Exposed seconds of one MoE layer's exchange (dispatch and combine, forward and backward)
    when one micro-batch's forward runs beside another's backward: Megatron-Core's EP overlap
    (``--overlap-moe-expert-parallel-comm``) and DualPipe (DeepSeek-V3 report, section 3.2.1,
    Fig. 4). Megatron-Core's schedule of one layer pair (megatron/core/models/common/
    model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run, at Megatron-LM c3d44dcf14)::

        comm_stream: combine_bwd       | dispatch_fwd->dispatch_bwd   | combine_fwd
        comp_stream: pre_dispatch_fwd  | mlp_bwd->mlp_bwd_dw->mlp_fwd | pre_dispatch_bwd

    so each exchange hides only behind its partner: the combine's backward behind the attention's
    forward, the dispatch behind the experts' backward, the dispatch's backward behind the experts'
    forward (which waits for the dispatch), the combine behind the attention's backward. A phase
    lasts as long as the longer of its two streams. ``pre_dispatch`` is the layer's forward less
    the MoE block's (``ops.modules["moe"]``: router, permutation, experts); each part's backward is
    taken in proportion to its forward (the layer's backward / forward)."""
    f, b = ops.fwd, ops.bwd
    if f <= 0:
        return 2 * (t_dispatch + t_combine)
    mlp_f = min(f, ops.modules.get("moe", 0.0))
    pre_f = f - mlp_f
    mlp_b, pre_b = mlp_f * b / f, pre_f * b / f
    phases = (
        max(t_dispatch, pre_f)  # the combine's backward moves a dispatch's bytes
        + max(t_dispatch, mlp_b)
        + max(mlp_f, t_combine)  # the dispatch's backward moves a combine's bytes
        + max(t_combine, pre_b)
    )
    # every phase is at least its compute, so this is >= 0 but for rounding (-1e-16 s)
    return max(0.0, phases - (f + b))


def overlap_contention(comm: dict[str, CommLine], gpu: GPUSpec) -> float:
    """Seconds compute loses to the collectives it hides: a running NCCL collective holds one
    thread block per channel, each on its own SM, so the kernels beside it run on the other SMs
    (NCCL's channels; Rashidi et al. 2021, "Enabling Compute-Communication Overlap in Distributed
    Deep Learning Training Platforms", measured overlapped compute slowing by up to 1.4x).
    Overlap is never free: hidden time x (SMs NCCL holds / SMs); a transfer that states its SMs
    (TransformerEngine's userbuffers: ``UB_SMS``) holds those instead."""
    e = efficiency(gpu)
    if not e.comm_sms or not gpu.sm_count:
        return 0.0
    nccl = sum(max(0.0, c.hidden - c.stated_hidden) for c in comm.values()) * min(e.comm_sms, gpu.sm_count)
    return (nccl + sum(c.sm_hidden for c in comm.values())) / gpu.sm_count
