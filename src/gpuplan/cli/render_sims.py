"""Rich output of the simulations and cost tables: pipeline schedules, expert placement, a
preemption's cost per checkpoint policy, the cluster simulation and rent-or-own."""

from __future__ import annotations

from rich.table import Table

from gpuplan.cli.render import console
from gpuplan.units import fmt_duration


def render_pipeline(doc: dict) -> None:
    table = Table(
        title=f"{doc['schedule']}: {doc['stages']} ranks, {doc['microbatches']} micro-batches, makespan "
        f"{fmt_duration(doc['makespan_s'])}, bubble {doc['bubble_fraction']:.2%} of rank-time "
        f"(idle/busy {doc['bubble_ratio']:.2%})"
    )
    for col in ("rank", "busy", "idle", "peak activations (micro-batches)", "weight copies"):
        table.add_column(col, justify="right")
    for r in range(doc["stages"]):
        table.add_row(
            str(r),
            fmt_duration(doc["busy_s"][r]),
            fmt_duration(doc["idle_s"][r]),
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
