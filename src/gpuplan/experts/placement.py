"""MoE expert placement: how many replicas each expert gets and which GPU holds each replica.

The problem (DeepSeek-V3 report, section 3.4; DeepSeek's EPLB): given each layer's per-expert
token loads, spread ``replicas`` physical expert slots over ``gpus`` GPUs (equal slots per GPU) so
that the most loaded GPU carries as little as possible. Two policies, as EPLB has:

* hierarchical (group-limited routing): expert groups are packed onto nodes first, so a token's
  group-limited routing stays on few nodes; within each node, replicas go to the heaviest experts
  and are packed onto the node's GPUs;
* global: replicas over all experts, packed onto all GPUs.

Replica counts: each extra replica goes to the expert with the highest load per replica (the
greedy that minimises the largest load per replica). Packing: longest-processing-time first
(heaviest replica to the least loaded GPU with a free slot, Graham 1969) *never onto a GPU that
already holds that expert* (EPLB's greedy can do that, which wastes the replica), then pairwise
swaps between the most loaded GPU and the others while they lower its load. The packing runs from
two starts (the plain LPT order when it happens to respect the constraint, and the constrained
one, and a round-robin deal that is always valid) and keeps the best; all of it is vectorised over
layers with numpy. An expert gets at most as many replicas as there are GPUs to hold them apart.

A replica carries load / replicas of its expert (tokens are split evenly across replicas).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplan.errors import require

POLICIES = ("hierarchical", "global")


@dataclass(frozen=True)
class Placement:
    policy: str
    phy2log: np.ndarray  # (layers, replicas): the logical expert in each physical slot (slot = gpu x per_gpu + i)
    log2phy: np.ndarray  # (layers, experts, max replicas): slots of each expert, -1 padded
    counts: np.ndarray  # (layers, experts) replicas per expert
    gpu_load: np.ndarray  # (layers, gpus)
    node_load: np.ndarray  # (layers, nodes)
    gpus: int
    nodes: int

    @property
    def balance(self) -> np.ndarray:
        """Max GPU load over mean GPU load, per layer (1.0 is perfect)."""
        mean = self.gpu_load.mean(axis=1)
        return np.where(mean > 0, self.gpu_load.max(axis=1) / np.where(mean > 0, mean, 1), 1.0)


def replicate(load: np.ndarray, slots: int, most: int) -> np.ndarray:
    """Replica counts (layers, experts) summing to ``slots``: each extra replica to the expert with
    the highest load per replica, at most ``most`` (the GPUs that can hold them apart)."""
    n_layers, n_exp = load.shape
    require(
        slots <= n_exp * most,
        "replicas",
        f"{slots} replicas of {n_exp} experts would put two copies of an expert on one of {most} GPUs",
        f"use at most {n_exp * most} replicas",
    )
    counts = np.ones((n_layers, n_exp), dtype=np.int64)
    rows = np.arange(n_layers)
    for _ in range(slots - n_exp):
        counts[rows, np.argmax(np.where(counts < most, load / counts, -np.inf), axis=1)] += 1
    return counts


def _expand(load: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-replica (layers, replicas) expert ids and loads, replicas of an expert side by side."""
    n_layers, n_exp = load.shape
    ids = np.stack([np.repeat(np.arange(n_exp), counts[l]) for l in range(n_layers)])
    per = load / counts
    return ids, np.take_along_axis(per, ids, axis=1)


def _lpt(w: np.ndarray, ids: np.ndarray, bins: int, distinct: bool) -> np.ndarray | None:
    """Bin of each item: heaviest first onto the least loaded bin with a free slot (and, with
    ``distinct``, without that expert). None if some layer gets stuck."""
    n_layers, n_items = w.shape
    cap = n_items // bins
    n_ids = int(ids.max()) + 1
    order = np.argsort(-w, axis=1, kind="stable")
    load = np.zeros((n_layers, bins))
    count = np.zeros((n_layers, bins), dtype=np.int64)
    has = np.zeros((n_layers, bins, n_ids), dtype=bool)
    out = np.empty((n_layers, n_items), dtype=np.int64)
    rows = np.arange(n_layers)
    for t in range(n_items):
        item = order[:, t]
        e = ids[rows, item]
        ok = count < cap
        if distinct:
            ok &= ~has[rows, :, e]
        if not ok.any(axis=1).all():
            return None
        b = np.argmin(np.where(ok, load, np.inf), axis=1)
        out[rows, item] = b
        load[rows, b] += w[rows, item]
        count[rows, b] += 1
        has[rows, b, e] = True
    return out


