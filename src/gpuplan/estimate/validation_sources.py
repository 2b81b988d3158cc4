"""The published training runs' sources (catalog/validation/training_runs*.csv and the held-out
set): how each source ran (``SOURCES``: framework, kernels, overlap, architecture, stated once per
source, never per row) and how its reported metric becomes a step time.

Rows that give TFLOP/s or MFU are turned into a step time with the FLOP formula the source used
(column ``flop_formula``: Narayanan et al. 2021 eq. 3, Megatron-Core's
num_floating_point_operations, the Llama 3 paper's count), so every convention compares on seconds;
tokens/s need no formula. validation_rows.py reads the rows with these; validate.py runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

DATA = Path(__file__).resolve().parent.parent / "catalog" / "validation"
CSV = DATA / "training_runs.csv"
CSVS = (CSV, DATA / "training_runs_hopper.csv")
# Published runs gathered here, never fitted to (scripts/fit_sustained.py reads CSVS only): they
# test whether the model carries to runs it was not tuned on, and widen the error bands.
HELD_OUT = (
    DATA / "held_out" / "training_runs_nemo.csv",
    DATA / "held_out" / "training_runs_torchtitan.csv",
    DATA / "held_out" / "training_runs_dgxc.csv",
)
MEGATRON_FORMULA = "96BsLh^2(1+s/6h+V/16Lh)"
H100_BF16_PEAK = 989.4e12  # the peak the Megatron-Core table's MFU is over (README: "989 TFLOP/s")
LLAMA3_405B_PARAMS = 405_853_388_800  # N in the llama3 formula (shared validation README)


def megatron_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs per step with full recompute (Narayanan et al. 2021, eq. 3, appendix)."""
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def megatron_model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Model FLOPs per step, no recompute: 72·B·s·L·h²·(1 + s/6h + V/12Lh) (Megatron-Core's
    num_floating_point_operations for a GeLU 4h MLP, full attention; shared README, ``megatron``)."""
    return 72 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def llama3_flops(batch: int, seq: int, layers: int, hidden: int) -> float:
    """Model FLOPs per step as the Llama 3 paper counts them: (6·N + 6·L·h·s) per token with
    N = 405,853,388,800 (causal attention; shared README, ``llama3``)."""
    return batch * seq * (6 * LLAMA3_405B_PARAMS + 6 * layers * hidden * seq)


@dataclass(frozen=True)
class Source:
    """How one source's runs ran: the framework, its kernels and overlap, the architecture."""

    prefix: str  # the start of the CSV's ``source`` column
    framework: str  # words, for the report
    arch: str  # the architecture all its runs share ("": the row's ``arch`` column says)
    profile: str  # the gpuplan --framework profile that runs as the source did ("generic": none fits)
    config: dict[str, Any] = field(default_factory=dict)  # TrainingConfig fields
    plan: dict[str, Any] = field(default_factory=dict)  # ParallelPlan fields the source states for all its runs
    sp: bool | None = None  # sequence parallelism whenever tp > 1 (None: the row's ``sp`` column)
    dropout: float = 0.0  # residual and attention dropout (Megatron-LM's default was 0.1)
    # what a row's ``peak_memory_gib`` measured: "reserved", the caching allocator's peak reserved
    # bytes (torch.cuda.memory_stats reserved_bytes.all.peak), which the CUDA context lies outside
    # of; "" where the source reports no memory
    memory: str = ""


