"""One writer per checkpoint directory: an advisory ``flock`` on ``<dir>/.lock``.

The kernel drops the lock when its holder dies (SIGKILL, OOM, node reboot on a local disk), so a
crashed run never leaves a stale lock behind; the file stays and says who held it last (pid, host,
start time) so that a second trainer can name the holder. On NFS, Linux emulates flock with POSIX
locks (works); Lustre needs the ``flock`` mount option. Torch-free.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCK = ".lock"


class LockHeld(Exception):
    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


class DirectoryLock:
    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK
        self.fd: int | None = None

    def acquire(self) -> DirectoryLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # a full disk with no room even for an empty file: lock the directory itself (works on
            # local file systems, which is where a disk this full usually is)
            fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = self.holder()
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LockHeld(holder) from None
            raise
        self.fd = fd
        self._write_holder()
        return self

    def _write_holder(self) -> None:
        text = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        )
        if self.fd is None:
            return
        try:  # best effort: a full disk may refuse even these few bytes, and the lock holds anyway
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text.encode(), 0)
        except OSError:
            pass

    def holder(self) -> str:
        try:
            h = json.loads(self.path.read_text())
            return f"pid {h['pid']} on {h['host']} (since {h['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process (its pid is not recorded)"

    def release(self) -> None:
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None
