"""Step time, training time and cost from FLOPs at a given model FLOPs utilisation (MFU).

MFU as defined by Chowdhery et al. 2022 (PaLM, Appendix B): model FLOPs per second achieved over
the aggregate dense peak. So step time = model FLOPs per step / (GPUs x peak x MFU), and HFU =
MFU x hardware FLOPs / model FLOPs. MFU is either given (``--mfu``) or follows from the step time
the performance model predicts (estimate/step_time.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.units import DAY, HOUR


@dataclass(frozen=True)
class TrainingTime:
    step_s: float
    total_s: float
    steps: float
    tokens_per_step: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    gpu_hours: float
    cost_usd: float | None

    @property
    def days(self) -> float:
        return self.total_s / DAY


def training_days(total_flops: float, gpus: int, achieved_flops_per_gpu: float) -> float:
    """Days to do ``total_flops`` on ``gpus`` GPUs each sustaining ``achieved_flops_per_gpu``."""
    return total_flops / (gpus * achieved_flops_per_gpu) / DAY


def training_time(
    *,
    model_flops_per_token: float,
    hardware_flops_per_token: float,
    tokens: float,
    tokens_per_step: float,
    gpus: int,
    peak_flops: float,
    mfu: float | None = None,
    step_s: float | None = None,
    price_per_gpu_hour: float | None,
) -> TrainingTime:
    """Time and cost from either an MFU or a step time (exactly one of them)."""
    if step_s is None:
        assert mfu is not None, "training_time needs an MFU or a step time"
        step_s = model_flops_per_token * tokens_per_step / (gpus * peak_flops * mfu)
    else:
        mfu = model_flops_per_token * tokens_per_step / (gpus * peak_flops * step_s)
    steps = tokens / tokens_per_step
    total_s = step_s * steps
    gpu_hours = gpus * total_s / HOUR
    return TrainingTime(
        step_s=step_s,
        total_s=total_s,
        steps=steps,
        tokens_per_step=tokens_per_step,
        tokens_per_s_per_gpu=tokens_per_step / step_s / gpus,
        mfu=mfu,
        hfu=mfu * hardware_flops_per_token / model_flops_per_token,
        gpu_hours=gpu_hours,
        cost_usd=None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour,
    )
