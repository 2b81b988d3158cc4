"""The offload paths of ``gpuplan serve`` and ``gpuplan train``: build the host from the catalog and
the user's flags, call the library once, render. Kept out of app.py so that the commands there
only gain their flags and one dispatch line each."""

from __future__ import annotations

from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec, parse_bytes
from gpuplan.units import GB, fmt_bytes, fmt_duration


def host_from_flags(
    gpu: GPUSpec,
    cpu_memory: str | None,
    disk: str | None,
    pcie_gbps: float | None,
    disk_gbps: float | None,
    cpu_memory_gbps: float | None = None,
    host: str | None = None,
) -> HostSpec:
    """The host (``--host``: a catalog id or a hardware file; else the catalog's host for this GPU)
    with the user's numbers in place (``--disk`` without ``--disk-gbps`` keeps the host's NVMe rates)."""
    from gpuplan.catalog.hosts import host_for_gpu, load_host

    base = load_host(host) if host else host_for_gpu(gpu.id)
    return base.with_overrides(
        cpu_memory_bytes=parse_bytes(cpu_memory, "cpu_memory") if cpu_memory else None,
        disk_bytes=parse_bytes(disk, "disk") if disk else None,
        pcie_bytes_per_s=pcie_gbps * GB if pcie_gbps is not None else None,
        disk_bytes_per_s=disk_gbps * GB if disk_gbps is not None else None,
        cpu_memory_bytes_per_s=cpu_memory_gbps * GB if cpu_memory_gbps is not None else None,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def render_serve_offload(doc: dict) -> None:
    from rich.table import Table

    from gpuplan.cli.render import console

    p, st = doc["placement"], doc["decode_step_s"]
    console.print(f"[bold]{doc['model']}[/] on {doc['gpu']} + {doc['host']}")
    w, kv = p["weights"], p["kv_cache"]
    where = f"--gpu-layers {p['gpu_layers']}: " if p["gpu_layers"] is not None else ""
    console.print(
        f"{where}weights GPU {_pct(w['gpu'])} / CPU {_pct(w['cpu'])} / disk {_pct(w['disk'])}; "
        f"KV cache GPU {_pct(kv['gpu'])} / CPU {_pct(kv['cpu'])} / disk {_pct(kv.get('disk', 0.0))}"
        + ("; attention over the off-GPU KV runs on the CPU" if p["attention_on_cpu"] else "")
    )
    console.print(
        f"batch {doc['batch']}"
        + (f" (GPU batches of {doc['gpu_batch']})" if doc.get("gpu_batch", doc["batch"]) < doc["batch"] else "")
        + f": {doc['throughput_tokens_per_s']:.2f} tokens/s generated (prefill included), "
        f"{doc['decode_tokens_per_s']:.2f} tokens/s decoding, {fmt_duration(doc['per_token_s'])} per token"
    )
    t = Table(title="one decode step of the block")
    t.add_column("part")
    t.add_column("time", justify="right")
    for key in ("compute", "pcie", "disk", "cpu", "overlap", "total"):
        t.add_row(
            "overlap (hidden by prefetch)" if key == "overlap" else key,
            ("-" if key == "overlap" and st[key] > 0 else "") + fmt_duration(st[key]),
        )
    console.print(t)
    mem = doc["memory_bytes"]
    console.print(f"memory: GPU {fmt_bytes(mem['gpu'])}, CPU {fmt_bytes(mem['cpu'])}, disk {fmt_bytes(mem['disk'])}")
    console.print(f"compute catches up with the weight transfer at a batch of ~{doc['balanced_batch']:.0f}")


def render_train_offload(full: dict) -> None:
    """``train --offload``: memory per GPU and host, the step's parts; with ``--tokens`` on a catalog
    GPU, the run's days, GPU-hours and cost on the offloaded step (``full``: the --json document)."""
    from rich.table import Table

    from gpuplan.cli.render import console

    doc = full["offload"]
    m, s = doc["memory_bytes"], doc["step_s"]
    console.print(
        f"[bold]{doc['model']}[/] on {doc['gpu']} + {doc['host']}: --offload {doc['offload']} "
        f"to {doc['device']}" + (" (one-step delayed update)" if doc["delayed_update"] else "")
    )
    t = Table(title="memory")
    t.add_column("where")
    t.add_column("bytes", justify="right")
    for key, value in m["per_gpu"].items():
        t.add_row(f"per GPU: {key}", fmt_bytes(value))
    t.add_row("CPU per node", fmt_bytes(m["cpu_per_node"]))
    t.add_row("NVMe per node", fmt_bytes(m["disk_per_node"]))
    console.print(t)
    console.print(
        "step "
        + fmt_duration(s["total"])
        + ": forward "
        + fmt_duration(s["forward"])
        + ", backward "
        + fmt_duration(s["backward"])
        + ", PCIe grads down "
        + fmt_duration(s["pcie_grads_down"])
        + ", params up "
        + fmt_duration(s["pcie_params_up"])
        + ", CPU Adam "
        + fmt_duration(s["cpu_optimizer"])
        + f"; offload adds {fmt_duration(s['exposed_offload'])}"
    )
    console.print(
        f"{doc['tflops_per_gpu']:.1f} TFLOP/s per GPU; largest model that fits this way: "
        f"{doc['max_params'] / 1e9:.1f}B parameters"
    )
    run = full.get("time")
    if run and full["training"].get("tokens"):
        cost = f", ${full['cost_usd']:,.0f}" if full.get("cost_usd") is not None else ""
        console.print(
            f"{full['training']['tokens']:,.0f} tokens: {fmt_duration(run['total_s'])} "
            f"({full['gpu_hours']:,.0f} GPU-hours{cost}), MFU {full['mfu']:.1%}"
        )


def render_offload_validation(checks, summary: dict, title: str = "offload: predicted vs published") -> None:
    from rich.table import Table

    from gpuplan.cli.render import console

    t = Table(title=title)
    for col in ("id", "tag", "metric", "measured", "predicted", "error", "search"):
        t.add_column(col)
    for c in checks:
        search = f"{c.search_margin:+.1%}" if c.search_margin is not None else ""
        t.add_row(c.id, c.tag, c.metric, f"{c.measured:.4g}", f"{c.predicted:.4g}", f"{c.error:+.1%}", search)
    console.print(t)
    searched = summary.get("min_search_margin")
    console.print(
        f"median |error| {summary['median_abs_error']:.1%}, max {summary['max_abs_error']:.1%} "
        f"(baselines: gpuplan's placement over theirs, least margin {summary['min_baseline_margin']:+.1%}"
        + (f"; search: gpuplan's best over FlexGen's placement, least {searched:+.1%}" if searched is not None else "")
        + (
            f"; published lower bounds: least margin {summary['min_bound_margin']:+.1%}"
            if summary.get("min_bound_margin") is not None
            else ""
        )
        + (
            f"; gpuplan's best over FlexGen's searched best: least {summary['min_best_margin']:+.1%}"
            if summary.get("min_best_margin") is not None
            else ""
        )
        + ")"
    )
