"""The search space as numpy arrays: peak memory and a step-time lower bound for every plan at once.

A *layout* fixes (tp, cp, pp, dp, ep, etp, schedule, vp); the grid crosses each layout with every
micro-batch size, ZeRO stage and recompute mode, giving arrays of shape (layouts, mbs, zero, rec).

``peak_memory`` evaluates the memory terms of ``estimate/memory_terms.py`` over arrays, the same
functions ``estimate.memory.estimate_memory`` calls for one plan (tests/search/test_grid.py checks
they agree to 1e-9 on sampled plans of several searches), so the search can reject the tens of
thousands of plans that do not fit without a Python call each and no second copy of the formulas
can drift from the first.
``compute_bound`` is a lower bound of ``estimate.step_time.step_time``: the critical stage's
kernels over all micro-batches plus, for 1F1B, the bubble the other stages' kernels alone cause,
or any stage's kernels plus the time before the first micro-batch's forward can reach it
(communication, the optimizer and the rest only add). The search times plans in order of this
bound and stops once the bound passes the plans it already has (branch and bound), so it times a
few hundred plans instead of thousands and still returns exactly the best ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.estimate import memory_terms as terms
from gpuplan.estimate.compute import layer_times
from gpuplan.estimate.memory import _activations, pipeline_candidates, stage_params
from gpuplan.estimate.model_ends import embedding_times, head_times, mtp_times
from gpuplan.estimate.step_time import _moe_layers, _shape
from gpuplan.specs import schedules
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan, head_stage
from gpuplan.specs.split import shape_layers
from gpuplan.specs.training import TrainingConfig


@dataclass(frozen=True)
class Layout:
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    schedule: str
    vp: int
    # uneven pipeline split (specs/parallel.py); the search itself enumerates even splits only
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    etp: int | None = None  # expert tensor parallelism (MoE parallel folding); None: as tp, unfolded

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    def plan(self, zero: int) -> ParallelPlan:
        return ParallelPlan(
            dp=self.dp,
            tp=self.tp,
            pp=self.pp,
            cp=self.cp,
            ep=self.ep,
            etp=self.etp,
            zero=zero,
            vp=self.vp,
            schedule=self.schedule,
            first_stage_layers=self.first_stage_layers,
            last_stage_layers=self.last_stage_layers,
        )


class Grid:
    """Per-(layout, candidate stage) rows; the (mbs, zero, rec) axes are broadcast."""

    def __init__(
        self,
        m: ModelSpec,
        base: TrainingConfig,
        layouts: list[Layout],
        micro_batches,
        zero_stages,
        rec_order,
        gpu: GPUSpec,
    ):
        if base.offload_activation_layers:  # the search does not choose which layers to offload
            raise GpuplanError(
                "offload_activation_layers",
                "search does not enumerate activation-offload plans",
                "plan them with train",
            )
        self.m, self.base, self.layouts = m, base, layouts
        self.fp8_one_layout = gpu.fp8_any_layout  # as estimate_memory reads its ``gpu``
        self.mbs = np.array(micro_batches, dtype=np.int64)
        self.zero = np.array(zero_stages, dtype=np.int64)
        self.rec = list(rec_order)
        self.configs = [
            [
                replace(
                    base,
                    micro_batch=int(b),
                    recompute=r,
                    recompute_modules=base.recompute_modules if r == "selective" else (),
                )
                for r in rec_order
            ]
            for b in micro_batches
        ]
        # Rows come from the pipeline split, which depends only on the layout's pipeline shape (pp,
        # vp, schedule, first/last stage layers): split once per distinct shape, not per layout,
        # and read the per-layout columns once per layout (rows index them through row_layout).
        rows: list[tuple[int, int, int, int]] = []
        starts = []
        split: dict[tuple, tuple[tuple[tuple[int, int, int], ...], int]] = {}
        fewest = []  # the lightest rank's layers, for the bound on when the first forward reaches a rank
        for li, lo in enumerate(layouts):
            starts.append(len(rows))
            shape = (lo.pp, lo.vp, lo.schedule, lo.first_stage_layers, lo.last_stage_layers)
            if shape not in split:
                split[shape] = (pipeline_candidates(m, *shape), min(shape_layers(m.num_layers, *shape)))
            candidates, least = split[shape]
            fewest.append(least)
            rows += [(li, s, first, n) for s, first, n in candidates]
        self.starts = np.array(starts, dtype=np.int64)
        row_layout = np.array([r[0] for r in rows], dtype=np.int64)
        self.row_layout = row_layout

        def per_layout(values: list, dtype=None) -> np.ndarray:  # a column by layout, spread to rows
            return np.array(values, dtype=dtype)[row_layout]

        col = {
            name: per_layout([getattr(lo, name) for lo in layouts], np.int64)
            for name in ("tp", "cp", "pp", "dp", "ep", "vp")
        }
        col["etp"] = per_layout([lo.expert_tp for lo in layouts], np.int64)
        self.col = col
        self.stage = np.array([r[1] for r in rows], dtype=np.int64)
        self.n_layers = np.array([r[3] for r in rows], dtype=np.int64)
        self.fewest_layers = per_layout(fewest, np.int64)
        specs = [schedules.get(lo.schedule) for lo in layouts]  # what each layout's schedule implies
        self.copies = per_layout([s.param_copies for s in specs], np.float64)
        self.in_flight_profile = per_layout([s.in_flight for s in specs])
        self.bidirectional = per_layout([s.bidirectional for s in specs], bool)
        self.chunks = per_layout([s.chunks(lo.vp) for s, lo in zip(specs, layouts)], np.int64)
        layout_heads = [head_stage(lo.schedule, lo.pp) for lo in layouts]
        heads = per_layout(layout_heads, np.int64)
        # one stage_params per distinct (pp, stage, layers, tp, ep, head, etp); rows index them
        distinct: dict[tuple, int] = {}
        which = []
        for li, s, first, n in rows:
            lo = layouts[li]
            mtp = base.mtp_layers if s == layout_heads[li] else 0  # MTP blocks run beside the head
            key = (lo.pp, s, first, n, lo.tp, lo.ep, layout_heads[li], lo.expert_tp, mtp)
            which.append(distinct.setdefault(key, len(distinct)))
        params = [stage_params(m, *key) for key in distinct]
        pick = np.array(which, dtype=np.int64)
        self.params = {
            k: np.array([getattr(p, k) for p in params], dtype=np.float64)[pick]
            for k in (
                "dense",
                "expert",
                "adafactor_dense",
                "adafactor_expert",
                "biggest_layer",
                "biggest_dense",
                "biggest_expert",
                "n_dense",
                "n_moe",
                "n_linear",
                "gemm",
                "biggest_gemm",
                "gemm_matrices",
                "biggest_gemm_matrices",
            )
        }
        self.first_stage = self.stage == 0
        self.last_stage = self.stage == heads  # the stage holding the head (ZB-V: the first)
        # the blocks a stage runs: its layers and, beside the head, the multi-token-prediction ones
        self.n_blocks = self.n_layers + np.where(self.last_stage, base.mtp_layers, 0)
        # activation and kernel-time tables keyed by the shape a stage sees: (tp, cp, ep, etp)
        triples = [(lo.tp, lo.cp, lo.ep, lo.etp) for lo in layouts]
        keys = sorted(set(triples), key=lambda k: (*k[:3], -1 if k[3] is None else k[3]))  # every layout has rows
        index = {k: i for i, k in enumerate(keys)}
        self.shape_key = per_layout([index[k] for k in triples], np.int64)
        self.shape_keys = keys

    # -- memory -------------------------------------------------------------------------------
    def microbatches(self) -> tuple[np.ndarray, np.ndarray]:
        """(micro-batches per step, whether the global batch divides) per (layout, mbs)."""
        dp = np.array([lo.dp for lo in self.layouts], dtype=np.int64)[:, None]
        per = dp * self.mbs[None, :]
        ok = self.base.global_batch % per == 0
        return np.where(ok, self.base.global_batch // per, 0), ok

    def _activation_table(self) -> dict[str, np.ndarray]:
        """Activation bytes per micro-batch by (shape key, mbs, rec)."""
        names = (
            "dense_layer", "moe_layer", "layer_checkpoint", "embedding", "head", "layer_rerun", "linear_delta", "loss"
        )  # fmt: skip
        out = {k: np.zeros((len(self.shape_keys), len(self.mbs), len(self.rec))) for k in names}
        for i, (tp, cp, ep, etp) in enumerate(self.shape_keys):
            for j in range(len(self.mbs)):
                for k, cfg in enumerate(self.configs[j]):
                    a = _activations(self.m, cfg, tp, cp, ep, True, etp)
                    for name in names[:-1]:
                        out[name][i, j, k] = getattr(a, name)
                    out["loss"][i, j, k] = a.loss_saved + a.loss_transient
        return out

    def peak_memory(self, mb: np.ndarray) -> np.ndarray:
        """Bytes on the most loaded GPU, shape (layouts, mbs, zero, rec); ``mb``: micro-batches per
        step by (layout, mbs). The terms are estimate/memory_terms.py's, as estimate_memory uses
        them, over arrays: micro-batch-independent ones with shape (rows, Z), the rest (rows, M, R)."""
        cfg, p = self.base, {k: v[:, None] for k, v in self.params.items()}  # (rows, 1)
        z = self.zero[None, :]  # (1, Z)
        zg = (self.col["dp"] * self.col["cp"])[:, None].astype(np.float64)
        # the expert data-parallel ranks tp x cp x dp / (ep x etp) (ParallelPlan.expert_zero_group)
        ezg = (self.col["tp"] * self.col["cp"] * self.col["dp"] // (self.col["ep"] * self.col["etp"]))[:, None]
        copies = self.copies[:, None]
        held = {k: copies * p[k] for k in ("dense", "expert", "adafactor_dense", "adafactor_expert", "gemm")}
        states = terms.model_states(
            cfg, z, zg, ezg.astype(np.float64), held["dense"], held["expert"],
            held["adafactor_dense"], held["adafactor_expert"], held["gemm"],
        )  # fmt: skip
        other = terms.buffers(
            cfg, z, zg, self.n_blocks[:, None], p["biggest_layer"], held["gemm"],
            copies * p["gemm_matrices"], p["biggest_gemm"], p["biggest_gemm_matrices"], self.fp8_one_layout,
            self.col["pp"][:, None], held["dense"] + held["expert"], ezg.astype(np.float64),
            p["biggest_dense"], p["biggest_expert"],
        )  # fmt: skip
        fixed = sum(states) + sum(v for v in other.values() if v is not None)  # (rows, Z)

        act = {k: v[self.shape_key] for k, v in self._activation_table().items()}  # (rows, M, R)
        last = self.last_stage[:, None, None]
        varying, _ = terms.activations(
            cfg,
            np.array([r == "full" for r in self.rec])[None, None, :],
            self._in_flight(mb[self.row_layout])[:, :, None],
            self.n_blocks[:, None, None],
            self.params["n_dense"][:, None, None],
            self.params["n_moe"][:, None, None],
            act["dense_layer"],
            act["moe_layer"],
            act["layer_checkpoint"],
            act["embedding"],
            act["head"],
            self.first_stage[:, None, None],
            last,
            rerun=act["layer_rerun"],
            n_linear=self.params["n_linear"][:, None, None],
            linear_delta=act["linear_delta"],
        )
        varying = varying + np.where(last, act["loss"], 0.0)  # (rows, M, R): the head's logits

        allocated = fixed[:, None, :, None] + varying[:, :, None, :]
        reserve, context = terms.reserved(cfg, allocated)
        return np.maximum.reduceat(allocated + reserve + context, self.starts, axis=0)

    def _in_flight(self, mb: np.ndarray) -> np.ndarray:
        """estimate.memory.microbatches_in_flight for every (row, mbs): the registry's formula of
        each row's schedule (gpuplan.specs.schedules.in_flight), over arrays."""
        pp, vp, s = self.col["pp"][:, None], self.col["vp"][:, None], self.stage[:, None]
        mb = mb.astype(np.float64)
        out = np.zeros_like(mb)
        for profile in np.unique(self.in_flight_profile):
            rows = (self.in_flight_profile == profile)[:, None]
            out = np.where(rows, schedules.in_flight(str(profile), s, pp, vp, mb), out)
        return np.where(pp == 1, 1.0, out)

    # -- time ---------------------------------------------------------------------------------
    def compute_bound(self, gpu: GPUSpec, mb: np.ndarray) -> np.ndarray:
        """A lower bound of the step time, shape (layouts, mbs, rec) (see the module docstring)."""
        m = self.m
        n_s, n_r = len(self.shape_keys), len(self.rec)
        dense_t = np.zeros((n_s, len(self.mbs), n_r))
        moe_t, ends_first, ends_last = np.zeros_like(dense_t), np.zeros_like(dense_t), np.zeros_like(dense_t)
        lin_t = np.zeros_like(dense_t)  # a linear-attention layer's time minus a softmax one's (same MLP)
        fwd_min = np.full((n_s, len(self.mbs)), np.inf)  # the cheapest layer's forward
        for i, (tp, cp, ep, etp) in enumerate(self.shape_keys):
            plan = ParallelPlan(dp=ep * (etp or 1), tp=tp, cp=cp, ep=ep, etp=etp)
            for j in range(len(self.mbs)):
                shape = _shape(m, self.configs[j][0], plan)
                for k, rec in enumerate(self.rec):
                    for moe, out in ((False, dense_t), (True, moe_t)):
                        if moe and not m.is_moe:
                            continue
                        o = layer_times(m, gpu, shape, moe)
                        fwd_min[i, j] = min(fwd_min[i, j], o.fwd)
                        redo = o.recompute(rec, self.configs[j][k].recomputed)
                        out[i, j, k] = o.fwd + o.bwd + redo
                    if m.linear_layers:
                        o = layer_times(m, gpu, shape, False, True)
                        fwd_min[i, j] = min(fwd_min[i, j], o.fwd)
                        lin_t[i, j, k] = (
                            o.fwd + o.bwd + o.recompute(rec, self.configs[j][k].recomputed) - dense_t[i, j, k]
                        )
                    e, h = embedding_times(m, gpu, shape), head_times(m, gpu, shape)
                    ends_first[i, j, k] = e.fwd + e.bwd
                    # each multi-token-prediction depth: its own kernels and one more head (its
                    # block is among the stage's n_dense / n_moe)
                    ends_last[i, j, k] = h.fwd + h.bwd
                    if self.base.mtp_layers:
                        depth = mtp_times(m, gpu, shape)
                        ends_last[i, j, k] += self.base.mtp_layers * (depth.fwd + depth.bwd + h.fwd + h.bwd)
        key = self.shape_key
        n_d, n_m = self.params["n_dense"][:, None, None], self.params["n_moe"][:, None, None]
        n_l = self.params["n_linear"][:, None, None]
        stage = (
            n_d * dense_t[key]
            + n_m * moe_t[key]
            + n_l * lin_t[key]
            + np.where(self.first_stage[:, None, None], ends_first[key], 0.0)
            + np.where(self.last_stage[:, None, None], ends_last[key], 0.0)
        )  # (rows, M, R)
        worst = np.maximum.reduceat(stage, self.starts, axis=0)  # (L, M, R)
        lkey = key[self.starts]
        mtp = self.base.mtp_layers
        n_moe = _moe_layers(m, 0, m.num_layers) + mtp * m.mtp_kind.moe
        whole = (
            (m.num_layers + mtp - n_moe) * dense_t[lkey]
            + n_moe * moe_t[lkey]
            + m.num_linear_layers * lin_t[lkey]
            + ends_first[lkey]
            + ends_last[lkey]
        )
        pp = np.array([lo.pp for lo in self.layouts])[:, None, None]
        vp = np.array([lo.vp for lo in self.layouts])[:, None, None]
        one_f = np.array([schedules.get(lo.schedule).flush_bubble_bound for lo in self.layouts])[:, None, None]
        bubble = np.where(one_f & (pp > 1), np.maximum(0.0, whole - worst) / vp, 0.0)
        flat = mb[:, :, None] * worst + bubble
        # a rank cannot start before the first micro-batch's forward reached it: r chunks of at
        # least (the lightest rank's layers)/v layers each (DualPipe: from the nearer end). 5% margin for the
        # simulation's 1% cost rounding.
        r_v = self.chunks[:, None]
        dual = self.bidirectional[:, None]
        hops = np.where(dual, np.minimum(self.stage, self.col["pp"] - 1 - self.stage)[:, None], self.stage[:, None])
        delay = 0.95 * hops * self.fewest_layers[:, None] / r_v * fwd_min[key]  # (rows, M)
        rows = self.row_layout
        row_bound = mb[rows][:, :, None] * stage + delay[:, :, None]
        return np.maximum(flat, np.maximum.reduceat(row_bound, self.starts, axis=0))
