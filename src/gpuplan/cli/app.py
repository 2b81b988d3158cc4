"""``gpuplan`` commands. Each checks its flags (cli/params.py), calls the library once and renders
the result.

Exit codes: 0 answered; 2 bad input, as one line ``error: <field>: <what>; <fix>`` on stderr and
never a traceback; 3 a valid request whose plan does not fit (train, serve, search), with the
smallest change found that does fit.
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from typing import Annotated

import typer

from gpuplan import inputs
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
from gpuplan.errors import DoesNotFit, GpuplanError

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


JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable JSON document.")]
HtmlOpt = Annotated[
    str | None,
    typer.Option("--html", help="Also write a self-contained HTML report here: pictures, numbers, the JSON inline."),
]
PlotOpt = Annotated[
    str | None,
    typer.Option(
        "--plot",
        help="Also write the report's pictures as one static image, a panel each (PNG, SVG, PDF: by the suffix).",
    ),
]
# Options several commands share, declared once
ModelArg = Annotated[str, typer.Argument(help="Catalog id (see `gpuplan models`) or a path to a config.json.")]
ClusterOpt = Annotated[
    str | None,
    typer.Option(help="A cluster TOML file: its GPU, nodes, NVLink and NIC networks (replaces --gpu; see README)."),
]
GpuOpt = Annotated[str, typer.Option(help="GPU id (see `gpuplan gpus`) or a GPU TOML file in the catalog's schema.")]
TpOpt = Annotated[int, typer.Option(help="Tensor-parallel degree.")]
PpOpt = Annotated[int, typer.Option(help="Pipeline-parallel degree.")]
PriceOpt = Annotated[float | None, typer.Option(help="USD per GPU-hour (default: dated catalog price).")]
DpAttentionOpt = Annotated[
    bool, typer.Option("--dp-attention", help="MLA models: attention data-parallel over the TP ranks (SGLang).")
]
EngineOpt = Annotated[
    str | None,
    typer.Option(
        help="Serving engine profile: vllm, vllm-v0, sglang, trtllm (memory accounting, scheduler, host time)."
    ),
]
# the engine settings serve and serve-sim share (None: the --engine's default)
MemFractionOpt = Annotated[float | None, typer.Option(help="Engine memory fraction (default 0.9, or the --engine's).")]
BlockSizeOpt = Annotated[int | None, typer.Option(help="Tokens per KV-cache block (default 16 or the engine's).")]
BatchedTokensOpt = Annotated[
    int | None, typer.Option(help="Tokens per iteration, chunked-prefill budget (default 8192 or the engine's).")
]
CalibrationOpt = Annotated[
    str | None,
    typer.Option(
        help="Calibration profile from `gpuplan calibrate`: its fitted efficiency replaces the catalog's for this "
        "GPU family (and its allocator reserve the default)."
    ),
]
# Host and storage (offload): override the catalog's host for the GPU (catalog/hosts/)
CpuMemoryOpt = Annotated[str | None, typer.Option(help="CPU memory per node, e.g. 256GB (offload).")]
DiskOpt = Annotated[str | None, typer.Option(help="NVMe capacity per node, e.g. 2TB (offload).")]
PcieOpt = Annotated[float | None, typer.Option(help="Achievable host<->GPU GB/s, one direction (offload).")]
DiskGbpsOpt = Annotated[float | None, typer.Option(help="NVMe read GB/s (write: half) (offload).")]
HostOpt = Annotated[str | None, typer.Option(help="Host: a catalog/hosts id or a hardware TOML file (offload).")]
FrameworkOpt = Annotated[
    str,
    typer.Option(
        help="Training framework profile: megatron, nemo, torchtitan, deepspeed, hf, or generic (gpuplan's "
        "defaults, every option open). Sets kernels, overlap, schedules, recompute and memory layout."
    ),
]


def _duration_or_zero(text: str, field: str) -> float:
    """A duration where zero is allowed (a restart that costs nothing)."""
    return inputs.duration(text, field, zero_ok=True)


def _global_batch(text: str, seq_len: int) -> int:
    """Sequences (512) or tokens with a suffix (16M: 16M tokens of --seq-len sequences), the same
    for train and search."""
    from gpuplan.units import parse_count

    text = str(text).strip()
    gb = inputs.count(text, "global_batch")
    if not text.isdigit():  # a token count, e.g. 16M tokens of 8K sequences
        # Batch sizes quoted in tokens are powers of two (Llama 3's "16M" is 2048 x 8192): read the
        # suffix as binary when the decimal count is not a whole number of sequences.
        binary = (
            parse_count(text[:-1], "global_batch") * 2 ** (10 * "KMGT".index(text[-1].upper()) + 10)
            if text[-1:].upper() in ("K", "M", "G", "T")
            else gb
        )
        if gb % seq_len and binary % seq_len == 0:
            gb = binary
        if gb % seq_len:
            raise GpuplanError(
                "global_batch",
                f"{text} tokens is not a whole number of {seq_len}-token sequences",
                "use a multiple of --seq-len, or give sequences",
            )
        gb //= seq_len
    return inputs.integer(int(gb), "global_batch", hi=10**9, fix="give sequences per step, e.g. 512, or tokens: 16M")


def _price(gpu_id: str, price: float | None) -> float | None:
    """--price, or the GPU's dated catalog price."""
    if price is not None:
        return price
    from gpuplan import catalog

    found = catalog.price_per_gpu_hour(gpu_id)
    return found[0] if found else None


def _show(doc: dict, json_out: bool, renderer: str) -> None:
    """Print ``doc`` as JSON, or through the named rich renderer of cli/render.py."""
    if json_out:
        _emit_json(doc)
        return
    from gpuplan.cli import render

    getattr(render, renderer)(doc)


_ARGS: list[str] = []  # the command line main() is running, for the header of an --html report


def _report(path: str | None, command: str, doc: dict, slo: dict | None = None) -> None:
    """--html: the report of the document --json prints (gpuplan/report/)."""
    if path:
        from gpuplan.report.page import write_report

        drop = {i for i, a in enumerate(_ARGS) if a == "--html"} | {i + 1 for i, a in enumerate(_ARGS) if a == "--html"}
        argv = [a for i, a in enumerate(_ARGS) if i not in drop and not a.startswith("--html=") and a != "--json"]
        write_report(path, command, _strict(doc), argv=argv or None, slo=slo)


def _plot(path: str | None, command: str, doc: dict, slo: dict | None = None) -> None:
    """--plot: the --html report's pictures as one static file (gpuplan/report/static.py)."""
    if path:
        from gpuplan.report.static import write_plot

        write_plot(path, command, _strict(doc), slo=slo)


def _emit_json(doc) -> None:
    # Strict JSON: a NaN or an infinity left in a document is a bug upstream; it becomes null here
    # rather than a token other parsers reject.
    sys.stdout.write(json.dumps(_strict(doc), indent=2, allow_nan=False) + "\n")


def _strict(x):
    import math

    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):  # numpy scalars and arrays
        return _strict(x.tolist())
    if isinstance(x, float):
        return (x + 0.0) if math.isfinite(x) else None
    return x


