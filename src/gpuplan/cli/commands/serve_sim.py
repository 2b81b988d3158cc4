"""``gpuplan serve-sim``: the discrete-event serving simulation (serve/sim.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import (
    AcceptanceOpt,
    BatchedTokensOpt,
    BlockSizeOpt,
    DpAttentionOpt,
    DraftLenOpt,
    DraftModelOpt,
    EngineOpt,
    GpuOpt,
    HtmlOpt,
    JsonOpt,
    MemFractionOpt,
    ModelArg,
    MtpOpt,
    NgramOpt,
    PlotOpt,
    PpOpt,
    TpOpt,
)
from gpuplan.cli.output import plot as write_plot, report, show
from gpuplan.cli.params import at_least, between, checked, fraction, html_file, plot as plot_path, seed as seed_rule


@checked(
    tp=at_least(1),
    pp=at_least(1),
    requests=at_least(1, 200_000),
    concurrency=at_least(1, 10**7),
    seed=seed_rule,
    gpu_memory_utilization=between(0, 1, lo_open=True),
    block_size=at_least(1, 10**6),
    max_batched_tokens=at_least(1, 10**9),
    max_num_seqs=at_least(1, 10**7),
    prefill_instances=at_least(1, 1024),
    decode_instances=at_least(1, 1024),
    prefill_tp=at_least(1),
    draft_len=at_least(1, 64),
    acceptance=fraction,
    html=html_file,
    plot=plot_path,
)
def serve_sim(
    model: ModelArg,
    gpu: GpuOpt = "h100-sxm",
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    weights: Annotated[str, typer.Option(help="Weight format (see `gpuplan serve --help`).")] = "bf16",
    kv: Annotated[str, typer.Option(help="KV-cache format: bf16, fp16, fp8, int8, nvfp4 (Blackwell).")] = "bf16",
    rate: Annotated[
        str | None,
        typer.Option(
            help="Poisson request rate(s) per second, e.g. 4 or 1,2,4,8; inf: a burst, all --requests at t = 0 "
            "(vllm bench serve's default --request-rate inf)."
        ),
    ] = None,
    requests: Annotated[int, typer.Option(help="Requests per simulation.")] = 1000,
    input_len: Annotated[str, typer.Option(help="Prompt length: 2048, 512-4096 (uniform) or exp:1024.")] = "2048",
    output_len: Annotated[str, typer.Option(help="Output length: 256, 64-512 (uniform) or exp:256.")] = "256",
    trace: Annotated[str | None, typer.Option(help="CSV trace: arrival_s,input_len,output_len.")] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Closed loop of N clients, each sending its next request when one finishes.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed (arrivals and lengths).")] = 0,
    ttft_slo: Annotated[str | None, typer.Option(help="p99 TTFT target, e.g. 2s: find the highest rate.")] = None,
    itl_slo: Annotated[
        str | None, typer.Option("--itl-slo", "--tpot-slo", help="p99 inter-token latency (TPOT) target, e.g. 50ms.")
    ] = None,
    engine: EngineOpt = None,
    dp_attention: DpAttentionOpt = False,
    gpu_memory_utilization: MemFractionOpt = None,
    block_size: BlockSizeOpt = None,
    max_batched_tokens: BatchedTokensOpt = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            help="Cap on running sequences (default: the --engine's; without one, what the KV pool holds, as `serve`)."
        ),
    ] = None,
    prefill_instances: Annotated[
        int | None,
        typer.Option(
            help="Disaggregated serving: this many prefill instances (with --decode-instances); each request's "
            "KV moves to a decode instance over the network."
        ),
    ] = None,
    decode_instances: Annotated[
        int | None, typer.Option(help="Disaggregated serving: this many decode instances (with --prefill-instances).")
    ] = None,
    prefill_tp: Annotated[int | None, typer.Option(help="With the pools: TP of the prefill instances.")] = None,
    draft_model: DraftModelOpt = None,
    ngram: NgramOpt = False,
    mtp: MtpOpt = False,
    draft_len: DraftLenOpt = 4,
    acceptance: AcceptanceOpt = 0.7,
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Discrete-event serving simulation: continuous batching, paged KV, chunked prefill, preemption;
    optionally disaggregated prefill and decode pools and speculative decoding."""
    from gpuplan import catalog
    from gpuplan.errors import GpuplanError
    from gpuplan.serve.engines import engine_config
    from gpuplan.serve.formats import kv_format, weight_format
    from gpuplan.serve.sim import Lengths
    from gpuplan.serve.sim_study import parse_rates, study
    from gpuplan.serve.timing import Deployment

    hw = catalog.gpu(gpu)
    d = Deployment(catalog.model(model), hw, weight_format(weights, hw), kv_format(kv, hw), tp, pp, dp_attention)
    seats = max_num_seqs  # None: the engine's default (the KV pool decides without one, as in `serve`)
    cfg = engine_config(engine, hw, tp, gpu_memory_utilization, block_size, max_batched_tokens, seats)
    pools = None
    if (prefill_instances is None) != (decode_instances is None):
        given = "prefill_instances" if prefill_instances is not None else "decode_instances"
        raise GpuplanError(
            given,
            "disaggregated serving needs both pools",
            "give both `--prefill-instances` and `--decode-instances` (e.g. 1 and 3), or neither",
        )
    if prefill_tp is not None and prefill_instances is None:
        raise GpuplanError("prefill_tp", "only the disaggregated pools have a prefill instance", "add the pools")
    if prefill_instances is not None and decode_instances is not None:
        from gpuplan.serve.disagg import prefill_deployment
        from gpuplan.serve.sim_disagg import Pools

        p = prefill_deployment(d, prefill_tp)
        pcfg = engine_config(engine, hw, p.tp, gpu_memory_utilization, block_size, max_batched_tokens, seats)
        pools = Pools(p, pcfg, prefill_instances, decode_instances)
    from gpuplan.serve.sim import Speculating
    from gpuplan.serve.speculative import expected_tokens, proposer

    prop = proposer(d, catalog.model(draft_model) if draft_model else None, ngram, mtp)
    spec = Speculating(prop, draft_len, acceptance, seed) if prop is not None else None
    lin, lout = Lengths.parse(input_len, "input_len"), Lengths.parse(output_len, "output_len")
    ttft = inputs.duration(ttft_slo, "ttft_slo", max_s=86400) if ttft_slo is not None else None
    itl = inputs.duration(itl_slo, "itl_slo", max_s=86400) if itl_slo is not None else None
    plan = study(
        d,
        cfg,
        requests,
        lin,
        lout,
        seed,
        rates=parse_rates(rate),
        trace=trace,
        clients=concurrency,
        ttft_slo_s=ttft,
        itl_slo_s=itl,
        pools=pools,
        spec=spec,
    )
    from gpuplan.cli.render import progress

    with progress(json_out) as bar:
        what, steps = plan.describe()
        task = bar.add_task(what, total=steps)
        results, best = plan.run(lambda: bar.advance(task))
    doc = {
        "model": d.model.name,
        "gpu": hw.id,
        "tp": tp,
        "pp": pp,
        "weights": weights,
        "kv": kv,
        "engine": cfg.engine,
        "seed": seed,
        "runs": [r.to_dict() for r in results],
    }
    if spec is not None:
        doc["speculative"] = {
            "method": spec.proposer.method,
            "draft_len": draft_len,
            "acceptance": acceptance,
            "expected_tokens": expected_tokens(acceptance, draft_len),
        }
    if pools is not None:
        doc["disaggregated"] = {
            "prefill_instances": pools.n_prefill,
            "decode_instances": pools.n_decode,
            "prefill_tp": pools.prefill.tp,
            "gpus": pools.gpus(d),
        }
    if plan.searches:
        doc["slo"] = {
            "ttft_p99_s": ttft,
            "itl_p99_s": itl,
            "max_rate": best[0],
            "at_max_rate": best[1].to_dict() if best[1] else None,
        }
    report(html, "serve-sim", doc)
    write_plot(plot, "serve-sim", doc)
    show(doc, json_out, "render_serve.render_serve_sim")
