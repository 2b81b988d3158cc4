"""``gpuplan cluster whatif`` and ``gpuplan cluster sim`` (cluster/)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import HtmlOpt, JsonOpt, PlotOpt
from gpuplan.cli.output import plot as write_plot, report, show
from gpuplan.cli.params import (
    anything,
    at_least,
    between,
    checked,
    fraction,
    html_file,
    out_file,
    plot as plot_path,
    price as price_rule,
    seed as seed_rule,
)
from gpuplan.errors import GpuplanError


@checked(
    gpus=at_least(1, 10**7),
    hours=between(0, 1e6, lo_open=True),
    checkpoint=anything,
    price=price_rule,
    html=html_file,
    plot=plot_path,
)
def whatif(
    gpus: Annotated[int, typer.Option(help="GPUs of the job.")] = 64,
    gpu: Annotated[str, typer.Option(help="GPU id (for its catalog price).")] = "h100-sxm",
    hours: Annotated[float, typer.Option(help="Hours of work the job needs.")] = 47.0,
    spot: Annotated[bool, typer.Option("--spot", help="Runs on spot capacity (informational).")] = False,
    preempt_at: Annotated[str, typer.Option(help="When the preemption hits, e.g. 47h.")] = "47h",
    checkpoint: Annotated[
        list[str], typer.Option(help="Policies to compare: none, an interval (1h, 30m), optimal. Repeat the flag.")
    ] = ["none", "1h", "optimal"],  # noqa: B006 (typer reads the default, nothing mutates it)
    cost: Annotated[str, typer.Option("--checkpoint-cost", "--cost", help="Time to write one checkpoint.")] = "60s",
    restart: Annotated[str, typer.Option(help="Time to restart the job.")] = "10m",
    mtbf: Annotated[
        str | None, typer.Option(help="Mean time between preemptions (for optimal; default: the job's length).")
    ] = None,
    price: Annotated[float | None, typer.Option(help="USD per GPU-hour (default: catalog price).")] = None,
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Dollars a preemption throws away under each checkpoint policy."""
    from gpuplan import catalog
    from gpuplan.cluster.whatif import loss
    from gpuplan.units import HOUR

    hw = catalog.gpu(gpu)
    price = catalog.price_or_catalog(hw.id, price) or 0.0
    at = min(inputs.duration(preempt_at, "preempt_at", zero_ok=True), hours * HOUR)
    m = inputs.duration(mtbf, "mtbf") if mtbf is not None else hours * HOUR
    c, r = inputs.duration(cost, "checkpoint_cost"), inputs.duration(restart, "restart", zero_ok=True)
    for p in checkpoint:
        if p not in ("none", "optimal"):
            inputs.duration(p, "checkpoint")
    rows = [loss(p, gpus=gpus, preempt_at_s=at, cost_s=c, restart_s=r, price=price, mtbf_s=m) for p in checkpoint]
    doc = {
        "gpus": gpus,
        "gpu": hw.id,
        "hours": hours,
        "spot": spot,
        "preempt_at_s": at,
        "price_per_gpu_hour": price,
        "policies": [x.to_dict() for x in rows],
    }
    report(html, "cluster whatif", doc)
    write_plot(plot, "cluster whatif", doc)
    show(doc, json_out, "render_sims.render_whatif")