def _hardware(gpu: str, cluster: str | None, gpus: int | None):
    """(GPU, GPU count): a --cluster file's GPU with its nodes and networks (specs/cluster_file.py),
    else the --gpu entry; the count defaults to the whole cluster (8 without one)."""
    from gpuplan import catalog

    if not cluster:
        return catalog.gpu(gpu), 8 if gpus is None else gpus
    from gpuplan.specs.cluster_file import read_cluster_file

    found = read_cluster_file(cluster)
    gpus = found.gpus if gpus is None else gpus
    found.check_gpus(gpus)
    return found.gpu, gpus


def _calibrated(hw, calibration: str | None, allocator_fraction: float | None):
    """(GPU, profile, allocator reserve) with a --calibration profile applied: its efficiency for
    the GPU, its reserve unless --allocator-fraction was given (None: the config's default)."""
    if not calibration:
        return hw, None, allocator_fraction
    from gpuplan.estimate.profile import load_profile

    prof = load_profile(calibration)
    if allocator_fraction is None:
        allocator_fraction = prof.allocator_fraction
    return prof.apply(hw), prof, allocator_fraction


@app.command()
@checked(
    gpus=at_least(1),
    tp=at_least(1),
    pp=at_least(1),
    dp=at_least(1),
    cp=at_least(1),
    ep=at_least(1),
    vp=at_least(1),
    zero=at_least(0, 3),
    seq_len=at_least(1, 10**8),
    micro_batch=at_least(1, 10**6),
    global_batch=anything,
    tokens=anything,
    mfu=between(0, 1, lo_open=True),
    price=price_rule,
    cuda_context_gib=between(0, 1024),
    allocator_fraction=between(0, 1),
    expert_imbalance=between(1, 1000),
    html=html_file,
    plot=plot_path,
)
def train(
    model: ModelArg,
    gpu: GpuOpt = "h100-sxm",
    gpus: Annotated[
        int | None, typer.Option(help="Number of GPUs (world size; default 8, or all of --cluster).")
    ] = None,
    cluster: ClusterOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    dp: Annotated[int | None, typer.Option(help="Data-parallel degree (default: gpus / (tp*pp*cp)).")] = None,
    cp: Annotated[int, typer.Option(help="Context-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel degree (carved from dp*cp).")] = 1,
    vp: Annotated[int, typer.Option(help="Virtual pipeline stages per rank (interleaved 1F1B).")] = 1,
    first_stage_layers: Annotated[
        int | None,
        typer.Option(
            help="Layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers); "
            "the middle stages share the rest."
        ),
    ] = None,
    last_stage_layers: Annotated[
        int | None,
        typer.Option(help="Layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers)."),
    ] = None,
    schedule: Annotated[
        str, typer.Option(help="Pipeline schedule: 1f1b, zb (zero-bubble H1), zb-v (V-shaped zero bubble), dualpipe.")
    ] = "1f1b",
    rank_order: Annotated[
        str, typer.Option(help="Rank order, innermost first (decides which groups cross nodes).")
    ] = "tp-cp-dp-pp",
    zero: Annotated[int, typer.Option(help="ZeRO stage 0-3 (3 = FSDP full shard).")] = 0,
    sp: Annotated[bool, typer.Option("--sp/--no-sp", help="Sequence parallelism with TP.")] = True,
    seq_len: Annotated[int, typer.Option(help="Sequence length in tokens.")] = 4096,
    micro_batch: Annotated[int, typer.Option(help="Sequences per micro-batch per GPU.")] = 1,
    global_batch: Annotated[
        str | None,
        typer.Option(help="Global batch: sequences (512) or tokens with a suffix (16M); default micro-batch x dp."),
    ] = None,
    tokens: Annotated[str | None, typer.Option(help="Training tokens, e.g. 2T, 15.6e12, 300B.")] = None,
    recompute: Annotated[str, typer.Option(help="Activation recompute: none, selective, full.")] = "none",
    precision: Annotated[
        str, typer.Option(help="bf16, fp16, fp32, fp8, or mxfp8/nvfp4 (Blackwell block-scaled GEMMs).")
    ] = "bf16",
    master_weights: Annotated[
        bool, typer.Option("--master-weights/--no-master-weights", help="Keep an fp32 master copy (mixed precision).")
    ] = True,
    optimizer: Annotated[str, typer.Option(help="adamw, adamw8bit, sgd or adafactor.")] = "adamw",
    attention: Annotated[
        str | None, typer.Option(help="flash or eager attention kernels (default: the framework's; generic: flash).")
    ] = None,
    attention_kernel: Annotated[
        str | None,
        typer.Option(
            help="fa3 (FlashAttention-3 / cuDNN, TransformerEngine), "
            "fa2 (flash_attn 2, PyTorch SDPA's flash backend) or sdpa (what PyTorch >= 2.11 SDPA "
            "picks: cuDNN on H100/B200, FlashAttention-2 elsewhere) (default: the framework's)."
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="fused (Megatron/TE) or eager (PyTorch + transformers) (default: the framework's; generic: fused)."
        ),
    ] = None,
    framework: FrameworkOpt = "generic",
    mfu: Annotated[float | None, typer.Option(help="Override the predicted MFU, e.g. 0.4.")] = None,
    tp_overlap: Annotated[
        bool | None,
        typer.Option(
            "--tp-overlap/--no-tp-overlap",
            help="Hide TP collectives behind GEMMs (TransformerEngine) (default: the framework's; generic: off).",
        ),
    ] = None,
    overlap_grad_reduce: Annotated[
        bool | None,
        typer.Option(
            "--overlap-grad-reduce/--no-overlap-grad-reduce",
            help="Reduce DP gradients during the backward (default: the framework's; generic: on).",
        ),
    ] = None,
    ep_overlap: Annotated[
        bool,
        typer.Option(
            "--ep-overlap/--no-ep-overlap",
            help="MoE: hide the expert all-to-all behind another micro-batch's "
            "compute (Megatron --overlap-moe-expert-parallel-comm; "
            "DualPipe always does).",
        ),
    ] = False,
    offload_activations: Annotated[
        int,
        typer.Option(
            "--offload-activations",
            metavar="N",
            help="Keep the activations of N layers per pipeline chunk in CPU memory "
            "(Megatron-Core --cpu-offloading-num-layers); copies overlap the next layer.",
        ),
    ] = 0,
    grad_dtype: Annotated[
        str | None,
        typer.Option(
            "--grad-dtype",
            help="Gradient buffer and reduce dtype: fp32 (Megatron's main_grad) or bf16 "
            "(Megatron-Bridge grad_reduce_in_fp32=False) (default: the framework's).",
        ),
    ] = None,
    price: PriceOpt = None,
    cuda_context_gib: Annotated[float, typer.Option(help="CUDA/NCCL context per GPU, GiB.")] = 0.5,
    allocator_fraction: Annotated[
        float | None,
        typer.Option(help="Allocator reserve, fraction of allocated (default 0.05, or the --calibration profile's)."),
    ] = None,
    expert_imbalance: Annotated[
        float,
        typer.Option(help="MoE: busiest expert-parallel GPU's load over the mean (`gpuplan experts` reports it)."),
    ] = 1.0,
    calibration: CalibrationOpt = None,
    offload: Annotated[str | None, typer.Option(help="ZeRO-Offload: none, optimizer, optimizer+params.")] = None,
    offload_device: Annotated[str, typer.Option(help="Where offloaded states live: cpu or nvme.")] = "cpu",
    delayed_update: Annotated[
        bool, typer.Option("--delayed-update", help="Offload: one-step delayed parameter update (ZeRO-Offload DPU).")
    ] = False,
    cpu_memory: CpuMemoryOpt = None,
    disk: DiskOpt = None,
    pcie_gbps: PcieOpt = None,
    disk_gbps: DiskGbpsOpt = None,
    host: HostOpt = None,
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Will a training run fit, where every byte per GPU goes, its FLOPs, time and cost."""
    from gpuplan import catalog
    from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig
    from gpuplan.units import GiB

    spec = catalog.model(model)
    hw, gpus = _hardware(gpu, cluster, gpus)
    hw, prof, allocator_fraction = _calibrated(hw, calibration, allocator_fraction)
    if dp is None:
        if gpus % (tp * pp * cp):
            raise GpuplanError(
                "gpus",
                f"{gpus} GPUs do not split into tp x pp x cp = {tp * pp * cp}",
                "use a GPU count that is a multiple of tp*pp*cp",
            )
        dp = gpus // (tp * pp * cp)
    plan = ParallelPlan(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        vp=vp,
        zero=zero,
        sp=sp,
        schedule=schedule,
        order=rank_order,
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
    )
    if plan.world_size != gpus:
        raise GpuplanError(
            "dp",
            f"dp x tp x pp x cp = {plan.world_size} is not --gpus {gpus}",
            "make the product of the degrees equal the GPU count",
        )
    if cuda_context_gib < 0:
        raise GpuplanError("cuda_context_gib", "must not be negative")
    config = TrainingConfig.for_framework(
        framework,
        seq_len=seq_len,
        micro_batch=micro_batch,
        global_batch=0 if global_batch is None else _global_batch(global_batch, seq_len),
        precision=precision,
        master_weights=master_weights,
        optimizer=optimizer,
        recompute=recompute,
        attention=attention,
        attention_kernel=attention_kernel,
        profile=profile,
        cuda_context_bytes=cuda_context_gib * GiB,
        allocator_fraction=allocator_fraction,
        tp_overlap=tp_overlap,
        overlap_grad_reduce=overlap_grad_reduce,
        expert_imbalance=expert_imbalance,
        ep_overlap=ep_overlap,
        offload_activation_layers=offload_activations,
        grad_fp32=_grad_fp32(grad_dtype),
    )
    price_source = "--price"
    if price is None:
        found = catalog.price_per_gpu_hour(hw.id)
        if found:
            price, price_source = found
        else:
            price_source = "no catalog price for this GPU; pass --price"
    if offload is not None:  # the offload model (estimate/offload.py) answers instead
        from gpuplan.cli.offload import host_from_flags, render_train_offload
        from gpuplan.estimate.offload import OffloadTrainRequest, check_fits, estimate_offload_training, to_dict as od

        host_spec = host_from_flags(hw, cpu_memory, disk, pcie_gbps, disk_gbps, host=host)
        oreq = OffloadTrainRequest(
            model=spec,
            gpu=hw,
            host=host_spec,
            plan=plan,
            config=config,
            offload=offload,
            device=offload_device,
            delayed_update=delayed_update,
            microbatches=max(1, (global_batch or micro_batch * plan.dp) // (micro_batch * plan.dp)),
        )
        oest = estimate_offload_training(oreq)
        _report(html, "train", od(oest))
        _plot(plot, "train", od(oest))
        check_fits(oest)
        _emit_json(od(oest)) if json_out else render_train_offload(od(oest))
        return
    req = TrainRequest(
        model=spec,
        gpu=hw,
        plan=plan,
        config=config,
        tokens=inputs.count(tokens, "tokens") if tokens is not None else None,
        mfu=mfu,
        price_per_gpu_hour=price,
        price_source=price_source,
    )
    est = estimate_training(req)
    doc = {**to_dict(est), "calibration_profile": prof.describe() if prof else None} if json_out or html or plot else {}
    _report(html, "train", doc)
    _plot(plot, "train", doc)
    if json_out:
        _emit_json(doc)
    else:
        from gpuplan.cli.render import console, render_train

        if prof:
            console.print(prof.summary())
        render_train(est)
    if not est.memory.fits:
        fix = next((s.change for s in est.suggestions if s.fits), None)
        raise DoesNotFit(
            "memory",
            f"needs {est.memory.per_gpu.total / GiB:,.2f} GiB per GPU, {hw.name} has "
            f"{est.memory.capacity / GiB:,.2f} GiB",
            f"try {fix} (checked: it fits)" if fix else "use a GPU with more memory",
        )


def _grad_fp32(grad_dtype: str | None) -> bool | None:
    if grad_dtype is None:
        return None
    if grad_dtype not in ("fp32", "bf16"):
        raise GpuplanError("grad_dtype", f"unknown gradient dtype {grad_dtype!r}", "use --grad-dtype fp32 or bf16")
    return grad_dtype == "fp32"


@app.command()
@checked(
    gpus=at_least(1, 10**7),
    seq_len=at_least(1, 10**8),
    top=at_least(1, 1000),
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
    objective: Annotated[str, typer.Option(help="Rank by throughput or cost.")] = "throughput",
    top: Annotated[int, typer.Option(help="How many plans to show.")] = 5,
    framework: FrameworkOpt = "generic",
    price: PriceOpt = None,
    calibration: CalibrationOpt = None,
    tp: Annotated[int | None, typer.Option(help="Fix the tensor-parallel degree.")] = None,
    pp: Annotated[int | None, typer.Option(help="Fix the pipeline-parallel degree.")] = None,
    cp: Annotated[int | None, typer.Option(help="Fix the context-parallel degree.")] = None,
    ep: Annotated[int | None, typer.Option(help="Fix the expert-parallel degree.")] = None,
    dp: Annotated[int | None, typer.Option(help="Fix the data-parallel degree.")] = None,
    max_tp: Annotated[int | None, typer.Option(help="Largest tensor-parallel degree.")] = None,
    max_pp: Annotated[int | None, typer.Option(help="Largest pipeline-parallel degree.")] = None,
    max_cp: Annotated[int | None, typer.Option(help="Largest context-parallel degree.")] = None,
    max_ep: Annotated[int | None, typer.Option(help="Largest expert-parallel degree.")] = None,
    schedule: Annotated[
        str | None, typer.Option(help="Only these schedules, e.g. 1f1b,interleaved (also zb, zb-v, dualpipe).")
    ] = None,
    zero: Annotated[str | None, typer.Option(help="Only these ZeRO stages, e.g. 1,3.")] = None,
    recompute: Annotated[str | None, typer.Option(help="Only these recompute modes, e.g. none,selective.")] = None,
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
    from gpuplan.search.plans import search as run_search
    from gpuplan.specs.training import TrainingConfig

    spec = catalog.model(model)
    hw, gpus = _hardware(gpu, cluster, gpus)
    hw, prof, reserve = _calibrated(hw, calibration, None)
    base = TrainingConfig.for_framework(
        framework,
        seq_len=seq_len,
        global_batch=_global_batch(global_batch, seq_len),
        precision=precision,
        optimizer=optimizer,
        allocator_fraction=reserve,
    )
    price = _price(hw.id, price)
    from gpuplan.search.plans import RECOMPUTE_ORDER, Constraints, parse_choices

    narrow = dict(
        constraints=Constraints(
            tp=tp,
            pp=pp,
            cp=cp,
            ep=ep,
            dp=dp,
            max_tp=max_tp,
            max_pp=max_pp,
            max_cp=max_cp,
            max_ep=max_ep,
            schedules=parse_choices(schedule, "schedule"),
        ),
        zero_stages=parse_choices(zero, "zero", int) or (0, 1, 2, 3),
        recompute=parse_choices(recompute, "recompute") or RECOMPUTE_ORDER,
        micro_batches=parse_choices(micro_batch, "micro-batch", int) or (1, 2, 4, 8),
        offload=offload,
        host=_search_host(host),
    )
    if json_out:
        result = run_search(spec, hw, gpus, base, top=top, objective=objective, price_per_gpu_hour=price, **narrow)
        from gpuplan.search.report import to_dict

        doc = {**to_dict(result, spec, hw), "calibration_profile": prof.describe() if prof else None}
        _report(html, "search", doc)
        _plot(plot, "search", doc)
        _emit_json(doc)
        return
    from gpuplan.cli.render import console, progress, render_search

    if prof:
        console.print(prof.summary())
    with progress() as bar:
        task = bar.add_task("searching plans", total=1)
        result = run_search(
            spec,
            hw,
            gpus,
            base,
            top=top,
            objective=objective,
            price_per_gpu_hour=price,
            progress=lambda i, n: bar.update(task, completed=i, total=n),
            **narrow,
        )
    render_search(result, spec, hw)
    if html or plot:
        from gpuplan.search.report import to_dict

        doc = {**to_dict(result, spec, hw), "calibration_profile": prof.describe() if prof else None}
        _report(html, "search", doc)
        _plot(plot, "search", doc)


def _search_host(name: str | None):
    """``search --host``: a catalog host id or a hardware file; None: the catalog's host for the GPU."""
    if name is None:
        return None
    from gpuplan.catalog.hosts import load_host

    return load_host(name)


@app.command()
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
    draft_model: Annotated[str | None, typer.Option(help="Draft model for speculative decoding.")] = None,
    ngram: Annotated[bool, typer.Option("--ngram", help="n-gram (prompt lookup) speculative decoding.")] = False,
    draft_len: Annotated[int, typer.Option(help="Tokens proposed per step.")] = 4,
    acceptance: Annotated[float, typer.Option(help="Per-token acceptance rate of proposals.")] = 0.7,
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
    from gpuplan.serve.engines import engine_config
    from gpuplan.serve.plan import ServeRequest, estimate_serving, to_dict

    itl = inputs.duration(itl_slo, "itl_slo", max_s=86400) if itl_slo is not None else None
    ttft = inputs.duration(ttft_slo, "ttft_slo", max_s=86400) if ttft_slo is not None else None
    # a profile's efficiency (GEMM, HBM, bus factors) times serving too; its allocator reserve is
    # a training figure, which the engines' own memory rules replace
    hw, prof, _ = _calibrated(catalog.gpu(gpu), calibration, None)
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
        )
        doc = {**od(plan_offload(oreq)), **described}
        _report(html, "serve", doc)
        _plot(plot, "serve", doc)
        _emit_json(doc) if json_out else render_serve_offload(doc)
        return
    price = _price(hw.id, price)
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
        if html or plot:  # the report page has no view of the pools yet
            flag = "html" if html else "plot"
            raise GpuplanError(flag, "the pictures do not cover disaggregated pools yet", f"drop --{flag}, use --json")
        ddoc = {**dd(plan_disaggregated(req, ttft, itl, prefill_tp)), **described}
        _emit_json(ddoc) if json_out else render_disagg(ddoc)
        return
    est = estimate_serving(req)
    doc = {**to_dict(est), **described}
    _report(html, "serve", doc, slo={"tpot_s": itl, "ttft_s": ttft})
    _plot(plot, "serve", doc, slo={"tpot_s": itl, "ttft_s": ttft})
    if json_out:
        _emit_json(doc)
        return
    from gpuplan.cli.render import console, render_serve

    render_serve(est, doc)
    if prof:
        console.print(prof.summary())


