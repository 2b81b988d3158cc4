"""Predicted step time against published training runs (catalog/validation/training_runs.csv).

The CSV is a copy of the shared calibration set; each row is one published run. How a row
becomes a plan, stated once for all rows (no per-row constants):

* ``arch = gpt``: a GPT-2/3-style decoder (LayerNorm, GeLU MLP, biases, learned positions, tied
  embeddings) with Megatron-LM's default dropout of 0.1 on the residual and attention paths;
* Megatron-LM as it ran in 2021-22: fp16 with loss scaling, eager attention (fused
  scale-mask-softmax; FlashAttention did not exist yet), gradients reduced after the backward
  (LocalDDP, no overlap), no distributed optimizer;
* fields the source did not state take gpuplan's defaults: micro-batch 1, no interleaving.

Rows that give TFLOP/s are turned into a step time with the formula the source used (column
``flop_formula``), so both conventions compare on seconds.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

CSV = Path(__file__).resolve().parent.parent / "catalog" / "validation" / "training_runs.csv"
MEGATRON_FORMULA = "96BsLh^2(1+s/6h+V/16Lh)"


def megatron_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs per step with full recompute (Narayanan et al. 2021, eq. 3, appendix)."""
    return 96 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


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


@functools.cache
def load_rows(path: Path = CSV) -> tuple[Row, ...]:
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            if r["arch"] != "gpt":
                raise GpuplanError("arch", f"row {r['id']}: unknown arch {r['arch']!r}", "only gpt rows are modelled")
            L, h, heads, ffn, vocab, seq = (int(r[k]) for k in ("layers", "hidden", "heads", "ffn", "vocab", "seq"))
            model = model_from_hf_config({
                "model_type": "gpt2", "n_layer": L, "n_embd": h, "n_head": heads, "n_inner": ffn,
                "vocab_size": vocab, "n_positions": seq, "resid_pdrop": 0.1, "attn_pdrop": 0.1, "embd_pdrop": 0.1,
            }, name=r["id"])
            tp, pp, dp = int(r["tp"]), int(r["pp"]), int(r["dp"])
            mbs, vp, gbs = int(r["mbs"] or 1), int(r["vp"] or 1), int(r["gbs"])
            plan = ParallelPlan(dp=dp, tp=tp, pp=pp, vp=vp, sp=r["sp"] == "yes")
            config = TrainingConfig(seq_len=seq, micro_batch=mbs, global_batch=gbs, precision=r["precision"],
                                    recompute=r["recompute"], attention="eager", overlap_grad_reduce=False)
            value = float(r["value"])
            if r["metric"] == "step_s":
                measured = value
            elif r["metric"] == "tflops_per_gpu":
                if r["flop_formula"] != MEGATRON_FORMULA:
                    raise GpuplanError("flop_formula", f"row {r['id']}: unknown formula {r['flop_formula']!r}",
                                       f"add it to gpuplan.estimate.validate (known: {MEGATRON_FORMULA})")
                measured = megatron_flops(gbs, seq, L, h, vocab) / (int(r["gpus"]) * value * 1e12)
            else:
                raise GpuplanError("metric", f"row {r['id']}: unknown metric {r['metric']!r}", "use step_s or tflops_per_gpu")
            rows.append(Row(r["id"], r["source"], model, r["gpu"], plan, config, gbs // (mbs * dp), measured,
                            r["metric"], value))
    return tuple(rows)


@dataclass(frozen=True)
class Result:
    row: Row
    predicted_step_s: float
    mfu: float
    breakdown: dict[str, float]

    @property
    def error(self) -> float:
        """Signed relative error of the predicted step time."""
        return self.predicted_step_s / self.row.measured_step_s - 1


def validate_training(path: Path = CSV) -> list[Result]:
    from gpuplan import catalog
    from gpuplan.estimate.step_time import step_time

    out = []
    for row in load_rows(path):
        st = step_time(row.model, row.config, row.plan, catalog.gpu(row.gpu), row.microbatches)
        out.append(Result(row, st.step_s, st.mfu, st.breakdown))
    return out


def summary(results: list[Result]) -> dict[str, float]:
    errs = [abs(r.error) for r in results]
    return {"rows": len(errs), "mean_abs_error": sum(errs) / len(errs), "max_abs_error": max(errs),
            "mean_signed_error": sum(r.error for r in results) / len(errs)}
