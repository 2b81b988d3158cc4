"""Execute a schedule's action lists with given costs and report the timeline.

Each rank runs its actions in order; an action starts when the rank is free and every input is
ready: a forward needs the previous stage's forward of the same micro-batch, a backward the next
stage's backward (or, on the last stage, the forward), a W its own B. An input produced on
another rank arrives ``p2p_s`` after it is produced (sends are asynchronous: the sender does not
wait). An overlapped pair (FB) takes ``overlap`` (DualPipe's F&B) or, by default, F + B + W.

Costs are per micro-batch for a whole pipeline stage (one rank's layers); a virtual stage (one of
v chunks) costs its fraction. ``b`` is the *input-gradient* backward only and ``w`` the weight-
gradient part, so a full backward costs b + w; ``from_full_backward`` converts the other
convention (DualPipe's table writes B for the full backward).

Activations are counted from a forward's start to the end of the backward that frees them (the
full backward, or W for a split one), in micro-batches of one stage.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplan.errors import GpuplanError, require
from gpuplan.pipeline.schedules import Action, Op, Schedule


def _per_rank(x: float | Sequence[float], p: int, name: str) -> tuple[float, ...]:
    vals = tuple(float(v) for v in x) if isinstance(x, Sequence) else (float(x),) * p
    require(len(vals) == p, name, f"needs one value per rank ({p}), got {len(vals)}")
    require(all(v >= 0 for v in vals), name, f"times must not be negative, got {vals}")
    return vals


@dataclass(frozen=True)
class Costs:
    f: float | Sequence[float] = 1.0
    b: float | Sequence[float] = 1.0  # input-gradient backward
    w: float | Sequence[float] = 1.0  # weight-gradient backward
    overlap: float | Sequence[float] | None = None  # one overlapped F&B pair (default F + B + W)
    p2p_s: float = 0.0

    @classmethod
    def from_full_backward(cls, f, b_full, w, overlap=None, p2p_s: float = 0.0) -> Costs:
        """Take the full backward (input + weight gradients) and the weight part."""
        b = np.asarray(b_full, dtype=float) - np.asarray(w, dtype=float)  # scalars or one per stage
        require(
            bool((b >= 0).all()),
            "w",
            "the weight-gradient part `w` cannot exceed the full backward `b_full` (input + weight gradients)",
            "give `w` at most `b_full`",
        )
        return cls(f, b.tolist() if b.ndim else float(b), w, overlap, p2p_s)


@dataclass(frozen=True)
class Event:
    rank: int
    start: float
    end: float
    action: Action


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    start: float
    end: float
    label: str


@dataclass(frozen=True)
class Timeline:
    schedule: Schedule
    events: tuple[Event, ...]
    transfers: tuple[Transfer, ...]
    makespan_s: float
    busy_s: tuple[float, ...]
    peak_activations: tuple[float, ...]  # micro-batches of one stage, per rank
    activation_bytes_per_microbatch: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def idle_s(self) -> tuple[float, ...]:
        return tuple(self.makespan_s - b for b in self.busy_s)

    @property
    def bubble_fraction(self) -> float:
        return sum(self.idle_s) / (len(self.busy_s) * self.makespan_s) if self.makespan_s else 0.0

    @property
    def bubble_ratio(self) -> float:
        """Idle time over busy time, summed over ranks (the bubble as a share of the work, where
        :attr:`bubble_fraction` is a share of the wall time)."""
        return sum(self.idle_s) / sum(self.busy_s) if sum(self.busy_s) else 0.0

    @property
    def peak_activation_bytes(self) -> tuple[float, ...] | None:
        if self.activation_bytes_per_microbatch is None:
            return None
        return tuple(a * self.activation_bytes_per_microbatch for a in self.peak_activations)

    def to_dict(self) -> dict:
        s = self.schedule
        return {
            "schedule": s.name,
            "stages": s.ranks,
            "microbatches": s.microbatches,
            "virtual_stages": s.stages,
            "streams": s.streams,
            "makespan_s": self.makespan_s,
            "busy_s": list(self.busy_s),
            "idle_s": list(self.idle_s),
            "bubble_fraction": self.bubble_fraction,
            "peak_activations": list(self.peak_activations),
            "peak_activation_bytes": (list(self.peak_activation_bytes) if self.peak_activation_bytes else None),
            "parameter_copies": [s.param_copies] * s.ranks,
            # Every action, as columns (the timeline pictures read them; a Chrome trace has more)
            "events": {
                "rank": [e.rank for e in self.events],
                "kind": [e.action.kind for e in self.events],
                "start": [e.start for e in self.events],
                "end": [e.end for e in self.events],
                "microbatch": ["/".join(str(o.mb) for o in e.action.ops) for e in self.events],
            },
        }


def _deps(op: Op, last_stage: int) -> list[tuple]:
    if op.kind == "F":
        return [("F", op.stream, op.stage - 1, op.mb)] if op.stage > 0 else []
    if op.kind in ("B", "BW"):
        up = ("B", op.stream, op.stage + 1, op.mb) if op.stage < last_stage else ("F", op.stream, op.stage, op.mb)
        return [up, ("F", op.stream, op.stage, op.mb)]
    return [("B", op.stream, op.stage, op.mb)]  # W


KINDS = ("F", "B", "W", "BW", "FB")


@dataclass(frozen=True)
class Compiled:
    """A schedule as arrays over its actions, in levels a vectorised pass can run one at a time:
    every action's inputs and its rank's previous action lie in earlier levels."""

    rank: np.ndarray
    kind: np.ndarray  # index into KINDS
    prev: np.ndarray  # the rank's previous action (n: none)
    deps: np.ndarray  # (actions, 3) producing actions (n: none)
    cross: np.ndarray  # (actions, 3) whether that input comes from another rank
    levels: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]  # (actions, prev, deps, cross) per level
    order: tuple[tuple[int, int], ...]  # action index -> (rank, position in the rank's list)


@functools.lru_cache(maxsize=256)
def compile_schedule(s: Schedule) -> Compiled:
    flat = [(r, i, a) for r in range(s.ranks) for i, a in enumerate(s.actions[r])]
    n = len(flat)
    producer: dict[tuple, int] = {}
    for idx, (_, _, a) in enumerate(flat):
        for op in a.ops:
            producer[("B" if op.kind == "BW" else op.kind, op.stream, op.stage, op.mb)] = idx
    rank = np.array([r for r, _, _ in flat], dtype=np.int64)
    kind = np.array([KINDS.index(a.kind) for _, _, a in flat], dtype=np.int64)
    prev = np.full(n, n, dtype=np.int64)
    deps = np.full((n, 3), n, dtype=np.int64)
    last = s.stages - 1
    for idx, (r, i, a) in enumerate(flat):
        if i:
            prev[idx] = idx - 1
        ds = [producer.get(d, -1) for op in a.ops for d in _deps(op, last)]
        ds = [d for d in dict.fromkeys(ds) if d != idx]
        if -1 in ds:
            raise GpuplanError("schedule", f"{s.name}: rank {r} runs {a.ops[0].label()} whose input no rank produces")
        for j, d in enumerate(ds[:3]):
            deps[idx, j] = d
    cross = (deps < n) & (rank[np.minimum(deps, n - 1)] != rank[:, None])
    # levels: longest chain of inputs and rank order before each action (a cycle = deadlock)
    level = np.full(n, -1, dtype=np.int64)
    preds = [[int(x) for x in (prev[i], *deps[i]) if x < n] for i in range(n)]
    users: list[list[int]] = [[] for _ in range(n)]
    missing = np.zeros(n, dtype=np.int64)
    for i, ps in enumerate(preds):
        missing[i] = len(ps)
        for q in ps:
            users[q].append(i)
    frontier = [i for i in range(n) if missing[i] == 0]
    levels, depth = [], 0
    while frontier:
        levels.append(np.array(frontier, dtype=np.int64))
        for i in frontier:
            level[i] = depth
        nxt = []
        for i in frontier:
            for u in users[i]:
                missing[u] -= 1
                if missing[u] == 0:
                    nxt.append(u)
        frontier, depth = nxt, depth + 1
    if (level < 0).any():
        stuck = sorted({flat[i][0] for i in np.nonzero(level < 0)[0]})
        raise GpuplanError("schedule", f"{s.name} deadlocks: ranks {stuck} wait on each other")
    per_level = tuple((idx, prev[idx], deps[idx], cross[idx].astype(np.float64)) for idx in levels)
    # the result is cached and shared: read-only arrays, so no caller can change the next one's
    for a in (rank, kind, prev, deps, cross, *(x for lv in per_level for x in lv)):
        a.setflags(write=False)
    return Compiled(rank, kind, prev, deps, cross, per_level, tuple((r, i) for r, i, _ in flat))


def run(c: Compiled, durations: np.ndarray, p2p_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Start and end time of every action (longest path, one level at a time)."""
    n = len(durations)
    end = np.zeros(n + 1)  # slot n: "none", ready at 0
    start = np.zeros(n)
    for idx, prev, deps, cross in c.levels:
        inputs = end[deps] + cross * p2p_s if p2p_s else end[deps]
        ready = np.maximum(end[prev], inputs.max(axis=1))
        start[idx] = ready
        end[idx] = ready + durations[idx]
    return start, end[:n]


