"""Pipeline schedules as per-rank action lists.

An action is a forward (F), an input-gradient backward (B), a weight-gradient backward (W), a
full backward (BW = B then W, as 1F1B runs it), or an overlapped pair (FB: one chunk's forward
and another's backward run together, DualPipe's communication-hiding unit). Every action names a
micro-batch and a *virtual stage* of a *stream*: a stream is one pipeline the micro-batch flows
through (DualPipe has two, in opposite directions), a virtual stage one model chunk; ``rank_of``
says which rank holds each stage.

Definitions followed:

* GPipe (Huang et al. 2019): all forwards, then all backwards.
* 1F1B (PipeDream-Flush; Narayanan et al. 2021, section 2.2): rank i runs p - 1 - i forwards,
  then alternates one forward and one backward, then drains the backwards (Megatron-LM's
  ``forward_backward_pipelining_without_interleaving``).
* Interleaved 1F1B (Narayanan et al. 2021, section 2.2.2): v chunks per rank (stage c x p + i on
  rank i), micro-batches in groups of p per chunk, (p - i - 1) x 2 + (v - 1) x p warm-up
  forwards (Megatron-LM's ``forward_backward_pipelining_with_interleaving``); needs m % p == 0.
* ZB-H1 and ZB-H2 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3): backward split
  into B and W; in the steady state rank i runs (F_x, B_{x-d}, W_{x-e}) with d = p - 1 - i,
  e = p - 1 (H1: 1F1B's memory) or d = 2(p - 1 - i), e = 2(p - 1) (H2: about twice the memory,
  no bubble), warm-up and cool-down being the same triples with the out-of-range parts left out.
* ZB-V (Qi et al. 2023, section 6, and Qi et al. 2024, "Pipeline Parallelism with Controllable
  Memory"): a V-shaped placement of 2p chunks (chunk c < p on rank c, chunk c >= p on rank
  2p - 1 - c) and the paper's handcrafted order, zero bubble at F = B = W with 1F1B's memory.
* DualPipe (DeepSeek-V3 report, section 3.2.1, and the reference implementation
  deepseek-ai/DualPipe): two streams fed from both ends, each rank holding stage i of one and stage
  p - 1 - i of the other; eight steps (nF0, nF0F1, nB1W1F1, nF0B1F1B0 with overlapped pairs,
  nB1F1B0, nB1B0, nWB0, nW). DualPipeV ("cut-in-half" DualPipe, Qi et al. 2025): one stream in a
  V over 2p chunks, the same eight steps on p ranks. DualPipe needs an even number of ranks and
  m >= 2p micro-batches (m even); DualPipeV needs m >= 2p.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import require
from gpuplan.specs import schedules as registry

# Every schedule this module builds, as registered (gpuplan.specs.schedules: names, aliases and
# what each needs of the stages and micro-batches).
SCHEDULES = tuple(s.name for s in registry.REGISTRY)


@dataclass(frozen=True)
class Op:
    """One unit of work of one micro-batch on one virtual stage."""

    kind: str  # F, B, W, BW
    mb: int
    stage: int
    stream: int = 0

    @property
    def key(self) -> tuple:
        return self.kind, self.stream, self.stage, self.mb

    def label(self) -> str:
        return f"{self.kind}{self.mb}" + (f"/{self.stream}" if self.stream else "")


@dataclass(frozen=True)
class Action:
    """What a rank runs next: one op, or two overlapped (F of one chunk with a backward of another)."""

    ops: tuple[Op, ...]

    @property
    def kind(self) -> str:
        return "FB" if len(self.ops) > 1 else self.ops[0].kind


@dataclass(frozen=True)
class Schedule:
    name: str
    ranks: int
    microbatches: int  # of the whole step (DualPipe: half per stream)
    stages: int  # virtual stages per stream
    streams: int
    rank_of: tuple[tuple[int, ...], ...]  # [stream][stage] -> rank
    actions: tuple[tuple[Action, ...], ...]  # per rank, in order
    chunk_fraction: float  # one virtual stage's share of a rank's layers (1/v; DualPipe: 1, each copy is a stage)
    param_copies: int = 1  # DualPipe holds two copies of the weights


def _one(kind: str, mb: int, stage: int, stream: int = 0) -> Action:
    return Action((Op(kind, mb, stage, stream),))


def _check(p: int, m: int, name: str | None = None) -> None:
    require(isinstance(p, int) and p >= 1, "stages", f"must be a positive integer, got {p!r}")
    require(isinstance(m, int) and m >= 1, "microbatches", f"must be a positive integer, got {m!r}")
    if name is not None:  # the registered schedule's needs
        spec = registry.get(name)
        require(
            not spec.even_ranks or (p >= 2 and p % 2 == 0),
            "stages",
            f"{name} needs an even number of ranks, got {p}",
            "use an even `stages`",
        )
        problem = spec.microbatch_problem(p, m)
        fix = (
            f"use a multiple of {p}"
            if spec.microbatches_per_group
            else f"use `microbatches={spec.min_microbatches(p)}` or more"
            + (" (even)" if spec.even_microbatches else "")
        )
        require(problem is None, "microbatches", f"{name} {problem}", fix)


def gpipe(p: int, m: int) -> Schedule:
    _check(p, m)
    acts = tuple(tuple(_one("F", x, r) for x in range(m)) + tuple(_one("BW", x, r) for x in range(m)) for r in range(p))
    return Schedule("gpipe", p, m, p, 1, (tuple(range(p)),), acts, 1.0)


def _triples(p: int, m: int, r: int, d: int, e: int | None) -> tuple[Action, ...]:
    """(F_x, B_{x-d}, W_{x-e}) for x = 0, 1, ...; out-of-range parts left out. e=None: full backward."""
    out: list[Action] = []
    last = m + (d if e is None else max(d, e))
    for x in range(last):
        if x < m:
            out.append(_one("F", x, r))
        if 0 <= x - d < m:
            out.append(_one("BW" if e is None else "B", x - d, r))
        if e is not None and 0 <= x - e < m:
            out.append(_one("W", x - e, r))
    return tuple(out)


def one_f_one_b(p: int, m: int) -> Schedule:
    _check(p, m)
    acts = tuple(_triples(p, m, r, min(p - 1 - r, m), None) for r in range(p))
    return Schedule("1f1b", p, m, p, 1, (tuple(range(p)),), acts, 1.0)


def zb_h1(p: int, m: int) -> Schedule:
    _check(p, m)
    acts = tuple(_triples(p, m, r, p - 1 - r, p - 1) for r in range(p))
    return Schedule("zb-h1", p, m, p, 1, (tuple(range(p)),), acts, 1.0)


def zb_h2(p: int, m: int) -> Schedule:
    _check(p, m, "zb-h2")
    acts = tuple(_triples(p, m, r, 2 * (p - 1 - r), 2 * (p - 1)) for r in range(p))
    return Schedule("zb-h2", p, m, p, 1, (tuple(range(p)),), acts, 1.0)


def interleaved(p: int, m: int, v: int) -> Schedule:
    """Megatron-LM's interleaved 1F1B: chunk c of rank r is virtual stage c x p + r."""
    require(isinstance(v, int) and v >= 1, "vp", f"must be a positive integer, got {v!r}")
    _check(p, m, "interleaved" if v > 1 else None)
    total = m * v

    def fwd(k: int) -> tuple[int, int]:  # k-th forward of a rank: (chunk, micro-batch)
        group, within = divmod(k, p * v)
        return (k // p) % v, group * p + within % p

    def bwd(k: int) -> tuple[int, int]:
        c, mb = fwd(k)
        return v - 1 - c, mb

    acts = []
    for r in range(p):
        warm = min(total, (p - r - 1) * 2 + (v - 1) * p) if v > 1 else min(total, p - r - 1)
        seq: list[Action] = []
        for k in range(warm):
            c, mb = fwd(k)
            seq.append(_one("F", mb, c * p + r))
        for k in range(total - warm):
            c, mb = fwd(k + warm)
            seq.append(_one("F", mb, c * p + r))
            c, mb = bwd(k)
            seq.append(_one("BW", mb, c * p + r))
        for k in range(total - warm, total):
            c, mb = bwd(k)
            seq.append(_one("BW", mb, c * p + r))
        acts.append(tuple(seq))
    rank_of = (tuple(s % p for s in range(p * v)),)
    return Schedule("interleaved" if v > 1 else "1f1b", p, m, p * v, 1, rank_of, tuple(acts), 1 / v)


def zb_v(p: int, m: int) -> Schedule:
    """The handcrafted ZB-V (module docstring). Rank r, holding chunk 0 = stage r and chunk 1 =
    stage 2p - 1 - r, runs: 2(p - r) - 1 forwards of chunk 0; r pairs (F1, F0); p - r triples
    (F1, B1, W1); then the steady state (F0, B0, W0, F1, B1, W1) until every forward is issued;
    then r pairs (B0, B1), p - r pairs (B0, W0) and the remaining Ws. The phase lengths assume at
    least 2p - 1 micro-batches; with fewer, the order is built for 2p - 1 and the micro-batches that
    do not exist are left out (as PyTorch's ScheduleZBVZeroBubble does). At F = B = W every rank
    idles (p - 1) F / 2, the time the first micro-batch takes to reach the last rank, and holds p
    micro-batches' activations (Qi et al. 2024, section 6: "zero bubble" at 1F1B's memory)."""
    _check(p, m)
    n = max(m, 2 * p - 1)
    acts = []
    for r in range(p):
        chunk_stage = (r, 2 * p - 1 - r)
        issued = {(k, c): 0 for k in "FBW" for c in (0, 1)}
        seq: list[Action] = []

        def run(*tokens: str) -> None:  # "F0", "B1", ...: the next micro-batch of that chunk
            for tok in tokens:
                key = (tok[0], int(tok[1]))
                x = issued[key]
                issued[key] += 1
                if x < m:
                    seq.append(_one(tok[0], x, chunk_stage[key[1]]))

        run(*["F0"] * (2 * (p - r) - 1))
        run(*["F1", "F0"] * r)
        run(*["F1", "B1", "W1"] * (p - r))
        while issued["F", 1] < issued["F", 0] or issued["F", 0] < n:
            run(*(["F0"] if issued["F", 0] < n else []), "B0", "W0", "F1", "B1", "W1")
        run(*["B0", "B1"] * r)
        run(*["B0", "W0"] * (p - r))
        run(*["W1"] * (issued["B", 1] - issued["W", 1]))
        run(*["W0"] * (issued["B", 0] - issued["W", 0]))
        acts.append(tuple(seq))
    rank_of = tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p))
    return Schedule("zb-v", p, m, 2 * p, 1, (rank_of,), tuple(acts), 0.5)


