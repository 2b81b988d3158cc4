"""``gpuplan ui``: a local web page over the CLI's commands.

Each form submission runs the command's own entry point in-process with ``--json`` (runner.py),
so the page shows exactly the numbers and the one-line errors the terminal does; the pictures and
the numbers table come from :mod:`gpuplan.report`, as in ``--html`` reports. The page's scripts
(plotly.js from plotly's wheel, static/ui.js) are served from the installed packages: nothing is
fetched from the internet.
"""
