"""The on-disk side of checkpoints (checkpoint.py): directory names, the marker, fsync, the space a
checkpoint takes and making room for the next, and one-line descriptions of what failed."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from pathlib import Path

import torch.distributed as dist

from gpuplan.errors import GpuplanError
from gpuplan.train.space import free_bytes, human, tree_bytes

log = logging.getLogger("gpuplan.train")

MARKER = "COMPLETE"
EXTRA = "extra.pt"
RANKS = "ranks"  # extra.pt under torchrun: every rank's extra, in rank order
PREFIX = "step-"
TMP = ".tmp-"
CORRUPT = ".corrupt-"
OLD_RUNS = "old-runs"
ROOM_MARGIN = 1.05  # a save needs the last one's size, and a little more for what grew
# never swallowed: interpreter shutdown and exits. Everything else that a save or a load raises is
# handled, BaseException included (DCP's CheckpointException is not an Exception)
PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)


class CheckpointError(GpuplanError):
    pass


def is_dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_dist() else 0


def describe(exc: BaseException) -> str:
    """What went wrong, for one log line: the OSError behind it when there is one (DCP wraps them
    in CheckpointException.failures, torch.save in a RuntimeError), else the exception's first line."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError):
            if e.errno == errno.ENOSPC:
                return "no space left on device"
            return e.strerror or str(e)
        for v in (getattr(e, "failures", None) or {}).values():
            todo.append(v[0] if isinstance(v, tuple) else v)
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fsync_tree(path: Path) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step_of(path: Path) -> int | None:
    """The step of a ``step-00000123`` directory (not of a quarantined or temporary one)."""
    digits = path.name[len(PREFIX) :]
    return int(digits) if path.name.startswith(PREFIX) and digits.isdigit() else None


def complete(directory: Path) -> list[tuple[int, Path]]:
    """Committed checkpoints (those with a marker), newest first. Reads only: takes no lock."""
    out = [
        (s, p) for p in Path(directory).glob(f"{PREFIX}*") if (s := step_of(p)) is not None and (p / MARKER).is_file()
    ]
    return sorted(out, reverse=True)


def quarantined(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).glob(f"{PREFIX}*{CORRUPT}*") if p.is_dir())


def marker_bytes(path: Path) -> int | None:
    """The bytes a checkpoint takes, as its marker says (else as measured); None: unreadable."""
    try:
        n = json.loads((path / MARKER).read_text()).get("bytes")
        return int(n) if n else tree_bytes(path)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def make_room(directory: Path, need: int | None, step: int) -> None:
    """Before writing step ``step``: if the free space is below ``need`` (what the last checkpoint
    took), remove older checkpoints, oldest first, never the newest complete one."""
    free = free_bytes(directory)
    if not need or free is None or free >= need * ROOM_MARGIN:
        return
    for s, path in reversed(complete(directory)[1:]):
        shutil.rmtree(path, ignore_errors=True)
        free = free_bytes(directory) or 0
        log.warning(
            "low on space in %s: removed step %d before writing step %d (%s free now, a checkpoint "
            "takes %s; the newest is kept)",
            directory,
            s,
            step,
            human(free),
            human(need),
        )
        if free >= need * ROOM_MARGIN:
            return


def room_short(directory: Path, need: int | None) -> tuple[int, int] | None:
    """(free, reclaimable) bytes when even removing every older checkpoint would not make room for
    one more of ``need`` bytes; None when it would (or nothing is known)."""
    free = free_bytes(directory)
    if not need or free is None:
        return None
    reclaimable = sum(marker_bytes(p) or 0 for _, p in complete(directory)[1:])
    return None if free + reclaimable >= need * ROOM_MARGIN else (free, reclaimable)


def move_aside(directory: Path) -> tuple[Path | None, tuple[str, str, str] | None]:
    """Move every checkpoint of ``directory`` (quarantined ones too) to ``old-runs/<time>/``:
    (where they went, or None when there were none; the error's field, message and fix, or None)."""
    dest, err = None, None
    olds = [p for p in directory.iterdir() if p.name.startswith(PREFIX)]
    if olds:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        dest = directory / OLD_RUNS / stamp
        n = 1
        while dest.exists():
            n += 1
            dest = directory / OLD_RUNS / f"{stamp}-{n}"
        try:
            dest.mkdir(parents=True)
            for p in olds:
                os.rename(p, dest / p.name)
            fsync_dir(directory)
        except OSError as exc:
            err = (
                "checkpoint_dir",
                f"could not move the previous run's checkpoints in {directory} aside ({exc.strerror})",
                "free some space, or pass another `checkpoint_dir`",
            )
        else:
            log.warning(
                "restart: moved the previous run's %d checkpoint(s) to %s (delete it when you no longer need them)",
                len(olds),
                dest,
            )
    return dest, err
