import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"


@pytest.fixture(scope="session")
def tiny():
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_forked(tiny, argv, out: Path, kill_after: float | None = None, sig=signal.SIGTERM, kill_when=None):
    """Run the example's main(argv) in a forked child (torch already imported: fast); stdout to
    ``out``. Send ``sig`` after ``kill_after`` seconds, or once ``kill_when()`` is true. Returns the
    exit status (negative: killed by that signal)."""
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            # pytest replaces sys.stdout with its capture: write to the file itself
            sys.stdout = sys.stderr = os.fdopen(fd, "w", buffering=1)
            import logging
            logging.basicConfig(stream=sys.stderr, force=True)
            code = tiny.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            os._exit(code)
    t0 = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if (kill_after is not None and time.monotonic() - t0 >= kill_after) or (kill_when and kill_when()):
            os.kill(pid, sig)
            kill_after = kill_when = None
        time.sleep(0.002)


def checksum(out: Path) -> str | None:
    lines = [l for l in out.read_text().splitlines() if l.startswith("final_checksum=")]
    return lines[-1] if lines else None
