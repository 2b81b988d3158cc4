"""What the user fixes or bounds in a search (``Constraints``), and the comma-separated lists
the search's choices are given as."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import GpuplanError, field_ref, require
from gpuplan.search.grid import Layout
from gpuplan.specs import schedules

# The --schedule names a search accepts, from the registry: each training schedule, then the one it
# becomes with vp > 1 virtual stages (1f1b, interleaved, zb, zb-v, dualpipe)
SEARCH_SCHEDULES = tuple(
    name
    for spec in schedules.training()
    for name in (spec.train_name, *((schedules.get(spec.interleaved).train_name,) if spec.interleaved else ()))
)


@dataclass(frozen=True)
class Constraints:
    """What the user fixes or bounds (Calculon-style): a TP fixed by the NVLink domain, a PP capped
    by the framework, only some schedules. Plans outside are counted as rejected, with the flag."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    dp: int | None = None
    etp: int | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    max_cp: int | None = None
    max_ep: int | None = None
    schedules: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "ep", "dp", "etp", "max_tp", "max_pp", "max_cp", "max_ep"):
            value = getattr(self, name)
            require(value is None or value >= 1, name, f"must be a positive integer, got {value}")
        for name in ("tp", "pp", "cp", "ep"):
            fixed, most = getattr(self, name), getattr(self, f"max_{name}")
            require(
                fixed is None or most is None or fixed <= most,
                name,
                f"{field_ref(name, fixed)} is above {field_ref(f'max_{name}', most)}",
                "drop one of them",
            )
        if self.schedules is not None:
            bad = [x for x in self.schedules if x not in SEARCH_SCHEDULES]
            require(
                not bad and bool(self.schedules),
                "schedule",
                f"unknown schedule(s) {', '.join(bad) or '(none)'}",
                f"use some of {', '.join(SEARCH_SCHEDULES)}",
            )

    def reason(self, lo: Layout) -> str | None:
        """Why a layout is outside the constraints (the field that excludes it), or None."""
        for name in ("tp", "pp", "cp", "ep", "dp"):
            fixed = getattr(self, name)
            if fixed is not None and getattr(lo, name) != fixed:
                return f"{name} is not {fixed} (`{name}`)"
        if self.etp is not None and lo.expert_tp != self.etp:
            return f"etp is not {self.etp} (`etp`)"
        for name in ("tp", "pp", "cp", "ep"):
            most = getattr(self, f"max_{name}")
            if most is not None and getattr(lo, name) > most:
                return f"{name} above {most} (`max_{name}`)"
        if self.schedules is not None:
            # the --schedule name: interleaved 1F1B is 1f1b with vp > 1
            kind = schedules.get(lo.schedule).simulated(lo.vp).train_name
            if kind not in self.schedules:
                return f"schedule {kind} not asked for (`schedule`)"
        return None


def parse_choices(text: str | None, field: str, kind: type = str) -> tuple | None:
    """A comma-separated CLI list (``--zero 1,3``), or None when not given. An empty item (``1,,3``)
    is refused rather than dropped, and an integer is at most ``MAX_CHOICE`` (a micro-batch or degree
    beyond any machine: larger would overflow the search's integer arrays)."""
    if text is None:
        return None
    fix = f"give a comma-separated list, e.g. {field_ref(field, '1,3')}"
    items = [x.strip() for x in text.split(",")]
    require(any(items), field, "is empty", fix)
    require(all(items), field, f"has an empty item in {text!r}", fix)
    try:
        values = tuple(kind(x) for x in items)
    except ValueError:
        raise GpuplanError(field, f"cannot read {text!r}", fix) from None
    big = [v for v in values if kind is int and abs(v) > MAX_CHOICE]
    if big:
        raise GpuplanError(field, f"{big[0]} is larger than any plan uses", f"use values up to {MAX_CHOICE:,}")
    return values


MAX_CHOICE = 1_000_000
