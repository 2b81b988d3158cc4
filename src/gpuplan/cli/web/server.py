"""The local web server of ``gpuplan ui`` (the standard library's, bound to 127.0.0.1).

Routes: ``/`` the page; ``/static/...`` its script and style and plotly.js (from plotly's
wheel); ``/api/<form>?<fields>`` one command run with ``--json``, answered as JSON: the command
line, the document, the figures and the numbers table, or the CLI's one-line error and the field
it names.
"""

from __future__ import annotations

import functools
import json
import shlex
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gpuplan.cli.web import forms, runner
from gpuplan.cli.web.page import index_html

STATIC = {"ui.js": "text/javascript", "ui.css": "text/css"}


@functools.lru_cache(maxsize=len(STATIC) + 1)
def _static(name: str) -> bytes:
    if name == "plotly.min.js":
        return (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    return (resources.files("gpuplan.cli.web") / "static" / name).read_bytes()


@functools.lru_cache(maxsize=1)
def _index() -> bytes:
    return index_html().encode()


def _slo(query: dict[str, str]) -> dict[str, float | None]:
    """The serve form's latency targets, for the line on its picture (the command checked them)."""
    from gpuplan import inputs

    out: dict[str, float | None] = {}
    for key, name in (("tpot_s", "itl_slo"), ("ttft_s", "ttft_slo")):
        text = query.get(name, "").strip()
        out[key] = inputs.duration(text, name) if text else None
    return out


def answer(key: str, query: dict[str, str]) -> dict[str, Any]:
    """One form submission: the command run once, its document and what the page draws of it."""
    from gpuplan.report.page import results

    args = forms.argv(key, query)
    outcome = runner.run(args)
    res: dict[str, Any] = {
        "code": outcome.code,
        "argv": args,
        "command_line": "gpuplan " + shlex.join(args),
        "error": None,
        "doc": outcome.doc,
        "figures": [],
        "numbers_html": "",
    }
    if outcome.error:
        named = outcome.named()
        res["error"] = {"field": forms.field_for(key, named) if named else None, "message": outcome.error}
    if outcome.doc is not None:
        form = forms.BY_KEY[key]
        slo = _slo(query) if key == "serve" and outcome.code == 0 else None
        res.update(results(form.report, outcome.doc, slo))
    return res


class Handler(BaseHTTPRequestHandler):
    server_version = "gpuplan"

    def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        if url.path == "/":
            self._send(HTTPStatus.OK, _index(), "text/html; charset=utf-8")
        elif url.path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon", cache=True)
        elif url.path.startswith("/static/") and url.path[8:] in (*STATIC, "plotly.min.js"):
            name = url.path[8:]
            self._send(HTTPStatus.OK, _static(name), STATIC.get(name, "text/javascript"), cache=True)
        elif url.path.startswith("/api/") and url.path[5:] in forms.BY_KEY:
            body = json.dumps(answer(url.path[5:], dict(parse_qsl(url.query))), allow_nan=False)
            self._send(HTTPStatus.OK, body.encode(), "application/json")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        pass  # the terminal shows the URL, not a line per request


def warm() -> threading.Thread:
    """Build the page and import the planners before the first visitor, who then waits for an
    answer rather than for imports."""
    _index()
    # One small plan through the whole path, in the background: the first answer is then warm too
    thread = threading.Thread(target=runner.run, args=(["train", "llama-3.1-8b", "--zero", "2"],), daemon=True)
    thread.start()
    return thread


def make_server(port: int = 8000, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), Handler)
