"""What is trained and how: batch, sequence, precision, optimizer, recompute, implementation.

Every default is documented here; each can be overridden from the library and the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplan.errors import require
from gpuplan.specs.framework import check_config, get as get_framework
from gpuplan.units import GiB

PRECISIONS = ("bf16", "fp16", "fp32", "fp8", "mxfp8", "nvfp4")
FP8_SCALINGS = ("delayed", "current")  # per-tensor FP8 recipes (TrainingConfig.fp8_scaling)
# Block-scaled training formats (Blackwell tensor cores), per GEMM operand element: value bytes,
# scale bytes per block, and one FP32 per-tensor scale (bytes per matrix). OCP Microscaling Formats
# (MX) v1.0 spec, section 5: MXFP8 = E4M3 values, one E8M0 scale per 32 elements; NVIDIA NVFP4
# (Blackwell; "Pretraining Large Language Models with NVFP4", NVIDIA 2025, section 2): E2M1
# values, one E4M3 scale per 16 elements, and an FP32 scale per tensor.
BLOCK_SCALED = {"mxfp8": (1.0, 1 / 32, 0.0), "nvfp4": (0.5, 1 / 16, 4.0)}
LOW_PRECISION = ("fp8", *BLOCK_SCALED)  # GEMMs in a sub-16-bit format, the rest in BF16
OPTIMIZERS = ("adamw", "adamw8bit", "sgd", "adafactor")
# dtype of the optimizer's moments (TrainingConfig.optimizer_dtype) and of its master weights
# (TrainingConfig.master_dtype): fp32, or bf16
OPTIMIZER_DTYPES = ("fp32", "bf16")
RECOMPUTE = ("none", "selective", "full")
# the micro-batch sizes `gpuplan search` tries unless told otherwise (and validation tries for a
# published run that does not state its own: estimate/validation_rows.py)
SEARCH_MICRO_BATCHES = (1, 2, 4, 8)
# Megatron-Core's selective recompute by module (TransformerConfig.recompute_modules, megatron/core/
# transformer/transformer_config.py; --recompute-modules): "core_attn" (its default), "layernorm"
# (the norms that are modules of their own: the pre-MLP norm of an MoE layer, the input norm before
# MLA; TransformerEngine fuses the others into the next linear), "moe_act" (the experts'
# activation), "mlp" (a dense MLP), "moe" (the whole MoE layer, dispatch included) and
# "shared_experts". "layernorm" and "moe_act" discard their outputs and run again before the
# backward (CheckpointWithoutOutput); the others keep their input and rerun their forward.
# "mla_up_proj" (multi-latent attention only): Megatron-Core checkpoints the q and kv
# up-projections and their rotary embedding without their outputs (multi_latent_attention.py,
# recompute_up_proj: CheckpointWithoutOutput over qkv_up_proj_and_rope_apply, whose query, key and
# value are discarded once the attention core has run and rebuilt before its backward)
RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mlp", "moe", "shared_experts", "mla_up_proj")
ATTENTION = ("flash", "eager")
ATTENTION_KERNELS = ("fa3", "fa2", "sdpa")
# How context parallelism exchanges keys and values (Megatron-Core's --cp-comm-type, the names of
# TransformerEngine's attn_forward_func_with_cp): "p2p" ring attention (cp - 1 steps, each passing
# one K,V chunk to the next rank while the current one computes); "all_gather" (K and V gathered
# once before the local queries' kernels, Llama 3's way, Dubey et al. 2024 section 3.3.2);
# "a2a" (DeepSpeed-Ulysses, Jacobs et al. 2023: all-to-alls turn the sequence split into a head
# split, attention runs over the whole sequence on heads / cp, and back)
CP_COMMS = ("p2p", "all_gather", "a2a")
PROFILES = ("fused", "eager")


# MoE token dispatchers (Megatron-Core --moe-token-dispatcher-type; the flex dispatcher by its
# --moe-flex-dispatcher-backend, deepep or hybridep, where stated, "flex" where not) and "" for not
# stated; estimate/moe_host.py counts each one's host synchronisations, ep_dispatch.py times flex's
MOE_DISPATCHERS = ("", "alltoall", "flex", "deepep", "hybridep", "allgather")


@dataclass(frozen=True)
class TrainingConfig:
    seq_len: int = 4096
    micro_batch: int = 1
    global_batch: int = 0  # sequences per optimizer step; 0 means micro_batch x dp (one micro-batch each)
    precision: str = "bf16"
    master_weights: bool = True  # fp32 master copy of the weights for mixed precision
    # the fp32 master kept as the 16 bits a BF16 weight lacks (Apex DistributedFusedAdam's
    # store_param_remainders, which NeMo 1.0 sets for BF16 models with an fp32 optimizer:
    # nemo/collections/nlp/models/language_modeling/megatron_base_model.py, setup_optimization)
    master_remainders: bool = False
    # how FP8 (precision "fp8") scales each tensor: "delayed" (TransformerEngine's DelayedScaling:
    # the scale from the amax history, known before the cast) or "current" (Float8CurrentScaling,
    # Megatron-Bridge's FP8-CS: each tensor's own amax, a reduction pass before the cast)
    fp8_scaling: str = "delayed"
    # the block GEMM weights held only as their low-precision copies, the fp32 master in the
    # optimizer and no BF16 weight (Megatron-Core --fp8-param-gather, TransformerEngine
    # fp8_model_init; Megatron-Bridge's FP8 and MXFP8 presets set fp8_param_gather): the
    # data-parallel parameter all-gather moves them in low precision too
    fp8_params: bool = False
    optimizer: str = "adamw"
    # the dtype of the optimizer's moments (adamw's exp_avg and exp_avg_sq, sgd's momentum): "fp32",
    # or "bf16" as Megatron-Core's precision-aware optimizer keeps them (--use-precision-aware-optimizer
    # --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; the DeepSeek-V3 report, section 3.3.2: "BF16
    # ... for the first and second moments in the AdamW optimizer", FP32 master weights; Megatron-
    # Bridge's DeepSeek-V3 recipes since v0.2.0, recipes/deepseek/deepseek_v3.py)
    optimizer_dtype: str = "fp32"
    # the master weights' dtype: "fp32", or "bf16", no separate copy: the BF16 weights are updated in
    # place (Apex DistributedFusedAdam when NeMo 1.0's optim.dtype equals the BF16 model's: NeMo
    # 24.07 megatron_base_model.py setup_optimization, lines 791-812 at 9c5c5e9709, store_params
    # False), and a BF16 copy beside FP8 parameters
    master_dtype: str = "fp32"
    recompute: str = "none"
    # with recompute "selective": the modules recomputed (empty: Megatron's default, the attention core)
    recompute_modules: tuple[str, ...] = ()
    attention: str = "flash"  # flash: fused kernel saves q, k, v, out, lse; eager: softmax of s^2 saved
    # which flash kernel: fa3 (FlashAttention-3 or cuDNN fused attention, what TransformerEngine picks
    # on Hopper) or fa2 (FlashAttention-2: PyTorch SDPA's flash backend, the flash_attn 2 package)
    attention_kernel: str = "fa3"
    # context parallelism's K,V exchange (CP_COMMS; None: the framework's) and whether the
    # sequence is split into load-balanced head-tail chunks (flops.cp_attention_imbalance)
    cp_comm: str | None = None
    cp_load_balance: bool = True
    # sequences packing documents of this many tokens, attention masked to each document (Llama 3's
    # document mask, torchtitan's flex attention "block_causal", packed THD sequences); 0: one
    # document per sequence, a plain causal mask (flops.mean_context)
    document_len: int = 0
    # multi-token-prediction depths trained beside the next-token loss (DeepSeek-V3 report, section
    # 2.2; Megatron-Core's --mtp-num-layers, torchtitan's num_mtp_layers): each an embedding lookup,
    # two norms, a 2h -> h projection, one more block and one more LM head and loss on the stage
    # holding the head (ModelSpec.mtp_kind, params.mtp_tensors); 0: none
    mtp_layers: int = 0
    profile: str = "fused"  # fused: Megatron/TransformerEngine kernels; eager: plain PyTorch + transformers
    # Gradient accumulation dtype; None: fp32 for the fused profile (Megatron's main_grad buffer),
    # the weight dtype for eager PyTorch (FSDP/DDP reduce in the parameter dtype).
    grad_fp32: bool | None = None
    # The rest of the per-GPU memory, each a documented default:
    cuda_context_bytes: float = 0.5 * GiB  # CUDA/NCCL context and cuBLAS workspaces outside the allocator
    # caching-allocator reserve and fragmentation, fraction of allocated. Bounded by measurement: the
    # H100 runs of measurements/h100-sxm-2026-11-23/runs reserved 4-20% over their allocated peak
    # (median 7.4%; 20% under full recompute's alloc/free churn) with no memory pressure, an upper
    # bound of what stands in the way near capacity, where the allocator frees its unused cached
    # segments and retries before it fails (CUDACachingAllocator.cpp: release_cached_blocks)
    allocator_fraction: float = 0.05
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator maps physical pages
    # into one growing segment and, before it reports out of memory, unmaps the free pages of its
    # cached blocks (c10/cuda/CUDACachingAllocator.cpp: release_cached_blocks -> release_block ->
    # unmap_block for a block of an expandable segment), so cached-but-free memory no longer
    # stands between the allocated peak and the GPU's capacity: no ``allocator_fraction`` reserve
    # (what is left is under one 2 MiB page at each end of a free block)
    expandable_segments: bool = False
    comm_bucket_bytes: float = 2 * 40e6 * 4  # two in-flight gradient buckets of 40M fp32 elements (Megatron)
    # Communication overlap (performance model):
    tp_overlap: bool = False  # TP collectives hidden behind GEMMs (TransformerEngine userbuffers)
    overlap_grad_reduce: bool = True  # DP gradient reduce in buckets during the last backward
    overlap_param_gather: bool = True  # ZeRO parameter all-gather behind the next forward
    # interleaved 1F1B posts each chunk's receive ahead and sends while the next chunk computes
    # (Megatron-Core overlap_p2p_comm, on for interleaved runs since 2023; Megatron-LM 2021-22
    # waited on every batch_isend_irecv and synchronized: megatron/p2p_communication.py)
    overlap_p2p: bool = True
    # A column-parallel GEMM's backward collectives run async beside its own dgrad and wgrad GEMMs
    # (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication since 2021-09, and
    # TransformerEngine's modules; layer_comm.py). None: the fused profile's. Megatron-LM before
    # it (Narayanan et al. 2021's code) all-reduced the dgrad synchronously.
    tp_async_backward: bool | None = None
    # MoE: the most loaded expert-parallel GPU's routed tokens over the mean (``gpuplan experts``
    # reports it for a placement); the slowest GPU sets the pace of the expert GEMMs and all-to-all
    expert_imbalance: float = 1.0
    # MoE: hide the expert all-to-all behind another micro-batch's compute (Megatron-Core's
    # --overlap-moe-expert-parallel-comm); DualPipe always does
    ep_overlap: bool = False
    # MoE: the token dispatcher ("" not stated: no host term; alltoall, flex = DeepEP/HybridEP,
    # allgather), whose host synchronisation exposes the expert loop's host launches
    # (estimate/moe_host.py), and whether the whole step is one CUDA graph (no host launches)
    moe_dispatcher: str = ""  # one of MOE_DISPATCHERS
    full_cuda_graph: bool = False
    # MoE: Megatron-Core's use_transformer_engine_op_fuser: TransformerEngine's op fuser runs the
    # routed experts' fc1, activation and fc2 with its prob-scaled bias as fused ops (experts.py
    # TEGroupedMLP._with_fused_impl), so no fp32 bias pass follows fc2 (estimate/expert_bias.py)
    te_op_fuser: bool = False
    # torch.compile over each transformer block (torchtitan's compile.enable, transformers'
    # torch_compile): Inductor fuses a block's pointwise and reduction ops (norms, rotary, the MLP's
    # activation) into a few kernels, and AOTAutograd's partitioner saves what a fused kernel would
    # keep, not every eager op's inputs. Only for the eager profile: the fused one is fused already.
    compile: bool = False
    # torch.compile over the loss too (torchtitan's compile components ["model", "loss"], the default
    # since bbb1b616e, 2025-04; transformers computes the loss inside the compiled forward): Inductor
    # fuses the fp32 upcast, log-softmax and NLL, so the loss keeps the bf16 logits and two floats
    # per row instead of an fp32 log-softmax. None: with ``compile``; False: the blocks alone
    # (torchtitan before 2025-04 left the loss eager: "compiling loss function causes CUDA errors")
    compile_loss: bool | None = None
    # The training framework (specs/framework.py): "generic" is gpuplan's defaults, every option
    # open. Build with ``for_framework`` to take a framework's defaults for the fields above.
    framework: str = "generic"
    # torch.autocast over fp32 parameters and an fp32 residual stream (the framework's; hf)
    autocast: bool = False
    # Activation offload to host memory: the activations of this many transformer layers of each
    # pipeline chunk go to CPU memory in forward and come back in backward (Megatron-Core's
    # --cpu-offloading-num-layers, TransformerEngine's get_cpu_offload_context), copied over the
    # GPU's host link while the next layer computes.
    offload_activation_layers: int = 0
    # the loss's elementwise passes fused (the framework's; specs/framework.py)
    fused_cross_entropy: bool = True
    # the loss writes the logits' gradient into the BF16 logits and keeps only them: Megatron-Core
    # cross_entropy_fusion_impl "te" (TransformerEngine's parallel_cross_entropy, transformer_engine/
    # pytorch/cross_entropy.py: ctx.save_for_backward(_input), the triton kernel overwriting _input
    # with the gradient), which Megatron-Bridge's performance scripts set; without it Megatron's
    # vocab-parallel cross-entropy upcasts the logits and keeps an fp32 softmax (activations.py)
    cross_entropy_in_place: bool = False

    @classmethod
    def for_framework(cls, framework: str = "generic", **overrides: Any) -> TrainingConfig:
        """A config with ``framework``'s kernel profile, attention, gradient dtype and overlap
        defaults; ``overrides`` (fields given explicitly, None meaning not given) win."""
        fw = get_framework(framework)
        given = {k: v for k, v in overrides.items() if v is not None}
        defaults = {
            "profile": fw.profile,
            "attention": fw.attention,
            "attention_kernel": fw.attention_kernel,
            "grad_fp32": fw.grad_fp32,
            "fused_cross_entropy": fw.fused_cross_entropy,
            "tp_overlap": fw.tp_overlap,
            "overlap_grad_reduce": fw.overlap_grad_reduce,
            "overlap_param_gather": fw.overlap_param_gather,
            "autocast": fw.autocast,
        }
        return cls(framework=framework, **{**defaults, **given})

    @property
    def compiled_loss(self) -> bool:
        """Whether torch.compile runs the loss (``compile_loss``, else with ``compile``)."""
        return self.compile if self.compile_loss is None else self.compile_loss

    def __post_init__(self) -> None:
        require(
            not self.compile_loss or self.profile == "eager",
            "compile_loss",
            f"the {self.framework} profile runs a fused cross-entropy already ({self.profile} profile)",
            "drop `compile_loss`, or use `framework=torchtitan` or `framework=hf` (eager PyTorch)",
        )
        require(
            not self.compile or self.profile == "eager",
            "compile",
            f"the {self.framework} profile runs fused kernels already ({self.profile} profile): torch.compile "
            "has nothing to fuse",
            "drop `compile`, or use `framework=torchtitan` or `framework=hf` (eager PyTorch)",
        )
        require(
            not self.te_op_fuser or self.profile == "fused",
            "te_op_fuser",
            f"TransformerEngine's op fuser is a Megatron-Core option; the {self.framework} profile runs "
            f"{self.profile} kernels",
            "drop `te_op_fuser`, or use `framework=megatron` or `framework=nemo`",
        )
        require(
            self.moe_dispatcher in MOE_DISPATCHERS,
            "moe_dispatcher",
            f"unknown MoE token dispatcher {self.moe_dispatcher!r}",
            f"use one of {', '.join(d for d in MOE_DISPATCHERS if d)}",
        )
        require(
            isinstance(self.document_len, int) and self.document_len >= 0,
            "document_len",
            f"is tokens per packed document, a non-negative integer (0: one per sequence), got {self.document_len!r}",
        )
        require(
            isinstance(self.mtp_layers, int) and not isinstance(self.mtp_layers, bool) and self.mtp_layers >= 0,
            "mtp_layers",
            f"is the multi-token-prediction depth, a non-negative integer (0: none), got {self.mtp_layers!r}",
        )
        for name in ("seq_len", "micro_batch"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name, f"must be a positive integer, got {value!r}")
        # depth k predicts the token k + 1 ahead: at depth seq_len or more no position has a target
        require(
            self.mtp_layers < self.seq_len,
            "mtp_layers",
            f"predicts {self.mtp_layers} tokens ahead, beyond a {self.seq_len}-token sequence",
            "use a depth below seq_len (published runs use 1-4)",
        )
        require(
            isinstance(self.global_batch, int) and self.global_batch >= 0,
            "global_batch",
            f"must be a positive integer, got {self.global_batch!r}",
        )
        require(
            self.precision in PRECISIONS,
            "precision",
            f"unknown precision {self.precision!r}",
            f"use one of {', '.join(PRECISIONS)}",
        )
        require(
            self.optimizer in OPTIMIZERS,
            "optimizer",
            f"unknown optimizer {self.optimizer!r}",
            f"use one of {', '.join(OPTIMIZERS)}",
        )
        require(
            self.optimizer_dtype in OPTIMIZER_DTYPES,
            "optimizer_dtype",
            f"unknown optimizer state dtype {self.optimizer_dtype!r}",
            f"use one of {', '.join(OPTIMIZER_DTYPES)}",
        )
        require(
            self.optimizer_dtype == "fp32" or self.optimizer in ("adamw", "sgd"),
            "optimizer_dtype",
            f"a bf16 state is stated for adamw and sgd, not {self.optimizer}",
            "drop `optimizer_dtype`, or use `optimizer=adamw`",
        )
        require(
            self.master_dtype in OPTIMIZER_DTYPES,
            "master_dtype",
            f"unknown master weight dtype {self.master_dtype!r}",
            f"use one of {', '.join(OPTIMIZER_DTYPES)}",
        )
        require(
            not self.cross_entropy_in_place or self.profile == "fused",
            "cross_entropy_in_place",
            "the in-place cross-entropy is TransformerEngine's kernel (the fused profile)",
            "drop `cross_entropy_in_place`, or use `profile=fused`",
        )
        require(
            self.attention_kernel in ATTENTION_KERNELS,
            "attention_kernel",
            f"unknown attention kernel {self.attention_kernel!r}",
            f"use one of {', '.join(ATTENTION_KERNELS)}",
        )
        require(
            self.cp_comm is None or self.cp_comm in CP_COMMS,
            "cp_comm",
            f"unknown context-parallel exchange {self.cp_comm!r}",
            f"use one of {', '.join(CP_COMMS)}",
        )
        require(
            self.cp_load_balance or self.cp_exchange == "p2p",
            "cp_load_balance",
            f"only ring attention (p2p) splits the sequence without load balancing; {self.cp_exchange} "
            "always takes head-tail chunks (TransformerEngine's DualChunkSwap) or whole heads (a2a)",
            "drop `cp_load_balance=false`, or use `cp_comm=p2p`",
        )
        require(
            self.recompute in RECOMPUTE,
            "recompute",
            f"unknown recompute {self.recompute!r}",
            f"use one of {', '.join(RECOMPUTE)}",
        )
        require(
            not self.master_remainders or self.precision in ("bf16", *LOW_PRECISION),
            "master_remainders",
            f"the remainder completes a BF16 weight to fp32; {self.precision} weights have none",
            "drop master_remainders",
        )
        require(
            self.fp8_scaling in FP8_SCALINGS,
            "fp8_scaling",
            f"unknown FP8 scaling {self.fp8_scaling!r}",
            f"use one of {', '.join(FP8_SCALINGS)}",
        )
        require(
            not self.fp8_params or (self.precision in LOW_PRECISION and self.profile == "fused"),
            "fp8_params",
            f"FP8 parameters need a low-precision recipe run by TransformerEngine, got {self.precision} "
            f"with the {self.profile} profile",
            "drop fp8_params, or use precision fp8/mxfp8/nvfp4 with the fused profile",
        )
        unknown = [x for x in self.recompute_modules if x not in RECOMPUTE_MODULES]
        require(
            not unknown,
            "recompute_modules",
            f"unknown module {unknown[0] if unknown else ''!r}",
            f"use any of {', '.join(RECOMPUTE_MODULES)}",
        )
        require(
            not self.recompute_modules or self.recompute == "selective",
            "recompute_modules",
            f"modules are recomputed only under selective recompute, not {self.recompute!r}",
            "use `recompute=selective`, or drop `recompute_modules`",
        )
        require(
            self.attention in ATTENTION,
            "attention",
            f"unknown attention {self.attention!r}",
            f"use one of {', '.join(ATTENTION)}",
        )
        require(
            self.profile in PROFILES,
            "profile",
            f"unknown profile {self.profile!r}",
            f"use one of {', '.join(PROFILES)}",
        )
        for name in ("cuda_context_bytes", "comm_bucket_bytes"):
            require(getattr(self, name) >= 0, name, "must not be negative")
        require(0 <= self.allocator_fraction < 1, "allocator_fraction", "must be in [0, 1)")
        require(
            self.expert_imbalance >= 1,
            "expert_imbalance",
            f"is the busiest GPU's load over the mean, so at least 1; got {self.expert_imbalance}",
        )
        require(
            isinstance(self.offload_activation_layers, int) and self.offload_activation_layers >= 0,
            "offload_activation_layers",
            f"must be a non-negative integer, got {self.offload_activation_layers!r}",
        )
        require(
            not (self.offload_activation_layers and self.recompute == "full"),
            "offload_activation_layers",
            "activation offload and full recompute both drop the layers' activations (Megatron-Core refuses the pair)",
            "choose one: `recompute=full` or `offload_activations=N`",
        )
        check_config(
            get_framework(self.framework),
            recompute=self.recompute,
            tp_overlap=self.tp_overlap,
            modules=self.recompute_modules,
            cp_comm=self.cp_comm,
            cp_load_balance=self.cp_load_balance,
            mtp=self.mtp_layers,
        )

    @property
    def cp_exchange(self) -> str:
        """The context-parallel K,V exchange that runs (``cp_comm``, else the framework's)."""
        return self.cp_comm or get_framework(self.framework).cp_comms[0]

    @property
    def recomputed(self) -> frozenset[str]:
        """The modules selective recompute runs again (``RECOMPUTE_MODULES``): none without it,
        the attention core when none are named. "moe" already holds "moe_act" and "shared_experts"."""
        if self.recompute != "selective":
            return frozenset()
        if get_framework(self.framework).per_op_sac and not self.recompute_modules:
            return frozenset({"op_sac"})  # per-op SAC (estimate/activations.py per_op_sac_saved)
        mods = frozenset(self.recompute_modules or ("core_attn",))
        return mods - {"moe_act", "shared_experts"} if "moe" in mods else mods

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (fp8, MXFP8 and NVFP4 runs keep BF16 activations; the
        GEMM inputs they save for backward are ``gemm_input_bytes``)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def gemm_input_bytes(self) -> float:
        """Bytes per element of a GEMM input saved for the weight-gradient GEMM. TransformerEngine
        (the fused profile) saves the quantized copy it already made for the forward GEMM and
        drops the BF16 one: module/linear.py, ``_Linear.forward``, "Discard row-wise data since it
        is not needed in backward pass" (1 byte per element for FP8; MXFP8/NVFP4 add their block
        scales). torchao's Float8Linear and eager autocast keep the high-precision input."""
        if self.precision in LOW_PRECISION and self.profile == "fused":
            data, scale, _ = BLOCK_SCALED.get(self.precision, (1.0, 0.0, 0.0))
            return data + scale
        return self.activation_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes per parameter of the model's own weights. FP8 training keeps them in BF16 and
        quantizes before each GEMM (TransformerEngine, docs/features/low_precision_training/
        performance_considerations: "Transformer Engine by default stores weights in high
        precision and quantizes them to low precision before each GEMM"; torchao float8 casts
        its bf16 nn.Linear weight the same way). The FP8 copies are ``fp8_copy_bytes``."""
        return 4 if self.precision == "fp32" else 2  # fp8, mxfp8, nvfp4: BF16 weights, quantized per GEMM

    @property
    def gathered_weight_bytes(self) -> float:
        """Bytes per parameter the data-parallel parameter all-gather moves: the weights, or their
        low-precision data with ``fp8_params`` (Megatron's --fp8-param-gather gathers the FP8
        tensors; the column-wise copy is made after the gather). Taken for every parameter: the
        norms, router and embeddings Megatron gathers in BF16 are counted at the FP8 size too, so
        a small model's gather (embedding ~6% of Llama 3 8B) is under-counted by up to that share.

        MXFP8 parameters are gathered in BF16, not MXFP8: Megatron-Core (core_v0.15.0, which
        Megatron-Bridge's bf16_with_mxfp8_mixed pairs with reuse_grad_buf_for_mxfp8_param_ag=True,
        src/megatron/bridge/training/mixed_precision.py:242-252 at r0.2.0) maps the param buffer of
        MXFP8 parameters onto the BF16 view of the gradient buffer
        (megatron/core/distributed/param_and_grad_buffer.py:695-711), all-gathers it there and
        quantizes each parameter from that BF16 slice after the gather (``param.data.copy_``,
        param_and_grad_buffer.py:303-314), so the gather moves ``weight_bytes``."""
        if self.fp8_params and self.precision == "mxfp8" and self.profile == "fused":
            return self.weight_bytes
        return self.quantized_bytes if self.fp8_params else self.weight_bytes

    @property
    def fp8_copy_bytes(self) -> float:
        """Bytes per GEMM weight parameter of the FP8 copies held besides the BF16 weights.

        TransformerEngine (the fused profile: Megatron, NeMo) quantizes a weight to FP8 both
        row-wise and column-wise (the transpose the backward's data-gradient GEMM needs on Hopper,
        which runs FP8 GEMMs only in the TN layout: TE docs, low_precision_training/introduction,
        "Linear layer data flow") and keeps them across micro-batches (FP8 weight caching,
        ``is_first_microbatch``): 1 + 1 bytes. torchao's Float8Linear (the eager profile:
        torchtitan) saves the high-precision weight for backward and recasts it there
        (torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args), so no copy outlives
        the GEMM. Blackwell's FP8 shares one layout for both usages; the figure is Hopper's.

        MXFP8 and NVFP4 (TransformerEngine's MXFP8BlockScaling and NVFP4BlockScaling recipes) scale
        blocks along the GEMM's reduction dimension, so the row-wise and column-wise copies are
        quantized separately and each carries its block scales: 2 x (1 + 1/32) bytes for MXFP8,
        2 x (0.5 + 1/16) for NVFP4 (its per-tensor FP32 scales: ``fp8_copy_matrix_bytes``).
        torchao's MX training recasts per GEMM like Float8Linear: no copy."""
        if self.precision not in LOW_PRECISION or self.profile != "fused":
            return 0.0
        return 2.0 * self.quantized_bytes

    def fp8_cached_bytes(self, one_layout: bool = False) -> float:
        """``fp8_copy_bytes`` on a GPU whose FP8 GEMMs take any layout (``one_layout``:
        GPUSpec.fp8_any_layout, Blackwell B200/GB200/B300): a per-tensor-scaled FP8 weight
        (precision "fp8", delayed or current scaling) is one FP8 tensor serving both usages, 1
        byte. MXFP8 and NVFP4 scale blocks along the reduction dimension, so their row-wise and
        column-wise copies stay separate on every GPU."""
        if one_layout and self.precision == "fp8":
            return self.fp8_copy_bytes / 2
        return self.fp8_copy_bytes

    @property
    def quantized_bytes(self) -> float:
        """Bytes per element of one quantized GEMM operand, block scales included (1 for FP8)."""
        value, scale, _ = BLOCK_SCALED.get(self.precision, (1.0, 0.0, 0.0))
        return value + scale

    @property
    def fp8_copy_matrix_bytes(self) -> float:
        """Bytes per weight matrix of the cached copies beyond ``fp8_copy_bytes``: NVFP4's FP32
        per-tensor scale, one for each of the two copies."""
        if self.profile != "fused":
            return 0.0
        return 2.0 * BLOCK_SCALED.get(self.precision, (0.0, 0.0, 0.0))[2]

    @property
    def fsdp_gathered_under_pp(self) -> bool:
        """Under pipeline parallelism FSDP keeps weights and gradients gathered through the step
        (Framework.fsdp_gathered_under_pp: torchtitan)."""
        return get_framework(self.framework).fsdp_gathered_under_pp

    @property
    def sharded_params_are_masters(self) -> bool:
        """Under ZeRO-3 the sharded parameters are the fp32 master weights (FSDP2 with a mixed
        precision policy: torchtitan), so no separate sharded BF16 weight is held."""
        return get_framework(self.framework).sharded_fp32_params and bool(self.master_bytes)

    @property
    def grad_bytes(self) -> float:
        if self.precision == "fp32":
            return 4
        fp32 = self.grad_fp32 if self.grad_fp32 is not None else self.profile == "fused"
        return 4 if fp32 else 2

    @property
    def master_bytes(self) -> float:
        """Master copy per parameter: fp32 for every mixed precision, fp8 included (TE docs,
        performance_considerations, "Master weights": BF16 model weights and FP32 master weights
        in the optimizer; Megatron's DistributedOptimizer keeps fp32 main params for fp8 runs);
        2 bytes when only the remainder below the BF16 weight is kept (``master_remainders``)."""
        if self.precision == "fp32" or not self.master_weights:
            return 0
        if self.master_dtype == "bf16":  # Apex: the BF16 state updates the BF16 weights in place
            return 2 if self.fp8_params else 0  # NeMo stores a BF16 copy beside FP8 parameters
        return 2 if self.master_remainders else 4

    @property
    def compute_dtype(self) -> str:
        """The GEMMs' tensor-core format (GPUSpec.peak gives its rate and checks the GPU has it)."""
        return {"fp32": "tf32"}.get(self.precision, self.precision)
