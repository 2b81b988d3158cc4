"""The library names inputs as fields (```seq_len=4096```, gpuplan/errors.py); the CLI shows each as
its flag (``--seq-len 4096``). A name no command has as a flag is left as written."""

from __future__ import annotations

import functools
import re

FIELD = re.compile(r"`([a-z][a-z0-9_]*)(?:=([^`]+))?`")


@functools.lru_cache(maxsize=1)
def flags() -> frozenset[str]:
    """Every long option of every command (built once, on the first error)."""
    from gpuplan.cli.entry import click_command

    out: set[str] = set()

    def walk(command) -> None:
        for param in getattr(command, "params", ()):
            out.update(o for o in getattr(param, "opts", ()) if o.startswith("--"))
        for sub in (getattr(command, "commands", None) or {}).values():
            walk(sub)

    walk(click_command())
    return frozenset(out)


def flag_for(field: str) -> str | None:
    """The flag of a field (``seq_len``: ``--seq-len``), or None when no command has it."""
    flag = "--" + field.replace("_", "-")
    return flag if flag in flags() else None


def as_flags(text: str) -> str:
    """``text`` with every field reference shown as its flag."""

    def show(m: re.Match) -> str:
        flag = flag_for(m.group(1))
        if flag is None:
            return m.group(0)
        return flag if m.group(2) is None else f"{flag} {m.group(2)}"

    return FIELD.sub(show, text)
