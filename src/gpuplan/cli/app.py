"""``gpuplan`` commands. Each checks its flags (cli/params.py), calls the library once and renders
the result.

Exit codes: 0 answered; 2 bad input, as one line ``error: <field>: <what>; <fix>`` on stderr and
never a traceback; 3 a valid request whose plan does not fit (train, serve, search), with the
smallest change found that does fit.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.commands import checkpoint, cluster, experts, pipeline, search, serve, serve_sim, slurm, tco, train
from gpuplan.cli.entry import DEPRECATED, click_command, main
from gpuplan.cli.options import (
    AgainstOpt,
    CalibrationOpt,
    JsonOpt,
    RunFormatOpt,
)
from gpuplan.cli.output import emit_json
from gpuplan.cli.params import (
    at_least,
    checked,
)
from gpuplan.errors import GpuplanError
from gpuplan.estimate.profile import calibrated
from gpuplan.runs.readers import read_runs

__all__ = ["DEPRECATED", "app", "click_command", "main"]

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP,
    help="Plan LLM training and serving: memory, FLOPs, time and cost per GPU.\n\n"
    "Exit codes: 0 answered, 2 bad input (one line naming the field and the fix), "
    "3 the plan does not fit (with the smallest change that does).",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("gpuplan")
        except PackageNotFoundError:  # run from a source tree without installing
            v = "unknown"
        sys.stdout.write(f"gpuplan {v}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Plan LLM training and serving: memory, FLOPs, time and cost per GPU."""


app.command()(train.train)


app.command()(search.search)


app.command()(serve.serve)


app.command("serve-sim")(serve_sim.serve_sim)


app.command()(pipeline.pipeline)


app.command()(experts.experts)


app.command(context_settings={"allow_interspersed_args": False})(slurm.slurm)


app.command("checkpoint-interval")(checkpoint.checkpoint_interval)


cluster_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Cluster questions: what preemption costs, a cluster simulated."
)
app.add_typer(cluster_app, name="cluster")


cluster_app.command()(cluster.whatif)


cluster_app.command("sim")(cluster.cluster_sim)


app.command()(tco.tco)


