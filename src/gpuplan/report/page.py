"""One self-contained HTML file: the figures (drawn by the plotly.js inlined from plotly's wheel),
the numbers table and the JSON document itself, so it opens offline and can be mailed."""

from __future__ import annotations

import functools
import html
import json
import shlex
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.report.figures import figures
from gpuplan.report.numbers import rows

TITLES = {
    "train": "Training plan",
    "search": "Parallel plans searched",
    "serve": "Serving plan",
    "serve-sim": "Serving simulated",
    "pipeline": "Pipeline schedule simulated",
    "cluster sim": "Cluster simulated",
    "cluster whatif": "What a preemption costs",
    "tco": "Rent or own",
    "checkpoint-interval": "Checkpoint interval",
}

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 1rem 1.5rem; color: #1b1b1b; }
h1 { font-size: 1.4rem; margin: 0.2rem 0; } .command { font-family: ui-monospace, monospace; color: #444; }
.figure { min-height: 320px; margin: 1rem 0; border: 1px solid #e3e3e3; border-radius: 6px; }
table.numbers { border-collapse: collapse; margin: 1rem 0; }
table.numbers td, table.numbers th { padding: 0.2rem 0.8rem; border-bottom: 1px solid #eee; text-align: left; }
table.numbers td.value { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; padding: 0.6rem; overflow: auto; max-height: 30rem; font-size: 12px; }
"""


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js as plotly's wheel ships it: the page needs nothing from the network."""
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    # Inside <script>, "</" would end the element: escape it (and keep the JSON strict)
    return json.dumps(value, allow_nan=False).replace("</", "<\\/")


def numbers_html(command: str, doc: dict) -> str:
    """The numbers table; each value cell carries its JSON key and raw value (data-key,
    data-value), which is what the browser tests compare with ``--json``."""
    out = ['<table class="numbers"><tbody>']
    for r in rows(command, doc):
        out.append(
            f'<tr><th scope="row">{html.escape(r.label)}</th><td class="value" data-key="{html.escape(r.key)}" '
            f'data-value="{html.escape(r.raw())}">{html.escape(r.text)}</td></tr>'
        )
    out.append("</tbody></table>")
    return "".join(out)


def results(command: str, doc: dict, slo: dict | None = None) -> dict:
    """What the page shows for a document: figures, the numbers table as HTML, and the document."""
    return {"figures": figures(command, doc, slo), "numbers_html": numbers_html(command, doc), "doc": doc}


def report_html(command: str, doc: dict, argv: list[str] | None = None, slo: dict | None = None) -> str:
    res = results(command, doc, slo)
    title = TITLES.get(command, command)
    line = "gpuplan " + shlex.join(argv) if argv else f"gpuplan {command}"
    divs = "".join(f'<div class="figure" id="figure-{i}"></div>' for i in range(len(res["figures"])))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuplan: {html.escape(title)}</title><style>{STYLE}</style></head>
<body><h1>{html.escape(title)}</h1><p class="command">{html.escape(line)}</p>
{divs}
<h2>Numbers</h2>{res["numbers_html"]}
<details><summary>The JSON document (as <code>--json</code> prints it)</summary><pre id="doc"></pre></details>
<script>{plotly_js()}</script>
<script id="report-data" type="application/json">{_script_json({"figures": res["figures"], "doc": doc})}</script>
<script>
const data = JSON.parse(document.getElementById("report-data").textContent);
document.getElementById("doc").textContent = JSON.stringify(data.doc, null, 2);
data.figures.forEach((f, i) => Plotly.newPlot("figure-" + i, f.data, f.layout, {{responsive: true, displaylogo: false}}));
</script></body></html>
"""


def write_report(
    path: str | Path, command: str, doc: dict, argv: list[str] | None = None, slo: dict | None = None
) -> None:
    Path(path).write_text(report_html(command, doc, argv, slo), encoding="utf-8")
