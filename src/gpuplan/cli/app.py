"""``gpuplan`` commands. Each parses its flags, calls the library once and renders the result.

Errors from bad input are one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from gpuplan.errors import GpuplanError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, help="Plan LLM training and serving: memory, FLOPs, time and cost per GPU.")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable JSON document.")]


def _emit_json(doc) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


@app.command()
def train(
    model: Annotated[str, typer.Argument(help="Catalog id (see `gpuplan models`) or a path to a config.json.")],
    gpu: Annotated[str, typer.Option(help="GPU id (see `gpuplan gpus`).")] = "h100-sxm",
    gpus: Annotated[int, typer.Option(help="Number of GPUs (world size).")] = 8,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel degree.")] = 1,
    dp: Annotated[Optional[int], typer.Option(help="Data-parallel degree (default: gpus / (tp*pp*cp)).")] = None,
    cp: Annotated[int, typer.Option(help="Context-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel degree (carved from dp*cp).")] = 1,
    vp: Annotated[int, typer.Option(help="Virtual pipeline stages per rank (interleaved 1F1B).")] = 1,
    schedule: Annotated[str, typer.Option(help="Pipeline schedule: 1f1b, zb (zero-bubble H1), dualpipe.")] = "1f1b",
    rank_order: Annotated[str, typer.Option(help="Rank order, innermost first (decides which groups cross nodes).")]
    = "tp-cp-dp-pp",
    zero: Annotated[int, typer.Option(help="ZeRO stage 0-3 (3 = FSDP full shard).")] = 0,
    sp: Annotated[bool, typer.Option("--sp/--no-sp", help="Sequence parallelism with TP.")] = True,
    seq_len: Annotated[int, typer.Option(help="Sequence length in tokens.")] = 4096,
    micro_batch: Annotated[int, typer.Option(help="Sequences per micro-batch per GPU.")] = 1,
    global_batch: Annotated[Optional[int], typer.Option(help="Sequences per optimizer step.")] = None,
    tokens: Annotated[Optional[str], typer.Option(help="Training tokens, e.g. 2T, 15.6e12, 300B.")] = None,
    recompute: Annotated[str, typer.Option(help="Activation recompute: none, selective, full.")] = "none",
    precision: Annotated[str, typer.Option(help="bf16, fp16, fp32 or fp8.")] = "bf16",
    master_weights: Annotated[bool, typer.Option("--master-weights/--no-master-weights",
                                                 help="Keep an fp32 master copy (mixed precision).")] = True,
    optimizer: Annotated[str, typer.Option(help="adamw, adamw8bit, sgd or adafactor.")] = "adamw",
    attention: Annotated[str, typer.Option(help="flash or eager attention kernels.")] = "flash",
    profile: Annotated[str, typer.Option(help="fused (Megatron/TE) or eager (PyTorch + transformers).")] = "fused",
    mfu: Annotated[Optional[float], typer.Option(help="Override the predicted MFU, e.g. 0.4.")] = None,
    tp_overlap: Annotated[bool, typer.Option("--tp-overlap/--no-tp-overlap",
                                             help="Hide TP collectives behind GEMMs (TransformerEngine).")] = False,
    overlap_grad_reduce: Annotated[bool, typer.Option("--overlap-grad-reduce/--no-overlap-grad-reduce",
                                                      help="Reduce DP gradients during the backward.")] = True,
    price: Annotated[Optional[float], typer.Option(help="USD per GPU-hour (default: dated catalog price).")] = None,
    cuda_context_gib: Annotated[float, typer.Option(help="CUDA/NCCL context per GPU, GiB.")] = 0.5,
    allocator_fraction: Annotated[float, typer.Option(help="Allocator reserve, fraction of allocated.")] = 0.05,
    json_out: JsonOpt = False,
) -> None:
    """Will a training run fit, where every byte per GPU goes, its FLOPs, time and cost."""
    from gpuplan import catalog
    from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig
    from gpuplan.units import GiB, parse_count

    spec = catalog.model(model)
    hw = catalog.gpu(gpu)
    if gpus < 1:
        raise GpuplanError("gpus", f"must be a positive integer, got {gpus}")
    for name, value in (("tp", tp), ("pp", pp), ("cp", cp)):
        if value < 1:
            raise GpuplanError(name, f"must be a positive integer, got {value}")
    if dp is None:
        if gpus % (tp * pp * cp):
            raise GpuplanError("gpus", f"{gpus} GPUs do not split into tp x pp x cp = {tp * pp * cp}",
                               "use a GPU count that is a multiple of tp*pp*cp")
        dp = gpus // (tp * pp * cp)
    plan = ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vp=vp, zero=zero, sp=sp, schedule=schedule,
                        order=rank_order)
    if plan.world_size != gpus:
        raise GpuplanError("dp", f"dp x tp x pp x cp = {plan.world_size} is not --gpus {gpus}",
                           "make the product of the degrees equal the GPU count")
    if cuda_context_gib < 0:
        raise GpuplanError("cuda_context_gib", "must not be negative")
    config = TrainingConfig(seq_len=seq_len, micro_batch=micro_batch, global_batch=global_batch or 0,
                            precision=precision, master_weights=master_weights, optimizer=optimizer,
                            recompute=recompute, attention=attention, profile=profile,
                            cuda_context_bytes=cuda_context_gib * GiB, allocator_fraction=allocator_fraction,
                            tp_overlap=tp_overlap, overlap_grad_reduce=overlap_grad_reduce)
    price_source = "--price"
    if price is None:
        found = catalog.price_per_gpu_hour(hw.id)
        if found:
            price, price_source = found
        else:
            price_source = "no catalog price for this GPU; pass --price"
    req = TrainRequest(model=spec, gpu=hw, plan=plan, config=config,
                       tokens=parse_count(tokens, "tokens") if tokens else None, mfu=mfu,
                       price_per_gpu_hour=price, price_source=price_source)
    est = estimate_training(req)
    if json_out:
        _emit_json(to_dict(est))
    else:
        from gpuplan.cli.render import render_train
        render_train(est)


@app.command()
def models(json_out: JsonOpt = False) -> None:
    """List the model catalog."""
    from gpuplan import catalog
    from gpuplan.estimate.params import count_params

    rows = []
    for mid in catalog.model_ids():
        m = catalog.model(mid)
        p = count_params(m)
        entry = catalog.model_entry(mid)
        rows.append({"id": mid, "model_type": m.model_type, "params_total": p.total, "params_active": p.active,
                     "layers": m.num_layers, "hidden_size": m.hidden_size, "heads": m.num_heads,
                     "kv_heads": m.num_kv_heads, "vocab_size": m.vocab_size, "experts": m.num_experts,
                     "source": entry["source"], "date": entry["date"]})
    if json_out:
        _emit_json(rows)
    else:
        from gpuplan.cli.render import render_models
        render_models(rows)


@app.command()
def gpus(json_out: JsonOpt = False) -> None:
    """List the GPU catalog (dense peaks)."""
    from gpuplan import catalog

    rows = []
    for gid in catalog.gpu_ids():
        g = catalog.gpu(gid)
        price = catalog.price_per_gpu_hour(gid)
        rows.append({"id": gid, "name": g.name, "memory_bytes": g.memory_bytes, "hbm_bytes_per_s": g.hbm_bytes_per_s,
                     "peak_flops": g.peak_flops, "interconnect": g.interconnect,
                     "interconnect_bytes_per_s": g.interconnect_bytes_per_s, "gpus_per_node": g.gpus_per_node,
                     "tdp_w": g.tdp_w, "usd_per_gpu_hour": price[0] if price else None,
                     "source": g.source, "date": g.date})
    if json_out:
        _emit_json(rows)
    else:
        from gpuplan.cli.render import render_gpus
        render_gpus(rows)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every bad input into one line and exit code 2."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="gpuplan", standalone_mode=False)
    except GpuplanError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.stderr.write("error: aborted\n")
        sys.exit(130)
    except Exception as exc:
        # Usage errors (unknown flag, bad value, missing argument) come from the click that typer
        # bundles; recognise them by their interface rather than a private module path.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        message = " ".join(exc.format_message().split())
        args = sys.argv[1:] if argv is None else argv
        sub = args[0] if args and args[0] in command.commands else ""
        sys.stderr.write(f"error: {message.rstrip('.')}; see `{' '.join(['gpuplan', sub, '--help']).replace('  ', ' ')}`\n")
        sys.exit(2)
