"""Human output of serving: one deployment (``serve``), the simulation (``serve-sim``) and the
shapes beyond one replica (disaggregated prefill/decode pools)."""

from __future__ import annotations

from rich.table import Table

from gpuplan.cli.render import console, mem_row, mem_table
from gpuplan.units import GiB, fmt_duration


def render_disagg(doc: dict) -> None:
    p, d = doc["prefill"], doc["decode"]
    console.print(
        f"[bold]{doc['model']}[/] disaggregated on {doc['gpu']}: {doc['prefill_gpus_per_instance']} GPU(s) per "
        f"prefill and {doc['gpus_per_instance']} per decode instance (decode tp={doc['tp']}, pp={doc['pp']}); "
        f"{doc['input_len']} tokens in, {doc['output_len']} out; "
        f"targets: mean TTFT {fmt_duration(doc['ttft_slo_s'])}, ITL {fmt_duration(doc['itl_slo_s'])}"
    )
    t = Table(title=f"Pools (P:D = {doc['ratio_p_to_d']}, {doc['gpus']} GPUs)")
    for col in ("pool", "instances", "per instance", "latency", "note"):
        t.add_column(col, justify="left" if col in ("pool", "note") else "right")
    t.add_row(
        "prefill",
        f"{p['instances']}",
        f"{p['requests_per_s_per_instance']:,.2f} req/s",
        f"TTFT {fmt_duration(p['ttft_s'])}",
        f"prefill {fmt_duration(p['prefill_s'])}, KV transfer {fmt_duration(p['kv_transfer_s'])}, M/D/1 queue",
    )
    t.add_row(
        "decode",
        f"{d['instances']}",
        f"{d['requests_per_s_per_instance']:,.2f} req/s",
        f"ITL {fmt_duration(d['itl_s'])}",
        f"batch {d['batch']:,} (KV holds {d['kv_max_batch']:,})",
    )
    console.print(t)
    s = Table(title="Served")
    s.add_column("quantity")
    s.add_column("value", justify="right")
    s.add_row("requests/s", f"{doc['requests_per_s']:,.2f}")
    s.add_row("output tokens/s", f"{doc['output_tokens_per_s']:,.0f}")
    s.add_row("requests/s per GPU", f"{doc['requests_per_s_per_gpu']:,.3f}")
    colo = doc["colocated_requests_per_s_per_gpu"]
    s.add_row(
        "colocated, same targets (TTFT without queueing)", f"{colo:,.3f} req/s per GPU" if colo is not None else "none"
    )
    if doc["cost_per_million_output_tokens"] is not None:
        s.add_row("$ per M output tokens", f"{doc['cost_per_million_output_tokens']:,.4f}")
    console.print(s)


def render_kv_validation(doc: dict) -> None:
    t = Table(title="KV pool vs engine startup logs (held out)")
    terms = ("weights", "activation", "non_torch")
    cols = ("run", "engine", "measured GiB", "predicted GiB", "error", *(f"{x} log/pred" for x in terms))
    for col in cols:
        t.add_column(col.replace("_", "-"), justify="left" if col in ("run", "engine") else "right")
    for r in doc["rows"]:
        err = (
            f"{r['error']:+.1%}"
            if r["error"] is not None
            else ("refused by both" if r["refused"] else "gpuplan fits it")
        )
        parts = [f"{r['parts'][x][0]:.2f}/{r['parts'][x][1]:.2f}" if x in r["parts"] else "" for x in terms]
        engine = f"{r['engine']} {r['engine_version']}".strip()
        t.add_row(r["id"], engine, f"{r['measured_gib']:,.2f}", f"{r['predicted_gib']:,.2f}", err, *parts)
    console.print(t)
    s = doc["summary"]
    console.print(
        f"{s['rows']} runs: median |error| {s['median_abs_error']:.1%}, p90 {s['p90_abs_error']:.1%}, "
        f"max {s['max_abs_error']:.1%}; engine refusals matched {s['refusals_matched']} of {s['refusals']}"
    )
    for v, e in s["by_version"].items():
        console.print(
            f"  {v}: {e['rows']} runs, median |error| {e['median_abs_error']:.1%}, max {e['max_abs_error']:.1%}"
        )
    for term, e in s["terms"].items():
        console.print(
            f"  {term.replace('_', '-')} (where logged, {e['rows']} runs): predicted - logged {e['mean_gib']:+.2f} GiB "
            f"on average, {e['mean_abs_gib']:.2f} GiB mean |difference|"
        )


