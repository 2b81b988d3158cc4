"""A measured run: the plan it ran and what it measured.

``RunPlan`` holds the plan with the same names and defaults as ``gpuplan train``'s flags
(``model``, ``gpu``, ``gpus``, ``tp`` .. ``overlap_grad_reduce``), so that a telemetry header, the
``[plan]`` table of a run file and ``gpuplan compare --against`` all say a plan the same way.
``Run`` holds the measurements; any of them may be missing (a torchtitan log has no allocated
memory, a Megatron log no kernel times), and each consumer uses only what is there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig


@dataclass(frozen=True)
class RunPlan:
    """A training plan, field for field ``gpuplan train``'s flags (same defaults)."""

    model: str | dict[str, Any]  # catalog id, path to a config.json, or the config.json itself
    gpu: str = "h100-sxm"
    gpus: int = 8
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1
    dp: int | None = None  # default: gpus / (tp x pp x cp)
    zero: int = 0
    sp: bool = True
    schedule: str = "1f1b"
    seq_len: int = 4096
    micro_batch: int = 1
    global_batch: int | None = None  # sequences per step; default: micro_batch x dp
    precision: str = "bf16"
    recompute: str = "none"
    optimizer: str = "adamw"
    framework: str = "generic"
    attention: str | None = None  # default: the framework's
    tp_overlap: bool | None = None
    overlap_grad_reduce: bool | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> RunPlan:
        """A plan from a telemetry header or a run file's ``[plan]``; ``where`` names the place
        for errors (``run.toml`` or ``telemetry.jsonl:1``)."""
        if not isinstance(data, dict):
            raise GpuplanError(f"{where}: plan", f"must be a table of train flags, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                raise GpuplanError(f"{where}: plan.{key}", "unknown plan field", f"use {', '.join(names)}")
        if "model" not in data:
            raise GpuplanError(f"{where}: plan.model", "missing", "name a catalog model or a config.json path")
        types = {
            "gpus": int,
            "tp": int,
            "pp": int,
            "cp": int,
            "ep": int,
            "vp": int,
            "dp": int,
            "zero": int,
            "seq_len": int,
            "micro_batch": int,
            "global_batch": int,
            "sp": bool,
            "tp_overlap": bool,
            "overlap_grad_reduce": bool,
            "gpu": str,
            "schedule": str,
            "precision": str,
            "recompute": str,
            "optimizer": str,
            "framework": str,
            "attention": str,
        }
        for key, value in data.items():
            want = types.get(key)
            if want is None or value is None:
                continue
            # bool is an int in Python: a true/false where a count belongs is an error, and so is 8.0
            ok = isinstance(value, want) and (want is bool or not isinstance(value, bool))
            if not ok:
                raise GpuplanError(f"{where}: plan.{key}", f"must be {want.__name__}, got {value!r}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def resolve(self) -> Resolved:
        """The model, GPU, parallel plan and config this plan names, checked as ``train`` checks."""
        from gpuplan import catalog
        from gpuplan.estimate.train import TrainRequest, validate
        from gpuplan.specs.hf import model_from_hf_config

        if isinstance(self.model, dict):
            spec = model_from_hf_config(self.model, name=str(self.model.get("_name_or_path", "run model")))
        else:
            spec = catalog.model(self.model)
        hw = catalog.gpu(self.gpu)
        for name in ("gpus", "tp", "pp", "cp", "ep", "vp"):
            if getattr(self, name) < 1:
                raise GpuplanError(f"plan.{name}", f"must be a positive integer, got {getattr(self, name)}")
        dp = self.dp
        if dp is None:
            if self.gpus % (self.tp * self.pp * self.cp):
                raise GpuplanError(
                    "plan.gpus",
                    f"{self.gpus} GPUs do not split into tp x pp x cp",
                    "give dp or a GPU count that is a multiple of tp*pp*cp",
                )
            dp = self.gpus // (self.tp * self.pp * self.cp)
        plan = ParallelPlan(
            dp=dp,
            tp=self.tp,
            pp=self.pp,
            cp=self.cp,
            ep=self.ep,
            vp=self.vp,
            zero=self.zero,
            sp=self.sp,
            schedule=self.schedule,
        )
        if plan.world_size != self.gpus:
            raise GpuplanError(
                "plan.dp",
                f"dp x tp x pp x cp = {plan.world_size} is not gpus = {self.gpus}",
                "make the product of the degrees equal the GPU count",
            )
        config = TrainingConfig.for_framework(
            self.framework,
            seq_len=self.seq_len,
            micro_batch=self.micro_batch,
            global_batch=self.global_batch or 0,
            precision=self.precision,
            recompute=self.recompute,
            optimizer=self.optimizer,
            attention=self.attention,
            tp_overlap=self.tp_overlap,
            overlap_grad_reduce=self.overlap_grad_reduce,
        )
        req = TrainRequest(model=spec, gpu=hw, plan=plan, config=config)
        validate(req)
        return Resolved(spec, hw, plan, config, req.microbatches)


@dataclass(frozen=True)
class Resolved:
    """A plan as the performance model takes it."""

    model: ModelSpec
    gpu: GPUSpec
    plan: ParallelPlan
    config: TrainingConfig
    microbatches: int

    @property
    def global_batch(self) -> int:
        return self.config.micro_batch * self.plan.dp * self.microbatches

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.config.seq_len


@dataclass(frozen=True)
class Run:
    """What one training run measured; every measurement is optional.

    Times are seconds per optimizer step (the median over the steps read, warm-up left out),
    memory is bytes per GPU (the most loaded GPU that reported), kernel times are seconds per
    step on the traced GPU by category (``gpuplan.runs.trace.CATEGORIES``).
    """

    source: str  # the file it came from
    format: str  # telemetry, megatron, nemo, torchtitan, hf, trace, run-file
    step_s: float | None = None
    steps: int = 0  # steps (or log intervals) the median is over
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None  # as the framework counted them (its own FLOP formula)
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    kernels_s: dict[str, float] = field(default_factory=dict)
    memory_bytes: dict[str, float] = field(default_factory=dict)  # measured by component (telemetry)
    plan: RunPlan | None = None
    notes: tuple[str, ...] = ()

    def measured_step_s(self, resolved: Resolved | None = None) -> float | None:
        """The step time: as logged, else from tokens per second per GPU and the plan's batch."""
        if self.step_s is not None:
            return self.step_s
        if self.tokens_per_s_per_gpu and resolved is not None:
            return resolved.tokens_per_step / (self.tokens_per_s_per_gpu * resolved.plan.world_size)
        return None

    def merged(self, other: Run) -> Run:
        """This run with what ``other`` (a trace or memory report of the same run) adds."""
        pick = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name in ("kernels_s", "memory_bytes"):
                pick[f.name] = {**theirs, **mine}
            elif f.name == "notes":
                pick[f.name] = mine + theirs
            elif mine in (None, 0) and theirs not in (None, 0):
                pick[f.name] = theirs
        return Run(**pick)


_BOOL_FLAGS = {"sp", "tp_overlap", "overlap_grad_reduce"}


def plan_from_flags(text: str) -> RunPlan:
    """A plan from ``gpuplan train`` flags in one string (``"llama-3.1-8b --gpus 16 --tp 2"``):
    the model first (or ``--model``), then any of ``RunPlan``'s fields as ``--kebab-case`` flags."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise GpuplanError("against", f"cannot split {text!r} ({exc})") from None
    names = {f.name: f for f in dataclasses.fields(RunPlan)}
    ints = {"gpus", "tp", "pp", "cp", "ep", "vp", "dp", "zero", "seq_len", "micro_batch", "global_batch"}
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("--"):
            if "model" in out:
                raise GpuplanError("against", f"unexpected {w!r}", "give the model once, then --flags")
            out["model"] = w
            i += 1
            continue
        key = w[2:].replace("-", "_")
        if key.startswith("no_") and key[3:] in _BOOL_FLAGS:
            out[key[3:]] = False
            i += 1
            continue
        if key in _BOOL_FLAGS:
            out[key] = True
            i += 1
            continue
        if key not in names or i + 1 >= len(words):
            known = ", ".join("--" + n.replace("_", "-") for n in names)
            raise GpuplanError("against", f"unknown flag or missing value: {w}", f"use {known}")
        value: Any = words[i + 1]
        if key in ints:
            try:
                value = int(value)
            except ValueError:
                raise GpuplanError("against", f"{w} needs an integer, got {value!r}") from None
        out[key] = value
        i += 2
    if "model" not in out:
        raise GpuplanError("against", "names no model", 'start with the model: `against="llama-3.1-8b --gpus 8"`')
    return RunPlan(**out)
