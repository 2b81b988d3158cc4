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
            opts = (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))  # --sp/--no-sp
            out.update(o for o in opts if o.startswith("--"))
        for sub in (getattr(command, "commands", None) or {}).values():
            walk(sub)

    walk(click_command())
    return frozenset(out)


def flag_for(field: str) -> str | None:
    """The flag of a field (``seq_len``: ``--seq-len``), or None when no command has it."""
    flag = "--" + field.replace("_", "-")
    return flag if flag in flags() else None


def as_flags(text: str) -> str:
    """``text`` with every field reference shown as its flag; an on/off field's value as the flag's
    form (```sp=false```: ``--no-sp``)."""

    def show(m: re.Match) -> str:
        flag = flag_for(m.group(1))
        if flag is None:
            return m.group(0)
        value = m.group(2)
        if value is not None and value.lower() in ("true", "false") and "--no-" + flag[2:] in flags():
            return flag if value.lower() == "true" else "--no-" + flag[2:]
        return flag if value is None else f"{flag} {value}"

    return FIELD.sub(show, text)


def shown(doc):
    """``doc`` (a command's JSON document) with every string's field references shown as flags: what
    the human rendering prints (``--json`` keeps the fields)."""
    if isinstance(doc, str):
        return as_flags(doc) if "`" in doc else doc
    if isinstance(doc, dict):
        return {k: shown(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return type(doc)(shown(v) for v in doc) if isinstance(doc, list) else tuple(shown(v) for v in doc)
    return doc
