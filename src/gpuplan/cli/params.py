"""Every command's flags checked in one place, before the command does any work.

:func:`checked` wraps a command: each float flag must be finite and not negative and each integer
flag not negative unless a rule for that flag says otherwise (a rule is a function ``(value,
field) -> value`` from :mod:`gpuplan.inputs`); output paths are rules too, so a bad ``--plot`` is
refused before a long simulation rather than after it. Flags are checked in their declared order,
so the error names the first bad one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from gpuplan import inputs
from gpuplan.inputs import PLOT_SUFFIXES

# A flag's check: (value, field) -> the value to use; values are whatever type the flag declares
Rule = Callable[[Any, str], Any]


def checked(**rules: Rule) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            for name, value in list(bound.arguments.items()):
                if value is None:
                    continue
                rule = rules.get(name)
                if rule is not None:
                    bound.arguments[name] = rule(value, name)
                elif isinstance(value, bool):
                    continue
                elif isinstance(value, float):
                    bound.arguments[name] = inputs.nonnegative(value, name)
                elif isinstance(value, int):
                    bound.arguments[name] = inputs.integer(value, name, lo=0)
            return fn(*bound.args, **bound.kwargs)

        return command

    return wrap


def at_least(lo: int, hi: int = inputs.MAX_COUNT) -> Rule:
    return lambda v, f: inputs.integer(v, f, lo=lo, hi=hi)


def between(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Rule:
    return lambda v, f: inputs.finite(v, f, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open)


def anything(v: Any, f: str) -> Any:
    """No check here: the library checks it (a list, a text with its own grammar)."""
    return v


positive: Rule = inputs.positive
fraction: Rule = inputs.fraction
price: Rule = inputs.price
seed: Rule = inputs.seed
plot: Rule = lambda v, f: inputs.output_path(v, f, suffixes=PLOT_SUFFIXES)  # noqa: E731
out_file: Rule = inputs.output_path
html_file: Rule = lambda v, f: inputs.output_path(v, f, suffixes=(".html", ".htm"))  # noqa: E731
