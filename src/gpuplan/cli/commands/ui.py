"""``gpuplan ui``: the local web page (cli/web/)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuplan.cli.params import (
    at_least,
    checked,
)
from gpuplan.errors import GpuplanError


@checked(port=at_least(0, 65535))
def ui(port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8000) -> None:
    """A local web page: a form per command, pictures, the same numbers as --json (cli/web/)."""
    from gpuplan.cli.web.server import make_server, warm

    try:
        server = make_server(port)
    except OSError as exc:
        raise GpuplanError(
            "port", f"cannot listen on 127.0.0.1:{port} ({exc.strerror})", "use another --port, or --port 0"
        ) from None
    warm()
    sys.stdout.write(f"gpuplan ui: http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C stops it)\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
