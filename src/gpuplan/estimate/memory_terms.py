"""The terms of training memory on one GPU of a pipeline stage, written once.

``estimate.memory.estimate_memory`` calls them with plain numbers for one plan and one stage;
``search.grid.Grid.peak_memory`` calls the same functions with numpy arrays that broadcast over
every (stage row, micro-batch size, ZeRO stage, recompute mode) of a search, so the search's
memory verdict is the scalar estimate evaluated many times at once, not a second copy of it.

Sources of each term are in ``estimate/memory.py`` (ZeRO: Rajbhandari et al. 2020, section 5;
activations in flight: Narayanan et al. 2021, section 2.2; Korthikanti et al. 2022, section 4.2.3).

A condition is a ``bool`` for one plan and a boolean array for many: ``_where`` picks with a plain
``if`` for the first (the scalar path stays in Python floats) and ``np.where`` for the second.
A term that does not apply to one plan is ``None`` (``_when``), so the scalar breakdown lists only
the components a plan has, as it always did; over arrays it is 0 where it does not apply.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuplan.specs.training import TrainingConfig

ADAM8BIT_BLOCK = 256  # bitsandbytes blockwise quantisation: one fp32 absmax per 256 values


def optimizer_bytes_per_param(cfg: TrainingConfig) -> float:
    """Optimizer state bytes per parameter (Adafactor is shape-dependent: see ``_adafactor_bytes``);
    adamw's and sgd's states in ``cfg.optimizer_dtype`` (4 bytes fp32, 2 bf16)."""
    state = 2.0 if cfg.optimizer_dtype == "bf16" else 4.0
    return {
        "adamw": 2 * state,  # exp_avg and exp_avg_sq (torch.optim.AdamW, Megatron, DeepSpeed; Apex in bf16)
        "adamw8bit": 2.0 + 2 * 4 / ADAM8BIT_BLOCK,  # two uint8 states + block scales (Dettmers et al. 2022)
        "sgd": state,  # one momentum buffer
        "adafactor": 0.0,
    }[cfg.optimizer]


def _where(cond: Any, a: Any, b: Any) -> Any:
    if isinstance(cond, (bool, np.bool_)):
        return a if cond else b
    return np.where(cond, a, b)


def _maximum(a: Any, b: Any) -> Any:
    if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
        return max(a, b)
    return np.maximum(a, b)


def _when(cond: Any, value: Any) -> Any:
    """``value`` where ``cond`` holds: None for one plan without it, 0 in arrays."""
    if isinstance(cond, (bool, np.bool_)):
        return value if cond else None
    return np.where(cond, value, 0.0)


def model_states(
    cfg: TrainingConfig,
    z: Any,
    zero_group: Any,
    expert_zero_group: Any,
    dense: Any,
    expert: Any,
    adafactor_dense: Any,
    adafactor_expert: Any,
    gemm: Any,
) -> tuple[Any, Any, Any, Any]:
    """(weights, gradients, optimizer, master weights) bytes of the parameters one GPU holds:
    ``dense`` and ``expert`` parameters (after TP/EP, times the schedule's parameter copies),
    ZeRO stage ``z`` sharding a state over its replicas (ZeRO section 5: stage 1 the optimizer
    and masters, 2 also gradients, 3 also weights): DP x CP ranks for dense tensors
    (``zero_group``), the expert data-parallel ranks for experts (``expert_zero_group``)."""

    def sharded(min_stage: int) -> Any:
        return _where(z >= min_stage, dense / zero_group + expert / expert_zero_group, dense + expert)

    weights = cfg.weight_bytes * sharded(3)
    if cfg.sharded_params_are_masters:  # FSDP2: the fp32 shards are the masters under ZeRO-3
        weights = _where(z == 3, 0.0 * weights, weights)
    if cfg.fp8_params:  # the block GEMM weights exist only as low-precision copies (fp8_weight_copies)
        weights = weights - cfg.weight_bytes * gemm
    gradients = cfg.grad_bytes * sharded(2)
    master = cfg.master_bytes * sharded(1)
    if cfg.optimizer == "adafactor":
        whole = adafactor_dense + adafactor_expert
        optimizer = _where(z >= 1, adafactor_dense / zero_group + adafactor_expert / expert_zero_group, whole)
    else:
        optimizer = optimizer_bytes_per_param(cfg) * sharded(1)
    return weights, gradients, optimizer, master


def buffers(
    cfg: TrainingConfig,
    z: Any,
    zero_group: Any,
    n_layers: Any,
    biggest_layer: Any,
    gemm: Any,
    gemm_matrices: Any,
    biggest_gemm: Any,
    biggest_gemm_matrices: Any,
    fp8_one_layout: bool = False,
    pp: Any = 1,
    held: Any = 0.0,
    expert_zero_group: Any = None,
    biggest_dense: Any = 0.0,
    biggest_expert: Any = 0.0,
) -> dict[str, Any]:
    """Memory besides states and activations that does not depend on the micro-batch (``None``
    where a term does not apply to one plan). ``gemm`` and ``gemm_matrices`` are of every block
    held (times the schedule's parameter copies); ``fp8_one_layout``: the GPU keeps one FP8 copy
    for both GEMM layouts (GPUSpec.fp8_any_layout, TrainingConfig.fp8_cached_bytes); ``pp``: the
    pipeline degree and ``held`` the parameters on the GPU, for FSDP under pipelining
    (``pp_unsharded_weights``, ``pp_grad_accumulator``); ``expert_zero_group``: the ranks the
    experts' states are sharded over (None: as the dense ones), with ``biggest_dense`` and
    ``biggest_expert`` the largest block's parameters of each kind."""
    copy_bytes = cfg.fp8_cached_bytes(fp8_one_layout)
    # what a ZeRO-3 gather brings in: the block's parameters sharded over more than one rank (a
    # group of one holds them whole, nothing to gather: dp = 1, or experts with no expert-dp)
    dense = zero_group > 1
    expert = dense if expert_zero_group is None else expert_zero_group > 1
    gathered = _where(dense & expert, biggest_layer, _where(dense, biggest_dense, _where(expert, biggest_expert, 0.0)))
    return {
        # FSDP/ZeRO-3 gathers a whole block's weights (current and prefetched next) and holds its
        # unsharded gradient until the reduce-scatter
        # (not torchtitan under PP, whose weights and gradients stay gathered: pp_unsharded_weights)
        "zero3_gather": _when(
            _where(_fsdp_keeps_gathered(cfg, pp), False, (z == 3) & (n_layers > 0)),
            gathered * (2 * cfg.weight_bytes + cfg.grad_bytes),
        ),
        # FP8 copies of the GEMM weights (TrainingConfig.fp8_copy_bytes): of every block held, or
        # under ZeRO-3 of the two gathered blocks only (a shard has nothing to quantize)
        "fp8_weight_copies": _when(
            bool(copy_bytes),
            copy_bytes * _where(z == 3, 2 * biggest_gemm, gemm)
            + cfg.fp8_copy_matrix_bytes * _where(z == 3, 2 * biggest_gemm_matrices, gemm_matrices),
        ),
        "comm_buckets": _when(zero_group > 1, cfg.comm_bucket_bytes),  # two gradient buckets in flight
        "unsharded_weights": pp_unsharded_weights(cfg, pp, z, held),
        "unsharded_fp32_grads": pp_grad_accumulator(cfg, pp, z, held),
    }


def activations(
    cfg: TrainingConfig,
    full: Any,
    in_flight: Any,
    n_layers: Any,
    n_dense: Any,
    n_moe: Any,
    dense_layer: Any,
    moe_layer: Any,
    layer_checkpoint: Any,
    embedding: Any,
    head: Any,
    first: Any,
    last: Any,
    offloaded: Any = 0,
    rerun: Any = 0.0,
    n_linear: Any = 0,
    linear_delta: Any = 0.0,
) -> tuple[Any, Any]:
    """(activation bytes on the GPU, activation bytes in host memory) of a stage: ``in_flight``
    micro-batches (schedules.in_flight) of what one keeps: every layer's saved tensors, or under
    full recompute (``full``) each layer's input plus one block re-run in backward; the embedding
    on the first stage, the head on the stage holding it. ``offloaded`` layers keep theirs in host
    memory with one layer's copy in flight on the GPU (TransformerEngine's offload handler
    double-buffers). ``rerun``: what a dense block's re-run holds beyond what it keeps under
    per-op SAC (activations.ActivationBreakdown.layer_rerun), alive in one block's backward.
    ``n_linear`` of the layers are linear attention, each keeping ``linear_delta`` more than a
    softmax layer of its MLP kind."""
    linear = _where(n_linear > 0, _maximum(linear_delta, 0.0), 0.0)  # what a linear layer adds at most
    kept = _where(
        full, layer_checkpoint * n_layers, n_dense * dense_layer + n_moe * moe_layer + n_linear * linear_delta
    )
    working = _where(
        full,
        _maximum(_where(n_dense > 0, dense_layer, 0.0), _where(n_moe > 0, moe_layer, 0.0)) + linear,
        _where(n_dense > 0, rerun, 0.0) + 0.0 * kept,
    )
    host = 0.0
    if cfg.offload_activation_layers:
        biggest = _where(n_moe > 0, moe_layer, dense_layer) + linear
        host = offloaded * biggest
        kept = kept - host
        working = biggest
    per_mb = kept + _where(first, embedding, 0.0) + _where(last, head, 0.0)
    return in_flight * per_mb + working, in_flight * host


def _fsdp_keeps_gathered(cfg: TrainingConfig, pp: Any) -> Any:
    """Under pipeline parallelism the framework's FSDP keeps weights and gradients gathered
    through the step (TrainingConfig.fsdp_gathered_under_pp: torchtitan)."""
    keeps = pp > 1
    return keeps if cfg.fsdp_gathered_under_pp else keeps & False


def pp_grad_accumulator(cfg: TrainingConfig, pp: Any, z: Any, held: Any) -> Any:
    """torchtitan's FSDP2 under pipeline parallelism: the stage's whole fp32 gradient.

    torch's PipelineStage turns FSDP's gradient sync off for every micro-batch but the last
    (torch/distributed/pipelining/stage.py: ``set_requires_gradient_sync(False)``,
    ``set_reshard_after_backward(False)``), so FSDP2 keeps each parameter's unsharded gradient and
    accumulates it in the reduce dtype (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
    ``to_accumulated_grad_if_needed``: ``unsharded_grad.to(self.reduce_dtype)``; torchtitan's
    ``mixed_precision_reduce`` is float32) until the last micro-batch's reduce-scatter: 4 bytes for
    every parameter ``held`` on the GPU (after TP/EP), beside the sharded gradients."""
    return _when(_fsdp_keeps_gathered(cfg, pp) & (z >= 2), 4.0 * held)


def pp_unsharded_weights(cfg: TrainingConfig, pp: Any, z: Any, held: Any) -> Any:
    """torchtitan's FSDP2 (ZeRO-3) under pipeline parallelism: the stage's gathered weights stay.

    torchtitan does not reshard after forward when pipelining (torchtitan/models/llama3/
    parallelize.py ``apply_fsdp``: ``reshard_after_forward`` False with PP, the "default" policy), and
    PipelineStage keeps them through every micro-batch's backward (``set_reshard_after_backward(False)``
    but for the last), so the stage holds its weights unsharded in the param dtype beside the
    sharded fp32 masters: ``weight_bytes`` for every parameter ``held``, as ZeRO-2 would."""
    return _when(_fsdp_keeps_gathered(cfg, pp) & (z == 3), cfg.weight_bytes * held)


def reserved(cfg: TrainingConfig, allocated: Any) -> tuple[Any, float]:
    """(the caching allocator's reserve over ``allocated``, the CUDA context outside it). With
    expandable segments (``TrainingConfig.expandable_segments``) the allocator unmaps its free
    cached pages before it fails an allocation: no reserve stands in the way."""
    if cfg.expandable_segments:
        return 0.0 * allocated, cfg.cuda_context_bytes
    return cfg.allocator_fraction * allocated, cfg.cuda_context_bytes
