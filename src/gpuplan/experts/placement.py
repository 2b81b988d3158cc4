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
    ids = np.repeat(np.tile(np.arange(n_exp), n_layers), counts.reshape(-1)).reshape(n_layers, -1)
    per = load / counts
    return ids, np.take_along_axis(per, ids, axis=1)


def _lpt(w: np.ndarray, ids: np.ndarray, bins: int, distinct: bool) -> tuple[np.ndarray, np.ndarray]:
    """Bin of each item: heaviest first onto the least loaded bin with a free slot (and, with
    ``distinct``, without that expert); and per layer, whether it got stuck (no such bin left for
    an item; its bins are then meaningless)."""
    n_layers, n_items = w.shape
    cap = n_items // bins
    n_ids = int(ids.max()) + 1
    order = np.argsort(-w, axis=1, kind="stable")
    w_next = np.take_along_axis(w, order, axis=1)  # the items in the order they are placed
    e_next = np.take_along_axis(ids, order, axis=1)
    load = np.zeros(n_layers * bins)  # flat (layer, bin), indexed by layer x bins + bin
    count = np.zeros(n_layers * bins, dtype=np.int64)
    # a bin's load while it has a free slot, inf once full: the greedy's argmin reads only this
    open_load = np.zeros((n_layers, bins))
    open_flat = open_load.reshape(-1)
    has = np.zeros((n_layers * n_ids, bins), dtype=bool)  # (layer, expert) -> bins holding it
    has_flat = has.reshape(-1)
    chosen = np.empty((n_layers, n_items), dtype=np.int64)
    base, id_base = np.arange(n_layers) * bins, np.arange(n_layers) * n_ids
    stuck = np.zeros(n_layers, dtype=bool)
    for t in range(n_items):
        if distinct:
            held = has[id_base + e_next[:, t]]
            choice = np.where(held, np.inf, open_load)
        else:
            choice = open_load
        b = choice.argmin(axis=1)
        cell = base + b
        stuck |= np.isinf(choice.reshape(-1)[cell])  # no bin left (loads are finite)
        if distinct:
            has_flat[(id_base + e_next[:, t]) * bins + b] = True
        chosen[:, t] = b
        load[cell] += w_next[:, t]
        count[cell] += 1
        open_flat[cell] = np.where(count[cell] < cap, load[cell], np.inf)
    out = np.empty_like(chosen)
    np.put_along_axis(out, order, chosen, axis=1)
    return out, stuck