# Each entry is what the source itself says about how it ran (read in the source; a field it does
# not state is gpuplan's default). Megatron-LM 2021-22: fp16 loss scaling, no FlashAttention yet
# (fused scale-mask-softmax), gradients reduced after the backward (LocalDDP), dropout 0.1.
# Megatron-LM 2021-22: no gradient/parameter overlap, and its pipeline p2p blocked
# (p2p_communication.py at 64a83fb588: batch_isend_irecv, req.wait(), torch.cuda.synchronize())
_MEGATRON_2021 = dict(attention="eager", overlap_grad_reduce=False, overlap_param_gather=False, overlap_p2p=False)
# NeMo 2.0 / Megatron-Bridge performance recipes since 2025-04: BF16 gradient reduce, TE current-scaling
# FP8 (FP8-CS), TransformerEngine's in-place cross-entropy (each Source below says where it read them)
_NEMO2_FP8CS = dict(grad_fp32=False, fp8_scaling="current", cross_entropy_in_place=True)
SOURCES = (
    # Narayanan et al. 2021's code (Megatron-LM at 64a83fb588, 2021-03) predates the async
    # all-reduce of the column-parallel dgrad (megatron/mpu/layers.py, 2021-09: 16c90445e7)
    Source(
        "Narayanan et al. 2021",
        "Megatron-LM (2021)",
        "gpt",
        "megatron",
        dict(_MEGATRON_2021, tp_async_backward=False),
        dropout=0.1,
    ),
    Source("Korthikanti et al. 2022", "Megatron-LM (2022)", "gpt", "megatron", _MEGATRON_2021, dropout=0.1),
    # Megatron-LM README, "Performance benchmarking" (core_r0.8.0): TransformerEngine kernels,
    # distributed optimizer, --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap, sequence
    # parallel, bf16 with fp32 gradient reduction (arguments.py: bf16 sets
    # accumulate_allreduce_grads_in_fp32), no dropout, no recompute.
    Source(
        "Megatron-Core r0.8",
        "Megatron-Core r0.8 + TransformerEngine",
        "gpt",
        "megatron",
        dict(attention="flash", tp_overlap=True),
        sp=True,
    ),
    # Llama 3 paper, section 3.3: 4D parallelism (TP with SP, CP, PP, FSDP of optimizer state and
    # gradients), bf16, FlashAttention. Its pipeline is interleaved 1F1B with V model chunks per
    # rank (section 3.3.2): "we reduce one Transformer layer each from the first and the last
    # stages, respectively. This means that the first model chunk on the first stage has only the
    # embedding, and the last model chunk on the last stage has only output projection and loss
    # calculation". Removing one layer empties a chunk only if a chunk holds one layer: 126 layers
    # and the two emptied slots are 128 = pp 16 x V 8, Megatron-Core's layout E|(t|)*126L (ranks
    # of 7, 8 x 14, 7 layers). Fig. 6 draws two chunks per rank for an example of pp 4; that is
    # an illustration, not the run's V (gpuplan read V = 2 from it until 2026-11-28).
    # Its context parallelism is all-gather based: "we first all-gather the key (K) and value (V)
    # tensors, and then compute attention output for the local query (Q) tensor chunk" (3.3.2).
    # Its FSDP "shards the optimizer states and gradients, but for model shards we do not reshard
    # after forward computation" (3.3.2): ZeRO-2's memory, where the CSV's zero column says 1 (the
    # step time is the same either way: the gradient reduction is overlapped; the memory is not)
    Source(
        "Llama 3 paper",
        "Meta (Llama 3 paper, section 3.3)",
        "llama",
        "generic",
        dict(attention="flash", tp_overlap=True, cp_comm="all_gather"),
        plan=dict(vp=8, layout="E|(t|)*126L", zero=2),
        sp=True,
    ),
    # NVIDIA's NeMo performance summary (NeMo 24.07 container, DGX-H100; docs/source/performance/
    # performance_summary.md of NVIDIA/NeMo at 9c5c5e9709): NeMo-Framework-Launcher configs on
    # Megatron-Core + TransformerEngine, FP8 (TE's delayed scaling), TP communication overlap and
    # sequence parallelism; the optimizer is Apex's distributed_fused_adam with a contiguous
    # gradient buffer in the parameter dtype (launcher_scripts/conf/training/*: optim.name
    # distributed_fused_adam, contiguous_grad_buffer: true; grad_sync_dtype defaults to the BF16
    # parameters), overlapped gradient reduce and parameter gather.
    # NeMo sets store_param_remainders for BF16 models with an fp32 optimizer (megatron_base_model.py,
    # setup_optimization): the fp32 master is the BF16 weight plus a 16-bit remainder.
    Source(
        "NeMo 24.07",
        "NeMo 24.07 (Megatron-Core + TransformerEngine)",
        "",
        "nemo",
        dict(grad_fp32=False, master_remainders=True),
        sp=True,
    ),
    # NeMo 2.0's performance summary for the NeMo 25.04 container (docs.nvidia.com nemo-framework
    # archive/25.04-performance-summary.html): "per-tensor FP8 quantization, leveraging scaling
    # factors computed in the current step" (FP8-CS). Its recipes (NVIDIA/NeMo v2.3.0, 2b03b748,
    # 2025-05-08, scripts/performance/utils.py set_primary_perf_configs): cross_entropy_fusion_impl
    # "te" with GPTConfig's cross_entropy_loss_fusion True, the precision plugin's
    # grad_reduce_in_fp32 False, bf16_with_fp8_current_scaling_mixed (fp8_param_gather True, off
    # under Megatron-FSDP: the row's fp8_params column); the model recipes set sequence parallelism.
    Source(
        "NeMo 25.04",
        "NeMo 25.04 (NeMo 2.0, Megatron-Core + TransformerEngine)",
        "",
        "nemo",
        _NEMO2_FP8CS,
        sp=True,
    ),
    # NVIDIA's DGX Cloud Benchmarking recipes (NVIDIA/dgxc-benchmarking v25.05.04, 1f6d9f4,
    # 2025-09-04): each README's "Expected Performance" tables give the measured training step time
    # (mean of iterations 11-44, common/parse_train_timing.sh). The launch scripts run NeMo's
    # scripts/performance/llm/pretrain_*.py in the NeMo 25.04.01 container (NVIDIA/NeMo v2.3.1) with
    # the README's layout (-tp -pp -cp -vp -mb -gb, -fsdp 0). NeMo v2.3.1's set_primary_perf_configs
    # (scripts/performance/utils.py): sequence parallelism with TP, cross_entropy_fusion_impl "te",
    # recompute and offload from model_configs_*.csv (none for these models); FP8 under the
    # argument parser's default --fp8_recipe ds, bf16_with_fp8_mixed (TE delayed scaling, amax
    # history 1024, fp8_param_gather True) with grad_reduce_in_fp32 set False, while BF16 keeps
    # bf16_mixed's grad_reduce_in_fp32 True (the rows' grad_dtype column says which).
    Source(
        "dgxc-benchmarking v25.05.04",
        "NeMo 25.04.01 (dgxc-benchmarking recipes)",
        "",
        "nemo",
        dict(fp8_scaling="delayed", cross_entropy_in_place=True),
        sp=True,
    ),
    # The same repository's release v25.04.01 (85380ff): the NeMo 25.02.01 container, NeMo checked out
    # at d2b21556 (2025-03-20) with the release's gsw_nemo.patch and its own
    # scripts/performance/llm/pretrain_llama31.py (llama3.1/setup.sh): the recipes' performance mode,
    # no TE in-place cross-entropy yet, FP8 as bf16_with_fp8_mixed (delayed scaling, fp8_params)
    # with grad_reduce_in_fp32 set False, BF16 with bf16_mixed's True (the rows' grad_dtype).
    Source(
        "dgxc-benchmarking v25.04.01",
        "NeMo 25.02.01 (dgxc-benchmarking recipes)",
        "",
        "nemo",
        dict(fp8_scaling="delayed"),
        sp=True,
    ),
    # The same repository's release v25.03 (1b9bb6b): the NeMo 24.12 container running NeMo 1.0's
    # megatron_gpt_pretraining on the release's own YAMLs (llama3.1/llama3.1_*.yaml) with
    # configure.sh's overrides: Apex distributed_fused_adam with grad_sync_dtype bf16, which NeMo 1.0
    # gives BF16 parameter remainders for an fp32 optimizer (as NeMo 24.07 above); FP8 as fp8 +
    # fp8_hybrid + fp8_params, TE's delayed scaling.
    Source(
        "dgxc-benchmarking v25.03",
        "NeMo 24.12 (dgxc-benchmarking, NeMo 1.0 configs)",
        "",
        "nemo",
        dict(grad_fp32=False, master_remainders=True, fp8_scaling="delayed"),
        sp=True,
    ),
    # NeMo 25.07 (docs.nvidia.com nemo-framework performance-summary.html, 'Container: NeMo 25.07'),
    # the same FP8-CS wording; its recipes (NVIDIA/NeMo v2.4.0, 2381f42f, 2025-07-25,
    # scripts/performance/helpers.py): set_precision_configs grad_reduce_in_fp32 False,
    # cross_entropy_fusion_impl "te", bf16_with_fp8_current_scaling_mixed for "cs".
    Source(
        "NeMo 25.07",
        "NeMo 25.07 (NeMo 2.0, Megatron-Core + TransformerEngine)",
        "",
        "nemo",
        _NEMO2_FP8CS,
        sp=True,
    ),
    # The NeMo 25.02 summary (the same docs page when 25.02 was current): "FP8 precision (using
    # NeMo 2.0)", scaling not stated. Its recipes (NVIDIA/NeMo v2.2.0, 7192a2c9, 2025-03-12,
    # scripts/llm/performance/pretrain_*.py): bf16_with_fp8_mixed (TE delayed scaling, amax history
    # 1024, fp8_params True) with grad_reduce_in_fp32 False; no cross_entropy_fusion_impl yet
    # (GPTConfig's cross_entropy_loss_fusion True: Megatron-Core's own fused loss, not TE's in-place
    # one); utils.py set_primary_perf_configs: sequence_parallel = tp_size > 1.
    Source(
        "NeMo 25.02",
        "NeMo 25.02 (NeMo 2.0, Megatron-Core + TransformerEngine)",
        "",
        "nemo",
        dict(grad_fp32=False),
        sp=True,
    ),
    # Megatron-Bridge performance summaries (NeMo 25.11 to 26.06 containers), the same stack a year
    # on: FP8-CS = TE current scaling (every FP8 row is FP8-CS, the pages' "fp8_cs" recipes);
    # FSDP > 0 = Megatron-FSDP (gpuplan's zero 3). Their performance
    # configs reduce and keep gradients in BF16 (scripts/performance/configs/*/*_llm_pretrain.py,
    # set_{llama3,llama31,qwen3,gpt_oss}_common_configs: grad_reduce_in_fp32 = False, r0.2.0 to v0.5.0).
    # Every version sets TransformerEngine's in-place cross-entropy: cross_entropy_fusion_impl "te"
    # (v0.1.0rc4 configs/*/*_llm_pretrain.yaml; r0.2.0 utils/helpers.py set_common_perf_overrides;
    # v0.3.0 to v0.5.0 utils/overrides.py; v0.6.0 perf_recipes/_common.py _benchmark_common) with
    # GPTModelProvider's cross_entropy_loss_fusion True (models/gpt_provider.py).
    Source(
        "Megatron-Bridge",
        "Megatron-Bridge (NeMo container)",
        "",
        "nemo",
        _NEMO2_FP8CS,
        sp=True,
    ),
    # llm-foundry: Composer + PyTorch FSDP FULL_SHARD, amp_bf16 (fp32 masters and reduction),
    # FlashAttention-2 (attn_impl flash: the flash_attn 2 package), eager PyTorch around it.
    Source(
        "llm-foundry",
        "llm-foundry (Composer, PyTorch FSDP)",
        "mpt",
        "generic",
        dict(attention="flash", attention_kernel="fa2", profile="eager"),
    ),
    # torchtitan's benchmark pages (benchmarks/llama3_h100_202412_torchtitan.md at torchtitan
    # 9dec370 / torch 1963fc8; asyncTP_llama3_h100_2025-06_torchtitan.md at 820504e / torch
    # 38410cf9), read at those commits: FSDP2 fully_shard with MixedPrecisionPolicy(param bf16,
    # reduce fp32) over the dp_shard x cp mesh, reshard_after_forward True for every block but the
    # last and False for all under PP (parallelize_llama.py apply_fsdp: zero 3, or 2 with PP, per
    # row); TP with sequence parallel norms and loss parallel, async TP per row (tp_overlap);
    # activation_checkpoint "selective" with selective_ac_option "op" (per-op SAC: saves every
    # second aten.mm output and the SDPA outputs, recomputes the rest: activations.per_op_sac_saved)
    # or "full"; torch.compile per row (column ``compile``, TrainingConfig.compile); Float8 = torchao Float8Linear with dynamic tensorwise scaling (config_manager.py
    # scaling_type_* default "dynamic": each tensor's own amax, fp8_scaling "current"), the
    # weights recast per GEMM (no cached copy). Attention: F.scaled_dot_product_attention with no
    # backend pinned (models/llama/model.py at 9dec370), whose H100 priority put FlashAttention-2
    # first; at 820504e torchtitan pins [FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH] off B200
    # (models/attention.py, pytorch/torchtitan PR 1196): fa2 both times. Memory is the peak
    # reserved that torchtitan logs (metrics.py DeviceMemoryMonitor: reserved_bytes.all.peak, in
    # GiB of 2^30 bytes; the page's footnote: "We take the maximum across all GPUs").
    Source(
        "torchtitan",
        "torchtitan (FSDP2, torchao Float8)",
        "llama",
        "torchtitan",
        dict(attention_kernel="fa2", fp8_scaling="current"),
        sp=True,
        memory="reserved",
    ),
)


