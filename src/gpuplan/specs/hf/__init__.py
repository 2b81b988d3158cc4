"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`.

The Llama-shaped families go through one normaliser (``decoder``, decoder.py) that reads the shared keys with
each family's defaults and quirks (``FAMILIES``); the older, differently-keyed families (GPT-2,
MPT, OPT, BLOOM, GPT-NeoX, Falcon) keep one small adapter each (legacy.py). Every reading follows the
family's ``transformers`` configuration class, so that parameter counts match what
``transformers`` builds exactly (tests/estimate/test_params.py and test_hf_families.py check this
on the ``meta`` device).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from gpuplan.errors import GpuplanError
from gpuplan.specs.hf import legacy
from gpuplan.specs.hf.decoder import FAMILIES, decoder
from gpuplan.specs.hf.reader import Config
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.vision import vision_tower

__all__ = ["ADAPTERS", "FAMILIES", "load_hf_config", "model_from_hf_config"]

# multimodal configs whose text model has its own model_type (used when text_config omits it)
NESTED_TEXT = {
    "llama4": "llama4_text",
    "gemma3": "gemma3_text",
    "mistral3": "mistral",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
}
# multimodal configs that may keep the text model's keys at the top level, beside vision_config
# (the Hub's Qwen2.5-VL configs; Qwen2_5_VLConfig moves them into text_config)
FLAT_TEXT = ("qwen2_5_vl",)
# composite configs whose own tie_word_embeddings (default as given) ties the LM head, as
# transformers builds them (other composite configs: ``_split_multimodal``)
OUTER_TIE = {"gemma3": True, "qwen2_5_vl": False, "qwen3_vl": False, "qwen3_5": False, "qwen3_5_moe": False}
# composite configs whose LM head follows their text_config's flag alone (Llama4Config)
TEXT_TIE = ("llama4",)


ADAPTERS: dict[str, Callable[[Config, str], ModelSpec]] = {
    "gpt2": legacy.gpt2,
    "mpt": legacy.mpt,
    "opt": legacy.opt,
    "bloom": legacy.bloom,
    "gpt_neox": legacy.gpt_neox,
    "falcon": legacy.falcon,
    **{t: functools.partial(decoder, model_type=t) for t in FAMILIES},
}


def _split_multimodal(config: dict[str, Any], where: str) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """(text config, where it is, the outer multimodal config or None) of a config.json."""
    outer = config.get("model_type")
    text = config.get("text_config")
    if text is None and outer in FLAT_TEXT and "vision_config" in config:
        text = {k: v for k, v in config.items() if k not in ("vision_config", "model_type")}
    if text is None:
        return config, where, None
    if not isinstance(text, dict):
        raise GpuplanError(f"{where}: text_config", f"must be an object, got {type(text).__name__}")
    text = dict(text)
    text.setdefault("model_type", NESTED_TEXT.get(str(outer), outer))
    if outer in OUTER_TIE:
        # the composite config's tie_word_embeddings decides (its class default when absent);
        # Qwen2_5_VLConfig also ties when its text config asks
        tied = config.get("tie_word_embeddings")
        tied = OUTER_TIE[outer] if tied is None else tied
        if not isinstance(tied, bool):
            raise GpuplanError(f"{where}: tie_word_embeddings", f"must be true or false, got {tied!r}")
        text["tie_word_embeddings"] = tied or (outer == "qwen2_5_vl" and text.get("tie_word_embeddings") is True)
    elif outer not in TEXT_TIE and config.get("tie_word_embeddings") is True:
        # any other composite config that says so ties the LM head to the embeddings, whichever way
        # its class combines the two flags (transformers 5: InternVL and Mistral 3 take the outer
        # flag, LLaVA ties when either asks); absent or false, the text config's flag decides
        text["tie_word_embeddings"] = True
    return text, f"{where}: text_config", config


def model_from_hf_config(config: dict[str, Any], name: str = "custom", where: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from the dict of a Hugging Face ``config.json``.

    A multimodal config (``text_config`` inside, as Llama 4 and Gemma 3 ship, or Qwen2.5-VL's text
    keys beside ``vision_config``) plans its text backbone and counts the vision tower's parameters
    (specs/vision.py) where gpuplan knows the family; otherwise the spec's ``notes`` say the tower
    is not counted."""
    if not isinstance(config, dict):
        raise GpuplanError(where, "must hold a JSON object", "pass a Hugging Face config.json")
    if not isinstance(config.get("model_type", ""), str):
        raise GpuplanError(f"{where}: model_type", f"must be a string, got {config['model_type']!r}", 'e.g. "llama"')
    text, text_where, outer = _split_multimodal(config, where)
    model_type = text.get("model_type")
    if not isinstance(model_type, str) or model_type not in ADAPTERS:
        raise GpuplanError(
            f"{text_where}: model_type",
            f"unsupported model_type {model_type!r}",
            f"supported: {', '.join(sorted(ADAPTERS))} (and multimodal configs of "
            f"{', '.join(sorted(NESTED_TEXT))} through their text_config)",
        )
    spec = ADAPTERS[model_type](Config(text, text_where), name)
    if outer is None:
        return spec
    kind = outer.get("model_type")
    # other encoders a composite config carries (audio_config: Qwen2-Audio, Voxtral; encoder_config:
    # Granite Speech; ...): gpuplan knows none of them, and says so
    others = [k for k, v in outer.items() if k.endswith("_config") and k not in ("text_config", "vision_config")]
    notes = [f"{kind} {k} not counted: the plan covers the text backbone" for k in others if isinstance(outer[k], dict)]
    tower = None
    if "vision_config" in outer:
        tower = vision_tower(outer, spec.hidden_size, where)
        if tower is None:
            notes.insert(0, f"{kind} vision tower (vision_config) not counted: the plan covers the text backbone")
        else:
            notes.insert(
                0,
                f"{kind} vision tower counted ({tower.params:,} parameters: weights and training states on "
                "the first pipeline stage); its activations, FLOPs and step time are not modelled (they "
                "depend on images per sample)",
            )
    if not notes:
        return spec
    return dataclasses.replace(spec, vision=tower, notes=(*notes, *spec.notes))


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read ``config.json`` from a file (or a folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise GpuplanError("model", f"no such file {str(path)!r}", "pass a catalog id or a config.json path")
    from gpuplan.inputs import read_text, too_deep

    def no_constant(token: str) -> NoReturn:  # NaN, Infinity: not JSON, and no size a model can have
        raise ValueError(f"{token} is not a number JSON allows")

    text = read_text(path, "model")  # outside the try: its errors are GpuplanErrors (ValueErrors) already
    try:
        data = json.loads(text, parse_constant=no_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise GpuplanError(
            str(path), f"is not valid JSON ({exc})", "pass a complete Hugging Face config.json"
        ) from None
    except RecursionError:
        raise too_deep("model", path) from None
    # a folder's config.json is named by its folder (the Hub's layout), any other file by its stem
    name = (path.parent.name or path.stem) if path.name == "config.json" else path.stem
    try:
        return model_from_hf_config(data, name=name, where=str(path))
    except GpuplanError as exc:  # the spec's own checks name a config.json key: say which file holds it
        raise exc.located(str(path)) from None
