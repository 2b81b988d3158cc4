"""Whether a (model, plan, batch) combination can run: every rule once, with a typed reason.

Each rule is one predicate written with comparisons and ``&``/``|`` only, so the same expression
decides one plan (plain numbers: ``ParallelPlan``, ``estimate_training``, ``step_time``, the
pipeline simulator's builders) and the search's whole grid at once (numpy arrays:
``search.plans``); tests/specs/test_validity.py checks that the two verdicts agree on every plan
the search enumerates. Rules run in a fixed order and a plan is rejected for the first that fails,
so scalar errors and the search's rejection counts name the same reason.

Three groups, by what they read: the plan alone (``STRUCTURE``: ParallelPlan checks these when it
is built), the plan against the model and sequence (``MODEL``), and the plan against the batch
(``BATCH``: micro-batches per step and what the schedule needs of them). Serving splits a model
by tp and pp under the engines' rules (``SERVING``: a KV head may be replicated over TP ranks).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.specs import schedules
from gpuplan.specs.model import ModelSpec


class Reason(StrEnum):
    """Why a plan cannot run; the values are what the search reports rejections under."""

    EP_DATA_PARALLEL = "ep x etp does not divide tp x cp x dp"
    VP_WITHOUT_PP = "interleaving without pipeline parallelism"
    VP_SCHEDULE = "the schedule has no virtual stages"
    ODD_PP = "DualPipe needs an even pipeline depth"
    TP_HEADS = "tp does not divide the attention heads"
    TP_KV_HEADS = "tp does not divide the key-value heads"
    TP_LINEAR_HEADS = "tp does not divide the linear-attention key heads"
    TP_LINEAR_SERVE = "tp does not divide the linear-attention heads"
    NO_ATTENTION_SERVE = "no softmax attention layer to size a KV pool by"
    CP_LINEAR = "tp x cp does not divide the linear-attention key heads"
    TP_KV_REPLICAS = "tp neither divides nor is a multiple of the key-value heads"
    PP_LAYERS = "more pipeline stages than layers"
    VP_LAYERS = "layers do not split into pp x vp chunks"
    V_LAYERS = "a V schedule needs two layers per pipeline rank"
    EP_DENSE = "expert parallelism on a dense model"
    EP_EXPERTS = "ep does not divide the experts"
    ETP_DENSE = "expert tensor parallelism (etp) on a dense model"
    MOE_SEQUENCE = "MoE with tp > 1 needs sequence parallelism"
    CP_SEQUENCE = "cp (x tp) does not divide the sequence"
    CP_A2A_HEADS = "cp does not divide the heads per tp rank (cp_comm a2a)"
    SP_SEQUENCE = "sequence parallelism needs seq_len / cp divisible by tp"
    BATCH = "global batch not divisible by dp x micro-batch"
    MICROBATCH_GROUPS = "interleaving needs micro-batches divisible by pp"
    MICROBATCH_COUNT = "DualPipe needs an even number of micro-batches, at least 2 x pp"
    # FP8 parameters (Megatron --fp8-param-gather) sharded by ZeRO-3 / FSDP: not modelled
    # (estimate/memory.py refuses them for one plan, the search counts them)
    FP8_PARAMS_ZERO3 = "FP8 parameters under ZeRO-3 are not modelled"
    # decided by the memory model, not by a rule here; listed so every count has one type
    MEMORY = "does not fit in GPU memory"
    SLOWER_VARIANT = "slower variant (less recompute fits)"


@functools.lru_cache(maxsize=64)  # keyed on all it reads: the name and whether vp > 1
def _features(schedule: str, interleaving: bool) -> tuple[bool, bool, bool, bool, bool, int]:
    """The registry's facts the rules read about a schedule run with or without virtual stages."""
    spec = schedules.get(schedule)
    sim = spec.simulated(2 if interleaving else 1)
    return (spec.interleaved is not None or spec.needs_vp, spec.v_shape, spec.even_ranks,
            sim.microbatches_per_group, sim.even_microbatches, sim.min_microbatches_per_rank)  # fmt: skip


def _split_fix(num_layers: int, pp: int, vp: int) -> str:
    from gpuplan.specs.split import _fix  # the first/last split that would work

    return _fix(num_layers, pp, vp)


