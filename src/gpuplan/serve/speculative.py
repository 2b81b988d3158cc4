"""Speculative decoding (Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding"; Chen et al. 2023).

A cheap proposer guesses ``k`` tokens; the target model checks them in one pass over k + 1
positions per sequence and keeps the longest accepted prefix plus one token of its own. With a
per-token acceptance rate ``alpha`` the expected tokens per target pass are

    E = (1 - alpha^(k+1)) / (1 - alpha)            (Leviathan et al. 2023, eq. 1)

and the speedup over plain decoding is E x t_target / (k x t_draft + t_verify), where t_verify is
the target's iteration over (k + 1) x batch rows. At small batches decoding is bandwidth-bound, so
verifying k + 1 tokens costs about as much as one and the speedup approaches E / (1 + k c)
(eq. 2, c = draft/target cost); as the batch grows the target turns compute-bound, verification
costs k + 1 times more, and speculation stops paying. An n-gram (prompt-lookup) proposer costs
nothing on the GPU (c = 0). A model's own multi-token-prediction module (DeepSeek-V3 report,
section 5.4.3: its one MTP depth as the draft, 85-90% of second tokens accepted; SGLang's NextN
and vLLM's ``deepseek_mtp`` run it k times, each pass one block, its projection and the shared LM
head) costs what ``mtp_draft`` builds: a one-block model of its layer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpuplan.errors import require
from gpuplan.serve.steady_state import Point
from gpuplan.serve.timing import Deployment, StepModel, step_model
from gpuplan.specs.model import ModelSpec


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per target pass (accepted drafts plus the target's own token)."""
    require(0 <= alpha <= 1, "acceptance", f"must be in [0, 1], got {alpha}")
    require(k >= 1, "draft_len", f"must be at least 1, got {k}")
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass(frozen=True)
class Speculation:
    method: str  # "draft", "ngram" or "mtp"
    draft_len: int
    acceptance: float
    expected_tokens: float
    speedup: float  # at the planned batch
    break_even_batch: int | None  # smallest batch at which it stops paying (None: pays at every batch tried)
    curve: tuple[tuple[int, float], ...]  # (batch, speedup)


def speedup(target: StepModel, draft: StepModel | None, batch: float, context: float, k: int, alpha: float) -> float:
    plain = target.decode_step(batch, context).seconds
    # the k drafted positions go through like a prompt chunk that reads the cache once per sequence
    verify = target.iteration(
        decode=batch, prefill=batch * k, decode_context=context, prefill_context=context, prefill_seqs=batch * k
    ).seconds
    propose = k * draft.decode_step(batch, context).seconds if draft is not None else 0.0
    return expected_tokens(alpha, k) * plain / (propose + verify)


@dataclass(frozen=True)
class Proposer:
    """What proposes the drafts and what it costs a replica: ``draft`` runs each proposal (None: an
    n-gram lookup, free on the GPU); its weights sit beside the target's on every GPU
    (``weight_bytes``, out of the KV pool) and, for an MTP module, its one attention layer's KV
    beside the target's per token (``kv_scale``)."""

    method: str  # "draft", "ngram" or "mtp"
    draft: StepModel | None
    weight_bytes: float = 0.0
    kv_scale: float = 1.0


def check_proposer(m: ModelSpec, draft_model: ModelSpec | None, ngram: bool, mtp: bool) -> None:
    """At most one proposer, one ``m`` can run: an MTP module it has, a draft of its vocabulary."""
    require(
        (ngram, draft_model is not None, mtp).count(True) <= 1,
        "draft",
        "pick one proposer: a draft model, n-gram or the model's MTP module",
    )
    require(
        not mtp or m.mtp_layers > 0,
        "mtp",
        f"{m.name} has no multi-token-prediction layer (its config's num_nextn_predict_layers is 0)",
        "use `draft_model` or `ngram`",
    )
    # A draft proposes token ids the target verifies: both must share one vocabulary
    require(
        draft_model is None or draft_model.vocab_size == m.vocab_size,
        "draft_model",
        f"{getattr(draft_model, 'name', '')} has a vocabulary of {getattr(draft_model, 'vocab_size', 0):,}"
        f" tokens, {m.name} of {m.vocab_size:,}",
        "use a draft model of the same family (same tokenizer)",
    )


