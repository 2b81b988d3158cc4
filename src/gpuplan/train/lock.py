"""One writer per checkpoint directory: an advisory ``flock`` on ``<dir>/.lock``.

The kernel drops the lock when its holder dies (SIGKILL, OOM, node reboot on a local disk), so a
crashed run never leaves a stale lock behind; the file stays and says who held it last (pid, host,
start time) so that a second trainer can name the holder. On NFS, Linux emulates flock with POSIX
locks (works); Lustre needs the ``flock`` mount option. The directory itself is flocked as well,
where the file system allows it, so that a trainer on a disk too full for ``.lock`` still excludes
the others. Torch-free.
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


HELD = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class DirectoryLock:
    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK
        self.fd: int | None = None
        self.dir_fd: int | None = None

    def acquire(self) -> DirectoryLock:
        # the directory itself is locked too, by every trainer: one that finds the disk too full to
        # create .lock holds only that, and a second trainer that creates .lock once space is freed
        # must still find it held (a directory cannot always be flocked: NFS emulates flock with
        # POSIX locks, which a read-only descriptor cannot take; then .lock alone decides)
        opened = os.open(self.path.parent, os.O_RDONLY)
        dir_fd: int | None = opened
        try:
            fcntl.flock(opened, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(opened)
            dir_fd = None
            if exc.errno in HELD:
                raise LockHeld(self.holder()) from None
        try:
            fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or dir_fd is None:
                self._close(dir_fd)
                raise
            # a full disk with no room even for an empty file: the directory's lock holds alone
            fd = None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = self.holder()
                os.close(fd)
                self._close(dir_fd)
                if exc.errno in HELD:
                    raise LockHeld(holder) from None
                raise
        self.fd, self.dir_fd = fd, dir_fd
        self._write_holder()
        return self

    @staticmethod
    def _close(fd: int | None) -> None:
        if fd is not None:
            os.close(fd)

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
        for name in ("fd", "dir_fd"):
            fd = getattr(self, name)
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                finally:
                    os.close(fd)
                    setattr(self, name, None)
