"""Predicted step time against published training runs (catalog/validation/training_runs*.csv).

The CSVs are copies of the shared calibration set; each row is one published run. How a row
becomes a plan is stated once per source (``SOURCES``), never per row; fields a source did not
state take gpuplan's defaults (micro-batch 1, no interleaving, no recompute).

Rows that give TFLOP/s or MFU are turned into a step time with the FLOP formula the source used
(column ``flop_formula``), so every convention compares on seconds; tokens/s need no formula.
Each result belongs to a category (GPU family x precision x context class x parallel style):
the error band validation measures per category is what ``gpuplan train`` prints beside a
prediction of the same kind (``error_band``).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import LOW_PRECISION, TrainingConfig

DATA = Path(__file__).resolve().parent.parent / "catalog" / "validation"
CSV = DATA / "training_runs.csv"
CSVS = (CSV, DATA / "training_runs_hopper.csv")
# Published runs gathered here, never fitted to (scripts/fit_sustained.py reads CSVS only): they
# test whether the model carries to runs it was not tuned on, and widen the error bands.
HELD_OUT = (DATA / "held_out" / "training_runs_nemo.csv",)
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


# Each entry is what the source itself says about how it ran (read in the source; a field it does
# not state is gpuplan's default). Megatron-LM 2021-22: fp16 loss scaling, no FlashAttention yet
# (fused scale-mask-softmax), gradients reduced after the backward (LocalDDP), dropout 0.1.
# Megatron-LM 2021-22: no gradient/parameter overlap, and its pipeline p2p blocked
# (p2p_communication.py at 64a83fb588: batch_isend_irecv, req.wait(), torch.cuda.synchronize())
_MEGATRON_2021 = dict(attention="eager", overlap_grad_reduce=False, overlap_param_gather=False, overlap_p2p=False)
SOURCES = (
    Source("Narayanan et al. 2021", "Megatron-LM (2021)", "gpt", "megatron", _MEGATRON_2021, dropout=0.1),
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
    # gradients), bf16, FlashAttention. Its pipeline is interleaved 1F1B (section 3.3.2) drawn in
    # Fig. 6 with two stages per rank; the paper gives no other V, so V = 2. "We reduce one
    # Transformer layer each from the first and the last stages" (section 3.3.2): 7 / 8 x 14 / 7.
    Source(
        "Llama 3 paper",
        "Meta (Llama 3 paper, section 3.3)",
        "llama",
        "generic",
        dict(attention="flash", tp_overlap=True),
        plan=dict(vp=2, first_stage_layers=7, last_stage_layers=7),
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
    # Megatron-Bridge performance summaries (NeMo 25.11 to 26.06 containers), the same stack a year
    # on: FP8-CS = TE current scaling (every FP8 row is FP8-CS, the pages' "fp8_cs" recipes);
    # FSDP > 0 = Megatron-FSDP (gpuplan's zero 3). Their performance
    # configs reduce and keep gradients in BF16 (scripts/performance/configs/*/*_llm_pretrain.py,
    # set_{llama3,llama31,qwen3,gpt_oss}_common_configs: grad_reduce_in_fp32 = False, r0.2.0 to v0.5.0).
    Source(
        "Megatron-Bridge",
        "Megatron-Bridge (NeMo container)",
        "",
        "nemo",
        dict(grad_fp32=False, fp8_scaling="current"),
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
)


def source_for(name: str) -> Source:
    for s in SOURCES:
        if name.startswith(s.prefix):
            return s
    raise GpuplanError(
        "source", f"no framework assumptions for source {name!r}", "add a Source to gpuplan.estimate.validate.SOURCES"
    )


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
    ``tp_overlap``, ``ep_overlap`` and ``fp8_params`` yes/no, ``offload_layers`` and
    ``recompute_modules``, in the held-out set). ``fp8_params``: the Megatron-Bridge FP8-CS and MXFP8
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
    if r.get("recompute_modules"):  # Megatron-Core --recompute-modules, space-separated
        out["recompute_modules"] = tuple(r["recompute_modules"].split())
    if r.get("fp8_params"):  # Megatron-Core --fp8-param-gather (TrainingConfig.fp8_params)
        out["fp8_params"] = r["fp8_params"] == "yes"
    return out


def _measured_step_s(r: dict[str, str], gbs: int, seq: int) -> float:
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
            f"add it to gpuplan.estimate.validate (known: {MEGATRON_FORMULA}, megatron, llama3)",
        )
    per_gpu = value * 1e12 if metric == "tflops_per_gpu" else value * H100_BF16_PEAK
    return flops / (gpus * per_gpu)


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
            mbs, gbs = int(r["mbs"] or 1), int(r["gbs"])
            vp = int(r["vp"]) if r["vp"] else src.plan.get("vp", 1)
            sp = (src.sp if src.sp is not None else r["sp"] == "yes") and tp > 1
            ends = ("first_stage_layers", "last_stage_layers")
            split = {k: src.plan[k] for k in ends if k in src.plan and pp > 1}
            split.update({k: int(r[k]) for k in ends if r.get(k)})  # a row's own uneven split
            etp = int(r["etp"]) if r.get("etp") else None  # optional column: MoE parallel folding, empty = tp
            plan = ParallelPlan(dp=dp, tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, zero=zero, sp=sp, **split)
            config = TrainingConfig.for_framework(
                src.profile,
                seq_len=seq,
                micro_batch=mbs,
                global_batch=gbs,
                precision=r["precision"],
                recompute=r["recompute"] or "none",
                **{**src.config, **_row_config(r)},
            )
            rows.append(
                Row(
                    r["id"],
                    r["source"],
                    model,
                    r["gpu"],
                    plan,
                    config,
                    gbs // (mbs * dp),
                    _measured_step_s(r, gbs, seq),
                    r["metric"],
                    float(r["value"]),
                    src.framework,
                )
            )
    return rows


@functools.cache
def load_rows(paths: tuple[Path, ...] = CSVS) -> tuple[Row, ...]:
    return tuple(row for p in paths for row in _rows(p))


@dataclass(frozen=True)
class Result:
    row: Row
    predicted_step_s: float
    mfu: float
    breakdown: dict[str, float]
    # the memory model's peak on the most loaded GPU and the GPU's capacity: a published run the
    # model says does not fit is a wrong refusal
    peak_bytes: float = 0.0
    capacity_bytes: float = 0.0

    @property
    def refused(self) -> bool:
        return self.peak_bytes > self.capacity_bytes

    @property
    def error(self) -> float:
        """Signed relative error of the predicted step time."""
        return self.predicted_step_s / self.row.measured_step_s - 1


def validate_training(paths: tuple[Path, ...] = CSVS) -> list[Result]:
    from gpuplan import catalog
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.estimate.step_time import step_time

    out = []
    for row in load_rows(paths):
        gpu = catalog.gpu(row.gpu)
        st = step_time(row.model, row.config, row.plan, gpu, row.microbatches)
        mem = estimate_memory(row.model, row.config, row.plan, gpu.memory_bytes, row.microbatches, all_stages=False)
        out.append(Result(row, st.step_s, st.mfu, st.breakdown, mem.per_gpu.total, gpu.memory_bytes))
    return out


def summary(results: list[Result]) -> dict[str, float]:
    errs = [abs(r.error) for r in results]
    return {
        "rows": len(errs),
        "mean_abs_error": sum(errs) / len(errs),
        "max_abs_error": max(errs),
        "mean_signed_error": sum(r.error for r in results) / len(errs),
        "refused": sum(r.refused for r in results),  # published runs the memory model says do not fit
    }


def by_category(results: list[Result]) -> dict[tuple[str, str, str, str], dict[str, float]]:
    """Validation error per category (see ``category``), with the signed range it spans."""
    groups: dict[tuple[str, str, str, str], list[Result]] = {}
    for r in results:
        groups.setdefault(r.row.category, []).append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        s = summary(rs)
        s["min_error"] = min(r.error for r in rs)
        s["max_error"] = max(r.error for r in rs)
        out[key] = s
    return out


@functools.cache
def _bands() -> dict[tuple[str, str, str, str], dict[str, float]]:
    # every published run, the held-out ones too: a band is what validation measured, not a fit
    return by_category(validate_training(CSVS + HELD_OUT))


def error_band(gpu: str | GPUSpec, cfg: TrainingConfig, plan: ParallelPlan, step_s: float) -> dict[str, Any]:
    """What validation measured for published runs of this kind (``category``), and the step time
    range it implies: a run measured e too slow/fast was predicted (1 + e) x its time, so the true
    step lies in [step / (1 + max error), step / (1 + min error)]. A kind with no published run is
    marked ``calibrated: False`` with no range: its numbers are physics and datasheets only."""
    key = category(gpu, cfg, plan)
    doc: dict[str, Any] = {"category": dict(zip(("gpu_family", "precision", "context", "parallel"), key))}
    band = _bands().get(key)
    if band is None:
        return {
            **doc,
            "calibrated": False,
            "runs": 0,
            "step_s_range": None,
            "note": "no published run of this kind in the validation set: uncalibrated",
        }
    return {
        **doc,
        "calibrated": True,
        "runs": int(band["rows"]),
        "mean_abs_error": band["mean_abs_error"],
        "min_error": band["min_error"],
        "max_error": band["max_error"],
        "step_s_range": [step_s / (1 + band["max_error"]), step_s / (1 + band["min_error"])],
    }


def to_dict(results: list[Result]) -> dict[str, Any]:
    """The JSON document of ``gpuplan validate``: a row per run, the summary and the error by
    category (GPU family, precision, context, parallelism)."""
    return {
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
            for k, v in by_category(results).items()
        ],
    }
