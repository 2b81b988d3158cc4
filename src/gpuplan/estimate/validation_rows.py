"""The published training runs as gpuplan inputs: each CSV row (catalog/validation/training_runs*.csv,
the held-out set) becomes a ``Row`` (model, GPU, ParallelPlan, TrainingConfig, measured step time)
under its source's assumptions (validation_sources.py); fields a source did not state take
gpuplan's defaults (no interleaving, no recompute), except the micro-batch, which takes the one a
tuned benchmark would use (``tuned_micro_batch``). ``category`` names the kind of
run (GPU family x precision x context class x parallel style) validation reports its error by.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.estimate.validation_sources import CSVS, measured_step_s, source_for
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import LOW_PRECISION, SEARCH_MICRO_BATCHES, TrainingConfig
from gpuplan.units import GiB


def _model(arch: str, r: dict[str, str], dropout: float) -> ModelSpec:
    L, h, heads, ffn, vocab, seq = (int(r[k]) for k in ("layers", "hidden", "heads", "ffn", "vocab", "seq"))
    kv = int(r.get("kv_heads") or heads)
    if arch == "gpt":  # GPT-2/3 style: LayerNorm, GeLU 4h MLP, biases, learned positions
        p = dropout
        cfg = {
            "model_type": "gpt2",
            "n_layer": L,
            "n_embd": h,
            "n_head": heads,
            "n_inner": ffn,
            "vocab_size": vocab,
            "n_positions": seq,
            "resid_pdrop": p,
            "attn_pdrop": p,
            "embd_pdrop": p,
        }
    elif arch == "llama":
        cfg = {
            "model_type": "llama",
            "num_hidden_layers": L,
            "hidden_size": h,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "intermediate_size": ffn,
            "vocab_size": vocab,
            "max_position_embeddings": seq,
        }
    elif arch == "nemotron":  # Nemotron-3/4 (NeMo): Llama's layout with a non-gated squared-ReLU MLP
        # and LayerNorm; squared ReLU costs what ReLU does (one elementwise pass)
        spec = _model("llama", r, dropout)
        return dataclasses.replace(spec, gated_mlp=False, activation="relu", norm="layernorm")
    elif arch == "mpt":
        cfg = {
            "model_type": "mpt",
            "n_layers": L,
            "d_model": h,
            "n_heads": heads,
            "expansion_ratio": ffn / h,
            "vocab_size": vocab,
            "max_seq_len": seq,
        }
    else:
        raise GpuplanError("arch", f"row {r['id']}: unknown arch {arch!r}", "use gpt, llama, nemotron or mpt")
    return model_from_hf_config(cfg, name=r["id"])


def _row_config(r: dict[str, str]) -> dict[str, Any]:
    """Settings a row's own recipe states where it departs from its source's (optional columns
    ``tp_overlap``, ``ep_overlap`` and ``fp8_params`` yes/no, ``offload_layers``,
    ``recompute_modules``, ``moe_dispatcher``, ``cuda_graph``, ``te_op_fuser``, ``optim_dtype``, ``exp_avg_dtype``, ``grad_dtype``, ``mtp_layers``,
    ``expandable_segments`` and ``compile``, in the held-out set). ``fp8_params``: the Megatron-Bridge FP8-CS and MXFP8
    presets set fp8_param_gather (src/megatron/bridge/training/mixed_precision.py,
    bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed, v0.1.0rc4 to v0.6.0), which the
    scripts/performance configs keep except gpt-oss's (configs/gpt_oss: fp8_param_gather False);
    Megatron-FSDP rows and the 26.08 perf_recipes rows (per-recipe settings) are left without it."""
    out: dict[str, Any] = {}
    if r.get("tp_overlap"):
        out["tp_overlap"] = r["tp_overlap"] == "yes"
    if r.get("offload_layers"):
        out["offload_activation_layers"] = int(r["offload_layers"])
    if r.get("ep_overlap"):
        out["ep_overlap"] = r["ep_overlap"] == "yes"
    if r.get("moe_dispatcher"):  # the recipe's token dispatcher (estimate/moe_host.py)
        out["moe_dispatcher"] = r["moe_dispatcher"]
    if r.get("cuda_graph"):  # "full": a full-iteration CUDA graph (Megatron-Bridge v0.6.0 perf_recipes)
        out["full_cuda_graph"] = r["cuda_graph"] == "full"
    if r.get("te_op_fuser"):  # Megatron-Core use_transformer_engine_op_fuser (TrainingConfig.te_op_fuser)
        out["te_op_fuser"] = r["te_op_fuser"] == "yes"
    if r.get("recompute_modules"):  # Megatron-Core --recompute-modules, space-separated
        out["recompute_modules"] = tuple(r["recompute_modules"].split())
    if r.get("fp8_params"):  # Megatron-Core --fp8-param-gather (TrainingConfig.fp8_params)
        out["fp8_params"] = r["fp8_params"] == "yes"
    if r.get("grad_dtype"):  # the gradient buffer's and its reduction's dtype (grad_reduce_in_fp32)
        out["grad_fp32"] = r["grad_dtype"] == "fp32"
    if r.get("mtp_layers"):  # multi-token-prediction depths trained (Megatron-Core --mtp-num-layers)
        out["mtp_layers"] = int(r["mtp_layers"])
    if r.get("optim_dtype"):
        # NeMo 1.0's optim.dtype: Apex DistributedFusedAdam's one state dtype, its moments' and, equal
        # to the BF16 model's, its master's (no separate copy)
        out["optimizer_dtype"] = out["master_dtype"] = r["optim_dtype"]
    if r.get("exp_avg_dtype"):  # Megatron-Core's --exp-avg-dtype/--exp-avg-sq-dtype (FP32 masters kept)
        out["optimizer_dtype"] = r["exp_avg_dtype"]
    if r.get("expandable_segments"):  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the run's env
        out["expandable_segments"] = r["expandable_segments"] == "yes"
    if r.get("compile"):  # torch.compile (torchtitan's compile.enable): "yes" the blocks and the
        # loss (torchtitan since 2025-04), "model" the blocks alone (its loss compile commented out before)
        out["compile"] = r["compile"] in ("yes", "model")
        if r["compile"] == "model":
            out["compile_loss"] = False
    return out


def tuned_micro_batch(model: ModelSpec, config: TrainingConfig, plan: ParallelPlan, gpu: str) -> int:
    """The micro-batch of a published run whose source does not state it (Megatron-Core's weak
    scaling table, Narayanan et al. 2021 Table 1, the Llama 3 paper): the one gpuplan's search would
    pick for the same plan, the fastest predicted step among ``SEARCH_MICRO_BATCHES`` that divide
    the replica's share of the global batch, satisfy the schedule and fit the GPU's memory; 1
    where none fits. These are benchmark tables of tuned runs, and the choice moves the exposed
    data-parallel traffic (hidden behind the last micro-batch's backward only) and the pipeline
    bubble (paid per micro-batch) in opposite directions, so no single default is neutral: 1
    exposes a pp = 1 run's whole gradient reduce-scatter, the largest inflates a deep pipeline's
    bubble. The choice reads only the model's own predictions, never the measurement."""
    from gpuplan import catalog
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.estimate.step_time import step_time

    g = catalog.gpu(gpu)
    per_replica = config.global_batch // plan.dp
    best: tuple[float, int] = (float("inf"), 1)
    for mbs in SEARCH_MICRO_BATCHES:
        if per_replica % mbs:
            continue
        cfg = dataclasses.replace(config, micro_batch=mbs)
        try:
            if not estimate_memory(model, cfg, plan, g, per_replica // mbs).fits:
                continue
            best = min(best, (step_time(model, cfg, plan, g, per_replica // mbs).step_s, mbs))
        except GpuplanError:  # the schedule refuses this many micro-batches (e.g. interleaving)
            continue
    return best[1]


@dataclass(frozen=True)
class Row:
    id: str
    source: str
    model: ModelSpec
    gpu: str
    plan: ParallelPlan
    config: TrainingConfig
    microbatches: int
    measured_step_s: float
    metric: str
    value: float
    framework: str = ""
    # the published peak memory per GPU (optional column ``peak_memory_gib``, GiB = 2^30 bytes), and
    # what it measured (Source.memory: "reserved"); None where the source reports none
    measured_peak_bytes: float | None = None
    memory_measure: str = ""
    micro_batch_stated: bool = True  # False: the source left it out, tuned_micro_batch chose it

    @property
    def category(self) -> tuple[str, str, str, str]:
        return category(self.gpu, self.config, self.plan)


def category(gpu: str | GPUSpec, cfg: TrainingConfig, plan: ParallelPlan) -> tuple[str, str, str, str]:
    """(GPU family, precision, context class, parallel style) of a run: the unit in which
    validation reports error and ``train`` reports its band. ``gpu``: a catalog id, or the spec
    itself (a GPU or cluster TOML file has no catalog id to look up)."""
    from gpuplan import catalog

    spec = catalog.gpu(gpu) if isinstance(gpu, str) else gpu
    eff = spec.efficiency
    family = eff.name if eff is not None else spec.id  # GPUs sharing an efficiency file share a calibration
    # MXFP8 and NVFP4 are their own kinds (their bands: the held-out Megatron-Bridge runs of them)
    precision = cfg.precision if cfg.precision in LOW_PRECISION else "16-bit"
    context = "long (>= 32K)" if cfg.seq_len >= 32768 else "short (< 32K)"
    if plan.ep > 1:
        style = "moe"
    elif plan.zero == 3:
        style = "fsdp"
    else:
        style = "3d" if (plan.tp > 1 or plan.pp > 1 or plan.cp > 1) else "dp"
    return family, precision, context, style


def _measured_peak(r: dict[str, str], measure: str) -> tuple[float | None, str]:
    """(bytes, what they measured) of a row's published peak memory, column ``peak_memory_gib``."""
    if not r.get("peak_memory_gib"):
        return None, ""
    if not measure:
        raise GpuplanError(
            "peak_memory_gib",
            f"row {r['id']}: its source states no memory measure",
            "set Source.memory (e.g. 'reserved') in gpuplan.estimate.validation_sources",
        )
    return float(r["peak_memory_gib"]) * GiB, measure


def _rows(path: Path) -> list[Row]:
    from gpuplan import catalog  # a row may name a catalog model

    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            src = source_for(r["source"])
            if src.arch and r["arch"] != src.arch:
                raise GpuplanError(
                    "arch",
                    f"row {r['id']}: arch {r['arch']!r} but {src.prefix} runs {src.arch}",
                    "fix the row's arch or its source",
                )
            # a catalog model by name (MoE and other layouts the arch columns cannot state)
            model = catalog.model(r["model"]) if r.get("model") else _model(src.arch or r["arch"], r, src.dropout)
            seq = int(r["seq"])
            tp, pp, dp = int(r["tp"]), int(r["pp"]), int(r["dp"])
            cp, ep, zero = int(r.get("cp") or 1), int(r.get("ep") or 1), int(r.get("zero") or 0)
            # a source that states how its data parallelism shards (Source.plan["zero"]) is read so,
            # whatever the row's column says (the Llama 3 paper's FSDP shards gradients too)
            zero = src.plan.get("zero", zero)
            mbs, gbs = int(r["mbs"] or 1), int(r["gbs"])
            vp = int(r["vp"]) if r["vp"] else src.plan.get("vp", 1)
            sp = (src.sp if src.sp is not None else r["sp"] == "yes") and tp > 1
            ends = ("first_stage_layers", "last_stage_layers")
            split = {k: src.plan[k] for k in ends if k in src.plan and pp > 1}
            split.update({k: int(r[k]) for k in ends if r.get(k)})  # a row's own uneven split
            etp = int(r["etp"]) if r.get("etp") else None  # optional column: MoE parallel folding, empty = tp
            # optional column: Megatron-Core's layout string; else the one the source states
            layout = r.get("pipeline_layout") or (src.plan.get("layout") if pp > 1 else None)
            plan = ParallelPlan(
                dp=dp, tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, zero=zero, sp=sp, layout=layout, **split
            )
            config = TrainingConfig.for_framework(
                src.profile,
                seq_len=seq,
                micro_batch=mbs,
                global_batch=gbs,
                precision=r["precision"],
                recompute=r["recompute"] or "none",
                **{**src.config, **_row_config(r)},
            )
            if not r["mbs"]:
                mbs = tuned_micro_batch(model, config, plan, r["gpu"])
                config = dataclasses.replace(config, micro_batch=mbs)
            rows.append(
                Row(
                    r["id"],
                    r["source"],
                    model,
                    r["gpu"],
                    plan,
                    config,
                    gbs // (mbs * dp),
                    measured_step_s(r, gbs, seq),
                    r["metric"],
                    float(r["value"]),
                    src.framework,
                    *_measured_peak(r, src.memory),
                    micro_batch_stated=bool(r["mbs"]),
                )
            )
    return rows


@functools.cache
def load_rows(paths: tuple[Path, ...] = CSVS) -> tuple[Row, ...]:
    return tuple(row for p in paths for row in _rows(p))