def _dual_steps(half_rank: int, half_ranks: int, n: int, ranks: int, first_special: bool) -> list[tuple]:
    """DualPipe's eight steps for one rank as (kind, chunk[, zero-bubble]) tokens; n micro-batches
    per chunk (DualPipe: per direction; DualPipeV: all)."""
    seq: list[tuple] = []
    seq += [("F", 0)] * ((half_ranks - half_rank - 1) * 2)  # 1: nF0
    for _ in range(half_rank + 1):  # 2: nF0F1
        seq += [("F", 0), ("F", 1)]
    for _ in range(half_ranks - half_rank - 1):  # 3: nB1W1F1 (zero bubble)
        seq += [("B", 1, True), ("W",), ("F", 1)]
    for i in range(n - ranks + half_rank + 1):  # 4: nF0B1F1B0
        if i == 0 and first_special:  # not overlapped, to shorten the bubble
            seq += [("F", 0), ("B", 1, False)]
        else:
            seq.append(("FB", 0, 1))
        seq.append(("FB", 1, 0))
    for _ in range(half_ranks - half_rank - 1):  # 5: nB1F1B0
        seq += [("B", 1, False), ("FB", 1, 0)]
    zb = False
    steps6 = half_rank + 1
    for i in range(steps6):  # 6: nB1B0, the second half with zero bubble
        if i == steps6 // 2 and half_rank % 2 == 1:
            zb = True
        seq.append(("B", 1, zb))
        if i == steps6 // 2 and half_rank % 2 == 0:
            zb = True
        seq.append(("B", 0, zb))
    for _ in range(half_ranks - half_rank - 1):  # 7: nWB0
        seq += [("W",), ("B", 0, True)]
    seq += [("W",)] * (half_rank + 1)  # 8: nW
    return seq


