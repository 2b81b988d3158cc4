"""The copies Megatron-Core's MoE token dispatchers make of the routed tokens a GPU receives,
beyond the permutation on the sending side (``compute.layer_times``' ``moe_permute`` term)."""

from __future__ import annotations

from gpuplan.specs.training import LOW_PRECISION


def dispatcher_copy_passes(dispatcher: str, local_experts: int, dtype: str) -> tuple[float, int, float, int]:
    """(forward bytes, forward kernels, backward bytes, backward kernels) per byte of the routed
    copies a GPU receives (rows x hidden x activation bytes) that Megatron-Core's dropless
    dispatcher copies again around the experts, beyond the permutation and unpermutation on the
    sending side (the ``moe_permute`` term above). Each pass reads and writes every copy once:

    * ``alltoall`` with more than one local expert: "Permutation 2: Sort tokens by local expert"
      after the all-to-all and its inverse before the combine's (megatron/core/transformer/moe/
      token_dispatcher.py at 0d8e0714, dispatch_postprocess line 740 and combine_preprocess line
      775: ``sort_chunks_by_idxs``, with moe_permute_fusion TransformerEngine's
      ``moe_sort_chunks_by_index``); TE v2.9 transformer_engine/pytorch/permutation.py
      ``_moe_chunk_sort`` (lines 623-721) launches make_chunk_sort_map and sort_chunks_by_map
      forward, and sort_chunks_by_map again on the gradient backward, whose Triton kernel
      (triton/permutation.py, _sort_chunks_by_map_kernel, lines 885-925) loads each row and
      stores it at its new place: 2 passes (4 kernels) forward, 2 (2 kernels) backward.
    * ``alltoall`` and ``allgather`` under FP8/MXFP8/NVFP4: ``TEGroupedMLP`` pads each expert's
      rows to the quantization alignment (experts.py at 0d8e0714, lines 835-837 and 880-887:
      Fp8Padding on the fc1 input, Fp8Unpadding on the fc2 output), a copy unless the counts are
      already aligned (TE v2.9 module/fp8_padding.py, lines 121-122), which with dropless routing
      they are not: Megatron-Bridge's Qwen3 and gpt-oss recipes leave moe_router_padding_for_fp8
      unset (v0.2.0 to v0.4.1). Forward the pad and the unpad, backward their mirrors: 2 passes
      each way, one kernel each.
    * ``hybridep``, ``deepep`` and ``flex`` (either): HybridEP pads and permutes inside its
      dispatch kernel (token_dispatcher.py at 0d8e0714, _HybridEPManager, lines 1036-1096:
      ``pad_multiple``, the permuted output returned as is) and DeepEP permutes after it (the
      ``moe_permute`` term), so nothing is added. Not stated (""): nothing.
    """
    fwd = bwd = 0.0
    kf = kb = 0
    if dispatcher == "alltoall" and local_experts > 1:
        fwd, kf, bwd, kb = fwd + 4, kf + 4, bwd + 4, kb + 2
    if dispatcher in ("alltoall", "allgather") and dtype in LOW_PRECISION:
        fwd, kf, bwd, kb = fwd + 4, kf + 2, bwd + 4, kb + 2
    return fwd, kf, bwd, kb
