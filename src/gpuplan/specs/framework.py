"""Training frameworks as gpuplan models them: kernels, overlap, schedules, recompute, memory layout.

``--framework NAME`` sets the defaults a framework runs with and refuses what it cannot run. Each
profile names its sources. ``generic`` (no ``--framework``) is gpuplan's own defaults with every
option open: fused Megatron/TransformerEngine-style kernels and every schedule, which is what
gpuplan predicted before profiles existed.

What a profile decides, and where gpuplan reads it:

* ``profile`` (TrainingConfig.profile): fused TransformerEngine kernels or eager PyTorch ops; it
  also decides whether FP8 training holds cached FP8 weight copies (TrainingConfig.fp8_copy_bytes);
* ``attention``: the attention kernel (flash: a fused kernel saving q, k, v, out and the
  log-sum-exp; eager: the s x s softmax saved); ``attention_kernel`` which flash kernel runs: fa3
  for TransformerEngine (cuDNN fused attention or FlashAttention-3 on Hopper), fa2 for frameworks
  on PyTorch's scaled_dot_product_attention, whose flash backend is FlashAttention-2;
* ``grad_fp32``: gradients accumulated and reduced in fp32 (TrainingConfig.grad_bytes);
* overlap abilities and defaults (tp_overlap, overlap_grad_reduce, overlap_param_gather);
* ``schedules``, ``interleaving`` and ``pipeline``: the pipeline schedules it has;
* ``zero_stages`` and ``recompute``: data-parallel sharding and activation recompute it has.
  ``selective`` recompute is Megatron's (the attention core is recomputed, Korthikanti et al.
  2022); torchtitan's is per-op SAC (estimate/activations.py ``per_op_sac_saved``, its re-run
  ``params.op_sac_kept``; ``selective_semantics`` says which a framework has);
* ``fp8_recipe``: how FP8 runs (documentation; memory follows ``profile``);
* ``autocast``: torch.autocast over fp32 parameters (hf): the casts it adds to every step;
* ``cp_comms`` and ``cp_unbalanced``: the context-parallel K,V exchanges it has, its default first
  (TrainingConfig.cp_comm: Megatron-Core's p2p ring, all_gather or a2a; PyTorch's ring for
  torchtitan and hf; DeepSpeed-Ulysses' all-to-all), and whether it can split the sequence
  without load balancing;
* ``sharded_fp32_params``: the memory layout under ZeRO-3. Megatron's distributed optimizer and
  DeepSpeed keep BF16 weights beside sharded FP32 masters; FSDP2 (torchtitan) shards the FP32
  parameters themselves and holds BF16 only for the gathered blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuplan.specs.parallel import ParallelPlan

from dataclasses import dataclass

from gpuplan.errors import GpuplanError
from gpuplan.specs import schedules

ALL_SCHEDULES = tuple(s.train_name for s in schedules.training())  # the registry's training schedules


@dataclass(frozen=True)
class Framework:
    name: str
    source: str  # where each choice below comes from
    profile: str = "fused"
    attention: str = "flash"
    attention_kernel: str = "fa3"  # TE picks cuDNN fused attention / FA3 on Hopper; SDPA runs FA2
    grad_fp32: bool | None = None  # None: follow the kernel profile (fused: fp32, eager: weight dtype)
    tp_overlap: bool = False  # the default
    can_tp_overlap: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    pipeline: bool = True
    schedules: tuple[str, ...] = ALL_SCHEDULES
    interleaving: bool = True  # vp > 1
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    zero_with_pp: tuple[int, ...] = (0, 1, 2, 3)  # ZeRO stages that run alongside pipeline parallelism
    recompute: tuple[str, ...] = ("none", "selective", "full")
    selective_semantics: str = "attention core (Megatron)"
    # ``selective`` is per-op SAC (torchtitan's activation_checkpoint mode "selective", option "op"):
    # estimate/activations.py per_op_sac_saved, params.op_sac_kept
    per_op_sac: bool = False
    # selective recompute by module (Megatron-Core's --recompute-modules; specs/training.py)
    recompute_modules: bool = True
    fp8_recipe: str = "TransformerEngine delayed scaling: BF16 weights, cached FP8 copies, FP32 masters"
    # FSDP2 with a MixedPrecisionPolicy shards the fp32 parameters themselves: the optimizer steps
    # them (they are the master weights) and BF16 exists only for the gathered blocks, so under
    # ZeRO-3 no sharded BF16 copy is held
    sharded_fp32_params: bool = False
    # under pipeline parallelism FSDP2 keeps the stage's weights gathered (no reshard after forward)
    # and its gradient unsharded in fp32 until the last micro-batch (memory_terms.pp_unsharded_weights,
    # pp_grad_accumulator)
    fsdp_gathered_under_pp: bool = False
    # torch.autocast over fp32 parameters (the Hugging Face Trainer with bf16=True, accelerate
    # without FSDP): every GEMM casts its fp32 weight and its fp32 input to bf16, the residual
    # stream stays fp32, and each weight gradient is cast back to fp32 (compute.layer_times)
    autocast: bool = False
    # The vocab-parallel cross-entropy's elementwise passes fused (Megatron-Core's
    # --cross-entropy-loss-fusion: jit-fused upcast+max, sub+exp+sum, div, and mul+cast in backward)
    # or one kernel per op (its default: megatron/core/tensor_parallel/cross_entropy.py)
    fused_cross_entropy: bool = True
    # context parallelism's K,V exchanges it has (specs/training.py CP_COMMS), its default first,
    # and whether it can split the sequence without load balancing (TrainingConfig.cp_load_balance)
    cp_comms: tuple[str, ...] = ("p2p", "all_gather", "a2a")
    cp_unbalanced: bool = True
    # multi-token-prediction training (TrainingConfig.mtp_layers) and whether it runs beside
    # pipeline or context parallelism
    mtp: bool = True
    mtp_with_pp_cp: bool = True

    def __post_init__(self) -> None:
        if self.profile not in ("fused", "eager") or self.attention not in ("flash", "eager"):
            raise GpuplanError("framework", f"profile {self.name!r} names an unknown kernel profile or attention")
        if not set(self.schedules) <= set(ALL_SCHEDULES) or schedules.DEFAULT not in self.schedules:
            raise GpuplanError(
                "framework", f"profile {self.name!r} must offer {schedules.DEFAULT} and only known schedules"
            )
        if self.tp_overlap and not self.can_tp_overlap:
            raise GpuplanError("framework", f"profile {self.name!r} turns on an overlap it cannot do")


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            name="generic",
            source="gpuplan's defaults before framework profiles (fused kernels, every schedule open)",
        ),
        Framework(
            name="megatron",
            source="https://github.com/NVIDIA/Megatron-LM: megatron/training/arguments.py (bf16 forces "
            "accumulate_allreduce_grads_in_fp32: fp32 main_grad), megatron/core/pipeline_parallel/"
            "schedules.py (1F1B and interleaved 1F1B only), --recompute-granularity selective "
            "(core attention) | full, --use-distributed-optimizer (ZeRO-1) and Megatron-FSDP "
            "(optim / optim_grads / optim_grads_params), --tp-comm-overlap (TransformerEngine "
            "userbuffers, off by default), --overlap-grad-reduce, --overlap-param-gather, "
            "--cross-entropy-loss-fusion (off by default: the loss runs one kernel per op), "
            "--mtp-num-layers (megatron/core/transformer/multi_token_prediction.py: the MTP blocks on the "
            "last pipeline stage, roll_tensor across context-parallel ranks)",
            grad_fp32=True,
            schedules=("1f1b",),
            fused_cross_entropy=False,
            # --cp-comm-type p2p (default) | all_gather | a2a; the batch is always cut into
            # load-balanced head-tail chunks (megatron/core/utils.py get_batch_on_this_cp_rank)
            cp_unbalanced=False,
        ),
        Framework(
            name="nemo",
            source="https://github.com/NVIDIA/NeMo (NeMo 2 / Megatron-Bridge on Megatron-Core): the same "
            "kernels, schedules and memory as megatron; the performance recipes turn on TP "
            "communication overlap (MegatronCommOverlapCallback, tp_comm_overlap=True) and the "
            "fused cross-entropy (cross_entropy_loss_fusion: true)",
            grad_fp32=True,
            schedules=("1f1b",),
            tp_overlap=True,
            cp_unbalanced=False,  # Megatron-Core's get_batch_on_this_cp_rank, as megatron
        ),
        Framework(
            name="torchtitan",
            recompute_modules=False,
            source="https://github.com/pytorch/torchtitan: FSDP2 fully_shard with MixedPrecisionPolicy "
            "(mixed_precision_param bfloat16, mixed_precision_reduce float32: fp32 reduce-scatter "
            "into fp32 sharded gradients), DDP or HSDP (no ZeRO-1), reshard_after_forward never "
            "= ZeRO-2; torch.distributed.pipelining schedules 1F1B, Interleaved1F1B, "
            "InterleavedZeroBubble, ZBVZeroBubble and DualPipeV (DualPipeV is not DualPipe: one "
            "weight copy per rank; gpuplan's dualpipe models DualPipe's two); SDPA with cuDNN "
            "attention first (torchtitan/models/attention.py since 6a3a9da95, 2025-10: "
            "sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, ...], set_priority=True); B200 since "
            "3b85aa31f, 2025-05); activation_checkpoint mode selective (per-op SAC) | full; async TP "
            "(enable_async_tensor_parallel, off by default); torchao Float8 training",
            profile="eager",
            attention_kernel="sdpa",
            grad_fp32=True,
            schedules=("1f1b", "zb", "zb-v"),
            zero_stages=(0, 2, 3),
            sharded_fp32_params=True,
            fsdp_gathered_under_pp=True,
            per_op_sac=True,
            selective_semantics="per-op SAC (torchtitan): every other matmul output and the attention output kept",
            fp8_recipe="torchao Float8Linear dynamic scaling: BF16 weights recast per GEMM, no cached copy",
            # PyTorch's context parallel (torch/distributed/tensor/experimental/_attention.py): ring
            # attention whose K,V rotate by all-gather or all-to-all, one SDPA call per step, with an
            # optional head-tail load balancer (_cp_options.enable_load_balance)
            cp_comms=("p2p",),
            # torchtitan/models/deepseek_v3/MTP.md: num_mtp_layers builds MTP blocks from the last
            # decoder layer's config; "the current implementation explicitly rejects CP and PP"
            mtp_with_pp_cp=False,
        ),
        Framework(
            name="deepspeed",
            recompute_modules=False,
            source="https://github.com/deepspeedai/DeepSpeed: deepspeed/runtime/pipe (PipelineEngine "
            "runs TrainSchedule, 1F1B, with no interleaving; ZeRO-2 and -3 are refused with "
            "pipeline parallelism), ZeRO stages 0-3 with overlap_comm and stage-3 prefetch, "
            "activation checkpointing of whole layers (no selective recompute), no TP "
            "communication overlap; kernels are the model's own PyTorch ops",
            profile="eager",
            attention_kernel="fa2",
            schedules=("1f1b",),
            interleaving=False,
            zero_with_pp=(0, 1),
            recompute=("none", "full"),
            can_tp_overlap=False,
            fp8_recipe="none built in (TransformerEngine through the model or accelerate)",
            # DeepSpeed-Ulysses (deepspeed/sequence/layer.py DistributedAttention): all-to-alls
            # around the attention, no ring
            cp_comms=("a2a",),
            cp_unbalanced=False,
            mtp=False,  # the model's own modules: transformers builds no MTP layers
        ),
        Framework(
            name="hf",
            recompute_modules=False,
            source="https://github.com/huggingface/transformers Trainer with accelerate: no pipeline "
            "parallelism, DDP, DeepSpeed ZeRO or FSDP for data parallelism, "
            "gradient_checkpointing (whole layers), attn_implementation sdpa (PyTorch >= 2.11 runs "
            "cuDNN attention on H100/B200: measurements/h100-sxm-2026-11-23 traces) or "
            "flash_attention_2 (`attention_kernel=fa2`), "
            "eager PyTorch kernels; autocast keeps fp32 parameters and gradients (4 + 4 B, the "
            "same total as BF16 weights and gradients plus an fp32 master)",
            profile="eager",
            attention_kernel="sdpa",
            pipeline=False,
            schedules=("1f1b",),
            interleaving=False,
            recompute=("none", "full"),
            can_tp_overlap=False,
            fp8_recipe="accelerate's TransformerEngine or torchao backend",
            autocast=True,
            cp_comms=("p2p",),  # accelerate's context parallelism runs PyTorch's ring attention
            mtp=False,  # transformers builds no MTP layers (DeepseekV3ForCausalLM drops layer 61)
        ),
    )
}
NAMES = tuple(FRAMEWORKS)


def get(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise GpuplanError("framework", f"unknown framework {name!r}", f"use one of {', '.join(NAMES)}")
    return FRAMEWORKS[name]


def _refuse(fw: Framework, field: str, what: str, alternatives: str) -> GpuplanError:
    return GpuplanError(field, f"the {fw.name} profile has no {what}", f"use {alternatives}, or another `framework`")


def check_config(
    fw: Framework,
    *,
    recompute: str,
    tp_overlap: bool,
    modules: tuple[str, ...] = (),
    cp_comm: str | None = None,
    cp_load_balance: bool = True,
    mtp: int = 0,
) -> None:
    """Refuse training options the framework cannot run (one line, naming the profile and the
    alternatives)."""
    if mtp and not fw.mtp:
        have = ", ".join(f.name for f in FRAMEWORKS.values() if f.mtp and f.name != "generic")
        raise _refuse(fw, "mtp_layers", f"multi-token-prediction training ({have} have it)", "`mtp_layers=0`")
    if cp_comm is not None and cp_comm not in fw.cp_comms:
        raise _refuse(fw, "cp_comm", f"{cp_comm} context-parallel exchange", "`cp_comm` " + " or ".join(fw.cp_comms))
    if not cp_load_balance and not fw.cp_unbalanced:
        raise _refuse(fw, "cp_load_balance", "unbalanced context-parallel split", "`cp_load_balance=true`")
    if recompute not in fw.recompute:
        raise _refuse(fw, "recompute", f"{recompute} recompute", "`recompute` " + " or ".join(fw.recompute))
    if modules and not fw.recompute_modules:
        raise _refuse(fw, "recompute_modules", "recompute by module", "`recompute` " + " or ".join(fw.recompute))
    if tp_overlap and not fw.can_tp_overlap:
        raise _refuse(fw, "tp_overlap", "TP communication overlap", "`tp_overlap=false`")


def check_plan(fw: Framework, plan: ParallelPlan, mtp: int = 0) -> None:
    """Refuse parallel layouts the framework cannot run (``mtp``: multi-token-prediction depths
    trained)."""
    if mtp and not fw.mtp_with_pp_cp and (plan.pp > 1 or plan.cp > 1):
        raise _refuse(
            fw, "mtp_layers", "multi-token prediction with pipeline or context parallelism", "`pp=1` and `cp=1`"
        )
    if plan.pp > 1 and not fw.pipeline:
        raise _refuse(fw, "pp", "pipeline parallelism", "`pp=1`")
    if schedules.get(plan.schedule).train_name not in fw.schedules:  # aliases (zb-h1) by their name
        raise _refuse(fw, "schedule", f"{plan.schedule} schedule", "`schedule` " + " or ".join(fw.schedules))
    if plan.vp > 1 and not fw.interleaving:
        raise _refuse(fw, "vp", "interleaved (virtual) pipeline stages", "`vp=1`")
    if plan.zero not in fw.zero_stages:
        raise _refuse(fw, "zero", f"ZeRO-{plan.zero} sharding", "`zero` " + " or ".join(map(str, fw.zero_stages)))
    if plan.pp > 1 and plan.zero not in fw.zero_with_pp:
        raise _refuse(
            fw,
            "zero",
            f"ZeRO-{plan.zero} with pipeline parallelism",
            "`zero` " + " or ".join(map(str, fw.zero_with_pp)) + " with `pp` > 1",
        )