def render_serving_held_out(doc: dict) -> None:
    """``validate serving-held-out``: per-row error, then median / p90 / max overall and per group."""
    t = Table(title="Serving throughput and latency vs published benchmarks (held out)")
    for col in ("run", "engine", "gpu", "metric", "measured", "predicted", "error"):
        t.add_column(col, justify="left" if col in ("run", "engine", "gpu", "metric") else "right")
    for r in doc["rows"]:
        pred = f"{r['predicted']:,.2f}" if r["predicted"] is not None else "refused"
        err = f"{r['error']:+.1%}" if r["error"] is not None else "refused"
        t.add_row(r["id"], r["engine"], r["gpu"], r["metric"], f"{r['measured']:,.2f}", pred, err)
    console.print(t)

    def line(name: str, s: dict) -> str:
        if "median_abs_error" not in s:
            return f"{name}: {s['rows']} rows, all refused"
        return (
            f"{name}: {s['rows']} rows, median |error| {s['median_abs_error']:.1%}, p90 {s['p90_abs_error']:.1%}, "
            f"max {s['max_abs_error']:.1%}" + (f", {s['refused']} refused" if s["refused"] else "")
        )

    s = doc["summary"]
    console.print(
        line("all", s)
        + f" (target: median {s['target']['median_abs_error']:.0%}, p90 {s['target']['p90_abs_error']:.0%})"
    )
    for key in ("by_engine", "by_gpu", "by_metric", "by_load"):
        for name, g in s[key].items():
            console.print("  " + line(f"{key[3:]} {name}", g))
    for name, g in s["poisson_by_metric"].items():  # the latency-vs-rate curves' rows alone
        console.print("  " + line(f"poisson {name}", g))


