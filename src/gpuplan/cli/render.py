"""Rich tables for humans. Memory is shown in GiB and GB, both labelled; rates in TFLOP/s."""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

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


def _id_column(table: Table, name: str, ids) -> None:
    """Ids are what users type next: never wrapped or cut with an ellipsis, whatever the width (a
    pipe counts as 80 columns); the other columns wrap instead."""
    table.add_column(name, no_wrap=True, overflow="fold", min_width=max([len(name)] + [len(str(i)) for i in ids]))


def _mem_table(title: str) -> Table:
    table = Table(title=title)
    for col in ("component", "GiB", "GB", "of GPU", "note"):
        table.add_column(col, justify="left" if col in ("component", "note") else "right")
    return table


def _mem_row(table: Table, name: str, n_bytes: float, capacity: float, note: str = "") -> None:
    table.add_row(name, f"{n_bytes / GiB:,.2f}", f"{n_bytes / GB:,.2f}", f"{100 * n_bytes / capacity:5.1f}%", note)


def render_train(est) -> None:
    req, mem, f, t = est.request, est.memory, est.flops, est.time
    s = mem.per_gpu
    m = req.model
    p = req.plan
    console.print(
        f"[bold]{m.name}[/] ({fmt_count(est.params.total)} params"
        + (f", {fmt_count(est.params.active)} active" if m.is_moe else "")
        + (f", {fmt_count(est.params.vision)} of them vision" if est.params.vision else "")
        + f") on {p.world_size} x {req.gpu.name}: dp={p.dp} tp={p.tp} pp={p.pp} cp={p.cp} ep={p.ep}"
        + f" zero={p.zero}{' sp' if p.sp and p.tp > 1 else ''}{f' vp={p.vp}' if p.vp > 1 else ''}"
    )
    console.print(
        f"seq {req.config.seq_len}, micro-batch {req.config.micro_batch}, global batch {req.global_batch}"
        f" ({req.microbatches} micro-batches/step), {req.config.precision}, {req.config.optimizer},"
        f" recompute {req.config.recompute}, {req.config.attention} attention, {req.config.profile} kernels,"
        f" framework {req.config.framework}"
    )
    for note in m.notes:  # what the plan leaves out (a vision tower, MTP layers)
        console.print(f"[dim]note: {note}[/]")
    if p.first_stage_layers or p.last_stage_layers:
        from gpuplan.pipeline.split import stage_layers

        console.print("layers per pipeline stage: " + " ".join(map(str, stage_layers(m, p))))

    table = _mem_table(f"Memory per GPU (most loaded: pipeline stage {s.stage}, {s.layers} layers)")
    cap = mem.capacity
    _mem_row(table, "weights", s.weights, cap)
    _mem_row(table, "gradients", s.gradients, cap)
    _mem_row(table, "optimizer states", s.optimizer, cap)
    _mem_row(table, "master weights", s.master_weights, cap)
    _mem_row(table, "activations", s.activations, cap, f"{s.microbatches_in_flight:g} micro-batches in flight")
    for name, value in s.other.items():
        _mem_row(table, f"  {name.replace('_', ' ')}", value, cap)
    table.add_section()
    _mem_row(table, "total", s.total, cap)
    _mem_row(table, "GPU capacity", cap, cap)
    console.print(table)
    if s.host_activations:
        console.print(
            f"activations offloaded to CPU memory (not counted above): {fmt_bytes(s.host_activations)} per GPU"
        )
    if mem.fits:
        console.print(f"[green]fits[/]: {fmt_bytes(mem.headroom)} free")
    else:
        console.print(f"[red]does not fit[/]: over by {fmt_bytes(-mem.headroom)}")
        for sug in est.suggestions:
            verdict = "fits" if sug.fits else "still over"
            console.print(f"  try {sug.change}: {sug.total_bytes / GiB:,.2f} GiB per GPU ({verdict})")
    console.print(f"model states for the whole job (unsharded): {fmt_bytes(mem.model_states_total['total'])}")

    tokens_per_step = req.global_batch * req.config.seq_len
    tokens = req.tokens or tokens_per_step
    ft = Table(title="Compute, time and cost" + ("" if mem.fits else " [red](were it to fit: it does not)[/]"))
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
        ft.add_row("tokens/s per GPU", f"{t.tokens_per_s_per_gpu:,.0f}")
        ft.add_row("steps", f"{t.steps:,.0f}")
        ft.add_row("training time", f"{t.days:,.2f} days")
        ft.add_row("GPU-hours", f"{t.gpu_hours:,.0f}")
        cost = "n/a (pass --price)" if t.cost_usd is None else f"${t.cost_usd:,.0f}"
        ft.add_row("cost", cost)
        if req.price_per_gpu_hour is not None:
            ft.add_row("price", f"${req.price_per_gpu_hour:.2f}/GPU-hour ({req.price_source})")
    console.print(ft)
    if est.step is not None:
        render_step(est.step, req.gpu, title="Predicted step time" + (" (not used: --mfu given)" if req.mfu else ""))