def source_for(name: str) -> Source:
    for s in SOURCES:
        if name.startswith(s.prefix):
            return s
    raise GpuplanError(
        "source",
        f"no framework assumptions for source {name!r}",
        "add a Source to gpuplan.estimate.validation_sources.SOURCES",
    )


def measured_step_s(r: dict[str, str], gbs: int, seq: int) -> float:
    value, gpus = float(r["value"]), int(r["gpus"])
    L, h, vocab = int(r["layers"]), int(r["hidden"]), int(r["vocab"])
    metric, formula = r["metric"], r.get("flop_formula", "")
    if metric == "step_s":
        return value
    if metric == "tokens_per_s_per_gpu":
        return gbs * seq / (gpus * value)
    if metric not in ("tflops_per_gpu", "mfu"):
        raise GpuplanError(
            "metric",
            f"row {r['id']}: unknown metric {metric!r}",
            "use step_s, tokens_per_s_per_gpu, tflops_per_gpu or mfu",
        )
    if formula == MEGATRON_FORMULA:
        flops = megatron_flops(gbs, seq, L, h, vocab)
    elif formula == "megatron":
        flops = megatron_model_flops(gbs, seq, L, h, vocab)
    elif formula == "llama3":
        flops = llama3_flops(gbs, seq, L, h)
    else:
        raise GpuplanError(
            "flop_formula",
            f"row {r['id']}: unknown formula {formula!r}",
            f"add it to gpuplan.estimate.validation_sources (known: {MEGATRON_FORMULA}, megatron, llama3)",
        )
    per_gpu = value * 1e12 if metric == "tflops_per_gpu" else value * H100_BF16_PEAK
    return flops / (gpus * per_gpu)
