"""``gpuplan train``: will a training run fit, where every byte per GPU goes, its FLOPs, time and cost."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplan import inputs
from gpuplan.cli.options import (
    CalibrationOpt,
    ClusterOpt,
    CompileOpt,
    CpCommOpt,
    CpLoadBalanceOpt,
    CpuMemoryOpt,
    DiskGbpsOpt,
    DiskOpt,
    DocumentLenOpt,
    FrameworkOpt,
    GpuOpt,
    HostOpt,
    HtmlOpt,
    JsonOpt,
    MasterDtypeOpt,
    ModelArg,
    MtpLayersOpt,
    OptimizerDtypeOpt,
    PcieOpt,
    PlotOpt,
    PpOpt,
    PriceOpt,
    RecomputeModulesOpt,
    TpOpt,
)
from gpuplan.cli.output import emit_json, plot as write_plot, report
from gpuplan.cli.params import anything, at_least, between, checked, html_file, plot as plot_path, price as price_rule
from gpuplan.errors import DoesNotFit, GpuplanError


@checked(
    gpus=at_least(1),
    tp=at_least(1),
    pp=at_least(1),
    dp=at_least(1),
    cp=at_least(1),
    ep=at_least(1),
    etp=at_least(1),
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
    ep: Annotated[
        int, typer.Option(help="Expert-parallel degree (carved from dp*cp; with --etp folded over tp*cp*dp).")
    ] = 1,
    etp: Annotated[
        int | None,
        typer.Option(
            help="Expert tensor-parallel degree (Megatron --expert-tensor-parallel-size): MoE parallel folding, "
            "the experts laid out as etp x ep x edp over tp*cp*dp (default: tp, as Megatron)."
        ),
    ] = None,
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
    pipeline_layout: Annotated[
        str | None,
        typer.Option(
            help="Megatron-Core's --pipeline-model-parallel-layout: the pp x vp virtual stages' layers, "
            "separated by | (E embedding, t transformer layer, m MTP layer, L loss; x*n and (...)*n repeat), "
            "e.g. 'Et*4|(t*4|)*14tmL'; sets vp from its stage count."
        ),
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
    recompute: Annotated[
        str | None, typer.Option(help="Activation recompute: none (default), selective, full.")
    ] = None,
    recompute_modules: RecomputeModulesOpt = None,
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
    cp_comm: CpCommOpt = None,
    cp_load_balance: CpLoadBalanceOpt = True,
    document_len: DocumentLenOpt = 0,
    mtp_layers: MtpLayersOpt = 0,
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
            help="MoE: hide the expert exchange behind another micro-batch's compute, each "
            "dispatch or combine beside its partner in Megatron's layer pair "
            "(--overlap-moe-expert-parallel-comm; DualPipe always does).",
        ),
    ] = False,
    moe_dispatcher: Annotated[
        str,
        typer.Option(
            "--moe-dispatcher",
            help="MoE: the token dispatcher, alltoall, deepep, hybridep (Megatron's flex "
            "dispatcher by backend; flex when the backend is not known) or allgather. DeepEP and "
            "HybridEP send a token once per destination node or rank, at their published rates; "
            "each dispatcher synchronises the host once per MoE layer forward, exposing the expert "
            "loop's host launches (default: not modelled).",
        ),
    ] = "",
    full_cuda_graph: Annotated[
        bool,
        typer.Option(
            "--full-cuda-graph/--no-full-cuda-graph",
            help="MoE: the whole step is one CUDA graph (no host syncs or per-expert launches).",
        ),
    ] = False,
    te_op_fuser: Annotated[
        bool,
        typer.Option(
            "--te-op-fuser/--no-te-op-fuser",
            help="MoE, fused profile: TransformerEngine's op fuser runs the experts' MLP "
            "(Megatron use_transformer_engine_op_fuser): biased experts' fc2 bias inside the GEMM.",
        ),
    ] = False,
    compile_blocks: CompileOpt = False,
    offload_activations: Annotated[
        int,
        typer.Option(
            "--offload-activations",
            metavar="N",
            help="Keep the activations of N layers per pipeline chunk in CPU memory "
            "(Megatron-Core --cpu-offloading-num-layers); copies overlap the next layer.",
        ),
    ] = 0,
    fp8_scaling: Annotated[
        str,
        typer.Option(
            "--fp8-scaling",
            help="FP8 per-tensor scaling: delayed (TransformerEngine DelayedScaling) or current "
            "(Float8CurrentScaling, Megatron-Bridge's FP8-CS: an amax pass before each cast).",
        ),
    ] = "delayed",
    fp8_params: Annotated[
        bool,
        typer.Option(
            "--fp8-params/--no-fp8-params",
            help="Keep the GEMM weights only in FP8 (Megatron --fp8-param-gather): no BF16 copy, "
            "FP8 parameter all-gather.",
        ),
    ] = False,
    optimizer_dtype: OptimizerDtypeOpt = "fp32",
    master_dtype: MasterDtypeOpt = "fp32",
    cross_entropy_in_place: Annotated[
        bool,
        typer.Option(
            "--cross-entropy-in-place/--no-cross-entropy-in-place",
            help="The loss keeps only the BF16 logits and writes their gradient over them "
            "(Megatron-Core cross_entropy_fusion_impl te: TransformerEngine's parallel_cross_entropy).",
        ),
    ] = False,
    expandable_segments: Annotated[
        bool,
        typer.Option(
            "--expandable-segments/--no-expandable-segments",
            help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: no allocator reserve (free cached "
            "pages are unmapped before an allocation fails).",
        ),
    ] = False,
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
    from gpuplan.estimate.profile import calibrated
    from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict
    from gpuplan.search.plans import parse_choices
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig
    from gpuplan.units import GiB

    spec = catalog.model(model)
    hw, gpus = catalog.hardware(gpu, cluster, gpus)
    hw, prof, allocator_fraction = calibrated(hw, calibration, allocator_fraction)
    if pipeline_layout is not None and vp == 1:  # the layout's stage count is pp x vp
        from gpuplan.specs.layout import parse

        stages = len(parse(pipeline_layout).layers)
        vp = stages // pp if stages % pp == 0 else vp
    plan = ParallelPlan.for_gpus(
        gpus,
        dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        vp=vp,
        zero=zero,
        sp=sp,
        schedule=schedule,
        order=rank_order,
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
        layout=pipeline_layout,
    )
    config = TrainingConfig.for_framework(
        framework,
        seq_len=seq_len,
        micro_batch=micro_batch,
        global_batch=0 if global_batch is None else inputs.global_batch(global_batch, seq_len),
        precision=precision,
        master_weights=master_weights,
        optimizer=optimizer,
        recompute=recompute_level(recompute, recompute_modules),
        recompute_modules=parse_choices(recompute_modules, "recompute_modules") or (),
        attention=attention,
        attention_kernel=attention_kernel,
        cp_comm=cp_comm,
        cp_load_balance=cp_load_balance,
        document_len=document_len,
        mtp_layers=mtp_layers,
        profile=profile,
        cuda_context_bytes=cuda_context_gib * GiB,
        allocator_fraction=allocator_fraction,
        tp_overlap=tp_overlap,
        overlap_grad_reduce=overlap_grad_reduce,
        expert_imbalance=expert_imbalance,
        ep_overlap=ep_overlap,
        moe_dispatcher=moe_dispatcher,
        full_cuda_graph=full_cuda_graph,
        te_op_fuser=te_op_fuser,
        compile=compile_blocks,
        offload_activation_layers=offload_activations,
        grad_fp32=_grad_fp32(grad_dtype),
        fp8_scaling=fp8_scaling,
        fp8_params=fp8_params,
        optimizer_dtype=optimizer_dtype,
        master_dtype=master_dtype,
        cross_entropy_in_place=cross_entropy_in_place,
        expandable_segments=expandable_segments,
    )
    if offload is None:
        # the offload model's own flags mean nothing without it: refuse rather than drop them
        given = {
            "offload_device": offload_device != "cpu",
            "delayed_update": delayed_update,
            "cpu_memory": cpu_memory is not None,
            "disk": disk is not None,
            "pcie_gbps": pcie_gbps is not None,
            "disk_gbps": disk_gbps is not None,
            "host": host is not None,
        }
        stray = [k for k, v in given.items() if v]
        if stray:
            raise GpuplanError(
                stray[0], "applies to offloaded training only", "add `offload` (e.g. optimizer) or drop the flag"
            )
    price_per_gpu_hour, price_source = catalog.price_with_source(hw.id, price)
    req = TrainRequest(
        model=spec,
        gpu=hw,
        plan=plan,
        config=config,
        tokens=inputs.count(tokens, "tokens") if tokens is not None else None,
        mfu=mfu,
        price_per_gpu_hour=price_per_gpu_hour,
        price_source=price_source,
    )
    if offload is not None:  # the offload model (estimate/offload.py) answers instead
        from gpuplan.cli.offload import host_from_flags, render_train_offload
        from gpuplan.estimate.offload import (
            OffloadTrainRequest,
            as_run,
            check_fits,
            estimate_offload_training,
            offloaded_step,
        )

        oreq = OffloadTrainRequest(
            model=spec,
            gpu=hw,
            host=host_from_flags(hw, cpu_memory, disk, pcie_gbps, disk_gbps, host=host),
            plan=plan,
            config=config,
            offload=offload,
            device=offload_device,
            delayed_update=delayed_update,
            microbatches=max(1, req.microbatches),
        )
        oest = estimate_offload_training(oreq)
        # train's whole document as the offloaded plan runs (days, cost, MFU), as search --offload
        # prints its plans, the offload estimate under "offload"
        odoc = as_run(to_dict(estimate_training(req)), oest, offloaded_step(oest))
        report(html, "train", odoc)
        write_plot(plot, "train", odoc)
        check_fits(oest)
        emit_json(odoc) if json_out else render_train_offload(odoc)
        return
    from gpuplan.search.plans import smallest_fitting_plan  # the fix when no single change fits

    est = estimate_training(req, find_plan=smallest_fitting_plan)
    doc = {**to_dict(est), "calibration_profile": prof.describe() if prof else None} if json_out or html or plot else {}
    report(html, "train", doc)
    write_plot(plot, "train", doc)
    if json_out:
        emit_json(doc)
    else:
        from gpuplan.cli.render import console, render_train

        if prof:
            console.print(prof.summary())
        render_train(est)
    if not est.memory.fits and not est.memory.tight:  # tight: a warning (rendered above), not a refusal
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


def recompute_level(recompute: str | None, modules: str | None) -> str:
    """``--recompute``, where ``--recompute-modules`` alone means selective recompute of those
    modules; an explicit ``--recompute none`` beside them is a contradiction, not a choice."""
    if not modules:
        return recompute or "none"
    if recompute == "none":
        raise GpuplanError(
            "recompute_modules",
            "lists modules to recompute while `recompute=none` recomputes nothing",
            "drop one of them (the modules alone mean selective recompute)",
        )
    return recompute or "selective"