BREAKDOWN_LABELS = {
    "compute": "compute (forward + backward)",
    "recompute": "recompute",
    "tp_comm": "TP communication (exposed)",
    "cp_comm": "CP communication (exposed)",
    "ep_comm": "EP all-to-all (exposed)",
    "pp_comm": "PP send/recv (exposed)",
    "dp_comm": "DP/ZeRO communication (exposed)",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
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
    _id_column(table, "id", [r["id"] for r in rows])
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
    _id_column(table, "id", [r["id"] for r in rows])
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
            + (f" ep{p.ep}" if p.ep > 1 else "")
            + f" {p.schedule}"
            + (f" v{p.vp}" if p.vp > 1 else "")
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
        rej.add_row(reason, f"{n:,}")
    console.print(rej)
    if gpu.efficiency.assumed:
        console.print(f"[yellow]note[/]: no published efficiency measurements for {gpu.name}; rates are assumed")


def render_validation(results, summary, categories=None) -> None:
    table = Table(title="Predicted vs published step time")
    _id_column(table, "run", [r.row.id for r in results])
    cols = ("GPUs", "tp", "pp", "dp", "cp", "zero", "recompute", "measured s", "predicted s", "error", "pred. MFU")
    for col in (*cols, "pred. peak GiB"):
        table.add_column(col, justify="left" if col == "recompute" else "right")
    for r in results:
        row = r.row
        table.add_row(
            row.id,
            str(row.plan.world_size),
            str(row.plan.tp),
            str(row.plan.pp),
            str(row.plan.dp),
            str(row.plan.cp),
            str(row.plan.zero),
            row.config.recompute,
            f"{row.measured_step_s:,.3f}",
            f"{r.predicted_step_s:,.3f}",
            f"{r.error:+.1%}",
            f"{r.mfu:.1%}",
            f"{r.peak_bytes / GiB:,.1f}" + (" [red](over)[/]" if r.refused else ""),
        )
    console.print(table)
    if categories:
        ct = Table(title="Error per category (the band `gpuplan train` reports for runs of that kind)")
        for col in ("GPU family", "precision", "context", "parallel", "runs", "mean |error|", "min", "max"):
            ct.add_column(col, justify="left" if col in ("GPU family", "precision", "context", "parallel") else "right")
        for key, s in categories.items():
            ct.add_row(
                *key,
                str(int(s["rows"])),
                f"{s['mean_abs_error']:.1%}",
                f"{s['min_error']:+.1%}",
                f"{s['max_error']:+.1%}",
            )
        console.print(ct)
    console.print(
        f"{summary['rows']} runs: mean |error| {summary['mean_abs_error']:.1%}, "
        f"max |error| {summary['max_abs_error']:.1%}, mean signed {summary['mean_signed_error']:+.1%}; "
        f"{summary['refused']} of them over the GPU's memory in gpuplan's memory model (it ran: a wrong refusal)"
    )


def render_serve(est, doc: dict) -> None:
    r, d = est.request, est.deployment
    mem = doc["memory"]
    console.print(
        f"[bold]{r.model.name}[/] on {d.gpus} x {d.gpu.name} (tp={d.tp}, pp={d.pp}"
        f"{', DP attention' if d.dp_attention else ''}), weights {d.weights.name}, "
        f"KV {d.kv.name}; {r.input_len} tokens in, {r.output_len} out, "
        f"{'max-throughput' if r.max_throughput else 'concurrency'} {doc['concurrency']}"
    )
    for note in r.model.notes:
        console.print(f"[dim]note: {note}[/]")
    eng = doc["engine"]
    if eng["name"] != "generic":
        rule = {"total": "of total memory", "free": "of memory free after loading", "static": "of total (static)"}
        console.print(
            f"engine {eng['name']}: KV pool from {r.config.gpu_memory_utilization:.0%} "
            f"{rule[eng['memory_rule']]}, {eng['max_batched_tokens']:,} tokens per iteration, "
            + (
                f"at most {eng['max_num_seqs']:,} sequences"
                if eng["max_num_seqs"]
                else "as many sequences as the pool holds"
            )
            + f"; host time: {eng['host_note']}"
        )
    frac = f"{r.config.gpu_memory_utilization:.0%}"
    budget = {  # each engine's rule for its memory fraction (serve/engines.py)
        "total": f"engine budget {frac} of {mem['capacity'] / GiB:,.2f} GiB",
        "free": f"KV pool {frac} of what is free of {mem['capacity'] / GiB:,.2f} GiB after loading",
        "static": f"weights and KV pool in {frac} of {mem['capacity'] / GiB:,.2f} GiB",
    }[eng["memory_rule"]]
    table = _mem_table(f"Memory per GPU ({budget})")
    per = mem["per_gpu"]
    cap = mem["capacity"]
    _mem_row(table, "weights", per["weights"], cap, d.weights.description)
    _mem_row(
        table,
        "KV cache (these sequences)",
        per["kv_cache"],
        cap,
        f"{doc['running']} x {r.input_len + r.output_len} tokens, blocks of {r.config.block_size}",
    )
    _mem_row(table, "activations (peak)", per["activations"], cap, f"{r.config.max_batched_tokens} batched tokens")
    _mem_row(table, "other", per["other"], cap, "CUDA context, graphs, NCCL")
    _mem_row(table, "total", per["total"], cap)
    _mem_row(table, "KV pool (allocated)", mem["kv_pool"], cap, f"holds {doc['max_concurrency']:,} such sequences")
    console.print(table)
    pg = doc["paging"]
    console.print(
        f"KV per token: {doc['kv_bytes_per_token'] / 1024:,.1f} KiB (whole model), "
        f"{doc['kv_bytes_per_token_per_gpu'] / 1024:,.1f} KiB per GPU; max concurrency {doc['max_concurrency']:,}; "
        f"max context at concurrency {doc['running']}: {doc['max_context_at_concurrency']:,} tokens"
    )
    console.print(
        f"paging wastes {pg['paged_waste_fraction']:.1%} of a sequence's blocks; contiguous pre-allocation of "
        f"{est.model_max_len:,} tokens would waste {pg['contiguous_waste_fraction']:.1%} and hold only "
        f"{pg['contiguous_max_concurrency']:,} sequences"
    )

    t = Table(title="Latency and throughput (steady state)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    if doc["queued"]:
        console.print(
            f"[yellow]{doc['concurrency']:,} clients, {doc['running']:,} fit at once: {doc['queued']:,} wait in the "
            f"queue, {fmt_duration(doc['queue_wait_s'])} each (included in TTFT)[/]"
        )
        t.add_row("TTFT (queue wait + prefill)", fmt_duration(doc["ttft_s"]))
    else:
        t.add_row("TTFT (prefill, no queueing)", fmt_duration(doc["ttft_s"]))
    t.add_row("TPOT (inter-token latency)", fmt_duration(doc["tpot_s"]))
    t.add_row("end-to-end per request", fmt_duration(doc["e2e_s"]))
    t.add_row("output tokens/s (replica)", f"{doc['output_tokens_per_s']:,.0f}")
    t.add_row("output tokens/s per GPU", f"{doc['output_tokens_per_s_per_gpu']:,.0f}")
    t.add_row("decode turns compute-bound at batch", f"{doc['compute_bound_batch']:,.0f}")
    if doc["cost_per_million_output_tokens"] is not None:
        t.add_row("$ per M input tokens", f"{doc['cost_per_million_input_tokens']:,.4f}")
        t.add_row("$ per M output tokens", f"{doc['cost_per_million_output_tokens']:,.4f}")
    if "gpus_needed" in doc:
        t.add_row("GPUs needed for the target", f"{doc['gpus_needed']:,}")
    t.add_row("swap one sequence's KV in from host", fmt_duration(doc["kv_offload"]["swap_in_s"]))
    console.print(t)

    c = Table(title="Throughput vs concurrency")
    for col in ("concurrency", "decoding", "TPOT", "TTFT", "output tok/s"):
        c.add_column(col, justify="right")
    for p in doc["throughput_curve"]:
        c.add_row(
            f"{p['concurrency']:,}",
            f"{p['decoding']:,.0f}",
            fmt_duration(p["tpot_s"]),
            fmt_duration(p["ttft_s"]),
            f"{p['output_tokens_per_s']:,.0f}",
        )
    console.print(c)
    if "speculative" in doc:
        s = doc["speculative"]
        stop = s["stops_paying_at_batch"]
        console.print(
            f"speculative ({s['method']}, {s['draft_len']} drafts, acceptance {s['acceptance']:.0%}): "
            f"{s['expected_tokens_per_pass']:.2f} tokens per target pass, speedup {s['speedup']:.2f}x at this "
            f"batch; " + (f"stops paying at batch {stop}" if stop else "pays at every batch up to the maximum")
        )


def render_serve_validation(checks, summary) -> None:
    table = Table(title="Predicted vs published serving runs")
    _id_column(table, "run", [c.row.id for c in checks])
    for col in ("metric", "measured", "predicted", "error"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for c in checks:
        table.add_row(c.row.id, c.row.metric, f"{c.row.measured:,.2f}", f"{c.predicted:,.2f}", f"{c.error:+.1%}")
    console.print(table)
    console.print(
        f"{summary['rows']} runs: median |error| {summary['median_abs_error']:.1%}, mean |error| "
        f"{summary['mean_abs_error']:.1%}, max |error| {summary['max_abs_error']:.1%}"
    )


def render_serve_sim(doc: dict) -> None:
    table = Table(
        title=f"Serving simulation: {doc['model']} on {doc['tp'] * doc['pp']} x {doc['gpu']} "
        f"({doc['weights']}, KV {doc['kv']}), engine {doc.get('engine', 'generic')}, seed {doc['seed']}"
    )
    for col in (
        "rate req/s",
        "requests",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "E2E p50",
        "E2E p99",
        "output tok/s",
        "preempt.",
    ):
        table.add_column(col, justify="right")
    runs = list(doc["runs"])
    if doc.get("slo") and doc["slo"]["at_max_rate"]:
        runs.append(doc["slo"]["at_max_rate"])
    for r in runs:
        itl = r["itl_s"] or {"p50": 0.0, "p99": 0.0}
        table.add_row(
            f"{r['clients']:,} clients" if r.get("clients") else (f"{r['rate']:,.2f}" if r["rate"] else "trace"),
            f"{r['requests']:,}",
            fmt_duration(r["ttft_s"]["p50"]),
            fmt_duration(r["ttft_s"]["p99"]),
            fmt_duration(itl["p50"]),
            fmt_duration(itl["p99"]),
            fmt_duration(r["e2e_s"]["p50"]),
            fmt_duration(r["e2e_s"]["p99"]),
            f"{r['output_tokens_per_s']:,.0f}",
            f"{r['preemptions']:,}",
        )
    console.print(table)
    for r in runs:
        if r.get("clients"):
            console.print(
                f"closed loop of {r['clients']:,} clients: on average {r['queued_mean']:,.1f} wait for a seat "
                f"(TTFT includes the wait); {r['requests_per_s']:,.2f} requests/s"
            )
    if doc.get("slo"):
        s = doc["slo"]
        goal = " and ".join(
            x
            for x in (
                f"p99 TTFT <= {fmt_duration(s['ttft_p99_s'])}" if s["ttft_p99_s"] else "",
                f"p99 ITL <= {fmt_duration(s['itl_p99_s'])}" if s["itl_p99_s"] else "",
            )
            if x
        )
        console.print(
            f"highest rate meeting {goal}: {s['max_rate']:,.2f} requests/s"
            if s["max_rate"]
            else f"no rate meets {goal}"
        )


def render_pipeline(doc: dict) -> None:
    table = Table(
        title=f"{doc['schedule']}: {doc['stages']} ranks, {doc['microbatches']} micro-batches, makespan "
        f"{doc['makespan_s']:,.3f}, bubble {doc['bubble_fraction']:.2%} of rank-time "
        f"(idle/busy {doc['bubble_ratio']:.2%})"
    )
    for col in ("rank", "busy", "idle", "peak activations (micro-batches)", "weight copies"):
        table.add_column(col, justify="right")
    for r in range(doc["stages"]):
        table.add_row(
            str(r),
            f"{doc['busy_s'][r]:,.3f}",
            f"{doc['idle_s'][r]:,.3f}",
            f"{doc['peak_activations'][r]:g}",
            str(doc["parameter_copies"][r]),
        )
    console.print(table)
    for k in ("trace", "plot"):
        if doc[k]:
            console.print(f"{k} written to {doc[k]}")


def render_experts(doc: dict) -> None:
    table = Table(
        title=f"Expert placement ({doc['policy']}): {doc['experts']} experts x {doc['layers']} layers, "
        f"{doc['replicas']} slots on {doc['gpus']} GPUs in {doc['nodes']} nodes"
    )
    for col in ("layer", "max/mean GPU load", "most replicas", "heaviest node share"):
        table.add_column(col, justify="right")
    layers = range(len(doc["balance"]))
    shown = list(layers) if len(doc["balance"]) <= 12 else sorted(layers, key=lambda l: -doc["balance"][l])[:12]
    for l in sorted(shown):
        node = doc["node_load"][l]
        table.add_row(
            str(l),
            f"{doc['balance'][l]:.4f}",
            str(max(doc["replica_counts"][l])),
            f"{max(node) / sum(node):.1%}" if sum(node) else "-",
        )
    console.print(table)
    c = doc["cross_node"]
    console.print(
        f"balance: mean {doc['balance_mean']:.4f}, worst {doc['balance_max']:.4f} "
        f"(pass --expert-imbalance {doc['expert_imbalance_for_train']:.3f} to `gpuplan train`); "
        f"a token's top-{c['top_k']} reaches {c['remote_nodes_per_token']:.2f} other nodes "
        f"({c['dispatch_bytes_per_token'] / 1024:,.1f} KiB dispatched across nodes per token, node-deduplicated)"
    )


def render_whatif(doc: dict) -> None:
    table = Table(
        title=f"{doc['gpus']} x {doc['gpu']}, preempted after {fmt_duration(doc['preempt_at_s'])} "
        f"at ${doc['price_per_gpu_hour']:.2f}/GPU-hour"
    )
    for col in ("checkpoint", "interval", "work lost", "GPU-hours lost", "$ lost", "$ checkpoint overhead"):
        table.add_column(col, justify="left" if col == "checkpoint" else "right")
    for p in doc["policies"]:
        table.add_row(
            p["checkpoint"],
            fmt_duration(p["interval_s"]) if p["interval_s"] else "-",
            fmt_duration(p["lost_work_s"]),
            f"{p['lost_gpu_hours']:,.1f}",
            f"${p['lost_usd']:,.0f}",
            f"${p['overhead_usd']:,.0f}",
        )
    console.print(table)


def render_cluster(r: dict) -> None:
    console.print(
        f"{r['finished']:,} of {r['jobs']:,} jobs on {r['gpus']:,} GPUs ({r['policy']}, {r['placement']}, "
        f"checkpoints {r['checkpoint']}) in {fmt_duration(r['makespan_s'])}: utilisation "
        f"{r['utilisation']:.1%}, goodput {r['goodput']:.1%}; {r['preemptions']:,} preemptions, "
        f"{r['failures']:,} node failures, {r['reclaims']:,} spot reclaims"
    )
    if r.get("skipped"):
        console.print("trace rows skipped: " + ", ".join(f"{n:,} {why}" for why, n in r["skipped"].items()))
    t = Table(title="GPU-hours by use")
    for col in ("use", "GPU-hours", "$"):
        t.add_column(col, justify="left" if col == "use" else "right")
    price = r["usd_lost"] / r["gpu_hours_lost"] if r["gpu_hours_lost"] else 0.0
    for k, v in r["gpu_hours"].items():
        t.add_row(k.replace("_", " "), f"{v:,.1f}", f"{v * price:,.0f}" if k != "useful" else "")
    console.print(t)
    q = Table(title="By tier")
    for col in ("tier", "jobs", "mean wait", "p99 wait", "mean completion"):
        q.add_column(col, justify="right")
    for tier, v in r["tiers"].items():
        q.add_row(
            tier,
            f"{v['jobs']:,}",
            fmt_duration(v["mean_wait_s"]),
            fmt_duration(v["p99_wait_s"]),
            fmt_duration(v["mean_jct_s"]),
        )
    console.print(q)


def render_tco(doc: dict) -> None:
    m = doc["monthly"]
    console.print(
        f"{doc['gpus']} GPUs, {doc['useful_gpu_hours_per_month']:,.0f} useful GPU-hours a month: on demand "
        f"${m['on_demand']:,.0f}/month"
        + (f", spot ${m['spot']:,.0f}/month (preemptions waste {doc['spot_waste_fraction']:.1%})" if m["spot"] else "")
        + f", owned ${m['owned_capex']:,.0f} up front + ${m['owned_running']:,.0f}/month"
    )
    be = doc["breakeven_month"]
    for k, v in be.items():
        if k == "spot" and not m["spot"]:
            continue
        console.print(
            f"owning beats {k.replace('_', '-')} "
            + (f"from month {v}" if v else f"never within {len(doc['cumulative'])} months")
        )
