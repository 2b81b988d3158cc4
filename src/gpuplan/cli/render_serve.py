"""Human output of the serving shapes beyond one replica: disaggregated prefill/decode pools."""

from __future__ import annotations

from rich.table import Table

from gpuplan.cli.render import console
from gpuplan.units import fmt_duration


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
    for col in ("run", "measured GiB", "predicted GiB", "error"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in doc["rows"]:
        err = (
            f"{r['error']:+.1%}"
            if r["error"] is not None
            else ("refused by both" if r["refused"] else "gpuplan fits it")
        )
        t.add_row(r["id"], f"{r['measured_gib']:,.2f}", f"{r['predicted_gib']:,.2f}", err)
    console.print(t)
    s = doc["summary"]
    console.print(
        f"{s['rows']} runs: median |error| {s['median_abs_error']:.1%}, p90 {s['p90_abs_error']:.1%}, "
        f"max {s['max_abs_error']:.1%}; engine refusals matched {s['refusals_matched']} of {s['refusals']}"
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
    for key in ("by_engine", "by_gpu", "by_metric"):
        for name, g in s[key].items():
            console.print("  " + line(f"{key[3:]} {name}", g))