def _improve(w: np.ndarray, ids: np.ndarray, where: np.ndarray, bins: int, rounds: int = 200) -> np.ndarray:
    """Swap a replica on the most loaded bin with one on a lighter bin while that lowers the pair's
    maximum below the current maximum (keeping every expert at most once per bin). Layers that
    stop improving drop out; candidates are the replicas on the ``near`` lightest bins."""
    n_items = w.shape[1]
    cap = n_items // bins
    n_ids = int(ids.max()) + 1
    near = min(bins - 1, 8)
    where = where.copy()
    act = np.arange(w.shape[0])
    for _ in range(rounds):
        if not len(act):
            break
        wa, ea, ba = w[act], ids[act], where[act]
        n = len(act)
        rows = np.arange(n)
        load = np.zeros((n, bins))
        np.add.at(load, (rows[:, None], ba), wa)
        has = np.zeros((n, bins, n_ids), dtype=bool)
        has[rows[:, None], ba, ea] = True
        by_load = np.argsort(load, axis=1)
        top = by_load[:, -1]
        light = by_load[:, :near]  # (n, near)
        # items on the top bin, and items on the light bins, as indices
        rank = np.argsort(ba, axis=1, kind="stable")  # items grouped by bin, cap each
        grouped = rank.reshape(n, bins, cap)
        on_top = grouped[rows, top]  # (n, cap)
        cand = grouped[rows[:, None], light].reshape(n, near * cap)  # (n, near*cap)
        wi = np.take_along_axis(wa, on_top, axis=1)[:, :, None]
        ei = np.take_along_axis(ea, on_top, axis=1)[:, :, None]
        wj = np.take_along_axis(wa, cand, axis=1)[:, None, :]
        ej = np.take_along_axis(ea, cand, axis=1)[:, None, :]
        bj = np.take_along_axis(ba, cand, axis=1)[:, None, :]
        delta = wi - wj
        top_load = load[rows, top][:, None, None]
        other = np.take_along_axis(load, bj[:, 0, :], axis=1)[:, None, :]
        new_peak = np.maximum(top_load - delta, other + delta)
        ok = (delta > 0) & (new_peak < top_load - 1e-12) & (ei != ej)
        ok &= ~has[rows[:, None, None], bj, ei]  # expert i not already on j's bin
        ok &= ~has[rows[:, None, None], top[:, None, None], ej]  # nor expert j on the top bin
        score = np.where(ok, new_peak, np.inf).reshape(n, -1)
        best = np.argmin(score, axis=1)
        go = np.isfinite(score[rows, best])
        r = rows[go]
        i = on_top[r, best[go] // cand.shape[1]]
        j = cand[r, best[go] % cand.shape[1]]
        li = act[go]
        bi = where[li, i].copy()
        where[li, i] = where[li, j]
        where[li, j] = bi
        act = li
    return where


def pack(w: np.ndarray, ids: np.ndarray, bins: int) -> np.ndarray:
    """Bin of each replica, distinct experts per bin, from the best of three starts per layer."""
    n_layers = w.shape[0]
    rows = np.arange(n_layers)[:, None]
    best, best_peak = None, np.full(n_layers, np.inf)
    # replicas of an expert side by side, dealt round-robin: always valid (an expert has at most
    # ``bins`` replicas), the fallback when both greedy starts get stuck
    n_items = w.shape[1]
    dealt = np.broadcast_to(np.arange(n_items) % bins, w.shape).copy()
    for start in (_lpt(w, ids, bins, False), _lpt(w, ids, bins, True), dealt):
        if start is None:
            continue
        load = np.zeros((n_layers, bins))
        np.add.at(load, (rows, start), w)
        peak = np.where(_distinct(start, ids), load.max(axis=1), np.inf)
        if best is None:
            best = start.copy()
        take = peak < best_peak
        best[take] = start[take]
        best_peak = np.minimum(peak, best_peak)
    assert best is not None, "every layer has at least one candidate start"
    return _improve(w, ids, best, bins)


def _distinct(where: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per layer: no bin holds an expert twice."""
    key = where * (int(ids.max()) + 1) + ids
    s = np.sort(key, axis=1)
    return ~(s[:, 1:] == s[:, :-1]).any(axis=1)


def place(load, replicas: int, gpus: int, nodes: int = 1, groups: int = 1, policy: str = "hierarchical") -> Placement:
    """Place ``replicas`` expert slots of every layer's ``load`` (layers x experts) on ``gpus``."""
    load = np.asarray(load, dtype=np.float64)
    require(load.ndim == 2 and load.size > 0, "loads", f"must be a (layers x experts) table, got shape {load.shape}")
    require(
        np.isfinite(load).all() and (load >= 0).all(),
        "loads",
        "must be finite and non-negative",
        "fix the negative or missing entries",
    )
    n_layers, n_exp = load.shape
    require(policy in POLICIES, "policy", f"unknown policy {policy!r}", f"use one of {', '.join(POLICIES)}")
    require(
        gpus >= 1 and nodes >= 1 and gpus % nodes == 0,
        "gpus",
        f"{gpus} GPUs do not split over {nodes} nodes",
        "use a GPU count that is a multiple of `nodes`",
    )
    require(
        replicas >= n_exp,
        "replicas",
        f"{replicas} replicas cannot hold {n_exp} experts",
        f"use `replicas={n_exp}` or more",
    )
    require(
        replicas % gpus == 0,
        "replicas",
        f"{replicas} replicas do not fill {gpus} GPUs evenly",
        f"use a multiple of {gpus}, e.g. {gpus * -(-replicas // gpus)}",
    )
    require(replicas // gpus >= 1, "replicas", "every GPU needs at least one slot")
    per_gpu = replicas // gpus
    hier = policy == "hierarchical" and nodes > 1
    if hier:
        require(groups >= 1 and n_exp % groups == 0, "groups", f"{groups} groups do not divide {n_exp} experts")
        require(
            groups % nodes == 0,
            "groups",
            f"{groups} expert groups do not spread over {nodes} nodes",
            "use a group count that is a multiple of `nodes`, or `policy=global`",
        )
    phy2log = np.empty((n_layers, replicas), dtype=np.int64)
    counts = np.zeros((n_layers, n_exp), dtype=np.int64)
    if hier:
        size = n_exp // groups
        group_load = load.reshape(n_layers, groups, size).sum(axis=2)
        group_ids = np.tile(np.arange(groups), (n_layers, 1))
        # groups to nodes by plain LPT: swaps there lower the heaviest node but can leave its GPUs worse off
        node_of_group = _lpt(group_load, group_ids, nodes, distinct=False)
        g_per_node, e_per_node = gpus // nodes, n_exp // nodes
        slots_node = replicas // nodes
        require(slots_node >= e_per_node, "replicas", "each node needs a slot for each of its experts")
        for n in range(nodes):
            groups_here = np.sort(np.argsort(node_of_group != n, axis=1, kind="stable")[:, : groups // nodes], axis=1)
            experts = (groups_here[:, :, None] * size + np.arange(size)).reshape(n_layers, -1)  # (L, e_per_node)
            sub = np.take_along_axis(load, experts, axis=1)
            c = replicate(sub, slots_node, g_per_node)
            ids, w = _expand(sub, c)
            gpu = pack(w, ids, g_per_node)
            _fill(phy2log, experts, ids, gpu, n * g_per_node, per_gpu)
            np.put_along_axis(counts, experts, c, axis=1)
    else:
        c = replicate(load, replicas, gpus)
        ids, w = _expand(load, c)
        gpu = pack(w, ids, gpus)
        _fill(phy2log, np.tile(np.arange(n_exp), (n_layers, 1)), ids, gpu, 0, per_gpu)
        counts = c
    per_replica = load / counts
    slot_load = np.take_along_axis(per_replica, phy2log, axis=1)
    gpu_load = slot_load.reshape(n_layers, gpus, per_gpu).sum(axis=2)
    node_load = gpu_load.reshape(n_layers, nodes, gpus // nodes).sum(axis=2)
    most = int(counts.max())
    log2phy = np.full((n_layers, n_exp, most), -1, dtype=np.int64)
    slots = np.argsort(phy2log, axis=1, kind="stable")  # slots grouped by expert
    experts_sorted = np.take_along_axis(phy2log, slots, axis=1)
    first = np.cumsum(counts, axis=1) - counts  # where each expert's run starts
    nth = np.arange(replicas)[None, :] - np.take_along_axis(first, experts_sorted, axis=1)
    log2phy[np.arange(n_layers)[:, None], experts_sorted, nth] = slots
    return Placement(
        policy if hier or policy == "global" else "global", phy2log, log2phy, counts, gpu_load, node_load, gpus, nodes
    )


def _fill(phy2log, experts, ids, gpu, first_gpu, per_gpu) -> None:
    """Write local replica ``ids`` (indices into ``experts``) packed on ``gpu`` into physical slots."""
    order = np.argsort(gpu, axis=1, kind="stable")  # replicas grouped by GPU, per_gpu each
    local = np.take_along_axis(ids, order, axis=1)
    logical = np.take_along_axis(experts, local, axis=1)
    start = first_gpu * per_gpu
    phy2log[:, start : start + logical.shape[1]] = logical


def cross_node_traffic(p: Placement, top_k: int) -> dict:
    """Expected remote nodes a token's top-k routed copies reach, tokens starting on every node
    alike and picking experts in proportion to their load: one copy per remote node when the
    dispatch deduplicates per node (DeepSeek-V3's node-limited all-to-all), k(N-1)/N without."""
    n = p.nodes
    share = p.node_load / np.maximum(p.node_load.sum(axis=1, keepdims=True), 1e-300)
    touched = (1 - (1 - share) ** top_k).sum(axis=1)  # expected nodes hit per token
    remote = touched * (n - 1) / n
    return {
        "remote_nodes_per_token": float(remote.mean()),
        "remote_nodes_per_token_by_layer": remote.tolist(),
        "remote_copies_per_token_without_dedup": top_k * (n - 1) / n,
    }