@app.command("serve-sim")
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
    rate: Annotated[str | None, typer.Option(help="Poisson request rate(s) per second, e.g. 4 or 1,2,4,8.")] = None,
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
        int | None, typer.Option(help="Cap on running sequences (default 256, or the --engine's).")
    ] = None,
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Discrete-event serving simulation: continuous batching, paged KV, chunked prefill, preemption."""
    from pathlib import Path

    from gpuplan import catalog
    from gpuplan.serve.engines import engine_config
    from gpuplan.serve.formats import kv_format, weight_format
    from gpuplan.serve.sim import Lengths, Workload, max_rate, simulate
    from gpuplan.serve.timing import Deployment

    hw = catalog.gpu(gpu)
    d = Deployment(catalog.model(model), hw, weight_format(weights, hw), kv_format(kv, hw), tp, pp, dp_attention)
    seats = max_num_seqs if max_num_seqs is not None or engine else 256  # without an engine: 256, as before
    cfg = engine_config(engine, hw, tp, gpu_memory_utilization, block_size, max_batched_tokens, seats)
    lin, lout = Lengths.parse(input_len, "input_len"), Lengths.parse(output_len, "output_len")
    ttft = inputs.duration(ttft_slo, "ttft_slo", max_s=86400) if ttft_slo is not None else None
    itl = inputs.duration(itl_slo, "itl_slo", max_s=86400) if itl_slo is not None else None
    rates = []
    for part in (rate or "").split(","):
        if part.strip():
            try:
                rates.append(inputs.finite(part, "rate", lo=0, lo_open=True, hi=1e6, fix="write e.g. 4 or 1,2,4,8"))
            except GpuplanError as exc:
                raise GpuplanError(
                    "rate",
                    f"cannot use {part.strip()!r} as a rate ({exc.message})",
                    "write positive requests per second, e.g. 4 or 1,2,4,8",
                ) from None
    if trace and (rates or ttft or itl):
        # A trace brings its own arrivals: a rate or an SLO search would be silently dropped
        raise GpuplanError(
            "trace",
            "a trace sets the arrivals itself: --rate and the SLO search do not apply",
            "drop --rate/--ttft-slo/--itl-slo, or drop --trace",
        )
    if concurrency is not None and (trace or rates or ttft or itl):
        # a closed loop sets its own arrivals, as a trace or a rate would
        raise GpuplanError(
            "concurrency",
            "a closed loop of --concurrency clients sets the arrivals itself",
            "drop --rate/--trace/--ttft-slo/--itl-slo, or drop --concurrency",
        )
    if not trace and not rates and not (ttft or itl) and concurrency is None:
        raise GpuplanError(
            "rate", "give --rate, --trace, or an SLO (--ttft-slo/--itl-slo) to search the rate", "e.g. --rate 1,2,4,8"
        )
    workload = Workload.from_trace(Path(trace)) if trace else None
    results, best = [], None
    from gpuplan.cli.render import progress

    with progress(json_out) as bar:
        if concurrency is not None:
            task = bar.add_task(f"simulating {concurrency:,} clients", total=1)
            results.append(simulate(d, cfg, Workload.closed(requests, lin, lout, seed), clients=concurrency))
            bar.update(task, completed=1)
        elif workload is not None:
            task = bar.add_task("simulating the trace", total=1)
            results.append(simulate(d, cfg, workload))
            bar.update(task, completed=1)
        else:
            task = bar.add_task(f"simulating {requests:,} requests", total=len(rates) + (30 if ttft or itl else 0))
            for r in rates:
                results.append(simulate(d, cfg, Workload.poisson(r, requests, lin, lout, seed), r))
                bar.advance(task)
            if ttft or itl:
                best = max_rate(d, cfg, requests, lin, lout, seed, ttft, itl, progress=lambda: bar.advance(task))
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
    if ttft or itl:
        doc["slo"] = {
            "ttft_p99_s": ttft,
            "itl_p99_s": itl,
            "max_rate": best[0],
            "at_max_rate": best[1].to_dict() if best[1] else None,
        }
    _report(html, "serve-sim", doc)
    _plot(plot, "serve-sim", doc)
    _show(doc, json_out, "render_serve_sim")


@app.command()
@checked(
    stages=at_least(1, 1024),
    microbatches=at_least(1, 100_000),
    vp=at_least(1, 64),
    p2p=between(0, 1e9),
    activation_gib=between(0, 1e6),
    trace=out_file,
    plot=plot_path,
    html=html_file,
)
def pipeline(
    schedule: Annotated[
        str, typer.Option(help="gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe, dualpipev.")
    ] = "1f1b",
    stages: Annotated[int, typer.Option(help="Pipeline ranks.")] = 4,
    microbatches: Annotated[int, typer.Option(help="Micro-batches per step (DualPipe: both directions together).")] = 8,
    vp: Annotated[int, typer.Option(help="Model chunks per rank (interleaved only).")] = 2,
    f: Annotated[
        str,
        typer.Option("--f", help="Forward time of one micro-batch on one stage (or one per stage, comma-separated)."),
    ] = "1",
    b: Annotated[str | None, typer.Option("--b", help="Input-gradient backward time (B without W).")] = None,
    b_full: Annotated[
        str | None, typer.Option("--b-full", help="Full backward time (input + weight gradients).")
    ] = None,
    w: Annotated[str, typer.Option("--w", help="Weight-gradient backward time (W).")] = "1",
    overlap: Annotated[
        str | None, typer.Option(help="Time of one overlapped forward+backward pair (F&B); default F + B + W.")
    ] = None,
    p2p: Annotated[float, typer.Option(help="Send/receive time between neighbouring stages.")] = 0.0,
    unit: Annotated[str, typer.Option(help="What one time unit is, for the trace: e.g. 1ms, 10ms, 1s.")] = "1ms",
    activation_gib: Annotated[
        float | None, typer.Option(help="Activation GiB of one micro-batch on one stage.")
    ] = None,
    trace: Annotated[str | None, typer.Option(help="Write a Chrome trace JSON (Perfetto, chrome://tracing).")] = None,
    plot: Annotated[str | None, typer.Option(help="Write a timeline picture (PNG, SVG, PDF).")] = None,
    html: HtmlOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Simulate a pipeline schedule: per-rank idle time, bubble, makespan, activations in flight."""
    from gpuplan.pipeline.render import write_plot, write_trace
    from gpuplan.pipeline.schedules import build
    from gpuplan.pipeline.simulate import Costs, simulate
    from gpuplan.units import GiB

    def times(text: str | None, name: str, zero_ok: bool = True):
        if text is None:
            return None
        fix = "write 1.5, or one per stage: 1,1,1,1.4"
        try:
            vals = [inputs.finite(x, name, lo=0, lo_open=not zero_ok, hi=1e9, fix=fix) for x in text.split(",")]
        except GpuplanError as exc:
            raise GpuplanError(name, f"cannot use {text!r} as times ({exc.message})", fix) from None
        if len(vals) not in (1, stages):
            raise GpuplanError(name, f"{len(vals)} times for {stages} stages", "give one time, or one per stage")
        return vals[0] if len(vals) == 1 else vals

    unit_s = inputs.duration(unit, "unit", max_s=86400)

    if b is not None and b_full is not None:
        raise GpuplanError(
            "b", "--b (input-gradient backward) and --b-full (full backward) are exclusive", "pass one of them"
        )
    f_, w_, ov_ = times(f, "f", zero_ok=False), times(w, "w"), times(overlap, "overlap")
    if b_full is not None:
        costs = Costs.from_full_backward(f_, times(b_full, "b_full"), w_, ov_, p2p)
    else:
        costs = Costs(f_, 1.0 if b is None else times(b, "b"), w_, ov_, p2p)

    # The simulation visits every action once: bound the count so a typo cannot run for hours
    from gpuplan.specs import schedules as registry

    actions = stages * microbatches * (vp if registry.get(schedule).needs_vp else 1) * 3
    if actions > 3_000_000:
        raise GpuplanError(
            "microbatches",
            f"{stages} stages x {microbatches} micro-batches is {actions:,} actions to simulate",
            "simulate fewer: the bubble repeats after a few x stages",
        )
    sched = build(schedule, stages, microbatches, vp)
    from gpuplan.cli.render import progress

    with progress(json_out or not plot) as bar:
        task = bar.add_task("simulating" + (" and plotting" if plot else ""), total=2 if plot else 1)
        t = simulate(sched, costs, activation_gib * GiB if activation_gib is not None else None)
        bar.advance(task)
        if trace:
            write_trace(t, trace, unit_s)
        if plot:
            write_plot(t, plot, unit_s)
            bar.advance(task)
    doc = t.to_dict() | {
        "costs": {
            "f": costs.f,
            "b": costs.b,
            "w": costs.w,
            "overlap": costs.overlap,
            "p2p": p2p,
            "unit_s": unit_s,
            "backward_convention": "b is the input-gradient backward; full = b + w",
        },
        "bubble_ratio": sum(t.idle_s) / sum(t.busy_s) if sum(t.busy_s) else 0.0,
        "trace": trace,
        "plot": plot,
    }
    _report(html, "pipeline", doc)
    _show(doc, json_out, "render_pipeline")