class View:
    """What the rules read about a plan: plain numbers for one plan, or numpy arrays of equal
    shape for many (``schedule`` then an array of names). Schedule properties come from the
    registry (gpuplan.specs.schedules)."""

    def __init__(
        self,
        *,
        tp: Any = 1,
        cp: Any = 1,
        pp: Any = 1,
        dp: Any = 1,
        ep: Any = 1,
        etp: Any = None,
        folded: Any = False,
        vp: Any = 1,
        sp: Any = True,
        schedule: Any = schedules.DEFAULT,
        seq_len: Any = 1,
        micro_batch: Any = 1,
        global_batch: Any = None,
        uneven: Any = False,
        cp_comm: Any = "p2p",
    ) -> None:
        self.uneven = uneven  # first/last stage layers or a layout given: specs/split.py checks that split
        self.a2a = cp_comm == "a2a"  # context parallelism by all-to-all: heads split over cp
        self.tp, self.cp, self.pp, self.dp, self.ep, self.vp, self.sp = tp, cp, pp, dp, ep, vp, sp
        # the experts' tensor-parallel degree (None: tp) and whether it was set (MoE parallel folding)
        self.etp, self.folded = (tp if etp is None else etp), folded
        self.schedule, self.seq_len, self.micro_batch, self.global_batch = schedule, seq_len, micro_batch, global_batch
        feats: tuple[Any, ...]
        if isinstance(schedule, str):
            feats = _features(schedule, bool(vp > 1))
        else:
            import numpy as np

            names = np.asarray(schedule)
            interleaving = np.broadcast_to(np.asarray(vp) > 1, names.shape)
            rows = [_features(n, v) for n, v in zip(names.ravel().tolist(), interleaving.ravel().tolist())]
            feats = tuple(np.array([r[i] for r in rows]).reshape(names.shape) for i in range(6))
        (self.takes_vp, self.v_shape, self.even_ranks, self.mb_groups, self.mb_even, self.mb_min) = feats

    @property
    def microbatches(self) -> Any:
        """Micro-batches per step (meaningful where the batch rule holds)."""
        return self.global_batch // (self.micro_batch * self.dp)


@dataclass(frozen=True)
class Rule:
    reason: Reason
    field: str  # the input to change
    ok: Callable[[View, ModelSpec], Any]
    explain: Callable[[View, ModelSpec], tuple[str, str]]  # (message, fix), for one plan


STRUCTURE: tuple[Rule, ...] = (
    Rule(
        # Megatron parallel_state.py (initialize_model_parallel): the expert grid etp x ep x edp
        # regroups the tp x cp x dp ranks of a stage, so ep x etp must divide them; with etp unset
        # (= tp) this is ep dividing dp x cp, experts spread over the data-parallel ranks
        Reason.EP_DATA_PARALLEL,
        "ep",
        lambda x, m: (x.tp * x.cp * x.dp) % (x.ep * x.etp) == 0,
        lambda x, m: (
            (
                f"ep {x.ep} x etp {x.etp} must divide tp x cp x dp = {x.tp * x.cp * x.dp} "
                "(the expert grid etp x ep x edp regroups those ranks)",
                f"pick ep and etp whose product divides {x.tp * x.cp * x.dp}, e.g. `etp=1` "
                f"`ep={next(d for d in range(min(x.ep, x.tp * x.cp * x.dp), 0, -1) if x.tp * x.cp * x.dp % d == 0)}`",
            )
            if x.folded
            else (
                f"ep={x.ep} must divide dp x cp = {x.dp * x.cp} (experts are spread over data-parallel ranks)",
                "pick an ep that divides dp x cp, or fold it over tp too with `etp=1` (MoE parallel folding)",
            )
        ),
    ),
    Rule(
        Reason.VP_WITHOUT_PP,
        "vp",
        lambda x, m: (x.vp == 1) | (x.pp > 1),
        lambda x, m: ("interleaving needs pipeline parallelism", "set `pp` > 1 or `vp=1`"),
    ),
    Rule(
        Reason.VP_SCHEDULE,
        "vp",
        lambda x, m: (x.vp == 1) | (x.takes_vp == 1),
        lambda x, m: (
            f"the {x.schedule} schedule has no virtual stages",
            "use `vp=1`, or `schedule=1f1b` for interleaving",
        ),
    ),
    Rule(
        Reason.ODD_PP,
        "pp",
        lambda x, m: (x.even_ranks == 0) | ((x.pp >= 2) & (x.pp % 2 == 0)),
        lambda x, m: (f"DualPipe needs an even pipeline depth, got pp={x.pp}", "use an even `pp`"),
    ),
)

