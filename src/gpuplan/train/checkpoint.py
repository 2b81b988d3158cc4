"""Atomic, sharded checkpoints with torch.distributed.checkpoint (DCP).

A checkpoint is a directory ``step-00000123`` holding DCP's shards and ``.metadata``, ``extra.pt``
(RNG states, counters, scheduler: small Python objects) and, written last, ``COMPLETE`` (JSON:
step, config hash, files). It is written under a temporary name, every file and the directory are
fsync'ed, the marker is written and fsync'ed, and only then is the directory renamed to its final
name (rename is atomic on POSIX) and the parent fsync'ed. A directory without its marker, or with
a temporary name, never counts; the newest complete checkpoint is loaded, the one before it when
the newest is unreadable; the last ``keep`` complete ones are kept.

With ``async_save`` the state is staged to CPU memory by DCP's async_save (the only stall the
training loop sees) and written by a background thread; the marker and rename happen when the
write finishes (``poll``/``wait``). Distributed: every rank writes its shard; rank 0 commits after
all ranks report done.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from gpuplan.errors import GpuplanError

log = logging.getLogger("gpuplan.train")
# a single process saves without a process group, on purpose
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")

MARKER = "COMPLETE"
EXTRA = "extra.pt"
PREFIX = "step-"
TMP = ".tmp-"


class CheckpointError(GpuplanError):
    pass


@dataclass
class Pending:
    step: int
    tmp: Path
    future: object
    extra: dict
    started: float
    stall_s: float


def _dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _dist() else 0


def _storage_error(exc: BaseException, reraise: bool = False) -> OSError:
    """The OSError behind a failed save (DCP reports it inside CheckpointException.failures);
    anything else is re-raised."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError):
            return e
        for v in (getattr(e, "failures", None) or {}).values():
            todo.append(v[0] if isinstance(v, tuple) else v)
        todo += [e.__cause__, e.__context__]
    if reraise:
        raise exc
    return OSError(str(exc))


