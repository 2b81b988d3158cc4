"""Option types several commands share, declared once so that each flag has one help text."""

from __future__ import annotations

from typing import Annotated

import typer

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
RecomputeModulesOpt = Annotated[
    str | None,
    typer.Option(
        help="Selective recompute by module (Megatron-Core --recompute-modules), comma-separated: core_attn, "
        "layernorm, moe_act, mlp, moe, shared_experts, mla_up_proj. Implies --recompute selective.",
    ),
]
CompileOpt = Annotated[
    bool,
    typer.Option(
        "--compile/--no-compile",
        help="torch.compile over each block (torchtitan, hf): norms, rotary and activation fused.",
    ),
]
OptimizerDtypeOpt = Annotated[
    str,
    typer.Option(
        "--optimizer-dtype",
        help="The optimizer moments' dtype: fp32, or bf16 (Megatron-Core --use-precision-aware-optimizer "
        "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, as DeepSeek-V3 trained; FP32 masters kept).",
    ),
]
MasterDtypeOpt = Annotated[
    str,
    typer.Option(
        "--master-dtype",
        help="The master weights' dtype: fp32, or bf16 (no separate copy: the BF16 weights are updated in "
        "place, as Apex DistributedFusedAdam with NeMo 1.0's optim.dtype bf16).",
    ),
]
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
        help="Serving engine profile: vllm (V1, 0.8-0.13), vllm-async (0.14+ default, or --async-scheduling), vllm-v0, sglang, trtllm (memory accounting, scheduler, host time)."
    ),
]
# speculative decoding, as serve and serve-sim take it (serve/speculative.py)
DraftModelOpt = Annotated[str | None, typer.Option(help="Draft model for speculative decoding.")]
NgramOpt = Annotated[bool, typer.Option("--ngram", help="n-gram (prompt lookup) speculative decoding.")]
MtpOpt = Annotated[
    bool,
    typer.Option(
        "--mtp",
        help="Speculative decoding with the model's own multi-token-prediction module as the draft "
        "(DeepSeek-V3/R1, GLM-4.5: SGLang's NextN, vLLM's deepseek_mtp); DeepSeek reports 85-90% "
        "acceptance of the first drafted token.",
    ),
]
DraftLenOpt = Annotated[int, typer.Option(help="Tokens proposed per step.")]
AcceptanceOpt = Annotated[float, typer.Option(help="Per-token acceptance rate of proposals.")]
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
# Context parallelism's K,V exchange (TrainingConfig.cp_comm) and its sequence split
CpCommOpt = Annotated[
    str | None,
    typer.Option(
        "--cp-comm",
        help="Context parallelism's K,V exchange (Megatron --cp-comm-type): p2p (ring attention, the "
        "exchange hidden behind each step's kernel), all_gather (K,V gathered once, Llama 3's way) or "
        "a2a (DeepSpeed-Ulysses: all-to-alls split heads, not the sequence; cp must divide the heads "
        "per tp rank) (default: the framework's; generic: p2p).",
    ),
]
CpLoadBalanceOpt = Annotated[
    bool,
    typer.Option(
        "--cp-load-balance/--no-cp-load-balance",
        help="Split the sequence into head-tail chunks so every CP rank has the same causal work "
        "(off: PyTorch's context parallel without its load balancer; the last rank does 2 - 1/cp "
        "of the mean).",
    ),
]
DocumentLenOpt = Annotated[
    int,
    typer.Option(
        "--document-len",
        help="Tokens per document when each sequence packs documents and attention is masked to "
        "each (Llama 3's document mask, torchtitan's block_causal flex attention, packed THD): the "
        "attention's work and its kernel's span shrink to the document (default 0: one document "
        "per sequence).",
    ),
]
MtpLayersOpt = Annotated[
    int,
    typer.Option(
        "--mtp-layers",
        help="Multi-token-prediction depths trained beside the next-token loss (DeepSeek-V3's MTP, "
        "Megatron's --mtp-num-layers): each adds a block, a 2h->h projection and an LM head and loss "
        "on the stage holding the head (default 0; the model's config states how many it ships, "
        "e.g. DeepSeek-V3 1).",
    ),
]

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
