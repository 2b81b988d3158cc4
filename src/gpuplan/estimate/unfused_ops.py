"""Elementwise chains Megatron-Core runs as separate PyTorch ops (no fused kernel) for some models.

Each function gives ((bytes per element, kernels) forward, (bytes per element, kernels) backward)
for ``a``-byte activations, counted in torch's own ops by tests/estimate/test_eager_kernels.py."""

from __future__ import annotations


def yarn_rope_passes(a: float) -> tuple[tuple[float, int], tuple[float, int]]:
    """Megatron's unfused rotary embedding, per element of the query or key it rotates (each is one
    call): ``_apply_rotary_pos_emb_bshd`` (megatron/core/models/common/embeddings/rope_utils.py at
    0d8e0714, lines 92-126): t * cos, rotate_half (the negated half and a cat), * sin, the add and
    a final cat with the (empty) unrotated part: 12 a in 6 kernels forward, plus 6 small kernels
    building cos and sin scaled by ``mscale``; backward 14 a in 7 kernels.

    It runs wherever YaRN's attention factor ("mscale", ModelSpec.rope_attention_factor) is not 1:
    TransformerEngine's fused RoPE takes no scale, so ``apply_rotary_pos_emb`` falls back to it
    even with apply_rope_fusion set (rope_utils.py lines 279-284, "mscale=... is not supported by
    TE's fused RoPE. Using unfused implementation."); attention.py (lines 837-856) passes
    ``_yarn_get_concentration_factor_from_config``, 0.1 ln(factor) + 1 for gpt-oss (1.347)."""
    return (12 * a, 12), (14 * a, 7)


def glu_clamp_passes(a: float) -> tuple[tuple[float, int], tuple[float, int]]:
    """The clamps Megatron applies before its fused gated activation when the model clamps it
    (gpt-oss: ``swiglu_limit`` 7, Megatron's ``activation_func_clamp_value``), per element of the
    activation's output (half its input): ``weighted_bias_quick_geglu_impl``
    (megatron/core/fusions/fused_bias_geglu.py at 0d8e0714, lines 424-432) chunks the fc1 output,
    clamps the gate half from above and the linear half both ways, and concatenates them again,
    eagerly, before the compiled activation: 8 a in 3 kernels forward; backward each clamp's masked
    gradient and their concatenation, 15 a in 9 kernels. A recomputed activation (``moe_act``) runs
    the forward again. TransformerEngine's op fuser (ScaledClampedQGeGLU) clamps inside its kernel
    instead (TrainingConfig.te_op_fuser)."""
    return (8 * a, 3), (15 * a, 9)