def _fsync_tree(path: Path) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointManager:
    def __init__(self, directory: str | Path, keep: int = 2, async_save: bool = True, config_hash: str = ""):
        if keep < 2:
            raise CheckpointError("keep", f"keep at least 2 checkpoints (got {keep}) so a bad newest one has a fallback")
        self.dir = Path(directory)
        self.keep = keep
        self.async_save = async_save and hasattr(dcp, "async_save")
        self.config_hash = config_hash
        self.pending: Pending | None = None
        # async saves run collectives from a background thread: give them their own group so they
        # never interleave with the training loop's collectives (DCP's advice for async_save)
        self.group = dist.new_group(backend="gloo") if _dist() else None
        if _rank() == 0:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                probe = self.dir / f".probe-{os.getpid()}"
                probe.write_text("ok")
                probe.unlink()
            except OSError as exc:
                raise CheckpointError("checkpoint_dir", f"{self.dir} is not writable ({exc.strerror})",
                                      "pass a writable --checkpoint-dir") from None
            for stale in self.dir.glob(f"{TMP}*"):  # partial writes of a killed run
                shutil.rmtree(stale, ignore_errors=True)
        if _dist():
            dist.barrier()

    # -- discovery ----------------------------------------------------------------------------------
    def complete(self) -> list[tuple[int, Path]]:
        """Complete checkpoints, newest first."""
        out = []
        for p in self.dir.glob(f"{PREFIX}*"):
            try:
                step = int(p.name[len(PREFIX):])
            except ValueError:
                continue
            if (p / MARKER).is_file():
                out.append((step, p))
        return sorted(out, reverse=True)

    # -- saving --------------------------------------------------------------------------------------
    def save(self, step: int, state: dict, extra: dict) -> float:
        """Start a checkpoint of ``state`` (DCP state dict) and ``extra`` (picklable). Returns the
        seconds the caller was stalled. Synchronous saves commit before returning."""
        self.wait()  # one checkpoint in flight at a time
        tmp = self.dir / f"{TMP}{PREFIX}{step:08d}"
        t0 = time.perf_counter()
        try:
            if _rank() == 0:
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
            if _dist():
                dist.barrier()
            if self.async_save:
                fut = dcp.async_save(state, checkpoint_id=str(tmp), process_group=self.group, no_dist=not _dist())
                fut = getattr(fut, "upload_completion", fut)
            else:
                dcp.save(state, checkpoint_id=str(tmp), process_group=self.group, no_dist=not _dist())
                fut = None
        except BaseException as exc:  # DCP wraps I/O errors in CheckpointException (a BaseException)
            self._failed(tmp, step, _storage_error(exc, reraise=True))
            return time.perf_counter() - t0
        stall = time.perf_counter() - t0
        self.pending = Pending(step, tmp, fut, extra, t0, stall)
        if fut is None:
            self.wait()
        return stall

    def poll(self) -> None:
        """Commit the checkpoint in flight if every rank finished writing it."""
        if self.pending is None:
            return
        done = self.pending.future is None or self.pending.future.done()
        if _dist():
            flag = torch.tensor([1 if done else 0])
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            done = bool(flag.item())
        if done:
            self.wait()

    def wait(self) -> None:
        """Finish and commit the checkpoint in flight (blocking)."""
        p, self.pending = self.pending, None
        if p is None:
            return
        try:
            if p.future is not None:
                p.future.result()
            if _dist():
                dist.barrier()
            if _rank() == 0:
                torch.save(p.extra, p.tmp / EXTRA)
                _fsync_tree(p.tmp)
                marker = {"step": p.step, "config_hash": self.config_hash, "time": time.time(),
                          "files": sorted(f.name for f in p.tmp.iterdir())}
                with open(p.tmp / MARKER, "w") as f:
                    json.dump(marker, f)
                    f.flush()
                    os.fsync(f.fileno())
                _fsync_dir(p.tmp)
                final = self.dir / f"{PREFIX}{p.step:08d}"
                if final.exists():
                    shutil.rmtree(final)
                os.rename(p.tmp, final)
                _fsync_dir(self.dir)
                self._prune()
                log.info("checkpoint step %d committed in %.3f s (stall %.3f s)", p.step,
                         time.perf_counter() - p.started, p.stall_s)
            if _dist():
                dist.barrier()
        except BaseException as exc:
            self._failed(p.tmp, p.step, _storage_error(exc, reraise=True))

    def _failed(self, tmp: Path, step: int, exc: OSError) -> None:
        """A write failed (a full disk, say): drop the partial one, keep the previous, go on."""
        if _rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        prev = self.complete()
        what = "no space left on device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        log.error("checkpoint of step %d failed: %s in %s; %s; training goes on", step, what, self.dir,
                  f"the previous checkpoint (step {prev[0][0]}) is intact" if prev else "no earlier checkpoint exists")
        self.last_error = f"checkpoint of step {step} failed: {what}"

    def _prune(self) -> None:
        for _, p in self.complete()[self.keep:]:
            shutil.rmtree(p, ignore_errors=True)

    # -- loading -------------------------------------------------------------------------------------
    def load_latest(self, state: dict) -> tuple[int, dict] | None:
        """Load the newest readable complete checkpoint into ``state`` (in place). Returns (step,
        extra), or None when there is none. A checkpoint of another config is refused."""
        found = self.complete()
        errors = []
        for step, path in found:
            try:
                marker = json.loads((path / MARKER).read_text())
                if not isinstance(marker, dict) or marker.get("step") != step:
                    raise ValueError("marker does not describe this checkpoint")
            except (OSError, ValueError) as exc:
                errors.append(f"{path.name}: corrupt marker ({exc})")
                log.warning("skipping %s: corrupt marker (%s); trying the previous checkpoint", path.name, exc)
                continue
            if self.config_hash and marker.get("config_hash") not in ("", self.config_hash):
                raise CheckpointError("checkpoint_dir", f"{path} was written by a different model or config "
                                                        f"(hash {marker.get('config_hash')}, this run {self.config_hash})",
                                      "use another --checkpoint-dir, or --restart to start over")
            try:
                dcp.load(state, checkpoint_id=str(path), process_group=self.group, no_dist=not _dist())
                extra = torch.load(path / EXTRA, weights_only=False)
            except Exception as exc:  # unreadable shard or pickle: fall back to the one before
                errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
                log.warning("could not load %s (%s); falling back to the previous checkpoint", path.name, exc)
                continue
            log.warning("resumed from %s (step %d)", path.name, step)
            return step, extra
        if found:
            raise CheckpointError("checkpoint_dir", f"no checkpoint in {self.dir} could be loaded ({'; '.join(errors)})",
                                  "fix or remove them, or pass --restart to start over")
        return None