def proposer(d: Deployment, draft_model: ModelSpec | None, ngram: bool, mtp: bool) -> Proposer | None:
    """The proposer a request names (one of a draft model, n-gram, the model's MTP module), or None."""
    check_proposer(d.model, draft_model, ngram, mtp)
    if draft_model is not None:
        from gpuplan.serve.weights import weight_bytes_per_gpu

        dd = Deployment(draft_model, d.gpu, d.weights, d.kv, d.tp, 1)
        return Proposer("draft", step_model(dd), weight_bytes_per_gpu(draft_model, d.weights, d.tp, 1))
    if mtp:
        from gpuplan.serve.weights import mtp_weight_bytes

        m = d.model
        draft = step_model(Deployment(mtp_draft(m), d.gpu, d.weights, d.kv, d.tp, 1, d.dp_attention))
        layers = m.num_attention_layers
        return Proposer("mtp", draft, mtp_weight_bytes(m, d.weights, d.tp, d.dp_attention), (layers + 1) / layers)
    if ngram:
        return Proposer("ngram", None)
    return None


def accepted_tokens(rng: np.random.Generator, alpha: float, k: int, n: int) -> np.ndarray:
    """Tokens each of ``n`` sequences keeps from one target pass: the accepted prefix of ``k`` drafts
    (each accepted with probability ``alpha`` while the ones before it were) plus the target's own
    token, 1 to k + 1; its mean is ``expected_tokens(alpha, k)``."""
    # the first rejection among k drafts, or k when every draft is accepted
    rejected = rng.random((n, k)) >= alpha
    first = np.where(rejected.any(axis=1), rejected.argmax(axis=1), k)
    return first + 1


def mtp_draft(m: ModelSpec) -> ModelSpec:
    """The model's multi-token-prediction module as a draft model: one block of its MTP layer's
    kind (``ModelSpec.mtp_kind``: softmax attention, the last layer's MLP) with the model's
    embedding and LM head, which a draft step reads as the module does. Its 2h -> h projection
    (2 h^2 weights, under 1% of a DeepSeek-V3 MoE block's) is left out."""
    moe = m.mtp_kind.moe
    return replace(
        m,
        name=f"{m.name} MTP",
        num_layers=1,
        moe_layers=(0,) if moe else (),
        first_dense_layers=0,
        moe_layer_freq=1,
        linear_layers=(),
        num_sliding_layers=0,
        mtp_layers=0,
        vision=None,
        notes=(),
    )


def speculation(
    target: StepModel,
    draft: StepModel | None,
    batch: int,
    context: float,
    k: int,
    alpha: float,
    max_batch: int,
    method: str | None = None,
) -> Speculation:
    curve, stop, b = [], None, 1
    while b <= max(max_batch, 1):
        s = speedup(target, draft, b, context, k, alpha)
        curve.append((b, s))
        if stop is None and s < 1:
            stop = b
        b *= 2
    return Speculation(
        method or ("draft" if draft is not None else "ngram"),
        k,
        alpha,
        expected_tokens(alpha, k),
        speedup(target, draft, batch, context, k, alpha),
        stop,
        tuple(curve),
    )


def with_speculation(
    p: Point, target: StepModel, draft: StepModel | None, context: float, k: int, alpha: float
) -> Point:
    """The steady-state point ``p`` with its decode steps speculated: the decode-alone part of an
    iteration (``p.decode_share``) shrinks by the speedup at the point's decoding batch, the
    prompts' prefill does not; TTFT's prefill is unchanged, its wait for the iterations in flight
    (``in_flight_s``) is for speculating ones. serve-sim runs the same per iteration (``Speculating``)."""
    s = speedup(target, draft, max(p.decoding, 1.0), context, k, alpha)
    decode = p.decode_share * p.iteration_s
    iteration = p.iteration_s - decode * (1 - 1 / s)
    tpot = max(p.tpot_s - decode * (1 - 1 / s), 0.0)
    # a new request waits out the iterations in flight: a speculating one drafts and verifies
    # expected_tokens per sequence, so it lasts that many of the speculated token gaps
    cycle = tpot * expected_tokens(alpha, k) / p.tpot_s if p.tpot_s > 0 else 1.0
    return replace(
        p,
        ttft_s=p.ttft_s + p.in_flight_s * (cycle - 1),
        in_flight_s=p.in_flight_s * cycle,
        iteration_s=iteration,
        tpot_s=tpot,
        output_tokens_per_s=p.output_tokens_per_s * p.iteration_s / iteration,
        input_tokens_per_s=p.input_tokens_per_s * p.iteration_s / iteration,
        decode_share=decode / s / iteration,
    )
