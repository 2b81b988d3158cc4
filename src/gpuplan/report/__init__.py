"""Pictures and numbers of a command's JSON document, for people rather than scripts.

Everything here reads the document a command prints with ``--json`` (never a second
computation), so a page or a report shows the numbers the terminal does:

* :mod:`gpuplan.report.figures`: interactive figures (plotly's JSON figure schema, drawn in the
  browser by the plotly.js that plotly's wheel ships, so nothing is fetched at run time);
* :mod:`gpuplan.report.numbers`: the numbers table, each row naming the JSON key it shows;
* :mod:`gpuplan.report.page`: one self-contained HTML file (inline script, figures and data).
"""

from __future__ import annotations

REPORTED = (
    "train",
    "search",
    "serve",
    "serve-sim",
    "pipeline",
    "cluster sim",
    "cluster whatif",
    "tco",
    "checkpoint-interval",
)
