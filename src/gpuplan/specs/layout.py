"""Megatron-Core's pipeline layout: which layers each virtual pipeline stage holds.

``--pipeline-model-parallel-layout`` (TransformerConfig.pipeline_model_parallel_layout,
megatron/core/transformer/pipeline_parallel_layer_layout.py) lists the pp x vp virtual stages in
order, separated by ``|``: ``E`` the embedding, ``t`` a transformer layer, ``m`` a
multi-token-prediction layer, ``L`` the loss; ``x*n`` repeats a character, ``(...)*n`` a group,
commas are cosmetic. Virtual stage i runs on pipeline rank i mod pp as that rank's chunk i // pp.
It states what first/last stage counts cannot: chunks of different sizes under interleaving, as
DeepSeek-V3's recipes run 61 layers on pp 4 x vp 4 (Megatron-Bridge
recipes/deepseek/.../deepseek_v3.py: ``Et*4|(t*4|)*14tmL``, so ranks of 16, 16, 16 and 13 layers).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gpuplan.errors import GpuplanError

FIELD = "pipeline_layout"
_KINDS = "EtmL"


@dataclass(frozen=True)
class Layout:
    """A parsed layout: the decoder layers and MTP layers of each virtual stage, in order."""

    layers: tuple[int, ...]  # transformer layers per virtual stage
    mtp: tuple[int, ...]  # multi-token-prediction layers per virtual stage

    def rank_layers(self, pp: int) -> tuple[int, ...]:
        """Transformer layers on each pipeline rank, all its chunks together."""
        return tuple(sum(self.layers[r::pp]) for r in range(pp))


MAX_REPEAT = 10_000  # layers: no model has more


@functools.lru_cache(maxsize=256)
def parse(text: str) -> Layout:
    """The virtual stages of a Megatron-Core layout string (its parse_str_to_list, then the
    checks of validate_layer_layout that do not need the model: the embedding first and the loss
    last, once each, MTP layers after every decoder layer and all in one stage)."""
    s = text.replace(",", "").replace(" ", "")
    big = [int(n) for n in re.findall(r"\*(\d+)", s) if len(n) > 5 or int(n) > MAX_REPEAT]
    if big:
        raise GpuplanError(
            FIELD, f"repeat count {big[0]} in {text!r} is larger than any model", f"repeat at most {MAX_REPEAT:,} times"
        )
    for pattern in (r"\(([^()]+)\)\*(\d+)", r"(.)\*(\d+)"):  # groups, then single characters
        s = re.sub(pattern, lambda g: g.group(1) * int(g.group(2)), s)
    bad = sorted(set(s) - set(_KINDS) - {"|"})
    if bad:
        raise GpuplanError(
            FIELD,
            f"unknown character(s) {' '.join(map(repr, bad))} in {text!r}",
            "write stages of E (embedding), t (transformer layer), m (MTP layer) and L (loss) separated by |, "
            "with x*n and (...)*n repeats, e.g. 'Et*4|(t*4|)*14tmL'",
        )
    stages = s.split("|")
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise GpuplanError(FIELD, f"{text!r} must start with the embedding E, once", "put E first in the first stage")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise GpuplanError(FIELD, f"{text!r} must end with the loss L, once", "put L last in the last stage")
    if "m" in flat:
        if "t" in flat[flat.index("m") :]:
            raise GpuplanError(FIELD, f"{text!r} places a transformer layer after an MTP layer", "put m after every t")
        if sum("m" in st for st in stages) > 1:
            raise GpuplanError(FIELD, f"{text!r} spreads the MTP layers over stages", "put every m in one stage")
    return Layout(tuple(st.count("t") for st in stages), tuple(st.count("m") for st in stages))


def check_mtp(text: str, mtp_layers: int) -> None:
    """A layout's MTP layers are the ones trained (Megatron-Core: "Number of mtp layers in layout
    must match mtp_num_layers")."""
    placed = sum(parse(text).mtp)
    if placed != mtp_layers:
        raise GpuplanError(
            "mtp_layers",
            f"the pipeline layout places {placed} MTP layer(s) but {mtp_layers} are trained",
            f"use `mtp_layers={placed}`, or put {mtp_layers} m's before the layout's L",
        )


def check(text: str, pp: int, num_layers: int) -> Layout:
    """The layout, checked against the model's layers on ``pp`` ranks: refused, naming the fix,
    where Megatron-Core refuses it, and where gpuplan cannot model it (a rank without a
    transformer layer; MTP anywhere but beside the loss). Its stage count against pp x vp is
    ParallelPlan's check, made when the plan is built."""
    lay = parse(text)
    if sum(lay.layers) != num_layers:
        raise GpuplanError(
            FIELD,
            f"the layout places {sum(lay.layers)} transformer layers; the model has {num_layers}",
            "count the t's",
        )
    empty = [r for r, k in enumerate(lay.rank_layers(pp)) if k == 0]
    if empty:
        raise GpuplanError(
            FIELD,
            f"pipeline rank {empty[0]} holds no transformer layer, which gpuplan does not model",
            "give every rank at least one t",
        )
    if any(lay.mtp[:-1]):
        raise GpuplanError(
            FIELD,
            "MTP layers in a stage of their own (Megatron's mtp_standalone) are not modelled: gpuplan runs them "
            "beside the loss",
            "move the m's into the last stage, before L",
        )
    return lay
