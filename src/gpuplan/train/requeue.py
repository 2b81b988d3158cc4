"""The requeue marker: ``<checkpoint dir>/requeue.marker``, written by rank 0 when the trainer stops
on a signal with exit 75; and the finished marker, ``finished.marker``, written by rank 0 when the
training loop ends on its own.

Launched by torchrun, the trainer's exit code does not reach the batch script: the agent reports
its own (1 after workers exit 75 on a forwarded SIGTERM; a death by signal when it does not handle
one). The script ``gpuplan slurm`` writes therefore requeues when the launcher exits 75 *or* this
file exists, and removes it. The trainer removes a stale one when it starts, so that a later crash
is never requeued by an old marker. Creating the file needs no free blocks, so it is written on a
full disk too (its JSON content is best effort).

A time-limit warning can land after the last step, while the workers shut down: the trainer has
nothing left to save, but torchrun's agent, which handles SIGUSR1 to forward it, exits 1 on it
(``SignalException``). The finished marker lets the script tell that from a crash: a launcher that
fails after a forwarded signal, with the loop finished, ends the job as done, not failed. Torch-free.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

NAME = "requeue.marker"
FINISHED = "finished.marker"


def write(directory: Path, step: int, signal_name: str, checkpointed: bool) -> Path:
    return _write(Path(directory) / NAME, {"step": step, "signal": signal_name, "checkpointed": checkpointed})


def write_finished(directory: Path, step: int) -> Path:
    return _write(Path(directory) / FINISHED, {"step": step})


def _write(path: Path, fields: dict) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(
            fd, json.dumps({**fields, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}).encode()
        )
        os.fsync(fd)
    except OSError:
        pass  # the file exists, which is what the batch script reads
    finally:
        os.close(fd)
    return path


def clear(directory: Path) -> None:
    """Remove both markers (a start: neither belongs to this run)."""
    for name in (NAME, FINISHED):
        try:
            os.unlink(Path(directory) / name)
        except FileNotFoundError:
            pass