@app.command()
@checked(
    synthetic=between(0, 100),
    layers=at_least(1, 10_000),
    num_experts=at_least(1, 100_000),
    seed=seed_rule,
    replicas=at_least(1, 10**6),
    groups=at_least(1, 100_000),
    nodes=at_least(1, 100_000),
    gpus=at_least(1, 10**6),
    top_k=at_least(1, 100_000),
    hidden=at_least(1, 10**6),
    dispatch_bytes=between(0, 64, lo_open=True),
)
def experts(
    loads: Annotated[str | None, typer.Option(help="Per-layer expert loads: CSV (a row per layer) or JSON.")] = None,
    synthetic: Annotated[float | None, typer.Option(help="Instead of --loads: Zipf skew of synthetic loads.")] = None,
    layers: Annotated[int, typer.Option(help="Layers of synthetic loads.")] = 61,
    num_experts: Annotated[int, typer.Option("--experts", help="Experts per layer of synthetic loads.")] = 256,
    seed: Annotated[int, typer.Option(help="Seed of synthetic loads.")] = 0,
    replicas: Annotated[int, typer.Option(help="Physical expert slots in all (a multiple of --gpus).")] = 288,
    groups: Annotated[int, typer.Option(help="Expert groups (group-limited routing).")] = 8,
    nodes: Annotated[int, typer.Option(help="Nodes.")] = 4,
    gpus: Annotated[int, typer.Option(help="GPUs in the expert-parallel group.")] = 32,
    policy: Annotated[str, typer.Option(help="hierarchical (groups to nodes first) or global.")] = "hierarchical",
    top_k: Annotated[int, typer.Option(help="Experts per token, for the cross-node traffic estimate.")] = 8,
    hidden: Annotated[int, typer.Option(help="Hidden size, for bytes per token.")] = 7168,
    dispatch_bytes: Annotated[float, typer.Option(help="Bytes per hidden element sent (1: fp8 dispatch).")] = 1.0,
    json_out: JsonOpt = False,
) -> None:
    """MoE expert placement: replicas per expert and the GPU of each, balance and cross-node traffic."""
    from gpuplan.experts.loads import read_loads, synthetic_loads
    from gpuplan.experts.placement import cross_node_traffic, place

    if (loads is None) == (synthetic is None):
        raise GpuplanError("loads", "give --loads FILE or --synthetic SKEW", "e.g. --synthetic 1.0 --layers 61")
    if synthetic is not None and layers * num_experts > 10**7:
        raise GpuplanError(
            "layers",
            f"{layers:,} layers x {num_experts:,} experts is too large a table",
            "use the model's real sizes, e.g. --layers 61 --experts 256",
        )
    table = read_loads(loads) if loads else synthetic_loads(layers, num_experts, synthetic, seed)
    if top_k > table.shape[1]:
        raise GpuplanError(
            "top_k", f"a token cannot reach {top_k} of {table.shape[1]} experts", f"use --top-k <= {table.shape[1]}"
        )
    p = place(table, replicas, gpus, nodes, groups, policy)
    traffic = cross_node_traffic(p, top_k)
    bal = p.balance
    doc = {
        "policy": p.policy,
        "layers": int(table.shape[0]),
        "experts": int(table.shape[1]),
        "replicas": replicas,
        "gpus": gpus,
        "nodes": nodes,
        "groups": groups,
        "balance": bal.tolist(),
        "balance_mean": float(bal.mean()),
        "balance_max": float(bal.max()),
        "gpu_load": p.gpu_load.tolist(),
        "node_load": p.node_load.tolist(),
        "replica_counts": p.counts.tolist(),
        "phy2log": p.phy2log.tolist(),
        "log2phy": p.log2phy.tolist(),
        "cross_node": traffic
        | {"dispatch_bytes_per_token": traffic["remote_nodes_per_token"] * hidden * dispatch_bytes, "top_k": top_k},
        "expert_imbalance_for_train": float(bal.mean()),
    }
    _show(doc, json_out, "render_experts")


