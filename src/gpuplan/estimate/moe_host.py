"""Host time of an MoE layer's expert loop, exposed by the token dispatcher's host synchronisation.

Megatron-Core runs the routed experts as TransformerEngine ``GroupedLinear`` fc1 and fc2
(``TEGroupedMLP``). TransformerEngine 2.9 (Megatron-Bridge v0.2.0 pins ``transformer-engine>=2.9,<2.10``;
v0.3.0 ``<2.13``) issues one cuBLASLt GEMM per local expert: ``nvte_multi_tensor_gemm`` takes the
``multi_stream_cublas_gemm`` path unless ``NVTE_USE_CUTLASS_GROUPED_GEMM`` is set on Hopper
(transformer_engine/common/gemm/cublaslt_gemm.cu at v2.9, lines 1015-1027), and that path loops
``for (int i = 0; i < num_gemms; i++)`` over ``cublas_gemm`` (lines 924-976, the loop at 941-965), which builds the
descriptors and queries ``cublasLtMatmulAlgoGetHeuristic`` for each call (lines 430-437, 722)
before ``cublasLtMatmul`` (line 730). Under FP8 each expert's slice of the input is quantized
separately (``tex.split_quantize(inp_view, m_splits, input_quantizers)``,
transformer_engine/pytorch/module/grouped_linear.py at v2.9, line 127), and in the backward each
expert's slice of the output gradient (lines 302-327). So the host issues, per local expert and
per GroupedLinear: forward one GEMM and one quantization; backward two GEMMs (dgrad, wgrad) and
one quantization. A quantization is one cast kernel, or three under per-tensor current scaling
(amax, scale, cast: ``kernels.fp8_cast_times``); BF16 splits are views (``torch.split``), no kernel.
Weights are quantized once per step (``is_first_microbatch``), not per micro-batch.

While the host runs ahead of the GPU, that host time is hidden behind the kernels already queued.
A host synchronisation empties the GPU's queue: after it the GPU runs only what the host issues
next, so the expert loop that follows costs max(host time, GPU time) and the host time past the
loop's own GPU work is exposed. Where Megatron-Core synchronises in an MoE layer's forward
(``SYNCS``; the backward reuses the forward's split sizes and has none):

* ``alltoall`` dispatcher, dropless: the split sizes go to the host on a side stream and
  ``self.d2h_event.synchronize()`` waits for them before the expert-parallel all-to-all
  (megatron/core/transformer/moe/token_dispatcher.py at 0d8e0714 = Megatron-Bridge v0.2.0's
  3rdparty/Megatron-LM, line 907; sync point set at line 572, or 581 without EP/TP): one;
* ``flex`` dispatcher (DeepEP or HybridEP): the fused dispatch brings the received token counts to
  the host inside the dispatch (megatron/core/transformer/moe/fused_a2a.py at 0d8e0714: DeepEP's
  ``buffer.dispatch``, "the CPU will wait for GPU's signal to arrive", lines 103-123, its counts
  made a CPU tensor at line 134; HybridEP's ``use_host_meta`` D2H of the counts unless the sizes
  are given, lines 357-361), which ``TEGroupedMLP.forward`` then reads as a list for the experts'
  splits (experts.py at 0d8e0714, line 879; at cd4afffa = v0.6.0, line 731): one;
* ``allgather`` dispatcher: ``self.local_map.sum(dim=0).long().cpu()`` (token_dispatcher.py at
  0d8e0714, line 302): one;
* a full-iteration CUDA graph (Megatron-Bridge v0.6.0 perf_recipes, ``_enable_hybridep_full_iteration_*``:
  paged stash with an expert capacity, so no size is read back): none, since a captured graph
  cannot hold a host synchronisation, and the whole step is one graph launch, so the per-expert
  host launches are gone too.

The synchronisation itself costs the GPU one host launch (the queue is empty until the next
kernel is issued) plus the device-to-host copy (one kernel gap). Host seconds per launch:
``HOST_LAUNCH_S``, the one host figure measured here (measurements/h100-sxm-2026-11-23/kernels/
launch.json: 10.0 us per tiny eager kernel launched from Python on the H100 machine's host). A
cuBLASLt call with its heuristic query is at least a launch; no B200 or Grace host has been
measured, so the same figure stands for them. The rest of the layer's host time (attention, router,
permutation) is not counted: it can run ahead of the GPU, so this is a lower bound of the
exposed host time.
"""

