"""``gpuplan search``: every valid parallel plan that fits, ranked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import (
    CalibrationOpt,
    ClusterOpt,
    CompileOpt,
    CpLoadBalanceOpt,
    DocumentLenOpt,
    FrameworkOpt,
    GpuOpt,
    HtmlOpt,
    JsonOpt,
    MasterDtypeOpt,
    ModelArg,
    MtpLayersOpt,
    OptimizerDtypeOpt,
    PlotOpt,
    PriceOpt,
    RecomputeModulesOpt,
)
from gpuplan.cli.output import emit_json, plot as write_plot, report
from gpuplan.cli.params import at_least, checked, html_file, plot as plot_path, price as price_rule


@checked(
    gpus=at_least(1, 10**7),
    seq_len=at_least(1, 10**8),
    top=at_least(1, 1000),
    etp=at_least(1),
    **{k: at_least(1) for k in ("tp", "pp", "cp", "ep", "dp", "max_tp", "max_pp", "max_cp", "max_ep")},
    price=price_rule,
    html=html_file,
    plot=plot_path,
)
def search(
    model: ModelArg,
    gpu: GpuOpt = "h100-sxm",
    gpus: Annotated[int | None, typer.Option(help="Number of GPUs (default 8, or all of --cluster).")] = None,
    cluster: ClusterOpt = None,
    seq_len: Annotated[int, typer.Option(help="Sequence length in tokens.")] = 4096,
    global_batch: Annotated[
        str, typer.Option(help="Global batch: sequences (512) or tokens with a suffix (16M).")
    ] = "512",
    precision: Annotated[
        str, typer.Option(help="bf16, fp16, fp32, fp8, or mxfp8/nvfp4 (Blackwell block-scaled GEMMs).")
    ] = "bf16",
    optimizer: Annotated[str, typer.Option(help="adamw, adamw8bit, sgd or adafactor.")] = "adamw",
    optimizer_dtype: OptimizerDtypeOpt = "fp32",
    master_dtype: MasterDtypeOpt = "fp32",
    fp8_scaling: Annotated[
        str, typer.Option("--fp8-scaling", help="FP8 per-tensor scaling: delayed or current (FP8-CS).")
    ] = "delayed",
    fp8_params: Annotated[
        bool,
        typer.Option(
            "--fp8-params/--no-fp8-params",
            help="Keep the GEMM weights only in FP8 (Megatron --fp8-param-gather); ZeRO-3 plans are left out.",
        ),
    ] = False,
    compile_blocks: CompileOpt = False,
    objective: Annotated[str, typer.Option(help="Rank by throughput or cost.")] = "throughput",
    top: Annotated[int, typer.Option(help="How many plans to show.")] = 5,
    framework: FrameworkOpt = "generic",
    cp_comm: Annotated[
        str | None,
        typer.Option(
            "--cp-comm",
            help="Context parallelism's K,V exchange to search: p2p (ring), all_gather, a2a (Ulysses), "
            "a comma list of them, or all the framework has; each plan with cp > 1 is ranked under each "
            "(default: the framework's).",
        ),
    ] = None,
    cp_load_balance: CpLoadBalanceOpt = True,
    document_len: DocumentLenOpt = 0,
    mtp_layers: MtpLayersOpt = 0,
    price: PriceOpt = None,
    calibration: CalibrationOpt = None,
    tp: Annotated[int | None, typer.Option(help="Fix the tensor-parallel degree.")] = None,
    pp: Annotated[int | None, typer.Option(help="Fix the pipeline-parallel degree.")] = None,
    cp: Annotated[int | None, typer.Option(help="Fix the context-parallel degree.")] = None,
    ep: Annotated[int | None, typer.Option(help="Fix the expert-parallel degree.")] = None,
    dp: Annotated[int | None, typer.Option(help="Fix the data-parallel degree.")] = None,
    etp: Annotated[
        int | None,
        typer.Option(help="Fix the expert tensor-parallel degree (MoE parallel folding; default: tp and 1 are tried)."),
    ] = None,
    max_tp: Annotated[int | None, typer.Option(help="Largest tensor-parallel degree.")] = None,
    max_pp: Annotated[int | None, typer.Option(help="Largest pipeline-parallel degree.")] = None,
    max_cp: Annotated[int | None, typer.Option(help="Largest context-parallel degree.")] = None,
    max_ep: Annotated[int | None, typer.Option(help="Largest expert-parallel degree.")] = None,
    schedule: Annotated[
        str | None, typer.Option(help="Only these schedules, e.g. 1f1b,interleaved (also zb, zb-v, dualpipe).")
    ] = None,
    zero: Annotated[str | None, typer.Option(help="Only these ZeRO stages, e.g. 1,3.")] = None,
    recompute: Annotated[str | None, typer.Option(help="Only these recompute modes, e.g. none,selective.")] = None,
    recompute_modules: RecomputeModulesOpt = None,
    micro_batch: Annotated[str | None, typer.Option(help="Micro-batch sizes to try (default 1,2,4,8).")] = None,
    offload: Annotated[
        str,
        typer.Option(
            help="Offload as one more dimension: none, auto (both below), optimizer or optimizer+params "
            "(ZeRO-Offload / ZeRO-Infinity variants of the pp=1 plans, beside the plans without)."
        ),
    ] = "none",
    host: Annotated[
        str | None, typer.Option(help="Host for --offload: a catalog host id or a hardware TOML file.")
    ] = None,
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Every valid parallel plan that fits, ranked; rejected plans counted by reason."""
    from gpuplan import catalog
    from gpuplan.catalog.hosts import load_host
    from gpuplan.errors import require
    from gpuplan.estimate.profile import calibrated
    from gpuplan.search.plans import RECOMPUTE_ORDER, Constraints, SearchResult, parse_choices, search as run_search
    from gpuplan.search.report import to_dict
    from gpuplan.specs.framework import get as get_framework
    from gpuplan.specs.training import SEARCH_MICRO_BATCHES, TrainingConfig

    # --cp-comm: one exchange, a comma list, or "all" the framework has: each is searched
    exchanges = parse_choices(cp_comm, "cp_comm") or ()
    if exchanges == ("all",):
        exchanges = get_framework(framework).cp_comms
    spec = catalog.model(model)
    hw, gpus = catalog.hardware(gpu, cluster, gpus)
    hw, prof, reserve = calibrated(hw, calibration, None)
    base = TrainingConfig.for_framework(
        framework,
        seq_len=seq_len,
        global_batch=inputs.global_batch(global_batch, seq_len),
        precision=precision,
        fp8_scaling=fp8_scaling,
        fp8_params=fp8_params,
        compile=compile_blocks,
        cp_comm=exchanges[0] if len(exchanges) == 1 else None,
        cp_load_balance=cp_load_balance,
        document_len=document_len,
        mtp_layers=mtp_layers,
        optimizer=optimizer,
        optimizer_dtype=optimizer_dtype,
        master_dtype=master_dtype,
        allocator_fraction=reserve,
        # the grid takes them for its selective plans (search/grid.py)
        recompute="selective" if recompute_modules else None,
        recompute_modules=parse_choices(recompute_modules, "recompute_modules"),
    )
    price = catalog.price_or_catalog(hw.id, price)
    constraints = Constraints(
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        dp=dp,
        etp=etp,
        max_tp=max_tp,
        max_pp=max_pp,
        max_cp=max_cp,
        max_ep=max_ep,
        schedules=parse_choices(schedule, "schedule"),
    )
    zero_stages = parse_choices(zero, "zero", int) or (0, 1, 2, 3)
    recompute_modes = parse_choices(recompute, "recompute") or RECOMPUTE_ORDER
    require(
        not recompute_modules or "selective" in recompute_modes,
        "recompute_modules",
        "apply only to selective recompute, which --recompute leaves out",
        "add selective to --recompute, or drop --recompute-modules",
    )
    micro_batches = parse_choices(micro_batch, "micro_batch", int) or SEARCH_MICRO_BATCHES
    # --host: a catalog host id or a hardware file; None: the catalog's host for the GPU
    host_spec = None if host is None else load_host(host)

    def run(progress: Callable[[int, int], object] | None = None) -> SearchResult:
        return run_search(
            spec,
            hw,
            gpus,
            base,
            top=top,
            objective=objective,
            price_per_gpu_hour=price,
            progress=progress,
            constraints=constraints,
            zero_stages=zero_stages,
            recompute=recompute_modes,
            micro_batches=micro_batches,
            offload=offload,
            host=host_spec,
            cp_comms=exchanges if len(exchanges) > 1 else (),
        )

    if json_out:
        result = run()
        doc = {**to_dict(result, spec, hw), "calibration_profile": prof.describe() if prof else None}
        report(html, "search", doc)
        write_plot(plot, "search", doc)
        emit_json(doc)
        return
    from gpuplan.cli.render import console, progress, render_search

    if prof:
        console.print(prof.summary())
    with progress() as bar:
        task = bar.add_task("searching plans", total=1)
        result = run(lambda i, n: bar.update(task, completed=i, total=n))
    render_search(result, spec, hw)
    if html or plot:
        doc = {**to_dict(result, spec, hw), "calibration_profile": prof.describe() if prof else None}
        report(html, "search", doc)
        write_plot(plot, "search", doc)