def durations(s: Schedule, c: Compiled, costs: Costs) -> np.ndarray:
    p = s.ranks
    f, b, w = (np.array(_per_rank(x, p, n)) for x, n in ((costs.f, "f"), (costs.b, "b"), (costs.w, "w")))
    ov = np.array(_per_rank(costs.overlap, p, "overlap")) if costs.overlap is not None else f + b + w
    require(costs.p2p_s >= 0, "p2p", "must not be negative")
    table = s.chunk_fraction * np.stack([f, b, w, b + w, ov])  # (KINDS, ranks)
    return table[c.kind, c.rank]


def simulate(s: Schedule, costs: Costs, activation_bytes_per_microbatch: float | None = None) -> Timeline:
    c = compile_schedule(s)
    start, end = run(c, durations(s, c, costs), costs.p2p_s)
    events, transfers = [], []
    for idx, (r, i) in enumerate(c.order):
        a = s.actions[r][i]
        events.append(Event(r, float(start[idx]), float(end[idx]), a))
        for j in range(3):
            d = c.deps[idx, j]
            if d < len(end) and c.cross[idx, j]:
                src = int(c.rank[d])
                transfers.append(
                    Transfer(
                        src,
                        r,
                        float(end[d]),
                        float(end[d]) + costs.p2p_s,
                        ("act " if a.kind == "F" else "grad ") + a.ops[-1].label(),
                    )
                )
    makespan = float(end.max())
    busy = np.bincount(c.rank, weights=end - start, minlength=s.ranks)
    return Timeline(
        s,
        tuple(events),
        tuple(transfers),
        makespan,
        tuple(float(x) for x in busy),
        _peaks(s, events),
        activation_bytes_per_microbatch,
    )


def _peaks(s: Schedule, events: list[Event]) -> tuple[float, ...]:
    """Most activations held at once per rank: +1 chunk at a forward's start, -1 when the backward
    that frees it (BW or W) ends."""
    out = []
    for r in range(s.ranks):
        deltas = []
        for e in events:
            if e.rank != r:
                continue
            for op in e.action.ops:
                if op.kind == "F":
                    deltas.append((e.start, 1, 1))
                elif op.kind in ("BW", "W"):
                    deltas.append((e.end, 0, -1))  # frees sort before allocations at the same time
        held = peak = 0
        for _, _, d in sorted(deltas):
            held += d
            peak = max(peak, held)
        out.append(peak * s.chunk_fraction)
    return tuple(out)