from __future__ import annotations

from dataclasses import dataclass

# TransformerEngine runs a GroupedLinear's per-expert GEMMs and quantizations round-robin on this
# many compute streams (transformer_engine/common/util/multi_stream.cpp at v2.9, line 53:
# ``num_compute_streams = 4``; used by cublaslt_gemm.cu line 931 and util/cast.cu line 176)
TE_COMPUTE_STREAMS = 4

HOST_LAUNCH_S = 10.0e-6  # measurements/h100-sxm-2026-11-23/kernels/launch.json (tiny_add_eager)

# host synchronisations in one MoE layer's forward, by token dispatcher (module docstring); the
# names are specs/training.py's MOE_DISPATCHERS ("" there: not stated, no host term)
SYNCS: dict[str, int] = {"alltoall": 1, "flex": 1, "deepep": 1, "hybridep": 1, "allgather": 1}


def te_stream_chain(local_experts: int) -> int:
    """Kernels one compute stream runs back to back for a GroupedLinear's per-expert GEMMs (or
    quantizations): expert i goes to stream i mod 4 (cublaslt_gemm.cu at TE v2.9, lines 941-965),
    so each stream pays the kernel gap ceil(experts / 4) times where one batched kernel pays it
    once (``compute.layer_times`` adds the difference for the fused profile)."""
    return -(-max(1, local_experts) // TE_COMPUTE_STREAMS)


def quantize_launches(precision: str, fp8_current: bool) -> int:
    """Kernels one expert slice's quantization launches: none in 16-bit (``torch.split`` views),
    three under FP8 per-tensor current scaling (amax, scale, cast), else one cast."""
    if precision not in ("fp8", "mxfp8", "nvfp4"):
        return 0
    return 3 if (precision == "fp8" and fp8_current) else 1


def expert_launches(local_experts: int, precision: str, fp8_current: bool) -> tuple[int, int]:
    """(forward, backward) host launches of the routed-expert GroupedLinear fc1 and fc2 for one
    micro-batch: per expert and linear one GEMM and a quantization forward, two GEMMs and a
    quantization backward (module docstring)."""
    q = quantize_launches(precision, fp8_current)
    return 2 * local_experts * (1 + q), 2 * local_experts * (2 + q)


@dataclass(frozen=True)
class MoEHost:
    """Seconds per MoE layer and micro-batch that the expert loop's host time adds to the GPU's."""

    syncs: int
    host_fwd: float
    host_bwd: float
    exposed: float


def moe_host_exposed(
    dispatcher: str,
    full_graph: bool,
    local_experts: int,
    precision: str,
    fp8_current: bool,
    gpu_loop_fwd: float,
    gpu_layer_fwd: float,
    gpu_layer_bwd: float,
    kernel_gap_s: float,
    host_launch_s: float = HOST_LAUNCH_S,
) -> MoEHost:
    """Exposed host seconds of one MoE layer for one micro-batch.

    ``gpu_loop_fwd``: GPU seconds of the forward expert loop (the experts' GEMMs, their casts and
    the activation between fc1 and fc2); ``gpu_layer_fwd`` / ``gpu_layer_bwd``: the whole layer's.
    After a synchronisation the loop costs max(host, GPU), so ``host - gpu_loop_fwd`` is exposed,
    plus the synchronisation (one launch and the copy's kernel gap); with none the host runs ahead
    and only host time past the whole layer's GPU time is. The backward has no synchronisation:
    host time past the layer's backward GPU time is exposed."""
    if not dispatcher or full_graph or local_experts < 1:
        return MoEHost(0, 0.0, 0.0, 0.0)
    n_f, n_b = expert_launches(local_experts, precision, fp8_current)
    host_f, host_b = n_f * host_launch_s, n_b * host_launch_s
    syncs = SYNCS[dispatcher]
    if syncs:
        fwd = max(0.0, host_f - gpu_loop_fwd) + syncs * (host_launch_s + kernel_gap_s)
    else:
        fwd = max(0.0, host_f - gpu_layer_fwd)
    return MoEHost(syncs, host_f, host_b, fwd + max(0.0, host_b - gpu_layer_bwd))
