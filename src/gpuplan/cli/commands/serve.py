"""``gpuplan serve``: does a deployment fit, its KV cache, latency, throughput and cost."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import (
    AcceptanceOpt,
    BatchedTokensOpt,
    BlockSizeOpt,
    CalibrationOpt,
    CpuMemoryOpt,
    DiskGbpsOpt,
    DiskOpt,
    DpAttentionOpt,
    DraftLenOpt,
    DraftModelOpt,
    EngineOpt,
    GpuOpt,
    HostOpt,
    HtmlOpt,
    JsonOpt,
    MemFractionOpt,
    ModelArg,
    MtpOpt,
    NgramOpt,
    PcieOpt,
    PlotOpt,
    PpOpt,
    PriceOpt,
    TpOpt,
)
from gpuplan.cli.output import emit_json, plot as write_plot, report
from gpuplan.cli.params import at_least, between, checked, fraction, html_file, plot as plot_path, price as price_rule
from gpuplan.errors import GpuplanError


@checked(
    tp=at_least(1),
    pp=at_least(1),
    input_len=at_least(1, 10**8),
    output_len=at_least(1, 10**8),
    concurrency=at_least(1, 10**7),
    prefill_tp=at_least(1, 1024),
    gpu_memory_utilization=between(0, 1, lo_open=True),
    block_size=at_least(1, 10**6),
    max_batched_tokens=at_least(1, 10**9),
    max_num_seqs=at_least(1, 10**7),
    max_model_len=at_least(1, 10**8),
    prefix_hit_rate=between(0, 1, hi_open=True),
    draft_len=at_least(1, 64),
    acceptance=fraction,
    target_tokens_per_s=between(0, 1e12, lo_open=True),
    target_rps=between(0, 1e9, lo_open=True),
    price=price_rule,
    html=html_file,
    plot=plot_path,
)
def serve(
    model: ModelArg,
    gpu: GpuOpt = "h100-sxm",
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    weights: Annotated[
        str,
        typer.Option(
            help="Weight format: bf16, fp16, fp8, fp8-wo, int8, int4-awq, int4-gptq, "
            "nf4, q4_k_m, q8_0, nvfp4, mxfp4, mxfp8 (Blackwell/MI355X), "
            "mxfp4-wo, mxfp4-experts (gpt-oss as shipped)."
        ),
    ] = "bf16",
    kv: Annotated[str, typer.Option(help="KV-cache format: bf16, fp16, fp8, int8, nvfp4 (Blackwell).")] = "bf16",
    input_len: Annotated[int, typer.Option(help="Prompt tokens per request.")] = 2048,
    output_len: Annotated[int, typer.Option(help="Generated tokens per request.")] = 256,
    concurrency: Annotated[int | None, typer.Option(help="Sequences in flight (default 1).")] = None,
    max_throughput: Annotated[
        bool, typer.Option("--max-throughput", help="As many sequences as memory allows (offline mode).")
    ] = False,
    engine: EngineOpt = None,
    dp_attention: DpAttentionOpt = False,
    disaggregate: Annotated[
        bool,
        typer.Option(
            "--disaggregate", help="Separate prefill and decode pools: P:D ratio under --ttft-slo and --itl-slo."
        ),
    ] = False,
    prefill_tp: Annotated[int | None, typer.Option(help="With --disaggregate: TP of the prefill instances.")] = None,
    gpu_memory_utilization: MemFractionOpt = None,
    block_size: BlockSizeOpt = None,
    max_batched_tokens: BatchedTokensOpt = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="Cap on sequences per iteration.")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Longest context (default: the model's).")] = None,
    prefix_hit_rate: Annotated[float, typer.Option(help="Share of prompt tokens found in the prefix cache.")] = 0.0,
    draft_model: DraftModelOpt = None,
    ngram: NgramOpt = False,
    mtp: MtpOpt = False,
    draft_len: DraftLenOpt = 4,
    acceptance: AcceptanceOpt = 0.7,
    target_tokens_per_s: Annotated[float | None, typer.Option(help="Output tokens/s to serve: GPUs needed.")] = None,
    target_rps: Annotated[float | None, typer.Option(help="Requests/s to serve: GPUs needed.")] = None,
    itl_slo: Annotated[
        str | None,
        typer.Option(
            "--itl-slo",
            "--tpot-slo",
            help="Inter-token latency (TPOT) target, e.g. 50ms; with --target-rps or --target-tokens-per-s.",
        ),
    ] = None,
    ttft_slo: Annotated[str | None, typer.Option(help="Time-to-first-token target, e.g. 2s; with a target.")] = None,
    price: PriceOpt = None,
    offload: Annotated[
        str | None,
        typer.Option(
            help="Place weights and KV across GPU, CPU and disk: auto, none, weights, kv (FlexGen-style search)."
        ),
    ] = None,
    gpu_layers: Annotated[
        int | None, typer.Option(help="llama.cpp -ngl split: layers on the GPU, the rest run on the CPU.")
    ] = None,
    cpu_memory: CpuMemoryOpt = None,
    disk: DiskOpt = None,
    pcie_gbps: PcieOpt = None,
    disk_gbps: DiskGbpsOpt = None,
    host: HostOpt = None,
    calibration: CalibrationOpt = None,
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Serving: does it fit, KV cache, max concurrency, TTFT/TPOT, tokens/s and $/M tokens."""
    from gpuplan import catalog
    from gpuplan.estimate.profile import calibrated
    from gpuplan.serve.engines import engine_config
    from gpuplan.serve.plan import ServeRequest, estimate_serving, to_dict

    itl = inputs.duration(itl_slo, "itl_slo", max_s=86400) if itl_slo is not None else None
    ttft = inputs.duration(ttft_slo, "ttft_slo", max_s=86400) if ttft_slo is not None else None
    # a profile's efficiency (GEMM, HBM, bus factors) times serving too; its allocator reserve is
    # a training figure, which the engines' own memory rules replace
    hw, prof, _ = calibrated(catalog.gpu(gpu), calibration, None)
    described = {"calibration_profile": prof.describe() if prof else None}
    if offload is not None or gpu_layers is not None or cpu_memory is not None or host is not None:  # offload.py
        from gpuplan.cli.offload import host_from_flags, render_serve_offload
        from gpuplan.serve.formats import kv_format, weight_format
        from gpuplan.serve.offload import OffloadRequest, plan_offload, to_dict as od

        oreq = OffloadRequest(
            model=catalog.model(model),
            gpu=hw,
            host=host_from_flags(hw, cpu_memory, disk, pcie_gbps, disk_gbps, host=host),
            weights=weight_format(weights, hw),
            kv=kv_format(kv),
            input_len=input_len,
            output_len=output_len,
            offload=offload or "auto",
            gpu_layers=gpu_layers,
            batch=concurrency,
            gpu_memory_utilization=gpu_memory_utilization if gpu_memory_utilization is not None else 0.9,
            max_itl_s=itl,
            max_ttft_s=ttft,
        )
        doc = {**od(plan_offload(oreq)), **described}
        report(html, "serve", doc)
        write_plot(plot, "serve", doc)
        emit_json(doc) if json_out else render_serve_offload(doc)
        return
    price = catalog.price_or_catalog(hw.id, price)
    cfg = engine_config(
        engine, hw, tp, gpu_memory_utilization, block_size, max_batched_tokens, max_num_seqs, max_model_len
    )
    req = ServeRequest(
        model=catalog.model(model),
        gpu=hw,
        tp=tp,
        pp=pp,
        weights=weights,
        kv=kv,
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        max_throughput=max_throughput,
        config=cfg,
        price_per_gpu_hour=price,
        prefix_hit_rate=prefix_hit_rate,
        draft_model=catalog.model(draft_model) if draft_model else None,
        ngram=ngram,
        mtp=mtp,
        draft_len=draft_len,
        acceptance=acceptance,
        target_tokens_per_s=target_tokens_per_s,
        target_requests_per_s=target_rps,
        tpot_slo_s=None if disaggregate else itl,
        ttft_slo_s=None if disaggregate else ttft,
        dp_attention=dp_attention,
    )
    if prefill_tp is not None and not disaggregate:
        raise GpuplanError("prefill_tp", "only the disaggregated pools have a prefill instance", "add --disaggregate")
    if disaggregate:  # serve/disagg.py; the SLOs size the pools rather than a target
        from gpuplan.cli.render_serve import render_disagg
        from gpuplan.serve.disagg import plan_disaggregated, to_dict as dd

        if ttft is None or itl is None:
            raise GpuplanError("disaggregate", "the pools are sized by both targets", "add --ttft-slo and --itl-slo")
        if concurrency or max_throughput or target_tokens_per_s or target_rps:  # they would be silently dropped
            raise GpuplanError(
                "disaggregate",
                "the targets size the pools: --concurrency, --max-throughput and --target-* do not apply",
                "drop them, or drop --disaggregate",
            )
        if draft_model or ngram or mtp:  # the pools' decode instances are timed without a proposer
            flag = "draft-model" if draft_model else ("ngram" if ngram else "mtp")
            raise GpuplanError(
                flag,
                "speculative decoding in disaggregated pools is not modelled",
                f"drop --{flag} to size the pools, or drop --disaggregate to plan a speculating replica",
            )
        if html or plot:  # the report page has no view of the pools yet
            flag = "html" if html else "plot"
            raise GpuplanError(flag, "the pictures do not cover disaggregated pools yet", f"drop --{flag}, use --json")
        ddoc = {**dd(plan_disaggregated(req, ttft, itl, prefill_tp)), **described}
        emit_json(ddoc) if json_out else render_disagg(ddoc)
        return
    est = estimate_serving(req)
    doc = {**to_dict(est), **described}
    report(html, "serve", doc, slo={"tpot_s": itl, "ttft_s": ttft})
    write_plot(plot, "serve", doc, slo={"tpot_s": itl, "ttft_s": ttft})
    if json_out:
        emit_json(doc)
        return
    from gpuplan.cli.render import console
    from gpuplan.cli.render_serve import render_serve

    render_serve(est, doc)
    if prof:
        console.print(prof.summary())