@app.command(context_settings={"allow_interspersed_args": False})
@checked(
    command=anything,
    gpus=at_least(1, 10**7),
    nodes=at_least(1, 10**5),
    gpus_per_node=at_least(0, 72),
    signal_before=at_least(0, 86400),
    output=out_file,
)
def slurm(
    command: Annotated[list[str], typer.Argument(help="The training script and its arguments (after --).")],
    gpus: Annotated[int | None, typer.Option(help="GPUs of the plan (nodes follow from --gpu's node size).")] = None,
    gpu: Annotated[str, typer.Option(help="GPU id: its GPUs per node.")] = "h100-sxm",
    nodes: Annotated[int | None, typer.Option(help="Nodes (instead of --gpus).")] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs per node (default: the GPU's node; 0: a CPU job, no --gres).")
    ] = None,
    partition: Annotated[str | None, typer.Option(help="Partition: the priority tier.")] = None,
    qos: Annotated[str | None, typer.Option(help="QoS (another way to set the tier).")] = None,
    time: Annotated[str, typer.Option("--time", help="Time limit, e.g. 48:00:00 or 2-00:00:00.")] = "24:00:00",
    job_name: Annotated[str, typer.Option(help="Job name.")] = "gpuplan-train",
    checkpoint_dir: Annotated[
        str, typer.Option(help="Checkpoint directory (passed as --checkpoint-dir).")
    ] = "checkpoints",
    signal_before: Annotated[int, typer.Option(help="Seconds before the time limit to send SIGUSR1.")] = 120,
    launcher: Annotated[
        str, typer.Option(help="torchrun (srun + torchrun per node) or python (one process).")
    ] = "torchrun",
    procs_per_node: Annotated[
        int | None, typer.Option(help="torchrun workers per node (default: one per GPU).")
    ] = None,
    output: Annotated[str | None, typer.Option(help="Write the script here (default: stdout).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write an sbatch script that checkpoints on SIGTERM/SIGUSR1 and requeues itself."""
    from gpuplan import catalog
    from gpuplan.slurm import SlurmJob, nodes_for, sbatch_script

    per_node = gpus_per_node if gpus_per_node is not None else catalog.gpu(gpu).gpus_per_node
    if gpus is not None:
        if per_node == 0:  # --gpus-per-node 0 is a CPU-only job (e.g. the python launcher's test runs)
            raise GpuplanError(
                "gpus",
                f"--gpus {gpus} with --gpus-per-node 0 asks for GPUs on nodes without any",
                "drop --gpus-per-node 0, or --gpus for a CPU-only job",
            )
        # Slurm allocates whole nodes: a GPU count that is not one would silently become another
        if gpus % per_node:
            raise GpuplanError(
                "gpus",
                f"{gpus} GPUs are not whole nodes of {per_node}",
                f"use --gpus {max(per_node, gpus // per_node * per_node)} or "
                f"{-(-gpus // per_node) * per_node}, or set --gpus-per-node",
            )
        if nodes is not None and nodes * per_node != gpus:
            raise GpuplanError(
                "nodes",
                f"--nodes {nodes} x {per_node} GPUs per node is {nodes * per_node} GPUs, not --gpus {gpus}",
                "give --gpus or --nodes, not both",
            )
    if nodes is None:
        nodes = nodes_for(gpus, per_node) if gpus is not None else 1
    job = SlurmJob(
        command=tuple(command),
        nodes=nodes,
        gpus_per_node=per_node,
        partition=partition,
        qos=qos,
        time_limit=time,
        job_name=job_name,
        checkpoint_dir=checkpoint_dir,
        signal_before_s=signal_before,
        launcher=launcher,
        procs_per_node=procs_per_node,
    )
    script = sbatch_script(job)
    if output:
        with open(output, "w") as f:
            f.write(script)
    if json_out:
        _emit_json(
            {
                "nodes": job.nodes,
                "gpus_per_node": job.gpus_per_node,
                "partition": partition,
                "qos": qos,
                "time": time,
                "signal": f"B:USR1@{signal_before}",
                "requeue": True,
                "output": output,
                "script": script,
            }
        )
    elif not output:
        sys.stdout.write(script)


@app.command("checkpoint-interval")
@checked(html=html_file, plot=plot_path)
def checkpoint_interval(
    mtbf: Annotated[str, typer.Option(help="Mean time between failures or preemptions, e.g. 3.1h.")],
    cost: Annotated[str, typer.Option("--checkpoint-cost", "--cost", help="Time to write one checkpoint, e.g. 60s.")],
    restart: Annotated[str, typer.Option(help="Time to restart after a failure, e.g. 10m.")] = "0s",
    html: HtmlOpt = None,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Young's and Daly's optimal checkpoint intervals and the expected share of time wasted."""
    from gpuplan.estimate.checkpoint_interval import daly_interval, expected_waste_fraction, young_interval
    from gpuplan.units import fmt_duration

    m, c, r = (
        inputs.duration(mtbf, "mtbf"),
        inputs.duration(cost, "checkpoint_cost"),
        _duration_or_zero(restart, "restart"),
    )
    if c >= m:
        raise GpuplanError(
            "checkpoint_cost",
            f"a checkpoint ({fmt_duration(c)}) takes longer than the mean time between "
            f"failures ({fmt_duration(m)}): the job would never finish",
            "write checkpoints faster (async, sharded) or find a more reliable machine",
        )
    young, daly = young_interval(c, m), daly_interval(c, m)
    doc = {
        "mtbf_s": m,
        "cost_s": c,
        "restart_s": r,
        "young_s": young,
        "daly_s": daly,
        "expected_waste_fraction": expected_waste_fraction(daly, c, m, r),
        "expected_waste_fraction_young": expected_waste_fraction(young, c, m, r),
    }
    _report(html, "checkpoint-interval", doc)
    _plot(plot, "checkpoint-interval", doc)
    if json_out:
        _emit_json(doc)
        return
    from gpuplan.cli.render import console

    console.print(
        f"checkpoint every {fmt_duration(daly)} (Daly; Young: {fmt_duration(young)}) for an MTBF of "
        f"{fmt_duration(m)} and {fmt_duration(c)} checkpoints: expected waste "
        f"{doc['expected_waste_fraction']:.2%} of wall time (checkpoints, lost work"
        f"{', restarts' if r else ''})"
    )


cluster_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Cluster questions: what preemption costs, a cluster simulated."
)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command()
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
    price = _price(hw.id, price) or 0.0
    at = min(inputs.duration(preempt_at, "preempt_at", zero_ok=True), hours * HOUR)
    m = inputs.duration(mtbf, "mtbf") if mtbf is not None else hours * HOUR
    c, r = inputs.duration(cost, "checkpoint_cost"), _duration_or_zero(restart, "restart")
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
    _report(html, "cluster whatif", doc)
    _plot(plot, "cluster whatif", doc)
    _show(doc, json_out, "render_whatif")


@cluster_app.command("sim")
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
    from gpuplan.cluster.sim import NODE_MTBF_PRESETS, ClusterConfig, ClusterSim
    from gpuplan.cluster.workloads import READERS, read_openb_nodes, read_reclaims, synthetic
    from gpuplan.units import fmt_duration

    if trace and trace_format not in READERS:
        raise GpuplanError("trace_format", f"unknown trace format {trace_format!r}", f"use one of {', '.join(READERS)}")
    ckpt = checkpoint if checkpoint in ("none", "daly", "sigterm") else str(inputs.duration(checkpoint, "checkpoint"))
    cost, rst = inputs.duration(checkpoint_cost, "checkpoint_cost"), _duration_or_zero(restart, "restart")
    if node_mtbf == "none" or node_mtbf in NODE_MTBF_PRESETS:
        mtbf = NODE_MTBF_PRESETS.get(node_mtbf)
    else:
        try:
            mtbf = inputs.duration(node_mtbf, "node_mtbf")
        except GpuplanError:
            raise GpuplanError(
                "node_mtbf",
                f"cannot read {node_mtbf!r} as a preset or a duration",
                f"use {', '.join(NODE_MTBF_PRESETS)}, none, or a duration like 264d",
            ) from None
    grace_s, repair_s = _duration_or_zero(grace, "grace"), inputs.duration(repair, "repair")
    # A job interrupted before it can restart and save a checkpoint never finishes: say so now
    # rather than simulate failures and reclaims without end
    from gpuplan.estimate.checkpoint_interval import daly_interval, expected_waste_fraction

    spot_jobs = spot_reclaim_per_hour > 0 and not trace and spot_share > 0
    for name, rate in (
        ("node_mtbf", 1 / mtbf if mtbf else 0.0),
        ("spot_reclaim_per_hour", spot_reclaim_per_hour / 3600 if spot_jobs else 0.0),
    ):
        every = 1 / (rate + (1 / mtbf if mtbf and name != "node_mtbf" else 0.0)) if rate else None
        waste = expected_waste_fraction(daly_interval(cost, every), cost, every, rst) if every else 0.0
        if waste >= 0.99:
            raise GpuplanError(
                name,
                f"a job interrupted every {fmt_duration(every)} has no time to work ({waste:.1%} "
                f"of it goes to restarts of {fmt_duration(rst)}, checkpoints of "
                f"{fmt_duration(cost)} and lost work)",
                "use a longer --node-mtbf (llama3: 264 node-days), fewer --spot-reclaim-per-hour, "
                "or a shorter --restart or --checkpoint-cost",
            )
    node_gpus, node_models, node_skips = read_openb_nodes(nodes_file) if nodes_file else (None, None, {})
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
    skipped: Counter = Counter()
    if trace:
        work, skipped = READERS[trace_format](trace)
        probe, runnable = ClusterSim(cfg, []), []
        for j in work:
            why = probe.never_fits(j)
            if why is None:
                runnable.append(j)
            else:
                skipped[why[0]] += 1
        if not runnable:
            # Nothing to run: say so now rather than simulating failures and repairs forever
            why = ", ".join(f"{n:,} {r}" for r, n in skipped.items()) or "no rows"
            raise GpuplanError(
                "trace",
                f"{trace} has no job this cluster can run ({why})",
                "pass a trace with GPU jobs, or a cluster with the GPUs they need",
            )
        work = runnable
        for k, j in enumerate(work):
            j.id, j.checkpoint, j.cost_s, j.restart_s = k, ckpt, cost, rst
    else:
        work = synthetic(jobs, gpus, load, seed, spot_share, checkpoint=ckpt, cost_s=cost, restart_s=rst)
    from gpuplan.cli.render import progress

    with progress(json_out) as bar:
        task = bar.add_task(f"simulating {len(work):,} jobs on {gpus:,} GPUs", total=len(work))
        sim = ClusterSim(cfg, work).run(progress=lambda done: bar.update(task, completed=done))
        report = sim.report()
    if trace_out or plot:
        from gpuplan.cluster.render import write_plot, write_trace

        if trace_out:
            write_trace(sim, trace_out)
        if plot:
            write_plot(sim, plot)
    report["skipped"] = dict(skipped) | dict(node_skips)
    report["trace"], report["plot"] = trace_out, plot
    report["policy"], report["placement"], report["checkpoint"] = policy, placement, checkpoint
    _report(html, "cluster sim", report)
    _show(report, json_out, "render_cluster")


@app.command()
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
    price = _price(hw.id, on_demand)
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
    _report(html, "tco", doc)
    _plot(plot, "tco", doc)
    _show(doc, json_out, "render_tco")


@app.command()
@checked()
def validate(
    kind: Annotated[
        str,
        typer.Argument(
            help="training (step time), training-held-out (published runs never fitted to), serving "
            "(throughput and latency), serving-held-out (published engine benchmarks never fitted to), serving-kv (KV pools) or offload."
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
    if calibrated and kind != "training":
        raise GpuplanError(
            "calibrated", "--calibrated refits on the shared training runs only", "use: gpuplan validate training"
        )
    if kind == "offload":
        from gpuplan.estimate.offload_validate import summary as off_summary, validate_offload

        checks = validate_offload()
        if json_out:
            _emit_json(
                {
                    "rows": [
                        {
                            "id": c.id,
                            "source": c.source,
                            "metric": c.metric,
                            "measured": c.measured,
                            "predicted": c.predicted,
                            "error": c.error,
                            "tag": c.tag,
                            "url": c.url,
                            "search_margin": c.search_margin,
                            "at_least": c.at_least,
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
        _emit_json(kdoc) if json_out else render_kv_validation(kdoc)
        return
    if kind == "serving-held-out":  # held out: throughput and latency against published engine benchmarks
        from gpuplan.cli.render_serve import render_serving_held_out
        from gpuplan.serve.validate_held_out import summary as ho_summary, to_rows, validate_held_out

        ho_checks = validate_held_out()
        hdoc = {"rows": to_rows(ho_checks), "summary": ho_summary(ho_checks)}
        _emit_json(hdoc) if json_out else render_serving_held_out(hdoc)
        return
    if kind == "serving":
        from gpuplan.serve.validate import summary as serve_summary, validate_serving

        checks = validate_serving()
        if json_out:
            _emit_json(
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
    if kind not in ("training", "training-held-out"):
        raise GpuplanError(
            "kind",
            f"unknown validation set {kind!r}",
            "use training, training-held-out, serving, serving-held-out, serving-kv or offload",
        )
    if calibrated:
        from gpuplan.estimate.calibrate import calibrated_validation

        doc = calibrated_validation()
        if json_out:
            _emit_json(doc)
        else:
            from gpuplan.cli.render_runs import render_calibrated_validation

            render_calibrated_validation(doc)
        return
    from gpuplan.estimate.validate import CSVS, HELD_OUT, by_category, summary, validate_training

    results = validate_training(HELD_OUT if kind == "training-held-out" else CSVS)
    categories = by_category(results)
    if json_out:
        _emit_json(
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
                        "predicted_peak_bytes": r.peak_bytes,
                        "gpu_memory_bytes": r.capacity_bytes,
                        "refused": r.refused,
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
        _emit_json(doc)
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
        _emit_json(rows)
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
        _emit_json(rows)
    else:
        from gpuplan.cli.render import render_gpus

        render_gpus(rows)


RunFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format", help="Log format: telemetry, megatron, torchtitan, hf, trace or run-file (default: sniffed)."
    ),
]
AgainstOpt = Annotated[
    str | None,
    typer.Option(
        help='The plan the run ran, as `gpuplan train` flags in one string: "llama-3.1-8b --gpus 16 --tp 2 '
        '--global-batch 256" (default: the plan the run file carries).'
    ),
]


def _read_runs(paths: list[str], fmt: str | None, against: str | None) -> list:
    from gpuplan.runs.readers import read_run
    from gpuplan.runs.record import plan_from_flags

    runs = [read_run(p, fmt) for p in paths]
    if against:
        plan = plan_from_flags(against)
        runs = [r if r.plan is not None else type(r)(**{**r.__dict__, "plan": plan}) for r in runs]
    return runs


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

    cal = calibrate_runs(_read_runs(runs, run_format, against), leave_one_out=loo)
    if out:
        write_profile(cal, out)
    doc = calibration_dict(cal, out)
    if json_out:
        _emit_json(doc)
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

    (r,) = _read_runs([run], run_format, against)
    if r.plan is None:
        raise GpuplanError("against", f"{run} carries no plan", 'pass --against "MODEL --gpus N --tp T ..."')
    res = r.plan.resolve()
    hw, prof, reserve = _calibrated(res.gpu, calibration, None)
    if prof:
        import dataclasses

        cfg = res.config if reserve is None else dataclasses.replace(res.config, allocator_fraction=reserve)
        res = dataclasses.replace(res, gpu=hw, config=cfg)
    doc = compare_run(r, res)
    doc["calibration_profile"] = {**prof.describe(), "summary": prof.summary()} if prof else None
    if json_out:
        _emit_json(doc)
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


# Old flag names that still work, and the name every command now shares
DEPRECATED = {"--tpot-slo": "--itl-slo", "--cost": "--checkpoint-cost"}


@functools.lru_cache(maxsize=1)
def click_command():
    """The click command typer builds from ``app``, built once: building it costs more than a
    train estimate, and ``gpuplan ui`` runs a command per request."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; bad input is one line and exit code 2, a plan that does not fit 3."""
    command = click_command()
    args = sys.argv[1:] if argv is None else list(argv)
    _ARGS[:] = args
    head = args[: args.index("--")] if "--" in args else args  # slurm: what follows -- is the user's command
    # Said after an answer only, so that an error stays the single line on stderr
    notes = [
        f"note: {old} is now {DEPRECATED[old]} (the old name still works)\n"
        for old in dict.fromkeys(a.split("=")[0] for a in head if a.split("=")[0] in DEPRECATED)
    ]
    try:
        code = command.main(args=args, prog_name="gpuplan", standalone_mode=False)
    except GpuplanError as exc:
        sys.stdout.flush()
        sys.stderr.write(f"error: {' '.join(str(exc).split())}\n")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        # `gpuplan models | head`: the reader left; nothing more to say
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:
        # Usage errors (unknown flag, bad value, missing argument) come from the click that typer
        # bundles; recognise them by their interface rather than a private module path.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError" and getattr(exc, "ctx", None) is not None:
            # `gpuplan` (or `gpuplan cluster`) alone: the help, formatted, is the answer
            sys.stdout.write(exc.ctx.get_help() + "\n")
            sys.exit(0)
        message = " ".join(exc.format_message().split())
        sub = [a for a in args[:2] if not a.startswith("-")]
        sub = sub[:1] if not sub or sub[0] != "cluster" else sub
        if sub and sub[0] not in command.commands:
            sub = []
        sys.stderr.write(f"error: {message.rstrip('.')}; see `{' '.join(['gpuplan', *sub, '--help'])}`\n")
        sys.exit(2)
    if isinstance(code, int) and code:  # typer.Exit(n) comes back as a return value without standalone mode
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.write("".join(notes))
