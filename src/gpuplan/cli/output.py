"""How every command prints what it answers: strict JSON for ``--json``, a rich rendering
otherwise, and the ``--html`` report of the same document (gpuplan/report/)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

# The command line main() is running, for the header of an --html report
ARGS: list[str] = []
# Whether this command has printed its JSON document (main() prints one for a plan that does not
# fit when the command did not: with --json, stdout always holds one document)
EMITTED: list[bool] = [False]


def show(doc: dict[str, Any], json_out: bool, renderer: str) -> None:
    """Print ``doc`` as JSON, or through a rich renderer named ``module.function`` under gpuplan.cli
    (e.g. ``render_sims.render_tco``), imported only when it draws."""
    if json_out:
        emit_json(doc)
        return
    import importlib

    from gpuplan.cli.flags import shown  # the library names fields; the CLI shows its flags

    module, function = renderer.rsplit(".", 1)
    getattr(importlib.import_module(f"gpuplan.cli.{module}"), function)(shown(doc))


def report(path: str | None, command: str, doc: dict[str, Any], slo: dict[str, Any] | None = None) -> None:
    """--html: the report of the document --json prints (gpuplan/report/)."""
    if path:
        from gpuplan.report.page import write_report

        drop = {i for i, a in enumerate(ARGS) if a == "--html"} | {i + 1 for i, a in enumerate(ARGS) if a == "--html"}
        argv = [a for i, a in enumerate(ARGS) if i not in drop and not a.startswith("--html=") and a != "--json"]
        write_report(path, command, strict(doc), argv=argv or None, slo=slo)


def plot(path: str | None, command: str, doc: dict[str, Any], slo: dict[str, Any] | None = None) -> None:
    """--plot: the --html report's pictures as one static file (gpuplan/report/static.py)."""
    if path:
        from gpuplan.report.static import write_plot

        write_plot(path, command, strict(doc), slo=slo)


def emit_json(doc: Any) -> None:
    # Strict JSON: a NaN or an infinity left in a document is a bug upstream; it becomes null here
    # rather than a token other parsers reject.
    sys.stdout.write(json.dumps(strict(doc), indent=2, allow_nan=False) + "\n")
    EMITTED[0] = True


def strict(x: Any) -> Any:
    """``x`` with numpy values made plain and NaN or infinities made None."""
    if isinstance(x, dict):
        return {k: strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):  # numpy scalars and arrays
        return strict(x.tolist())
    if isinstance(x, float):
        return (x + 0.0) if math.isfinite(x) else None
    return x
