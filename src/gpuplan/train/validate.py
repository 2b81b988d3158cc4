"""Up-front checks of intervals, counts and sizes, for the library (``Resilient(every_steps=...)``)
and for command lines (``--checkpoint-every``). A bad value raises :class:`GpuplanError` naming the
field, before anything is trained: a string or a float where a count belongs, zero, a negative,
NaN. Torch-free."""

from __future__ import annotations

import math
import numbers

from gpuplan.errors import GpuplanError


def _fail(field: str, what: str, value, fix: str | None) -> None:
    raise GpuplanError(field, f"must be {what}, got {value!r}", fix)


def count(field: str, value, minimum: int = 1, fix: str | None = None) -> int:
    """An int >= minimum (bool, float and str are refused: 1.5 and "10" are bugs, not counts)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        _fail(field, "an integer", value, fix)
    if value < minimum:
        _fail(field, "a positive integer" if minimum == 1 else f"an integer >= {minimum}", value, fix)
    return int(value)


def seconds(field: str, value, fix: str | None = None) -> float:
    """A finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        _fail(field, "a positive number of seconds", value, fix)
    if value <= 0:
        _fail(field, "a positive number of seconds", value, fix)
    return float(value)


def optional(check, field: str, value, **kw):
    return None if value is None else check(field, value, **kw)


def parse_count(field: str, text: str, minimum: int = 1, fix: str | None = None) -> int:
    """A command-line count: digits only (no 1.5, no 1e3)."""
    try:
        value = int(text.strip(), 10)
    except (ValueError, AttributeError):
        _fail(
            field,
            "an integer" if minimum < 1 else "a positive integer" if minimum == 1 else f"an integer >= {minimum}",
            text,
            fix,
        )
    return count(field, value, minimum, fix)


def parse_seconds(field: str, text: str, fix: str | None = None) -> float:
    try:
        value = float(text)
    except (ValueError, TypeError):
        _fail(field, "a positive number of seconds", text, fix)
    return seconds(field, value, fix)