MODEL: tuple[Rule, ...] = (
    Rule(
        Reason.TP_HEADS,
        "tp",
        lambda x, m: m.num_heads % x.tp == 0,
        lambda x, m: (
            f"tp={x.tp} does not divide num_attention_heads={m.num_heads}",
            f"use a tp that divides {m.num_heads}",
        ),
    ),
    Rule(
        Reason.TP_KV_HEADS,
        "tp",
        lambda x, m: m.is_mla | (m.num_kv_heads % x.tp == 0),
        lambda x, m: (
            f"tp={x.tp} does not divide num_key_value_heads={m.num_kv_heads}",
            f"use a tp that divides {m.num_kv_heads}",
        ),
    ),
    Rule(
        Reason.TP_LINEAR_HEADS,
        "tp",
        # value heads are a multiple of the key heads (ModelSpec): dividing the key heads divides
        # both; Megatron-Core's MambaMixer asserts the same of Mamba-2's groups ("ngroups must be
        # evenly divisible by tp_size")
        lambda x, m: (not m.linear_layers) | (m.linear_k_heads % x.tp == 0),
        lambda x, m: (
            f"tp={x.tp} does not divide {_linear_groups_key(m)}={m.linear_k_heads}",
            f"use a tp that divides {m.linear_k_heads}",
        ),
    ),
    Rule(
        Reason.CP_LINEAR,
        "cp",
        # Megatron-Core splits a Gated DeltaNet or Mamba-2 layer's heads and groups over tp x cp after
        # its CP all-to-all (gated_delta_net/gdn.py: num_value_heads // tp_size // cp_size;
        # mamba_mixer.py: ngroups_local_tpcp)
        lambda x, m: (not m.linear_layers) | (m.linear_k_heads % (x.tp * x.cp) == 0),
        lambda x, m: (
            f"tp x cp = {x.tp * x.cp} does not divide {_linear_groups_key(m)}={m.linear_k_heads}",
            f"use tp x cp dividing {m.linear_k_heads} (linear attention splits its heads over both)",
        ),
    ),
    Rule(
        Reason.PP_LAYERS,
        "pp",
        lambda x, m: x.pp <= m.num_layers,
        lambda x, m: (f"pp={x.pp} is more than the {m.num_layers} layers", f"use pp <= {m.num_layers}"),
    ),
    Rule(
        Reason.VP_LAYERS,
        "vp",
        lambda x, m: (x.vp == 1) | x.uneven | (m.num_layers % (x.pp * x.vp) == 0),
        lambda x, m: (
            f"{m.num_layers} layers do not split into pp x vp = {x.pp * x.vp} equal chunks (Megatron refuses this too)",
            _split_fix(m.num_layers, x.pp, x.vp),
        ),
    ),
    Rule(
        Reason.V_LAYERS,
        "pp",
        lambda x, m: (x.v_shape == 0) | (2 * x.pp <= m.num_layers),
        lambda x, m: (
            f"{x.schedule} splits the {m.num_layers} layers into 2 x pp = {2 * x.pp} chunks: too many",
            f"use pp <= {m.num_layers // 2}",
        ),
    ),
    Rule(
        Reason.EP_DENSE,
        "ep",
        lambda x, m: (x.ep == 1) | m.is_moe,
        lambda x, m: (f"{m.name} has no experts", "use `ep=1` for a dense model"),
    ),
    Rule(
        Reason.ETP_DENSE,
        "etp",
        lambda x, m: (x.folded == 0) | m.is_moe,
        lambda x, m: (f"{m.name} has no experts to split with etp={x.etp}", "drop `etp` for a dense model"),
    ),
    Rule(
        Reason.EP_EXPERTS,
        "ep",
        lambda x, m: (x.ep == 1) | (m.num_experts % x.ep == 0),
        lambda x, m: (
            f"ep={x.ep} does not divide the {m.num_experts} experts",
            f"use an ep that divides {m.num_experts}",
        ),
    ),
    Rule(
        # Megatron's MoELayer.forward raises in training with tp > 1 and no sequence parallelism
        # (megatron/core/transformer/moe/moe_layer.py); gpuplan's MoE layer reads tokens
        # sequence-sharded over tp, as the dispatcher receives them
        Reason.MOE_SEQUENCE,
        "sp",
        lambda x, m: (not m.is_moe) | (x.tp == 1) | (x.sp == 1),
        lambda x, m: (
            f"an MoE model with tp={x.tp} needs sequence parallelism (Megatron's MoE layer refuses tp > 1 without it)",
            "drop `sp=false`, or use tp 1",
        ),
    ),
    Rule(
        Reason.CP_SEQUENCE,
        "cp",
        lambda x, m: x.seq_len % x.cp == 0,
        lambda x, m: (f"cp={x.cp} does not divide seq_len={x.seq_len}", "use a cp that divides the sequence length"),
    ),
    Rule(
        # the all-to-all hands each CP rank whole heads: TransformerEngine's AttnFuncWithCPAndQKVOA2A
        # asserts "cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V"
        # (context_parallel.py), DeepSpeed-Ulysses likewise; a latent (MLA) head expands per head
        Reason.CP_A2A_HEADS,
        "cp",
        lambda x, m: (
            (not x.a2a) | (((m.num_heads // x.tp) % x.cp == 0) & (m.is_mla | ((m.num_kv_heads // x.tp) % x.cp == 0)))
        ),
        lambda x, m: _a2a_heads(x, m),
    ),
    Rule(
        Reason.SP_SEQUENCE,
        "seq_len",
        lambda x, m: (x.sp == 0) | (x.tp == 1) | ((x.seq_len // x.cp) % x.tp == 0),
        lambda x, m: (
            f"sequence parallelism needs seq_len/cp={x.seq_len // x.cp} divisible by tp={x.tp}",
            "change `seq_len` or `tp`, or pass `sp=false`",
        ),
    ),
)

BATCH: tuple[Rule, ...] = (
    Rule(
        Reason.BATCH,
        "global_batch",
        lambda x, m: x.global_batch % (x.micro_batch * x.dp) == 0,
        lambda x, m: (
            f"global batch {x.global_batch} is not a multiple of micro_batch x dp = {x.micro_batch * x.dp}",
            f"use a multiple of {x.micro_batch * x.dp}",
        ),
    ),
    Rule(
        Reason.MICROBATCH_GROUPS,
        "global_batch",
        lambda x, m: (x.mb_groups == 0) | (x.microbatches % x.pp == 0),
        lambda x, m: (
            f"interleaving needs micro-batches per step divisible by pp={x.pp}, got {x.microbatches}",
            f"use a global batch of {x.pp} x micro_batch x dp = {x.pp * x.micro_batch * x.dp} or a multiple",
        ),
    ),
    Rule(
        Reason.MICROBATCH_COUNT,
        "global_batch",
        lambda x, m: (x.microbatches >= x.mb_min * x.pp) & ((x.mb_even == 0) | (x.microbatches % 2 == 0)),
        lambda x, m: (
            f"{x.schedule} needs " + ("an even number of " if x.mb_even else "")
            + f"micro-batches per step, at least {x.mb_min} x pp = {x.mb_min * x.pp}, got {x.microbatches}",
            "raise `global_batch` or lower `micro_batch`",
        ),
    ),
)  # fmt: skip

RULES = STRUCTURE + MODEL + BATCH


def first_violation(rules: tuple[Rule, ...], x: View, m: ModelSpec | None = None) -> Rule | None:
    """The first rule one plan breaks, or None."""
    for rule in rules:
        if not rule.ok(x, m):  # type: ignore[arg-type]  # STRUCTURE rules never read the model
            return rule
    return None


def rules_for(*reasons: Reason) -> tuple[Rule, ...]:
    """The training rules with these reasons, in the order given (a rule named, not indexed)."""
    by_reason = {r.reason: r for r in RULES}
    return tuple(by_reason[reason] for reason in reasons)


# Serving engines split the query heads over tp like training and the KV heads too when tp
# divides them, but replicate a KV head over tp / num_kv_heads ranks when tp is a multiple of them
# (vLLM's QKVParallelLinear: num_kv_head_replicas = tp // num_kv_heads; TensorRT-LLM and SGLang
# likewise); an MLA model's one latent head is replicated on every rank.
KV_REPLICAS = Rule(
    Reason.TP_KV_REPLICAS,
    "tp",
    lambda x, m: m.is_mla | (m.num_kv_heads % x.tp == 0) | (x.tp % m.num_kv_heads == 0),
    lambda x, m: (
        f"tp={x.tp} neither divides nor is a multiple of num_key_value_heads={m.num_kv_heads}",
        f"use a tp that divides {m.num_kv_heads} or a multiple of it",
    ),
)
# Serving engines split a linear-attention layer's (value) heads over tp and replicate what does
# not divide of its key heads or groups (vLLM mamba_utils.py extra_groups_for_head_shards: "for
# n_groups == 1, this is exactly tp_size - n_groups"), as they replicate KV heads
LINEAR_SERVE = Rule(
    Reason.TP_LINEAR_SERVE,
    "tp",
    lambda x, m: (not m.linear_layers) | (m.linear_v_heads % x.tp == 0),
    lambda x, m: (
        f"tp={x.tp} does not divide the {m.linear_v_heads} linear-attention heads",
        f"use a tp that divides {m.linear_v_heads}",
    ),
)
# A serving pool is sized in blocks of the softmax attention layers' KV, a hybrid's linear states
# paged beside them (vLLM pads a state's page to the attention page); a model whose layers are all
# linear has no such block, and pure state-space serving is not modelled.
ATTENTION_SERVE = Rule(
    Reason.NO_ATTENTION_SERVE,
    "layer_types",
    lambda x, m: m.num_attention_layers > 0,
    lambda x, m: (
        f"all {m.num_layers} layers are linear attention; serving is planned for hybrids with softmax attention",
        'give layer_types at least one "full_attention" layer (pure state-space serving is not modelled)',
    ),
)
SERVING: tuple[Rule, ...] = (
    ATTENTION_SERVE,
    *rules_for(Reason.TP_HEADS),
    KV_REPLICAS,
    LINEAR_SERVE,
    *rules_for(Reason.PP_LAYERS),
)


def _linear_groups_key(m: ModelSpec) -> str:
    """The config.json key of a linear-attention layer's key heads (Mamba-2: its groups of B and C)."""
    return "mamba_n_groups" if m.linear_kind == "mamba2" else "linear_num_key_heads"


def _a2a_heads(x: View, m: ModelSpec) -> tuple[str, str]:
    """The CP_A2A_HEADS rule's message and fix for one plan."""
    q = m.num_heads // x.tp
    kv = q if m.is_mla else m.num_kv_heads // x.tp
    most = math.gcd(q, kv)
    return (
        f"cp_comm a2a splits the heads over cp={x.cp}, but a tp={x.tp} rank holds {q} query and {kv} key-value heads",
        (f"use a cp dividing {most}, or " if most > 1 else "no cp > 1 divides them: use ")
        + "`cp_comm=p2p` (ring attention splits the sequence, not the heads)",
    )


def require(rules: tuple[Rule, ...], x: View, m: ModelSpec | None = None) -> None:
    """Raise :class:`GpuplanError` naming the field and the fix for the first rule broken."""
    rule = first_violation(rules, x, m)
    if rule is not None:
        message, fix = rule.explain(x, m)  # type: ignore[arg-type]
        raise GpuplanError(rule.field, message, fix)


def view(
    plan: Any, seq_len: int = 1, micro_batch: int = 1, global_batch: int | None = None, cp_comm: str = "p2p"
) -> View:
    """One ParallelPlan (and optionally its batch) as the rules read it."""
    return View(
        tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp, ep=plan.ep, vp=plan.vp, sp=plan.sp,
        etp=getattr(plan, "etp", None), folded=getattr(plan, "etp", None) is not None,
        schedule=plan.schedule, seq_len=seq_len, micro_batch=micro_batch, global_batch=global_batch,
        uneven=any(getattr(plan, k, None) is not None for k in ("first_stage_layers", "last_stage_layers", "layout")),
        cp_comm=cp_comm,
    )  # fmt: skip


def check(
    m: ModelSpec, plan: Any, seq_len: int, micro_batch: int = 1, global_batch: int | None = None, cp_comm: str = "p2p"
) -> Rule | None:
    """The first rule a plan breaks (the batch rules only when ``global_batch`` is given)."""
    rules = RULES if global_batch is not None else STRUCTURE + MODEL
    return first_violation(rules, view(plan, seq_len, micro_batch, global_batch, cp_comm), m)


def require_valid(
    m: ModelSpec, plan: Any, seq_len: int, micro_batch: int = 1, global_batch: int | None = None, cp_comm: str = "p2p"
) -> None:
    """Raise for the first rule a plan breaks (the batch rules only when ``global_batch`` is given)."""
    rules = RULES if global_batch is not None else STRUCTURE + MODEL
    require(rules, view(plan, seq_len, micro_batch, global_batch, cp_comm), m)


def require_serving(m: ModelSpec, tp: int, pp: int = 1) -> None:
    """Raise unless ``m`` can be served split ``tp`` x ``pp`` (``SERVING``)."""
    require(SERVING, View(tp=tp, pp=pp), m)


def require_microbatches(plan: Any, microbatches: int) -> None:
    """Raise unless the plan's schedule can run ``microbatches`` per step (the step time's check)."""
    require(BATCH[1:], view(plan, micro_batch=1, global_batch=microbatches * plan.dp))


def reasons(rules: tuple[Rule, ...], x: View, m: ModelSpec | None = None) -> Any:
    """For arrays: the index into ``rules`` of the first rule each plan breaks, -1 where none."""
    import numpy as np

    out = None
    for i, rule in enumerate(reversed(rules)):  # the earliest rule broken wins: write it last
        bad = np.logical_not(rule.ok(x, m))  # type: ignore[arg-type]
        idx = len(rules) - 1 - i
        out = np.where(bad, idx, -1 if out is None else out)
    return out
