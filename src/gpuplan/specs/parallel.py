"""How a training job is split across GPUs: the parallel degrees and ZeRO stage.

World size = dp x tp x pp x cp. Expert parallelism (ep) does not multiply the world size: the MoE
layers are laid out apart from the attention layers, Megatron-Core's "MoE Parallel Folding" (Liu
et al. 2025, arXiv 2504.14960; megatron/core/parallel_state.py, initialize_model_parallel:
expert_tensor_parallel_size): the same tp x cp x dp ranks of a pipeline stage are regrouped as
etp x ep x edp for the experts. ``etp`` unset is Megatron's default, etp = tp
(model_parallel_config.py __post_init__), where ep is carved out of the dp x cp ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError, require
from gpuplan.specs import schedules, validity

# The pipeline schedules a training plan can run, with their aliases (gpuplan.specs.schedules):
# 1F1B (interleaved when vp > 1), zero-bubble ZB-H1 (``zb``), ZB-V and DualPipe.
SCHEDULES = schedules.names(training=True)


def head_stage(schedule: str, pp: int) -> int:
    return schedules.get(schedule).head_stage(pp)


@dataclass(frozen=True)
class ParallelPlan:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    # expert tensor parallelism (Megatron --expert-tensor-parallel-size); None: Megatron's
    # default, the experts split like the dense layers (etp = tp) and ep carved from dp x cp
    etp: int | None = None
    zero: int = 0  # 0: plain DP; 1: optimizer states; 2: + gradients; 3: + weights (FSDP full shard)
    sp: bool = True  # sequence parallelism alongside TP (Korthikanti et al. 2022)
    vp: int = 1  # virtual pipeline stages per rank (interleaved 1F1B)
    schedule: str = schedules.DEFAULT
    order: str = "tp-cp-dp-pp"  # rank order, innermost first: decides which groups cross nodes
    # Uneven pipeline split (Megatron's --decoder-first/last-pipeline-num-layers): transformer
    # layers on the first and last pipeline ranks, the rest shared by the middle ranks; None: even
    # split (specs/split.py, stage_layers, which also checks them against the model)
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    # Megatron-Core's --pipeline-model-parallel-layout: the layers of each of the pp x vp virtual
    # stages (specs/layout.py), e.g. "Et*4|(t*4|)*14tmL"; None: the split above
    layout: str | None = None

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp", "ep", "vp"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name, f"must be a positive integer, got {value!r}")
        require(
            self.etp is None or (isinstance(self.etp, int) and self.etp >= 1),
            "etp",
            f"must be a positive integer, got {self.etp!r}",
            "leave it unset to split the experts like the dense layers (tp)",
        )
        require(self.zero in (0, 1, 2, 3), "zero", f"must be 0, 1, 2 or 3, got {self.zero!r}")
        require(
            self.schedule in SCHEDULES,
            "schedule",
            f"unknown schedule {self.schedule!r}",
            f"use one of {', '.join(SCHEDULES)}",
        )
        validity.require(validity.STRUCTURE, validity.view(self))  # ep x etp vs tp x cp x dp, vp, DualPipe's even pp
        for name in ("first_stage_layers", "last_stage_layers"):
            value = getattr(self, name)
            require(
                value is None or (isinstance(value, int) and value >= 1),
                name,
                f"must be a positive integer, got {value!r}",
                "a stage with no layer cannot run; leave it unset for an even split",
            )
            require(value is None or self.pp > 1, name, "an uneven split needs pipeline parallelism", "set `pp` > 1")
        if self.layout is not None:
            from gpuplan.specs import layout

            require(
                self.first_stage_layers is None and self.last_stage_layers is None,
                "pipeline_layout",
                "a layout states every stage's layers, first and last included",
                "drop `first_stage_layers`/`last_stage_layers`",
            )
            stages = len(layout.parse(self.layout).layers)
            require(
                stages == self.pp * self.vp,
                "pipeline_layout",
                f"{stages} stages, where pp={self.pp} x vp={self.vp} makes {self.pp * self.vp}",
                f"use `vp={stages // self.pp}`" if stages % self.pp == 0 else "give pp x vp stages separated by |",
            )
        dims = self.order.split("-")
        require(
            sorted(dims) == ["cp", "dp", "pp", "tp"],
            "order",
            f"rank order {self.order!r} must name tp, cp, dp and pp once each, innermost first",
            "e.g. `rank_order=tp-cp-dp-pp`",
        )

    @classmethod
    def for_gpus(cls, gpus: int, dp: int | None = None, **degrees: Any) -> ParallelPlan:
        """The plan of ``gpus`` GPUs: ``dp`` (None: what is left after tp x pp x cp) with the other
        degrees, refused unless dp x tp x pp x cp is the GPU count."""
        if dp is None:
            rest = degrees.get("tp", 1) * degrees.get("pp", 1) * degrees.get("cp", 1)
            if gpus % rest:
                raise GpuplanError(
                    "gpus",
                    f"{gpus} GPUs do not split into tp x pp x cp = {rest}",
                    "use a GPU count that is a multiple of tp*pp*cp",
                )
            dp = gpus // rest
        plan = cls(dp=dp, **degrees)
        if plan.world_size != gpus:
            raise GpuplanError(
                "dp",
                f"dp x tp x pp x cp = {plan.world_size} is not `gpus={gpus}`",
                "make the product of the degrees equal the GPU count",
            )
        return plan

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline rank: vp, or ZB-V's two."""
        return schedules.get(self.schedule).chunks(self.vp)

    @property
    def head_stage(self) -> int:
        """The pipeline rank holding the output head: the last, or for ZB-V the first (the V
        comes back to rank 0)."""
        return head_stage(self.schedule, self.pp)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def zero_group(self) -> int:
        """Ranks that share one copy of the dense model states under ZeRO (DP x CP)."""
        return self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel degree of the expert weights: etp, or tp when unset."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_zero_group(self) -> int:
        """Ranks that share one copy of an expert's states, the expert data-parallel size EDP:
        tp x cp x dp / (ep x etp) (Megatron parallel_state.py: expert_data_parallel_size =
        world / (etp x ep x pp)); with etp unset, the dp x cp ranks left after ep."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)