def validation_line(v: dict) -> str:
    """One line: what validation measured for published runs of this engine profile."""
    if not v["calibrated"]:
        return f"[yellow]{v['engine']}: {v['note']}[/]"

    def signed(x: float | None, what: str) -> str:
        if x is None:
            return ""
        faster = (x > 0) == (what == "throughput")
        return f"; predicted {what} {x:+.0%} of measured on average ({'faster' if faster else 'slower'})"

    return (
        f"[dim]published runs under {v['engine']} ({v['rows']}): median |error| {v['median_abs_error']:.0%}, "
        f"p90 {v['p90_abs_error']:.0%}"
        + signed(v["throughput_mean_signed_error"], "throughput")
        + signed(v["latency_mean_signed_error"], "latency")
        + "[/]"
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
    console.print(validation_line(doc["validation"]))
    frac = f"{r.config.gpu_memory_utilization:.0%}"
    budget = {  # each engine's rule for its memory fraction (serve/engines.py)
        "total": f"engine budget {frac} of {mem['capacity'] / GiB:,.2f} GiB",
        "free": f"KV pool {frac} of what is free of {mem['capacity'] / GiB:,.2f} GiB after loading",
        "static": f"weights and KV pool in {frac} of {mem['capacity'] / GiB:,.2f} GiB",
    }[eng["memory_rule"]]
    table = mem_table(f"Memory per GPU ({budget})")
    per = mem["per_gpu"]
    cap = mem["capacity"]
    mem_row(table, "weights", per["weights"], cap, d.weights.description)
    mem_row(
        table,
        "KV cache (these sequences)",
        per["kv_cache"],
        cap,
        f"{doc['running']} x {doc['held_tokens_per_sequence']} tokens, blocks of {r.config.block_size}",
    )
    phases = mem["activation_phases"]
    peak_note = (
        f"sampler over {mem['sampled_rows']:,} rows x {d.model.vocab_size:,} logits"
        if phases["sampler"] > phases["forward"]
        else f"{r.config.max_batched_tokens} batched tokens"
    )
    mem_row(table, "activations (peak)", per["activations"], cap, peak_note)
    mem_row(table, "other", per["other"], cap, "CUDA context, graphs, NCCL")
    mem_row(table, "total", per["total"], cap)
    # max_concurrency counts sequences at their whole length; the running ones above hold, where the
    # engine allocates blocks as tokens come, their prompt and about half their output
    whole = r.input_len + r.output_len
    mem_row(
        table,
        "KV pool (allocated)",
        mem["kv_pool"],
        cap,
        f"holds {doc['max_concurrency']:,} sequences of {whole:,} tokens",
    )
    console.print(table)
    pg = doc["paging"]
    console.print(
        f"KV per token: {doc['kv_bytes_per_token'] / 1024:,.1f} KiB (whole model), "
        f"{doc['kv_bytes_per_token_per_gpu'] / 1024:,.1f} KiB per GPU; max concurrency {doc['max_concurrency']:,}; "
        f"max context at concurrency {doc['running']}: {doc['max_context_at_concurrency']:,} tokens"
    )
    if doc["seats"] > doc["max_concurrency"]:
        console.print(
            f"{eng['name']} allocates KV blocks as tokens are computed: {doc['seats']:,} sequences run at once, "
            f"holding about {doc['held_tokens_per_sequence']:,} tokens each on average "
            f"({doc['max_concurrency']:,} at full length)"
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
        t.add_row("TTFT (prefill + wait behind other prompts)", fmt_duration(doc["ttft_s"]))
    t.add_row("TPOT (inter-token latency)", fmt_duration(doc["tpot_s"]))
    if doc["decoding"] < doc["running"] - 0.5:  # Little's law over the loop: the rest await a first token
        t.add_row("decoding of the clients running", f"{doc['decoding']:,.0f} of {doc['running']:,}")
    t.add_row("end-to-end per request", fmt_duration(doc["e2e_s"]))
    pace = eng.get("api_server_tokens_per_s")
    if pace and doc["output_tokens_per_s"] >= 0.98 * pace:
        console.print(
            f"[yellow]the API server sets the pace: one process streams about {pace:,.0f} output tokens/s, "
            "less than the GPU could decode (vLLM's --api-server-count runs more)[/]"
        )
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


def _render_burst(r: dict) -> None:
    """A burst run (``--rate inf``) as ``vllm bench serve`` prints it: duration, throughputs, and
    TTFT/TPOT/ITL mean, median and p99."""

    def three(p: dict) -> str:
        if not p:
            return "n/a"
        return f"mean {fmt_duration(p['mean'])}, median {fmt_duration(p['p50'])}, p99 {fmt_duration(p['p99'])}"

    console.print(
        f"burst of {r['requests']:,} requests at t = 0 (vllm bench serve --request-rate inf): duration "
        f"{fmt_duration(r['makespan_s'])}, {r['requests_per_s']:,.2f} requests/s, output "
        f"{r['output_tokens_per_s']:,.0f} tok/s, total {r['total_tokens_per_s']:,.0f} tok/s"
    )
    console.print(f"  TTFT {three(r['ttft_s'])}; TPOT {three(r['tpot_s'])}; ITL {three(r['itl_s'])}")


def render_serve_sim(doc: dict) -> None:
    pools = doc.get("disaggregated")
    where = (
        f"{pools['prefill_instances']} prefill (TP {pools['prefill_tp']}) + {pools['decode_instances']} decode "
        f"instances (TP {doc['tp']}), {pools['gpus']} x {doc['gpu']}"
        if pools
        else f"{doc['tp'] * doc['pp']} x {doc['gpu']}"
    )
    table = Table(
        title=f"Serving simulation: {doc['model']} on {where} "
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
            f"{r['clients']:,} clients"
            if r.get("clients")
            else ("inf (burst)" if r.get("burst") else (f"{r['rate']:,.2f}" if r["rate"] else "trace")),
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
    if "speculative" in doc:
        sp = doc["speculative"]
        console.print(
            f"speculative decoding ({sp['method']}, {sp['draft_len']} drafts, acceptance {sp['acceptance']:.0%}): "
            f"{sp['expected_tokens']:.2f} tokens per target pass on average, drawn per sequence and iteration"
        )
    for r in runs:
        if r.get("burst"):
            _render_burst(r)
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
