"""Atomic, sharded, checksummed checkpoints with torch.distributed.checkpoint (DCP).

A checkpoint is a directory ``step-00000123`` holding DCP's shards and ``.metadata``, ``extra.pt``
(RNG states, counters, scheduler: small Python objects) and, written last, ``COMPLETE`` (JSON:
step, config hash, and every file's size and CRC-32). It is written under a temporary name, every
file and the directory are fsync'ed, the marker is written and fsync'ed, and only then is the
directory renamed to its final name (rename is atomic on POSIX) and the parent fsync'ed. A
directory with a temporary name never counts (and is removed at the next start).

Loading verifies the newest checkpoint against its marker before DCP reads it. Whatever goes wrong
(a missing marker, a file truncated, zeroed, deleted or with one byte flipped, DCP or unpickling
failing) is one warning line: the directory is quarantined (renamed ``step-N.corrupt-<reason>``,
never deleted: a person may want it) and the one before is tried. If none loads, the error names
each directory and why; a later start refuses too (rather than silently starting over) until
``restart`` moves them aside.

A failed save, at any stage and for any reason (a full disk, typically), removes its temporary
directory, is reported with the free space, and training goes on; the previous checkpoint stays.
Before a write, when the free space is below the size of the last checkpoint, older checkpoints are
removed to make room, never the newest complete one.

One writer per directory: rank 0 holds an advisory lock (``lock.py``) for the manager's life.

With ``async_save`` the state is staged to CPU memory by DCP's async_save (in the caller's
thread); the write, and on rank 0 the commit (``extra.pt``, checksums, fsync, marker, rename,
pruning), run in a background thread. DCP's save ends only after every rank wrote its shard and the
coordinator wrote the metadata, so rank 0 commits without asking the others.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from gpuplan.train import integrity, validate
from gpuplan.train.ckpt_disk import (
    EXTRA,
    MARKER,
    PASS_THROUGH,
    PREFIX,
    RANKS,
    TMP,
    CheckpointError,
    complete,
    describe,
    fsync_dir,
    fsync_tree as _fsync_tree,  # a module global: tests make it fail
    is_dist,
    make_room,
    marker_bytes,
    move_aside,
    quarantined,
    rank,
    room_short,
    step_of,
)
from gpuplan.train.ckpt_load import model_mismatch, newest_good, quarantine
from gpuplan.train.lock import DirectoryLock, LockHeld
from gpuplan.train.space import free_bytes, human

__all__ = ["CheckpointError", "CheckpointManager", "complete", "describe", "quarantined", "step_of"]

log = logging.getLogger("gpuplan.train")
# a single process saves without a process group, on purpose
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


@dataclass
class Pending:
    step: int
    tmp: Path
    job: Future
    started: float


class CheckpointManager:
    def __init__(self, directory: str | Path, keep: int = 2, async_save: bool = True, config_hash: str = ""):
        self.keep = validate.count(
            "keep", keep, minimum=2, fix="keep at least 2 checkpoints so that a damaged newest one has a fallback"
        )
        self.dir = Path(directory)
        self.async_save = bool(async_save) and hasattr(dcp, "async_save")
        self.config_hash = config_hash
        self.pending: Pending | None = None
        self.committed: int | None = None  # newest step this run committed or resumed from
        self.last_error: str | None = None  # why the last save failed (None once one succeeds)
        self.failures = 0  # saves failed in a row
        self.last_bytes: int | None = None  # size of the last checkpoint: what the next one needs
        self._lock: DirectoryLock | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._space_warned = False
        # async saves run collectives from a background thread: give them their own group so they
        # never interleave with the training loop's collectives (DCP's advice for async_save)
        self.group = dist.new_group(backend="gloo") if is_dist() else None
        # and the training loop's own CPU collectives (the stop flag) a gloo group of their own: the
        # default group may be NCCL (no CPU backend), and the save group may be busy in the background
        self.loop_group = dist.new_group(backend="gloo") if is_dist() else None
        err = None
        if rank() == 0:
            try:
                self._open()
            except CheckpointError as exc:
                err = (exc.field, exc.message, exc.fix)
        err = self._bcast(err)  # every rank fails alike, none waits for rank 0 forever
        if err:
            self.close()
            raise CheckpointError(*err)

    def _open(self) -> None:
        def not_writable(why: str | None) -> CheckpointError:
            return CheckpointError(
                "checkpoint_dir",
                f"{self.dir} is not writable ({why})",
                "pass a writable `checkpoint_dir`",
            )

        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise not_writable(exc.strerror) from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise not_writable("permission denied")
        try:
            self._lock = DirectoryLock(self.dir).acquire()
        except LockHeld as exc:
            raise CheckpointError(
                "checkpoint_dir",
                f"{self.dir} is in use by another trainer: {exc.holder}",
                "wait for it to end or stop it, or pass another `checkpoint_dir`",
            ) from None
        except OSError as exc:
            raise not_writable(exc.strerror) from None
        # partial writes of a run that was killed: ours to remove now that we are the only writer
        # (on a full disk this is what gives the space back)
        for stale in self.dir.glob(f"{TMP}*"):
            shutil.rmtree(stale, ignore_errors=True)
        done = self.complete()
        if done:
            self.last_bytes = marker_bytes(done[0][1])

    def close(self) -> None:
        """Release the directory (call after ``wait``)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _gather(self, extra: dict) -> dict:
        """Every rank's ``extra`` (its RNG states, tokens, data position) for rank 0 to write, in
        rank order under ``RANKS``: each rank resumes its own (collective)."""
        if not is_dist():
            return extra
        box: list | None = [None] * dist.get_world_size() if rank() == 0 else None
        dist.gather_object(extra, box, dst=0, group=self.group)
        return {RANKS: box} if box is not None else extra

    def own_extra(self, extra: dict) -> dict:
        """This rank's part of a checkpoint's ``extra`` (one written by a single process, or before
        extras were kept per rank, is every rank's; a checkpoint of another world size gives each
        rank the one of its rank modulo that size, said once)."""
        per_rank = extra.get(RANKS) if isinstance(extra, dict) else None
        if not per_rank:
            return extra
        r, n = rank(), dist.get_world_size() if is_dist() else 1
        if n != len(per_rank) and r == 0:
            log.warning(
                "resuming %d ranks from a checkpoint of %d: rank r takes the RNG states, tokens and data "
                "position saved by rank r mod %d",
                n,
                len(per_rank),
                len(per_rank),
            )
        return per_rank[r % len(per_rank)]

    def _bcast(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if not is_dist():
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    # -- discovery ----------------------------------------------------------------------------------
    def complete(self) -> list[tuple[int, Path]]:
        """Complete checkpoints, newest first."""
        return complete(self.dir)

    # -- saving --------------------------------------------------------------------------------------
    def save(self, step: int, state: dict, extra: dict) -> float:
        """Start a checkpoint of ``state`` (DCP state dict) and ``extra`` (picklable); collective.
        Returns the seconds spent here, waiting for the previous save included. A failure is
        reported and leaves no trace; synchronous saves commit before returning."""
        t0 = time.perf_counter()
        self.wait()  # one checkpoint in flight at a time
        extra = self._gather(extra)
        tmp = self.dir / f"{TMP}{PREFIX}{step:08d}"
        failure = None
        if rank() == 0:
            try:
                self._make_room(step)
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
            except PASS_THROUGH:
                raise
            except BaseException as exc:
                failure = describe(exc)
        failure = self._bcast(failure)  # also the barrier: the directory exists for every rank
        if failure:
            self._failed(step, tmp, failure)
            return time.perf_counter() - t0
        try:
            if self.async_save:
                fut = dcp.async_save(state, checkpoint_id=str(tmp), process_group=self.group, no_dist=not is_dist())
                fut = getattr(fut, "upload_completion", fut)
            else:
                dcp.save(state, checkpoint_id=str(tmp), process_group=self.group, no_dist=not is_dist())
                fut = None
        except PASS_THROUGH:
            raise
        except BaseException as exc:
            self._failed(step, tmp, describe(exc))
            return time.perf_counter() - t0
        if fut is not None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuplan-commit")
            job = self._pool.submit(self._finish, fut, step, tmp, extra)
        else:
            job = Future()
            try:
                job.set_result(self._finish(None, step, tmp, extra))
            except PASS_THROUGH:
                raise
            except BaseException as exc:
                job.set_exception(exc)
        self.pending = Pending(step, tmp, job, t0)
        if fut is None:
            self.wait()
        return time.perf_counter() - t0

    def _finish(self, fut, step: int, tmp: Path, extra: dict) -> int | None:
        """Wait for DCP's write; on rank 0 commit it. Returns the checkpoint's bytes (rank 0)."""
        if fut is not None:
            fut.result()
        if rank() != 0:
            return None
        torch.save(extra, tmp / EXTRA)
        files = integrity.manifest(tmp)
        _fsync_tree(tmp)
        nbytes = sum(f["bytes"] for f in files.values())
        marker = integrity.seal(
            {
                "step": step,
                "config_hash": self.config_hash,
                "time": time.time(),
                "digest": integrity.DIGEST,
                "bytes": nbytes,
                "files": files,
            }
        )
        with open(tmp / MARKER, "w") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(tmp)
        final = self.dir / f"{PREFIX}{step:08d}"
        if final.exists():  # only a leftover that no load accepted could be there: ours replaces it
            shutil.rmtree(final)
        os.rename(tmp, final)
        # committed from here on: a failure to sync the directory or to remove older checkpoints is
        # not the save's (it was logged as "failed ... the previous checkpoint (this one) is intact")
        try:
            fsync_dir(self.dir)
            self._prune()
        except OSError as exc:
            log.warning(
                "checkpoint of step %d committed, but syncing %s or removing older checkpoints failed (%s)",
                step,
                self.dir,
                exc.strerror or exc,
            )
        return nbytes

    def poll(self) -> float:
        """Collect the checkpoint in flight if its write (and commit) finished; never blocks, not
        collective. Returns the seconds spent."""
        t0 = time.perf_counter()
        if self.pending is not None and self.pending.job.done():
            self._collect()
        return time.perf_counter() - t0

    def wait(self, collective: bool = True) -> None:
        """Finish the checkpoint in flight (blocking). ``collective`` (every rank calls it): all
        ranks then agree on rank 0's outcome (``committed``, ``last_error``)."""
        self._collect()
        if collective and is_dist():
            self.committed, self.last_error = self._bcast((self.committed, self.last_error))

    def _collect(self) -> None:
        p, self.pending = self.pending, None
        if p is None:
            return
        try:
            nbytes = p.job.result()
        except PASS_THROUGH:
            raise
        except BaseException as exc:
            self._failed(p.step, p.tmp, describe(exc))
            return
        self.committed, self.last_error, self.failures = p.step, None, 0
        if rank() == 0:
            self.last_bytes = nbytes or self.last_bytes
            log.info(
                "checkpoint step %d committed in %.3f s (%s)", p.step, time.perf_counter() - p.started, human(nbytes)
            )
            self._check_space()

    def _failed(self, step: int, tmp: Path, what: str) -> None:
        """A save failed (a full disk, say): drop the partial one, keep the previous, go on."""
        self.failures += 1
        self.last_error = f"checkpoint of step {step} failed: {what}"
        if rank() != 0:
            return
        shutil.rmtree(tmp, ignore_errors=True)
        prev = self.complete()
        log.error(
            "checkpoint of step %d failed: %s in %s (%s free); %s%s; training goes on",
            step,
            what,
            self.dir,
            human(free_bytes(self.dir)),
            f"the previous checkpoint (step {prev[0][0]}) is intact" if prev else "no earlier checkpoint exists",
            f"; {self.failures} failed in a row" if self.failures > 1 else "",
        )

    def _make_room(self, step: int) -> None:
        make_room(self.dir, self.last_bytes, step)

    def _check_space(self) -> None:
        """After a commit: warn (once until it recovers) when even removing every older checkpoint
        would not make room for one more."""
        short = room_short(self.dir, self.last_bytes)
        if short is None:
            self._space_warned = False
        elif not self._space_warned:
            self._space_warned = True
            log.warning(
                "%s has %s free (%s more in older checkpoints): not enough for one more checkpoint (%s); "
                "the next saves will fail until space is freed (training goes on)",
                self.dir,
                human(short[0]),
                human(short[1]),
                human(self.last_bytes),
            )

    def _prune(self) -> None:
        for _, p in self.complete()[self.keep :]:
            shutil.rmtree(p, ignore_errors=True)

    # -- runs ----------------------------------------------------------------------------------------
    def archive(self) -> Path | None:
        """Move every checkpoint of this directory (quarantined ones too) to ``old-runs/<time>/``,
        so that the newest checkpoint is always the current run's. Collective."""
        dest, err = move_aside(self.dir) if rank() == 0 else (None, None)
        dest, err = self._bcast((dest, err))
        if err:
            raise CheckpointError(*err)
        self.committed = None
        return dest

    def empty(self) -> bool:
        """No checkpoint here at all, good or damaged (collective): nothing to load, nothing to refuse."""
        if rank() == 0:
            steps = any(step_of(p) is not None and p.is_dir() for p in self.dir.glob(f"{PREFIX}*"))
            none = not steps and not quarantined(self.dir)
        return bool(self._bcast(none if rank() == 0 else None))

    def load_latest(self, state: dict) -> tuple[int, dict] | None:
        """Load the newest good checkpoint into ``state`` (in place); collective. Returns (step,
        extra), or None when there is none. A checkpoint of another config is refused; damaged ones
        are quarantined; if there are checkpoints but none loads, CheckpointError names them all."""
        problems: list[str] = []
        while True:
            choice = self._bcast(newest_good(self.dir, self.config_hash, problems) if rank() == 0 else None)
            if choice is None:
                break
            if choice[0] == "config":
                raise CheckpointError(*choice[1:])
            _, step, path = choice
            # another model's checkpoint is not a damaged one: refuse it, do not quarantine it
            other = self._bcast(model_mismatch(path, state) if rank() == 0 else None)
            if other:
                raise CheckpointError(
                    "checkpoint_dir",
                    f"{Path(path).name} in {self.dir} was written by a different model: {other}",
                    "load it with the model that wrote it, or pass another `checkpoint_dir`, or `restart` to start over",
                )
            for _attempt in range(2):  # a read error can be passing (a network file system): once more
                err = None
                try:
                    dcp.load(state, checkpoint_id=path, process_group=self.group, no_dist=not is_dist())
                    extra = torch.load(Path(path) / EXTRA, weights_only=False)
                except PASS_THROUGH:
                    raise
                except BaseException as exc:  # CheckpointException too: any failure means "try the one before"
                    err = describe(exc)
                if is_dist():
                    errs = [None] * dist.get_world_size()
                    dist.all_gather_object(errs, err, group=self.group)
                    err = next((e for e in errs if e), None)
                if not err:
                    break
            if err:
                if rank() == 0:
                    problems.append(quarantine(self.dir, Path(path), "unloadable", f"could not be loaded ({err})"))
                    log.warning("damaged checkpoint %s; trying the one before", problems[-1])
                continue
            log.warning("resumed from %s (step %d)", Path(path).name, step)
            self.committed = step
            return step, self.own_extra(extra)
        problems = self._bcast(problems)
        if problems:
            raise CheckpointError(
                "checkpoint_dir",
                f"no checkpoint in {self.dir} could be loaded: {'; '.join(problems)}",
                f"rename one back to {PREFIX}<step> to try it again, or pass `restart` to start over "
                f"(the damaged ones are kept)",
            )
        left = self._bcast([p.name for p in quarantined(self.dir)] if rank() == 0 else None)
        if left:  # an earlier start quarantined every checkpoint: starting from 0 would lose the run
            raise CheckpointError(
                "checkpoint_dir",
                f"{self.dir} has no loadable checkpoint, only damaged ones ({', '.join(left)})",
                f"rename one back to {PREFIX}<step> to try it again, or pass `restart` to start over",
            )
        return None
