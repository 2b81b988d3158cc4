import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
# the torchrun and Slurm tests share one reference run. Enough steps that a Slurm preemption, which
# lands one or more scheduler cycles after the first checkpoint (at step 106 once), leaves the
# resumed run steps to train when the test's time-limit warning comes
TORCHRUN_STEPS = 320


@pytest.fixture(scope="session")
def torchrun_reference(tmp_path_factory) -> str:
    """The final checksum line of an uninterrupted 2-rank torchrun run of TORCHRUN_STEPS steps."""
    if TORCHRUN is None:
        pytest.skip("torchrun is not installed")
    d = tmp_path_factory.mktemp("torchrun-ref")
    r = subprocess.run(
        [
            TORCHRUN,
            "--nproc-per-node",
            "2",
            "--standalone",
            str(EXAMPLE),
            "--steps",
            str(TORCHRUN_STEPS),
            "--checkpoint-dir",
            str(d / "ckpt"),
            "--checkpoint-every",
            "20",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith("final_checksum=")]
    assert len(lines) == 1
    return lines[0]


@pytest.fixture(scope="session")
def tiny():
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # main() calls torch.use_deterministic_algorithms, which imports inductor (~1 s): once here,
    # not in every forked child
    import torch._inductor.config  # noqa: F401

    return mod


def spawn_forked(tiny, argv, out: Path) -> int:
    """Start the example's main(argv) in a forked child (torch already imported: fast); stdout and
    stderr to ``out``. Returns the child's pid; the child exits with main's code (a GpuplanError:
    2 and one line, as the script does)."""
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
            from gpuplan.errors import GpuplanError

            try:
                code = tiny.main(argv)
            except GpuplanError as exc:
                print(f"error: {exc}", file=sys.stderr)
                code = 2
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            os._exit(code)
    return pid


def wait_forked(
    pid: int, kill_after: float | None = None, sig=signal.SIGTERM, kill_when=None, timeout: float = 300
) -> int:
    """Wait for a child of spawn_forked; send ``sig`` after ``kill_after`` seconds, or once
    ``kill_when()`` is true. Returns the exit status (negative: killed by that signal)."""
    t0 = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if (kill_after is not None and time.monotonic() - t0 >= kill_after) or (kill_when and kill_when()):
            os.kill(pid, sig)
            kill_after = kill_when = None
        if time.monotonic() - t0 > timeout:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)


def run_forked(tiny, argv, out: Path, kill_after: float | None = None, sig=signal.SIGTERM, kill_when=None):
    """spawn_forked and wait_forked in one."""
    return wait_forked(spawn_forked(tiny, argv, out), kill_after, sig, kill_when)


_references: dict = {}


@pytest.fixture(scope="session")
def reference_for(tiny, tmp_path_factory):
    """The final checksum of an uninterrupted run of ``steps`` steps (seed 0), computed once per
    step count: checkpointing never changes the result, so every fault test compares with it."""

    def get(steps: int, seed: int = 0) -> str:
        if (steps, seed) not in _references:
            d = tmp_path_factory.mktemp(f"ref{steps}")
            code = run_forked(
                tiny,
                [
                    "--steps",
                    str(steps),
                    "--seed",
                    str(seed),
                    "--checkpoint-dir",
                    str(d / "ckpt"),
                    "--checkpoint-every",
                    str(steps),
                    "--quiet",
                ],
                d / "out",
            )
            assert code == 0, (d / "out").read_text()[-2000:]
            _references[(steps, seed)] = checksum(d / "out")
            assert _references[(steps, seed)]
        return _references[(steps, seed)]

    return get


def finish(tiny, ckpt: Path, out: Path, argv: list[str], tries: int = 5) -> str:
    """Rerun until the run ends (exit 0); its checksum."""
    for _ in range(tries):
        code = run_forked(tiny, argv, out)
        if code == 0:
            return checksum(out)
    raise AssertionError(f"never finished; last exit {code}: {out.read_text()[-1500:]}")


def checksum(out: Path) -> str | None:
    lines = [l for l in out.read_text().splitlines() if l.startswith("final_checksum=")]
    return lines[-1] if lines else None


def says(out: Path, text: str) -> bool:
    """``out`` (a child's log, maybe not created yet) contains ``text``."""
    try:
        return text in out.read_text()
    except FileNotFoundError:
        return False
