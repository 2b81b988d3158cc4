"""Rich tables for humans. Memory is shown in GiB and GB, both labelled; rates in TFLOP/s."""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

from gpuplan.cli.flags import as_flags
from gpuplan.units import GB, TFLOP, GiB, fmt_bytes, fmt_count, fmt_duration

console = Console()
if not console.is_terminal:
    # A pipe or a file: rich would assume 80 columns and squeeze the tables; print them whole and
    # leave long lines to the reader's tools (in an 80-column terminal, numbers wrap, ids never)
    console = Console(width=max(console.width, 200))


@contextmanager
def progress(disable: bool = False):
    """A bar with percentage and ETA on stderr for work that can take more than a couple of seconds;
    it disappears when done and is never drawn into a pipe or a JSON document."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    err = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=disable or not err.is_terminal,
    ) as bar:
        yield bar


def id_column(table: Table, name: str, ids) -> None:
    """Ids are what users type next: never wrapped or cut with an ellipsis, whatever the width (a
    pipe counts as 80 columns); the other columns wrap instead."""
    table.add_column(name, no_wrap=True, overflow="fold", min_width=max([len(name)] + [len(str(i)) for i in ids]))


def mem_table(title: str) -> Table:
    table = Table(title=title)
    for col in ("component", "GiB", "GB", "of GPU", "note"):
        table.add_column(col, justify="left" if col in ("component", "note") else "right")
    return table


def mem_row(table: Table, name: str, n_bytes: float, capacity: float, note: str = "") -> None:
    table.add_row(name, f"{n_bytes / GiB:,.2f}", f"{n_bytes / GB:,.2f}", f"{100 * n_bytes / capacity:5.1f}%", note)


def render_train(est) -> None:
    from gpuplan.estimate.params import mtp_params

    req, mem, f, t = est.request, est.memory, est.flops, est.time
    s = mem.per_gpu
    m = req.model
    p = req.plan
    console.print(
        f"[bold]{m.name}[/] ({fmt_count(est.params.total)} params"
        + (f", {fmt_count(est.params.active)} active" if m.is_moe else "")
        + (f", + {fmt_count(mtp_params(m, req.config.mtp_layers))} MTP" if req.config.mtp_layers else "")
        + (f", {fmt_count(est.params.vision)} of them vision" if est.params.vision else "")
        + f") on {p.world_size} x {req.gpu.name}: dp={p.dp} tp={p.tp} pp={p.pp} cp={p.cp} ep={p.ep}"
        + (f" etp={p.etp}" if p.etp is not None else "")
        + f" zero={p.zero}{' sp' if p.sp and p.tp > 1 else ''}{f' vp={p.vp}' if p.vp > 1 else ''}"
        + (
            f" (cp by {req.config.cp_exchange}{'' if req.config.cp_load_balance else ', unbalanced'})"
            if p.cp > 1
            else ""
        )
    )
    console.print(
        f"seq {req.config.seq_len}, micro-batch {req.config.micro_batch}, global batch {req.global_batch}"
        f" ({req.microbatches} micro-batches/step), {req.config.precision}, {req.config.optimizer},"
        f" recompute {req.config.recompute}, {req.config.attention} attention, {req.config.profile} kernels,"
        f" framework {req.config.framework}"
        + (
            f", documents of {req.config.document_len} tokens (masked)"
            if 0 < req.config.document_len < req.config.seq_len
            else ""
        )
        + (f", {req.config.mtp_layers} MTP depth(s) beside the head" if req.config.mtp_layers else "")
    )
    for note in m.notes:  # what the plan leaves out (a vision tower, MTP layers)
        console.print(f"[dim]note: {as_flags(note)}[/]")
    if p.first_stage_layers or p.last_stage_layers or p.layout:
        from gpuplan.specs.split import stage_layers

        console.print("layers per pipeline stage: " + " ".join(map(str, stage_layers(m, p))))

    table = mem_table(f"Memory per GPU (most loaded: pipeline stage {s.stage}, {s.layers} layers)")
    cap = mem.capacity
    mem_row(table, "weights", s.weights, cap)
    mem_row(table, "gradients", s.gradients, cap)
    mem_row(table, "optimizer states", s.optimizer, cap)
    mem_row(table, "master weights", s.master_weights, cap)
    mem_row(table, "activations", s.activations, cap, f"{s.microbatches_in_flight:g} micro-batches in flight")
    for name, value in s.other.items():
        mem_row(table, f"  {name.replace('_', ' ')}", value, cap)
    table.add_section()
    mem_row(table, "total", s.total, cap)
    mem_row(table, "GPU capacity", cap, cap)
    console.print(table)
    if s.host_activations:
        console.print(
            f"activations offloaded to CPU memory (not counted above): {fmt_bytes(s.host_activations)} per GPU"
        )
    if mem.fits:
        console.print(f"[green]fits[/]: {fmt_bytes(mem.headroom)} free")
    else:
        if mem.tight:
            console.print(
                f"[yellow]tight[/]: the allocated peak fits with {fmt_bytes(mem.headroom + mem.reserve)} to spare, "
                f"{fmt_bytes(-mem.headroom)} short of the allocator's usual {fmt_bytes(mem.reserve)} reserve: "
                "it may fail on fragmentation; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "(--expandable-segments) removes that"
            )
        else:
            console.print(f"[red]does not fit[/]: over by {fmt_bytes(-mem.headroom)}")
        lead = "or" if mem.tight else "try"
        for sug in est.suggestions:
            verdict = "fits" if sug.fits else "still over"
            console.print(f"  {lead} {as_flags(sug.change)}: {sug.total_bytes / GiB:,.2f} GiB per GPU ({verdict})")
    console.print(f"model states for the whole job (unsharded): {fmt_bytes(mem.model_states_total['total'])}")

    tokens_per_step = req.global_batch * req.config.seq_len
    tokens = req.tokens or tokens_per_step
    ft = Table(
        title="Compute, time and cost" + ("" if mem.fits or mem.tight else " [red](were it to fit: it does not)[/]")
    )
    ft.add_column("quantity")
    ft.add_column("value", justify="right")
    ft.add_row("FLOPs per token (fwd+bwd, causal attention)", f"{f.model_per_token:.4g}")
    ft.add_row("FLOPs per step", f"{f.model_per_token * tokens_per_step:.4g}")
    ft.add_row("FLOPs total (model)", f"{f.model_per_token * tokens:.4g}")
    from gpuplan.estimate.flops import six_nd

    ft.add_row("6·N·D for comparison", f"{six_nd(m, tokens):.4g}")
    if t is not None:
        peak = req.gpu.peak(req.config.compute_dtype)
        src = "given by --mfu" if req.mfu is not None else "predicted"
        ft.add_row(f"MFU / HFU ({src})", f"{t.mfu:.1%} / {t.hfu:.1%}")
        ft.add_row("achieved per GPU", f"{t.mfu * peak / TFLOP:,.1f} TFLOP/s of {peak / TFLOP:,.1f}")
        ft.add_row("step time", fmt_duration(t.step_s))
        band = est.band
        if band is not None:
            cat = " x ".join(band["category"].values())
            if band["calibrated"]:
                lo, hi = band["step_s_range"]
                ft.add_row(
                    "step time if off like published runs",
                    f"{fmt_duration(lo)} - {fmt_duration(hi)} ({band['runs']} runs: {cat})",
                )
            else:
                ft.add_row("calibration", f"[yellow]uncalibrated[/]: no published run of this kind ({cat})")
            for feature in band.get("uncalibrated_features", ()):
                ft.add_row("calibration", f"[yellow]uncalibrated[/]: {feature}")
        ft.add_row("tokens/s per GPU", f"{t.tokens_per_s_per_gpu:,.0f}")
        ft.add_row("steps", f"{t.steps:,.0f}")
        ft.add_row("training time", f"{t.days:,.2f} days")
        ft.add_row("GPU-hours", f"{t.gpu_hours:,.0f}")
        cost = "n/a (pass --price)" if t.cost_usd is None else f"${t.cost_usd:,.0f}"
        ft.add_row("cost", cost)
        if req.price_per_gpu_hour is not None:
            ft.add_row("price", f"${req.price_per_gpu_hour:.2f}/GPU-hour ({as_flags(req.price_source)})")
    console.print(ft)
    if est.step is not None:
        render_step(est.step, req.gpu, title="Predicted step time" + (" (not used: --mfu given)" if req.mfu else ""))
    fs = est.faster_split
    if fs is not None:
        flags = as_flags(
            f"`first_stage_layers={fs['first_stage_layers']}` `last_stage_layers={fs['last_stage_layers']}`"
        )
        console.print(
            f"faster split: {flags} ({' '.join(map(str, fs['stage_layers']))} layers per stage; the embedding, "
            f"the loss and any MTP depth each take a layer's place, as Megatron's account-for-embedding/loss "
            f"splits them): {fmt_duration(fs['step_s'])} per step, {fs['speedup']:.2f}x"
            + ("" if fs["fits"] else " (does not fit either)")
        )


BREAKDOWN_LABELS = {
    "compute": "compute (forward + backward)",
    "recompute": "recompute",
    "tp_comm": "TP communication (exposed)",
    "cp_comm": "CP communication (exposed)",
    "ep_comm": "EP dispatch and combine (exposed)",
    "pp_comm": "PP send/recv (exposed)",
    "dp_comm": "DP/ZeRO communication (exposed)",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "moe_host_sync": "MoE expert-loop host time after dispatcher syncs",
}


def render_step(st, gpu, title: str = "Predicted step time") -> None:
    """Where one step's time goes on the critical pipeline stage, and each dimension's traffic."""
    table = Table(
        title=f"{title}: {fmt_duration(st.step_s)}, MFU {st.mfu:.1%}, HFU {st.hfu:.1%}"
        f" (critical stage {st.critical_stage})"
    )
    table.add_column("part")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for key, value in st.breakdown.items():
        if value > 0:
            table.add_row(BREAKDOWN_LABELS.get(key, key), f"{value:,.4f}", f"{value / st.step_s:5.1%}")
    console.print(table)
    comm = Table(title="Communication per GPU per step (critical stage)")
    for col in ("dim", "collectives", "GB sent", "time s", "exposed s", "hidden s"):
        comm.add_column(col, justify="left" if col in ("dim", "collectives") else "right")
    for dim, c in st.comm.items():
        if c.bytes_per_gpu:
            kinds = ", ".join(f"{k} {v / GB:,.2f} GB" for k, v in c.collectives.items())
            comm.add_row(
                dim, kinds, f"{c.bytes_per_gpu / GB:,.2f}", f"{c.time:,.4f}", f"{c.exposed:,.4f}", f"{c.hidden:,.4f}"
            )
    if comm.row_count:
        console.print(comm)
    if gpu.efficiency.assumed:
        console.print(f"[yellow]note[/]: no published efficiency measurements for {gpu.name}; rates are assumed")


def render_models(rows) -> None:
    table = Table(title="Model catalog")
    id_column(table, "id", [r["id"] for r in rows])
    for col in ("type", "params", "active", "layers", "hidden", "heads/kv", "vocab", "experts"):
        table.add_column(col, justify="left" if col == "type" else "right", overflow="fold")
    for r in rows:
        table.add_row(
            r["id"],
            r["model_type"],
            fmt_count(r["params_total"]),
            fmt_count(r["params_active"]),
            str(r["layers"]),
            str(r["hidden_size"]),
            f"{r['heads']}/{r['kv_heads']}",
            str(r["vocab_size"]),
            str(r["experts"] or "-"),
        )
    console.print(table)


def render_gpus(rows) -> None:
    table = Table(title="GPU catalog (dense peaks)")
    id_column(table, "id", [r["id"] for r in rows])
    for col in (
        "memory GiB",
        "memory GB",
        "HBM GB/s",
        "bf16 TFLOP/s",
        "fp8 TFLOP/s",
        "link GB/s",
        "per node",
        "TDP W",
        "$/GPU-h",
    ):
        table.add_column(col, justify="right", overflow="fold")  # narrow: numbers wrap, never an ellipsis
    for r in rows:
        pf = r["peak_flops"]
        table.add_row(
            r["id"],
            f"{r['memory_bytes'] / GiB:.1f}",
            f"{r['memory_bytes'] / GB:.1f}",
            f"{r['hbm_bytes_per_s'] / GB:,.0f}",
            f"{pf.get('bf16', 0) / TFLOP:,.1f}",
            f"{pf['fp8'] / TFLOP:,.1f}" if "fp8" in pf else "-",
            f"{r['interconnect_bytes_per_s'] / GB:,.0f}",
            str(r["gpus_per_node"]),
            f"{r['tdp_w']:.0f}",
            f"{r['usd_per_gpu_hour']:.2f}" if r["usd_per_gpu_hour"] else "-",
        )
    console.print(table)


def render_search(result, m, gpu) -> None:
    """The top plans, their step-time breakdowns, and how many plans were rejected and why."""
    table = Table(title=f"Best plans for {m.name} on {gpu.name} (by {result.objective}, framework {result.framework})")
    for col in ("#", "plan", "step", "tok/s/GPU", "MFU", "GiB/GPU", "$/M tok"):
        table.add_column(col, justify="left" if col == "plan" else "right")
    for i, c in enumerate(result.ranked, 1):
        p, st = c.plan, c.step
        usd = (
            f"{result.price_per_gpu_hour * p.world_size / 3600 / c.tokens_per_s * 1e6:,.2f}"
            if result.price_per_gpu_hour
            else "-"
        )
        desc = (
            f"{p.world_size} GPUs: dp{p.dp} tp{p.tp} pp{p.pp} cp{p.cp}"
            + (f"({c.config.cp_exchange})" if p.cp > 1 else "")
            + (f" ep{p.ep}" if p.ep > 1 else "")
            + (f" etp{p.etp}" if p.etp is not None else "")
            + f" {p.schedule}"
            + (f" v{p.vp}" if p.vp > 1 else "")
            + (f" split{p.first_stage_layers}/{p.last_stage_layers}" if p.first_stage_layers is not None else "")
            + f" zero{p.zero} mbs{c.config.micro_batch}"
            + f" recompute:{c.config.recompute}"
            + (f" offload:{c.offload.request.offload}" if c.offload else "")
        )
        table.add_row(
            str(i),
            desc,
            fmt_duration(st.step_s),
            f"{c.tokens_per_s / p.world_size:,.0f}",
            f"{st.mfu:.1%}",
            f"{c.gpu_bytes / GiB:,.1f}",
            usd,
        )
    console.print(table)
    offloaded = [c for c in result.ranked if c.offload]
    if offloaded:
        most = max(c.offload.cpu_bytes for c in offloaded)
        console.print(
            f"offload plans sized for {result.host}: up to {most / GiB:,.0f} GiB of CPU memory per node "
            "(optimizer states, gradients and, with optimizer+params, the parameters)"
        )
    best = result.ranked[0]
    console.print(
        "best plan's step: "
        + ", ".join(
            f"{BREAKDOWN_LABELS.get(k, k).split(' (')[0]} {v / best.step.step_s:.0%}"
            for k, v in best.step.breakdown.items()
            if v > 0.005 * best.step.step_s
        )
    )
    rej = Table(
        title=f"{result.considered:,} plans considered, {result.feasible:,} fit, {result.timed:,} timed (the rest bounded out)"
    )
    rej.add_column("not ranked because")
    rej.add_column("plans", justify="right")
    for reason, n in sorted(result.rejected.items(), key=lambda kv: -kv[1]):
        rej.add_row(as_flags(reason), f"{n:,}")
    console.print(rej)
    if gpu.efficiency.assumed:
        console.print(f"[yellow]note[/]: no published efficiency measurements for {gpu.name}; rates are assumed")
