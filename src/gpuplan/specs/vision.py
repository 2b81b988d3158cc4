"""The vision tower of a multimodal checkpoint: its parameters, tensor by tensor.

A multimodal ``config.json`` (Llama 4, Gemma 3, Qwen2.5-VL, Qwen3-VL) holds a text model, which
gpuplan plans like any decoder, and a ``vision_config``: an image encoder (ViT) plus the projector
that maps its features into the text model's embedding space. The planner counts the tower's
weights, and when it is trained its gradients, master weights and optimizer states, on the
pipeline stage that holds the token embedding (the first), unsplit by tensor parallelism (the
tower is small next to the text model; Hugging Face and torchtitan replicate it). Its
activations, FLOPs and step time depend on how many images each sample carries and at what
resolution, which a text plan does not say: they are not modelled, and every plan says so
(``VisionTower.ignored``).

Each reader lists the tensors transformers (5.x) builds, with the configuration class's defaults:

* SigLIP (Gemma 3: ``SiglipVisionModel`` + ``Gemma3MultiModalProjector``): Conv2d patch embedding
  with bias, a learned position table of (image/patch)^2 rows, pre-LayerNorm blocks with biased
  q/k/v/out and fc1/fc2, a post LayerNorm, the optional attention-pooling head
  (``vision_use_head``), and a projector of one (vision, text) matrix and an RMSNorm weight.
* Llama 4 (``Llama4VisionModel`` + ``Llama4MultiModalProjector``): an unbiased linear patch
  embedding (Unfold), a class embedding, (image/patch)^2 + 1 positions, pre/post LayerNorms,
  biased blocks, the pixel-shuffle adapter's two unbiased linears, and an unbiased projector.
* Qwen2.5-VL (``Qwen2_5_VisionTransformerPretrainedModel``): an unbiased Conv3d patch embedding
  over temporal x spatial patches, RMSNorm blocks with a fused biased qkv and a biased gated MLP,
  and a patch merger (RMSNorm, two biased linears over spatial_merge_size^2 patches).
* Qwen3-VL (``Qwen3VLVisionModel``): a biased Conv3d patch embedding, a learned position table,
  LayerNorm blocks with a biased GeLU MLP, the merger, and one "deepstack" merger per
  ``deepstack_visual_indexes`` entry (LayerNorm over the merged width).

tests/estimate/test_vision.py builds whole models on the ``meta`` device and compares counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError, require

Shape = tuple[int, ...]

# What a text plan cannot size for the vision tower (images per sample, resolution)
IGNORED = ("activations", "flops", "step_time")
COUNTED = ("weights", "gradients", "master_weights", "optimizer")


@dataclass(frozen=True)
class VisionTower:
    """The image encoder and projector of a multimodal model, as ``(name, shape)`` tensors."""

    model_type: str  # the transformers vision model it follows
    tensors: tuple[tuple[str, Shape], ...]
    layers: int
    hidden_size: int

    def __post_init__(self) -> None:
        require(len(self.tensors) > 0, "vision_config", "a vision tower has tensors")
        for name, shape in self.tensors:
            require(
                all(isinstance(d, int) and d > 0 for d in shape),
                f"vision_config: {name}",
                f"has a shape with a non-positive size {shape}",
                "fix the sizes in vision_config",
            )

    @property
    def params(self) -> int:
        return sum(math.prod(s) for _, s in self.tensors)

    @property
    def projector_params(self) -> int:
        """The part that maps vision features to the text width (projector, merger, adapter)."""
        return sum(math.prod(s) for n, s in self.tensors if n.startswith(("projector.", "merger.", "adapter.")))

    @property
    def ignored(self) -> tuple[str, ...]:
        return IGNORED


class _Keys:
    """Reads of ``vision_config`` that name the key and the fix in their errors."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise GpuplanError(where, f"must be an object, got {type(data).__name__}", "pass the model's config.json")
        self.data, self.where = data, where

    def size(self, key: str, default: int) -> int:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
            value = value[0]  # a square (h, w) image or patch size
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= 1e9:
            raise GpuplanError(
                f"{self.where}: {key}", f"must be a positive integer, got {value!r}", "fix it in config.json"
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise GpuplanError(f"{self.where}: {key}", f"must be true or false, got {value!r}")
        return value

    def indices(self, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        value = self.data.get(key, default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) for i in value):
            raise GpuplanError(f"{self.where}: {key}", f"must be a list of layer indices, got {value!r}")
        return tuple(value)


def _linear(name: str, n_in: int, n_out: int, bias: bool) -> list[tuple[str, Shape]]:
    return [(f"{name}.weight", (n_out, n_in))] + ([(f"{name}.bias", (n_out,))] if bias else [])


def _layernorm(name: str, width: int) -> list[tuple[str, Shape]]:
    return [(f"{name}.weight", (width,)), (f"{name}.bias", (width,))]


def _vit_block(h: int, inner: int, attn_bias: bool = True) -> list[tuple[str, Shape]]:
    """A pre-LayerNorm ViT block: q, k, v, out and fc1, fc2, all biased (SigLIP, Llama 4)."""
    t = _layernorm("norm1", h) + _layernorm("norm2", h)
    for p in ("q", "k", "v", "o"):
        t += _linear(f"attn.{p}", h, h, attn_bias)
    return t + _linear("mlp.fc1", h, inner, True) + _linear("mlp.fc2", inner, h, True)


def _repeat(block: list[tuple[str, Shape]], n: int) -> list[tuple[str, Shape]]:
    return [(f"blocks.{i}.{name}", shape) for i in range(n) for name, shape in block]


def _siglip(v: _Keys, outer: dict, text_hidden: int) -> VisionTower:
    h, inner = v.size("hidden_size", 768), v.size("intermediate_size", 3072)
    layers, channels = v.size("num_hidden_layers", 12), v.size("num_channels", 3)
    patch, image = v.size("patch_size", 16), v.size("image_size", 224)
    t: list[tuple[str, Shape]] = [("patch_embed.weight", (h, channels, patch, patch)), ("patch_embed.bias", (h,))]
    t += [("pos_embed", ((image // patch) ** 2, h))]
    t += _repeat(_vit_block(h, inner), layers) + _layernorm("post_norm", h)
    if v.flag("vision_use_head", True):  # SiglipMultiheadAttentionPoolingHead
        t += (
            [("head.probe", (1, 1, h))] + _linear("head.attn_in", h, 3 * h, True) + _linear("head.attn_out", h, h, True)
        )
        t += _layernorm("head.norm", h) + _linear("head.fc1", h, inner, True) + _linear("head.fc2", inner, h, True)
    # Gemma3MultiModalProjector: a (vision, text) matrix and a Gemma RMSNorm over the vision width
    t += [("projector.weight", (h, text_hidden)), ("projector.norm", (h,))]
    return VisionTower("siglip_vision_model", tuple(t), layers, h)


def _llama4(v: _Keys, outer: dict, text_hidden: int) -> VisionTower:
    h, inner = v.size("hidden_size", 768), v.size("intermediate_size", 5632)
    layers, channels = v.size("num_hidden_layers", 34), v.size("num_channels", 3)
    patch, image = v.size("patch_size", 14), v.size("image_size", 448)
    heads = v.size("num_attention_heads", 16)
    require(h % heads == 0, f"{v.where}: num_attention_heads", f"{heads} does not divide hidden_size={h}")
    t: list[tuple[str, Shape]] = [
        ("class_embed", (h,)),
        ("pos_embed", ((image // patch) ** 2 + 1, h)),
        ("patch_embed.weight", (h, channels * patch * patch)),  # Llama4UnfoldConvolution: no bias
    ]
    t += _layernorm("pre_norm", h) + _layernorm("post_norm", h) + _repeat(_vit_block(h, inner), layers)
    # Llama4VisionPixelShuffleMLP -> Llama4VisionMLP2: fc1 (intermediate -> projector_input_dim),
    # fc2 (projector_output_dim square), both unbiased, as transformers builds them
    p_in, p_out = v.size("projector_input_dim", 4096), v.size("projector_output_dim", 4096)
    t += _linear("adapter.fc1", inner, p_in, False) + _linear("adapter.fc2", p_out, p_out, False)
    t += _linear("projector", v.size("vision_output_dim", 7680), text_hidden, False)
    return VisionTower("llama4_vision_model", tuple(t), layers, h)


def _qwen_merger(name: str, h: int, merge: int, out: int, norm: list[tuple[str, Shape]]) -> list[tuple[str, Shape]]:
    wide = h * merge**2
    return norm + _linear(f"{name}.fc1", wide, wide, True) + _linear(f"{name}.fc2", wide, out, True)


def _qwen2_5_vl(v: _Keys, outer: dict, text_hidden: int) -> VisionTower:
    h, inner = v.size("hidden_size", 3584), v.size("intermediate_size", 3420)
    layers, heads = v.size("depth", 32), v.size("num_heads", 16)
    require(h % heads == 0, f"{v.where}: num_heads", f"{heads} does not divide hidden_size={h}")
    c, p, tp = v.size("in_channels", 3), v.size("patch_size", 14), v.size("temporal_patch_size", 2)
    merge = v.size("spatial_merge_size", 2)
    block = [("norm1", (h,)), ("norm2", (h,))] + _linear("attn.qkv", h, 3 * h, True) + _linear("attn.o", h, h, True)
    block += (
        _linear("mlp.gate", h, inner, True) + _linear("mlp.up", h, inner, True) + _linear("mlp.down", inner, h, True)
    )
    t: list[tuple[str, Shape]] = [("patch_embed.weight", (h, c, tp, p, p))] + _repeat(block, layers)
    t += _qwen_merger("merger", h, merge, v.size("out_hidden_size", 3584), [("merger.norm", (h,))])
    return VisionTower("qwen2_5_vl_vision", tuple(t), layers, h)


def _qwen3_5(v: _Keys, outer: dict, text_hidden: int) -> VisionTower:
    """Qwen3.5's tower: Qwen3-VL's without the deepstack mergers (Qwen3_5VisionModel builds one
    merger, its norm over the unmerged width)."""
    return _qwen3_vl(v, outer, text_hidden, deepstack=False, kind="qwen3_5_vision")


def _qwen3_vl(
    v: _Keys, outer: dict, text_hidden: int, deepstack: bool = True, kind: str = "qwen3_vl_vision"
) -> VisionTower:
    h, inner = v.size("hidden_size", 1152), v.size("intermediate_size", 4304)
    layers, heads = v.size("depth", 27), v.size("num_heads", 16)
    require(h % heads == 0, f"{v.where}: num_heads", f"{heads} does not divide hidden_size={h}")
    c, p, tp = v.size("in_channels", 3), v.size("patch_size", 16), v.size("temporal_patch_size", 2)
    merge, out = v.size("spatial_merge_size", 2), v.size("out_hidden_size", 3584)
    block = _layernorm("norm1", h) + _layernorm("norm2", h)
    block += _linear("attn.qkv", h, 3 * h, True) + _linear("attn.o", h, h, True)
    block += _linear("mlp.fc1", h, inner, True) + _linear("mlp.fc2", inner, h, True)
    t: list[tuple[str, Shape]] = [("patch_embed.weight", (h, c, tp, p, p)), ("patch_embed.bias", (h,))]
    t += [("pos_embed", (v.size("num_position_embeddings", 2304), h))] + _repeat(block, layers)
    t += _qwen_merger("merger", h, merge, out, _layernorm("merger.norm", h))
    for i, _ in enumerate(v.indices("deepstack_visual_indexes", (8, 16, 24)) if deepstack else ()):
        # Qwen3VLVisionPatchMerger(use_postshuffle_norm=True): the norm runs over the merged width
        t += _qwen_merger(f"merger.deepstack{i}", h, merge, out, _layernorm(f"merger.deepstack{i}.norm", h * merge**2))
    return VisionTower(kind, tuple(t), layers, h)


# outer model_type -> reader of its vision_config
READERS: dict[str, Callable[[_Keys, dict, int], VisionTower]] = {
    "gemma3": _siglip,
    "llama4": _llama4,
    "qwen2_5_vl": _qwen2_5_vl,
    "qwen3_vl": _qwen3_vl,
    "qwen3_5": _qwen3_5,
    "qwen3_5_moe": _qwen3_5,
}


def vision_tower(outer: dict, text_hidden: int, where: str) -> VisionTower | None:
    """The tower of a multimodal config (None: a family whose tower gpuplan cannot count yet)."""
    reader = READERS.get(str(outer.get("model_type")))
    if reader is None:
        return None
    return reader(_Keys(outer.get("vision_config") or {}, f"{where}: vision_config"), outer, text_hidden)
