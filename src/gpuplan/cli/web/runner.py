"""Run a command as the terminal does, in-process: the CLI's entry point with ``--json``, its
stdout and stderr captured. The page therefore shows the document ``--json`` prints and the
one-line error the terminal prints, from the same code."""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
from dataclasses import dataclass
from typing import Any

# stdout and stderr are the process's: one command at a time
_LOCK = threading.Lock()
# "error: <field>: <what>; <fix>" (GpuplanError), or click's "Invalid value for '--gpus': ..."
_FIELD = re.compile(r"^error: ([a-z_][a-z0-9_]*): ")
_FLAG = re.compile(r"'(--?[a-z0-9][a-z0-9-]*|[A-Z_]+)'")


@dataclass(frozen=True)
class Outcome:
    code: int  # the CLI's exit code: 0 answered, 2 bad input, 3 does not fit
    doc: Any  # the JSON document, or None
    error: str  # the one-line message on stderr ("" when none)

    def named(self) -> str | None:
        """The field the error names, as the CLI spells it (a parameter or a flag)."""
        if not self.error:
            return None
        m = _FIELD.match(self.error)
        if m:
            return m.group(1)
        m = _FLAG.search(self.error)
        return m.group(1).lower() if m else None


def run(args: list[str]) -> Outcome:
    from gpuplan.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with _LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([*args, "--json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    text = out.getvalue()
    doc = json.loads(text) if text.strip() else None
    if doc is not None and set(doc) == {"fits", "error"}:  # a plan that does not fit, no report: the error says it
        doc = None
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("error:")]
    return Outcome(code, doc, lines[0] if lines else "")