def _expand(seq: list[tuple], chunk_of: dict[int, tuple[int, int]]) -> tuple[Action, ...]:
    """Tokens to actions: micro-batches in order per chunk; W pops the oldest split backward."""
    nf, nb = {0: 0, 1: 0}, {0: 0, 1: 0}
    wq: list[Op] = []
    out: list[Action] = []

    def fwd(c: int) -> Op:
        stream, stage = chunk_of[c]
        op = Op("F", nf[c], stage, stream)
        nf[c] += 1
        return op

    def bwd(c: int, zb: bool) -> Op:
        stream, stage = chunk_of[c]
        op = Op("B" if zb else "BW", nb[c], stage, stream)
        nb[c] += 1
        if zb:
            wq.append(Op("W", op.mb, stage, stream))
        return op

    for tok in seq:
        if tok[0] == "F":
            out.append(Action((fwd(tok[1]),)))
        elif tok[0] == "B":
            out.append(Action((bwd(tok[1], tok[2]),)))
        elif tok[0] == "W":
            out.append(Action((wq.pop(0),)))
        else:  # overlapped forward of one chunk and full backward of the other
            out.append(Action((fwd(tok[1]), bwd(tok[2], False))))
    return tuple(out)


def dualpipe(p: int, m: int) -> Schedule:
    _check(p, m, "dualpipe")
    half = p // 2
    acts = []
    for r in range(p):
        second = r >= half
        hr = p - 1 - r if second else r
        # stream 0 flows rank 0 -> p-1 (stage r on rank r); stream 1 flows p-1 -> 0 (stage p-1-r on rank r).
        # Chunk 0 is the stream this rank's half feeds.
        own0, own1 = (0, r), (1, p - 1 - r)
        chunk_of = {0: own1, 1: own0} if second else {0: own0, 1: own1}
        acts.append(_expand(_dual_steps(hr, half, m // 2, p, hr == half - 1), chunk_of))
    rank_of = (tuple(range(p)), tuple(p - 1 - s for s in range(p)))
    return Schedule("dualpipe", p, m, p, 2, rank_of, tuple(acts), 1.0, param_copies=2)


def dualpipev(p: int, m: int) -> Schedule:
    _check(p, m, "dualpipev")
    acts = []
    for r in range(p):
        chunk_of = {0: (0, r), 1: (0, 2 * p - 1 - r)}
        acts.append(_expand(_dual_steps(r, p, m, 2 * p, r == p - 1), chunk_of))
    rank_of = (tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p)),)
    return Schedule("dualpipev", p, m, 2 * p, 1, rank_of, tuple(acts), 0.5)


def build(name: str, stages: int, microbatches: int, vp: int = 1) -> Schedule:
    """A schedule by name or alias (gpuplan.specs.schedules); ``vp`` only for interleaved. Orders
    are fixed: the costs only come in when the schedule is simulated."""
    spec = registry.get(name)
    if spec.needs_vp:
        require(vp >= 2, "vp", "interleaved needs `vp=2` or more", "pass `vp`, or use `schedule=1f1b`")
        return interleaved(stages, microbatches, vp)
    return globals()[spec.builder](stages, microbatches)