def _improve(w: np.ndarray, ids: np.ndarray, where: np.ndarray, bins: int, rounds: int = 200) -> np.ndarray:
    """Swap a replica on the most loaded bin with one on a lighter bin while that lowers the pair's
    maximum below the current maximum (keeping every expert at most once per bin). Layers that
    stop improving drop out; candidates are the replicas on the ``near`` lightest bins."""
    n_layers, n_items = w.shape
    if bins < 2:  # one bin (one GPU, or one per node group): nothing to swap with
        return where
    cap = n_items // bins
    n_ids = int(ids.max()) + 1
    near = min(bins - 1, 8)
    where = where.copy()
    # kept up to date across rounds (a swap moves two items), rather than rebuilt each round:
    # has[layer, bin, expert], and each bin's items in ascending item order (a stable sort by bin)
    has = np.zeros((n_layers, bins, n_ids), dtype=bool)
    has[np.arange(n_layers)[:, None], where, ids] = True
    grouped_all = np.argsort(where, axis=1, kind="stable").reshape(n_layers, bins, cap)
    act = np.arange(n_layers)
    for _ in range(rounds):
        if not len(act):
            break
        wa, ea, ba = w[act], ids[act], where[act]
        n = len(act)
        rows = np.arange(n)
        # each bin's load, summed in item order (as np.add.at over the items, bit for bit)
        cell = (rows[:, None] * bins + ba).reshape(-1)
        load = np.bincount(cell, weights=wa.reshape(-1), minlength=n * bins).reshape(n, bins)
        by_load = np.argsort(load, axis=1)
        top = by_load[:, -1]
        light = by_load[:, :near]  # (n, near)
        # items on the top bin, and items on the light bins, as indices
        grouped = grouped_all[act]
        on_top = grouped[rows, top]  # (n, cap)
        cand = grouped[rows[:, None], light].reshape(n, near * cap)  # (n, near*cap)
        wi = np.take_along_axis(wa, on_top, axis=1)[:, :, None]
        ei = np.take_along_axis(ea, on_top, axis=1)[:, :, None]
        wj = np.take_along_axis(wa, cand, axis=1)[:, None, :]
        ej = np.take_along_axis(ea, cand, axis=1)[:, None, :]
        delta = wi - wj
        top_load = load[rows, top][:, None, None]
        other = np.repeat(np.take_along_axis(load, light, axis=1), cap, axis=1)[:, None, :]  # j's bin's load
        new_peak = np.maximum(top_load - delta, other + delta)
        ok = (delta > 0) & (new_peak < top_load - 1e-12) & (ei != ej)
        layer = act[:, None, None]
        # expert i not already on j's bin: looked up per (i, light bin), then spread over its items
        ok &= np.repeat(~has[layer, light[:, None, :], ei], cap, axis=2)
        ok &= ~has[layer, top[:, None, None], ej]  # nor expert j on the top bin
        score = np.where(ok, new_peak, np.inf).reshape(n, -1)
        best = np.argmin(score, axis=1)
        go = np.isfinite(score[rows, best])
        r = rows[go]
        p, q = best[go] // cand.shape[1], best[go] % cand.shape[1]  # i's place on the top bin, j's among cand
        i, j = on_top[r, p], cand[r, q]
        li = act[go]
        b_i, b_j = top[r], light[r, q // cap]
        e_i, e_j = ids[li, i], ids[li, j]
        has[li, b_i, e_i] = False
        has[li, b_j, e_j] = False
        has[li, b_j, e_i] = True
        has[li, b_i, e_j] = True
        where[li, i] = b_j
        where[li, j] = b_i
        grouped_all[li, b_i, p] = j
        grouped_all[li, b_j, q % cap] = i
        grouped_all[li, b_i] = np.sort(grouped_all[li, b_i], axis=1)
        grouped_all[li, b_j] = np.sort(grouped_all[li, b_j], axis=1)
        act = li
    return where


def pack(w: np.ndarray, ids: np.ndarray, bins: int, problem: np.ndarray | None = None) -> np.ndarray:
    """Bin of each replica, distinct experts per bin, from the best of three starts per layer.

    ``problem``: per layer, which of several packings stacked together it belongs to (None: one);
    a greedy start stuck on any layer of a packing is dropped for all of that packing's layers,
    as when each is packed on its own."""
    n_layers, n_items = w.shape
    problem = np.zeros(n_layers, dtype=np.int64) if problem is None else problem
    plain, stuck = _lpt(w, ids, bins, False)
    # The distinct-expert greedy takes the plain greedy's every step on a layer where the plain one
    # never put an expert on a bin holding it (the plain pick is open to it and the least loaded):
    # run it only on the other layers.
    redo = stuck | ~_distinct(plain, ids)
    constrained, stuck_c = plain.copy(), stuck.copy()
    if redo.any():
        constrained[redo], stuck_c[redo] = _lpt(w[redo], ids[redo], bins, True)
    # replicas of an expert side by side, dealt round-robin: always valid (an expert has at most
    # ``bins`` replicas), the fallback when both greedy starts get stuck
    dealt = np.broadcast_to(np.arange(n_items) % bins, w.shape).copy()
    no_stuck = np.zeros(n_layers, dtype=bool)
    best, best_peak = np.zeros_like(dealt), np.full(n_layers, np.inf)
    seen = np.zeros(n_layers, dtype=bool)  # layers that have had a start
    cell = (np.arange(n_layers)[:, None] * bins).reshape(-1, 1)
    for start, lost in ((plain, stuck), (constrained, stuck_c), (dealt, no_stuck)):
        ok = ~np.isin(problem, problem[lost])  # a stuck start is no start for its whole packing
        # each bin's load summed in item order (as np.add.at over the items)
        load = np.bincount((cell + start).reshape(-1), weights=w.reshape(-1), minlength=n_layers * bins)
        peak = np.where(_distinct(start, ids), load.reshape(n_layers, bins).max(axis=1), np.inf)
        first = ok & ~seen
        best[first] = start[first]
        seen |= ok
        take = ok & (peak < best_peak)
        best[take] = start[take]
        best_peak = np.where(ok, np.minimum(peak, best_peak), best_peak)
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
    # an expert has at most one copy per GPU (of its node, when groups stay on their node): said
    # here in the user's totals, before the per-node split would say it in the node's
    most = gpus // nodes if hier else gpus
    require(
        replicas <= n_exp * most,
        "replicas",
        f"{replicas} replicas of {n_exp} experts need more copies of an expert than the {most} GPUs "
        + ("of a node " if hier else "")
        + "that can hold them apart",
        f"use at most {n_exp * most} replicas",
    )
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
        node_of_group, _ = _lpt(group_load, group_ids, nodes, distinct=False)
        g_per_node, e_per_node = gpus // nodes, n_exp // nodes
        slots_node = replicas // nodes
        require(slots_node >= e_per_node, "replicas", "each node needs a slot for each of its experts")
        # the nodes' packings are independent: stacked as nodes x layers rows, done at once
        node_experts = []
        for n in range(nodes):
            groups_here = np.sort(np.argsort(node_of_group != n, axis=1, kind="stable")[:, : groups // nodes], axis=1)
            node_experts.append((groups_here[:, :, None] * size + np.arange(size)).reshape(n_layers, -1))
        experts = np.concatenate(node_experts)  # (nodes x L, e_per_node): node n's in rows n x L on
        sub = np.take_along_axis(np.tile(load, (nodes, 1)), experts, axis=1)
        c = replicate(sub, slots_node, g_per_node)
        ids, w = _expand(sub, c)
        gpu = pack(w, ids, g_per_node, np.repeat(np.arange(nodes), n_layers))
        for n in range(nodes):
            here = slice(n * n_layers, (n + 1) * n_layers)
            _fill(phy2log, experts[here], ids[here], gpu[here], n * g_per_node, per_gpu)
            np.put_along_axis(counts, experts[here], c[here], axis=1)
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
