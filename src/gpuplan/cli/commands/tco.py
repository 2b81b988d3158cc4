"""``gpuplan tco``: rent on demand, rent spot, or own (cluster/tco.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import GpuOpt, HtmlOpt, JsonOpt, PlotOpt
from gpuplan.cli.output import plot as write_plot, report, show
from gpuplan.cli.params import at_least, between, checked, html_file, plot as plot_path
from gpuplan.errors import GpuplanError


@checked(
    gpus=at_least(1, 10**7),
    on_demand=between(0, 1e6, lo_open=True),
    spot=between(0, 1e6, lo_open=True),
    pue=between(1, 5),
    kwh=between(0, 100),
    staff=between(0, 1e9),
    colo=between(0, 1e9),
    utilisation=between(0, 1, lo_open=True),
    months=at_least(1, 1200),
    html=html_file,
    plot=plot_path,
)
def tco(
    gpus: Annotated[int, typer.Option(help="GPUs to rent or buy.")] = 64,
    gpu: GpuOpt = "h100-sxm",
    on_demand: Annotated[float | None, typer.Option(help="On-demand USD per GPU-hour (default: catalog).")] = None,
    spot: Annotated[float | None, typer.Option(help="Spot USD per GPU-hour.")] = None,
    spot_mtbf: Annotated[str, typer.Option(help="Mean time between spot preemptions.")] = "24h",
    checkpoint_cost: Annotated[str, typer.Option(help="Time to write one checkpoint.")] = "60s",
    capex: Annotated[
        str | None,
        typer.Option(
            help="Purchase price of the owned GPUs (servers, network), e.g. 2.5M; 0 for hardware already paid for."
        ),
    ] = None,
    pue: Annotated[float, typer.Option(help="Power usage effectiveness of the data centre.")] = 1.3,
    kwh: Annotated[float, typer.Option(help="USD per kWh.")] = 0.10,
    staff: Annotated[float, typer.Option(help="Staff USD per month for the owned cluster.")] = 0.0,
    colo: Annotated[float, typer.Option(help="Colocation/space USD per month.")] = 0.0,
    utilisation: Annotated[float, typer.Option(help="Share of hours the GPUs do useful work.")] = 0.8,
    months: Annotated[int, typer.Option(help="Months to compare.")] = 36,
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Cloud on-demand vs spot (with preemption losses) vs owned: monthly costs and the break-even month."""
    from gpuplan import catalog
    from gpuplan.cluster.tco import TCOInput, tco as run_tco

    hw = catalog.gpu(gpu)
    if capex is None:
        # Without a purchase price owning looks free and "wins" from month one
        raise GpuplanError(
            "capex",
            "owning needs the purchase price of the servers",
            f"pass --capex, e.g. --capex {gpus * 40_000 / 1e6:g}M (about $40k per GPU in a server), or "
            "--capex 0 for hardware already paid for",
        )
    price = catalog.price_or_catalog(hw.id, on_demand)
    if price is None:
        raise GpuplanError("on_demand", f"no catalog price for {hw.name}", "pass --on-demand USD per GPU-hour")
    doc = run_tco(
        TCOInput(
            gpus=gpus,
            on_demand_per_gpu_hour=price,
            spot_per_gpu_hour=spot,
            spot_mtbf_s=inputs.duration(spot_mtbf, "spot_mtbf"),
            checkpoint_cost_s=inputs.duration(checkpoint_cost, "checkpoint_cost"),
            capex=inputs.count(capex, "capex", zero_ok=True),
            tdp_w=hw.tdp_w,
            pue=pue,
            usd_per_kwh=kwh,
            staff_per_month=staff,
            colo_per_month=colo,
            utilisation=utilisation,
            months=months,
        )
    )
    doc["on_demand_per_gpu_hour"] = price
    report(html, "tco", doc)
    write_plot(plot, "tco", doc)
    show(doc, json_out, "render_sims.render_tco")