@checked(
    gpus=at_least(1, 10**6),
    gpus_per_node=at_least(1, 1024),
    jobs=at_least(1, 1_000_000),
    load=between(0, 100, lo_open=True),
    spot_share=fraction,
    weibull=between(0.05, 100),
    spot_reclaim_per_hour=between(0, 3600),
    seed=seed_rule,
    price=price_rule,
    trace_out=out_file,
    plot=plot_path,
    html=html_file,
)
def cluster_sim(
    gpus: Annotated[int, typer.Option(help="GPUs in the cluster.")] = 1024,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    jobs: Annotated[int, typer.Option(help="Synthetic jobs (ignored with --trace).")] = 10_000,
    load: Annotated[float, typer.Option(help="Offered load of the synthetic jobs (1.0 = the cluster's GPUs).")] = 0.8,
    spot_share: Annotated[float, typer.Option(help="Share of the lowest tier's jobs on spot capacity.")] = 0.3,
    trace: Annotated[str | None, typer.Option(help="A job trace instead of synthetic jobs.")] = None,
    trace_format: Annotated[str, typer.Option(help="openb (Alibaba 2023), philly or helios.")] = "openb",
    nodes_file: Annotated[
        str | None,
        typer.Option(
            help="Nodes of differing sizes and GPU models: openb's node list (overrides --gpus/--gpus-per-node)."
        ),
    ] = None,
    policy: Annotated[str, typer.Option(help="fifo, priority or backfill.")] = "backfill",
    preempt: Annotated[bool, typer.Option("--preempt/--no-preempt", help="Higher tiers preempt lower ones.")] = True,
    placement: Annotated[str, typer.Option(help="pack, spread or topology.")] = "pack",
    grace: Annotated[str, typer.Option(help="SIGTERM to SIGKILL on preemption and reclaim.")] = "2m",
    node_mtbf: Annotated[
        str,
        typer.Option(
            help="Node mean time between failures: llama3 (264 node-days, H100), "
            "rsc1 or rsc2 (Meta's A100 clusters: 154 and 427 node-days), a "
            "duration, or none."
        ),
    ] = "llama3",
    weibull: Annotated[float | None, typer.Option(help="Weibull shape of failures (default exponential).")] = None,
    repair: Annotated[str, typer.Option(help="Time to repair a failed node.")] = "1h",
    spot_reclaim_per_hour: Annotated[float, typer.Option(help="Reclaims per running spot job per hour.")] = 0.05,
    reclaims: Annotated[
        str | None,
        typer.Option(
            help="Spot reclaim events from a CSV (time_s,gpus), in addition "
            "to the rate (set --spot-reclaim-per-hour 0 for the trace "
            "alone)."
        ),
    ] = None,
    checkpoint: Annotated[
        str, typer.Option(help="Jobs' checkpoint policy: none, daly, sigterm or an interval.")
    ] = "daly",
    checkpoint_cost: Annotated[
        str, typer.Option("--checkpoint-cost", "--cost", help="Time to write one checkpoint.")
    ] = "60s",
    restart: Annotated[str, typer.Option(help="Time to restart a job.")] = "5m",
    seed: Annotated[int, typer.Option(help="Seed of the workload, failures and reclaims.")] = 0,
    price: Annotated[float, typer.Option(help="USD per GPU-hour, for the dollars lost.")] = 3.0,
    trace_out: Annotated[str | None, typer.Option(help="Write a Chrome trace of jobs on nodes.")] = None,
    plot: Annotated[str | None, typer.Option(help="Write a PNG: utilisation over time, queue delay by tier.")] = None,
    html: HtmlOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Simulate a cluster running a job mix: utilisation, goodput, GPU-hours and $ lost by cause."""
    from gpuplan.cluster.setup import check_progress, node_mtbf as parse_node_mtbf, runnable_jobs
    from gpuplan.cluster.sim import ClusterConfig, ClusterSim
    from gpuplan.cluster.workloads import READERS, read_openb_nodes, read_reclaims, synthetic

    if trace and trace_format not in READERS:
        raise GpuplanError("trace_format", f"unknown trace format {trace_format!r}", f"use one of {', '.join(READERS)}")
    ckpt = checkpoint if checkpoint in ("none", "daly", "sigterm") else str(inputs.duration(checkpoint, "checkpoint"))
    cost, rst = inputs.duration(checkpoint_cost, "checkpoint_cost"), inputs.duration(restart, "restart", zero_ok=True)
    mtbf = parse_node_mtbf(node_mtbf)
    grace_s, repair_s = inputs.duration(grace, "grace", zero_ok=True), inputs.duration(repair, "repair")
    spot_jobs = spot_reclaim_per_hour > 0 and not trace and spot_share > 0
    reclaims_per_s = spot_reclaim_per_hour / 3600 if spot_jobs else 0.0
    node_gpus, node_models, node_skips = read_openb_nodes(nodes_file) if nodes_file else (None, None, Counter())
    if node_gpus:
        gpus = sum(node_gpus)
    elif gpus < gpus_per_node or gpus % gpus_per_node:
        raise GpuplanError(
            "gpus", f"{gpus} GPUs do not make whole nodes of {gpus_per_node}", f"use a multiple of {gpus_per_node}"
        )
    cfg = ClusterConfig(
        nodes=gpus // gpus_per_node,
        gpus_per_node=gpus_per_node,
        node_gpus=node_gpus,
        node_models=node_models,
        policy=policy,
        preempt=preempt,
        placement=placement,
        grace_s=grace_s,
        node_mtbf_s=mtbf,
        weibull_shape=weibull,
        repair_s=repair_s,
        spot_reclaim_per_hour=spot_reclaim_per_hour,
        reclaims=read_reclaims(reclaims) if reclaims else (),
        price_per_gpu_hour=price,
        seed=seed,
    )
    skipped: Counter[str] = Counter()
    if trace:
        work, skipped = READERS[trace_format](trace)
        work = runnable_jobs(cfg, work, skipped, trace, checkpoint=ckpt, cost_s=cost, restart_s=rst)
    else:
        work = synthetic(jobs, gpus, load, seed, spot_share, checkpoint=ckpt, cost_s=cost, restart_s=rst)
    # jobs that could never finish are refused before simulating, under their own checkpoint policy
    longest_spot = max((j.work_s for j in work if j.spot), default=0.0)
    check_progress(mtbf, reclaims_per_s, cost, rst, ckpt, max(j.work_s for j in work), grace_s, longest_spot)
    from gpuplan.cli.render import progress

    with progress(json_out) as bar:
        task = bar.add_task(f"simulating {len(work):,} jobs on {gpus:,} GPUs", total=len(work))
        sim = ClusterSim(cfg, work).run(progress=lambda done: bar.update(task, completed=done))
        result = sim.report().to_dict()
    if trace_out or plot:
        from gpuplan.cluster.render import write_plot, write_trace

        if trace_out:
            write_trace(sim, trace_out)
        if plot:
            write_plot(sim, plot)
    result["skipped"] = dict(skipped) | dict(node_skips)
    result["trace"], result["plot"] = trace_out, plot
    result["policy"], result["placement"], result["checkpoint"] = policy, placement, checkpoint
    report(html, "cluster sim", result)
    show(result, json_out, "render_sims.render_cluster")
