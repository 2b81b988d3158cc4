"""Stop signals (SIGTERM, SIGUSR1, SIGINT) recorded, never acted on at once, from the first line
of the trainer until its loop can checkpoint and exit 75.

``defer()`` goes before ``import torch`` (seconds, and longer on a busy node): a preemption notice
that arrives then is remembered, and ``Resilient`` ends the run with exit 75 as soon as it starts,
instead of Python's default (death by SIGTERM, a KeyboardInterrupt traceback on SIGINT). Under
torchrun, ``watch_parent()`` makes a worker notice that its agent died (SIGKILL, or a signal the
agent does not handle, such as SIGUSR1 on older torch): it then stops as on SIGTERM, checkpointing
with the other ranks, instead of training on as an orphan beside the next run. Torch-free.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
_received: int | None = None
_active = False  # a Resilient loop is running and will act on the signal
_finished = False  # a Resilient loop has ended on its own: a signal now has nothing to save


def record(signum, frame) -> None:
    """The handler: remember the first stop signal (the loop acts on it at the end of a step)."""
    global _received
    if _received is None:
        _received = signum
        name = signal.Signals(signum).name
        # os.write, not logging: a handler that takes the logging lock can deadlock the main thread
        os.write(
            2,
            (
                f"received {name}: finishing the step, then a checkpoint\n"
                if _active
                else f"received {name} after the training loop finished: nothing left to save\n"
                if _finished
                else f"received {name} during start-up: stopping as soon as the training loop starts (exit 75)\n"
            ).encode(),
        )


def defer() -> None:
    """Record stop signals from now on (main thread only). Idempotent."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, record)
    if under_torchrun():
        watch_parent()


def received() -> int | None:
    return _received


def clear() -> None:
    global _received
    _received = None


def set_active(active: bool) -> None:
    global _active
    _active = active


def set_finished(finished: bool) -> None:
    global _finished
    _finished = finished


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


_watching = False


def watch_parent(interval_s: float = 0.2) -> None:
    """Stop this process as on SIGTERM when its parent (the torchrun agent) dies: a daemon thread
    polls getppid(), which changes when the process is re-parented. Polling, not
    prctl(PR_SET_PDEATHSIG): that fires when the *thread* that forked us exits, which is not
    necessarily the agent's death."""
    global _watching
    if _watching:
        return
    _watching = True
    parent = os.getppid()

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os.write(2, f"parent process {parent} (the launcher) died: stopping as on SIGTERM\n".encode())
        if _active:
            os.kill(os.getpid(), signal.SIGTERM)  # the loop checkpoints with the other ranks and exits 75
        else:  # start-up (the rendezvous store lived in the agent) or after the loop: nothing to save
            sys.stderr.flush()
            os._exit(0 if _finished else 75)

    threading.Thread(target=run, name="gpuplan-parent-watch", daemon=True).start()