@app.command()
@checked()
def validate(
    kind: Annotated[
        str,
        typer.Argument(
            help="training (step time), serving (throughput and latency), serving-kv (KV pools) or offload."
        ),
    ] = "training",
    calibrated: Annotated[
        bool,
        typer.Option(
            "--calibrated",
            help="Training: calibrate on one run of a GPU family, "
            "predict the family's others (each in turn), against uncalibrated.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Predictions against published runs: per-row error, mean/median and max."""
    if kind == "offload":
        from gpuplan.estimate.offload_validate import summary as off_summary, validate_offload

        checks = validate_offload()
        if json_out:
            emit_json(
                {
                    "rows": [
                        {
                            "id": c.id,
                            "source": c.source,
                            "metric": c.metric,
                            "measured": c.measured,
                            "predicted": c.predicted,
                            "error": c.error,
                        }
                        for c in checks
                    ],
                    "summary": off_summary(checks),
                }
            )
            return
        from gpuplan.cli.offload import render_offload_validation

        render_offload_validation(checks, off_summary(checks))
        return
    if kind == "serving-kv":  # held out: KV pools against engines' startup logs
        from gpuplan.cli.render_serve import render_kv_validation
        from gpuplan.serve.validate_kv import summary as kv_summary, validate_kv_pools

        kv_checks = validate_kv_pools()
        kdoc = {"rows": [c.__dict__ | {"error": c.error} for c in kv_checks], "summary": kv_summary(kv_checks)}
        emit_json(kdoc) if json_out else render_kv_validation(kdoc)
        return
    if kind == "serving":
        from gpuplan.serve.validate import summary as serve_summary, validate_serving

        checks = validate_serving()
        if json_out:
            emit_json(
                {
                    "rows": [
                        {
                            "id": c.row.id,
                            "source": c.row.source,
                            "metric": c.row.metric,
                            "measured": c.row.measured,
                            "predicted": c.predicted,
                            "error": c.error,
                        }
                        for c in checks
                    ],
                    "summary": serve_summary(checks),
                }
            )
            return
        from gpuplan.cli.render import render_serve_validation

        render_serve_validation(checks, serve_summary(checks))
        return
    if kind != "training":
        raise GpuplanError("kind", f"unknown validation set {kind!r}", "use training, serving, serving-kv or offload")
    if calibrated:
        from gpuplan.estimate.calibrate import calibrated_validation

        doc = calibrated_validation()
        if json_out:
            emit_json(doc)
        else:
            from gpuplan.cli.render_runs import render_calibrated_validation

            render_calibrated_validation(doc)
        return
    from gpuplan.estimate.validate import by_category, summary, validate_training

    results = validate_training()
    categories = by_category(results)
    if json_out:
        emit_json(
            {
                "rows": [
                    {
                        "id": r.row.id,
                        "source": r.row.source,
                        "framework": r.row.framework,
                        "gpu": r.row.gpu,
                        "category": list(r.row.category),
                        "measured_step_s": r.row.measured_step_s,
                        "predicted_step_s": r.predicted_step_s,
                        "error": r.error,
                        "metric": r.row.metric,
                        "value": r.row.value,
                        "predicted_mfu": r.mfu,
                        "breakdown_s": r.breakdown,
                    }
                    for r in results
                ],
                "summary": summary(results),
                "categories": [
                    {"gpu_family": k[0], "precision": k[1], "context": k[2], "parallel": k[3], **v}
                    for k, v in categories.items()
                ],
            }
        )
        return
    from gpuplan.cli.render import render_validation

    render_validation(results, summary(results), categories)


@app.command()
@checked(ranks=at_least(1, 10**7), stride=at_least(1, 10**7))
def collective(
    kind: Annotated[str, typer.Argument(help="all-reduce, all-gather, reduce-scatter, all-to-all or p2p.")],
    size: Annotated[
        str,
        typer.Option(
            help="Buffer bytes: 1GB = 1e9, 1GiB = 2^30; a bare suffix is binary as in "
            "nccl-tests (1G = 2^30, 256M); the full buffer for gathers."
        ),
    ] = "1G",
    ranks: Annotated[int, typer.Option(help="Ranks in the group.")] = 8,
    gpu: Annotated[str, typer.Option(help="GPU id: its node size, links and NICs.")] = "h100-sxm",
    stride: Annotated[int, typer.Option(help="Rank distance between members (1: packed in nodes).")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """One collective on the machine: bytes each rank sends, time and bus bandwidth."""
    from gpuplan import catalog
    from gpuplan.estimate.comm import _group, bus_bandwidth, bytes_sent_per_rank, collective_time
    from gpuplan.units import GB

    hw = catalog.gpu(gpu)
    nbytes = inputs.parse_size(size, "size")
    group = _group(kind, ranks, stride, hw.fast_domain)
    sent = bytes_sent_per_rank(kind, nbytes, ranks)
    t = collective_time(kind, nbytes, group, hw)
    doc = {
        "collective": kind,
        "size_bytes": nbytes,
        "ranks": ranks,
        "gpu": hw.id,
        "nodes": group.domains,
        "ranks_per_node": group.per_domain,
        "bytes_sent_per_rank": sent,
        "volume_factor": sent / nbytes if nbytes else 0.0,
        "time_s": t,
        # nccl-tests: busbw = algbw x the collective's factor (2(n-1)/n all-reduce, (n-1)/n gathers, 1 p2p)
        "bus_bandwidth_bytes_per_s": (sent / t if kind != "p2p" else nbytes / t) if t else 0.0,
        "link_bandwidth_bytes_per_s": bus_bandwidth(group, hw),
        "algorithm_bandwidth_bytes_per_s": nbytes / t if t else 0.0,
    }
    if json_out:
        emit_json(doc)
        return
    from gpuplan.cli.render import console

    console.print(
        f"{kind} of {nbytes / GB:,.3f} GB over {ranks} ranks ({group.per_domain} per node, {group.domains} "
        f"node{'s' if group.domains > 1 else ''}) on {hw.name}: each rank sends {sent / GB:,.3f} GB "
        f"({doc['volume_factor']:.4f} x the buffer), {t * 1e3:,.3f} ms, bus bandwidth "
        f"{doc['bus_bandwidth_bytes_per_s'] / GB:,.1f} GB/s"
    )


@app.command()
@checked()
def models(json_out: JsonOpt = False) -> None:
    """List the model catalog."""
    from gpuplan import catalog
    from gpuplan.estimate.params import count_params

    rows = []
    for mid in catalog.model_ids():
        m = catalog.model(mid)
        p = count_params(m)
        entry = catalog.model_entry(mid)
        rows.append(
            {
                "id": mid,
                "model_type": m.model_type,
                "params_total": p.total,
                "params_active": p.active,
                "params_vision": p.vision,
                "layers": m.num_layers,
                "hidden_size": m.hidden_size,
                "heads": m.num_heads,
                "kv_heads": m.num_kv_heads,
                "vocab_size": m.vocab_size,
                "experts": m.num_experts,
                "source": entry["source"],
                "date": entry["date"],
            }
        )
    if json_out:
        emit_json(rows)
    else:
        from gpuplan.cli.render import render_models

        render_models(rows)


@app.command()
@checked()
def gpus(json_out: JsonOpt = False) -> None:
    """List the GPU catalog (dense peaks)."""
    from gpuplan import catalog

    rows = []
    for gid in catalog.gpu_ids():
        g = catalog.gpu(gid)
        price = catalog.price_per_gpu_hour(gid)
        rows.append(
            {
                "id": gid,
                "name": g.name,
                "memory_bytes": g.memory_bytes,
                "hbm_bytes_per_s": g.hbm_bytes_per_s,
                "peak_flops": g.peak_flops,
                "interconnect": g.interconnect,
                "interconnect_bytes_per_s": g.interconnect_bytes_per_s,
                "gpus_per_node": g.gpus_per_node,
                "tdp_w": g.tdp_w,
                "usd_per_gpu_hour": price[0] if price else None,
                "source": g.source,
                "date": g.date,
            }
        )
    if json_out:
        emit_json(rows)
    else:
        from gpuplan.cli.render import render_gpus

        render_gpus(rows)


@app.command()
def calibrate(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="Runs: telemetry .jsonl, a run .toml (a log, an optional trace "
            "and its [plan]), or logs with --against."
        ),
    ],
    out: Annotated[str | None, typer.Option(help="Write the cluster profile (TOML) here.")] = None,
    run_format: RunFormatOpt = None,
    against: AgainstOpt = None,
    loo: Annotated[bool, typer.Option("--loo/--no-loo", help="Leave-one-out error: one more fit per run.")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Fit GEMM, attention, HBM, bus and per-step overhead factors to your runs; write a profile."""
    from gpuplan.cli.render_runs import calibration_dict, render_calibration
    from gpuplan.estimate.calibrate import calibrate_runs
    from gpuplan.estimate.profile import write_profile

    cal = calibrate_runs(read_runs(runs, run_format, against), leave_one_out=loo)
    if out:
        write_profile(cal, out)
    doc = calibration_dict(cal, out)
    if json_out:
        emit_json(doc)
    else:
        render_calibration(doc)


@app.command()
def compare(
    run: Annotated[str, typer.Argument(help="A run: telemetry .jsonl, a run .toml, a log or a profiler trace.")],
    against: AgainstOpt = None,
    run_format: RunFormatOpt = None,
    calibration: CalibrationOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Predicted vs measured per component (step, kernels, memory); flags what is beyond the band."""
    from gpuplan.cli.render_runs import render_compare
    from gpuplan.runs.compare import compare_run

    (r,) = read_runs([run], run_format, against)
    if r.plan is None:
        raise GpuplanError("against", f"{run} carries no plan", 'pass --against "MODEL --gpus N --tp T ..."')
    res = r.plan.resolve()
    hw, prof, reserve = calibrated(res.gpu, calibration, None)
    if prof:
        import dataclasses

        cfg = res.config if reserve is None else dataclasses.replace(res.config, allocator_fraction=reserve)
        res = dataclasses.replace(res, gpu=hw, config=cfg)
    doc = compare_run(r, res)
    doc["calibration_profile"] = {**prof.describe(), "summary": prof.summary()} if prof else None
    if json_out:
        emit_json(doc)
    else:
        render_compare(doc)


@app.command()
@checked(port=at_least(0, 65535))
def ui(port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8000) -> None:
    """A local web page: a form per command, pictures, the same numbers as --json (cli/web/)."""
    from gpuplan.cli.web.server import make_server, warm

    try:
        server = make_server(port)
    except OSError as exc:
        raise GpuplanError(
            "port", f"cannot listen on 127.0.0.1:{port} ({exc.strerror})", "use another --port, or --port 0"
        ) from None
    warm()
    sys.stdout.write(f"gpuplan ui: http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C stops it)\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
