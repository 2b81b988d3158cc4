"""Megatron's weighted fc2 bias of biased routed experts (gpt-oss): a pass after the GEMM."""

from __future__ import annotations


def expert_bias_passes(
    local_experts: int, packed: bool, fp32_probs: bool = True
) -> tuple[tuple[float, int], tuple[float, int]]:
    """Megatron's weighted fc2 bias of biased experts (TEGroupedMLP._apply_bias, megatron/core/
    transformer/moe/experts.py): ((bytes per output element, kernels) forward, the same backward),
    outside the GEMM, in the probs' type (below); what it keeps for backward is ``expert_bias_kept``.

    With the token counts on the host (every dispatcher that synchronises, moe_host.SYNCS), each
    local expert's rows add ``bias * prob`` in a Python loop (fp32 by the prob's type), then one
    concatenation and the cast back: 4 + 10 + 8 + 6 bytes forward, 6 + 6 + 24 + 4 backward (the
    casts, the two products and sums per expert for the prob's and the bias's gradients, the
    gradient's concatenation), and only the per-expert bias and probs kept. Under a CUDA graph
    (counts on the device, Megatron-LM since 883533e049, 2026-08) the packed path upcasts the
    output, repeats the bias over the rows, multiplies and adds: 36 forward, 40 backward, and the
    repeated fp32 bias kept for the prob's gradient (4). Counted in torch's own ops by
    tests/estimate/test_eager_kernels.py.

    The loop's arithmetic takes the probs' type: fp32 where the dispatcher upcasts them (DeepEP and
    HybridEP "only support float32 probs", token_dispatcher.py at 0d8e0714, lines 1042-1048 and
    1187-1193) or the router runs in fp32 (moe_router_dtype); else the router's logits keep the
    input's bf16 (router.py lines 93-97) and so do the products: ``fp32_probs=False``, 12 bytes in
    2 E + 1 kernels forward, 16 in 4 E + 2 backward. The packed path upcasts in any case."""
    if packed:
        return (36, 7), (40, 8)
    if not fp32_probs:
        return (12, 2 * local_experts + 1), (16, 4 * local_experts + 2)
    return (28, 2 * local_experts + 2), (40, 6 * local_experts + 3)


def expert_bias_kept(packed: bool) -> float:
    """Bytes per output element the weighted bias keeps for backward (``expert_bias_passes``): the
    packed path's repeated fp32 bias, which its multiply saves for the prob's gradient; the loop
    keeps only each expert's bias and probs."""
    return 4.0 if packed else 0.0
