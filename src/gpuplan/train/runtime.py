"""A training loop that survives preemption: checkpoint on a schedule, stop cleanly on a signal,
resume exactly.

    with Resilient(model, optimizer, checkpoint_dir="ckpt", every_steps=50, config=cfg) as run:
        while run.step < total_steps:
            loss = train_step(batch_for(run.step))   # data indexed by run.step resumes exactly
            run.end_step(tokens=batch_tokens)

``end_step`` advances the step, writes a telemetry line (``gpuplan.telemetry/1``: the plan once
when ``plan=`` is given, tensor bytes by component after the first step, then per step the wall
time, tokens, loss, checkpoint stall and, on CUDA, peak allocated and reserved memory; the schema
is in ``gpuplan.runs.readers``, which reads it back for ``gpuplan calibrate`` and ``compare``),
checkpoints when the interval is due (every N steps, every T seconds, or Daly's optimum from
``mtbf_s`` and the measured checkpoint cost; with none of them, only on a signal) and, on a
schedule, once more when the loop ends between two (its last step, as Megatron-LM and torchtitan
save it), and, when SIGTERM, SIGUSR1 or SIGINT arrived during the step, writes a checkpoint and
exits with ``EXIT_REQUEUE`` (75, EX_TEMPFAIL: "try again", which the sbatch script ``gpuplan
slurm`` writes turns into a requeue; rank 0 also writes ``requeue.marker`` for launchers that
swallow the exit code, torchrun, and ``finished.marker`` when the loop ends on its own, so that a
time-limit warning during shutdown does not fail a finished job). A signal that arrived before the
loop (``gpuplan.train.signals.defer()`` records them from the script's first line) ends the run
with 75 as soon as it starts. Under torchrun every rank calls ``end_step``; the ranks agree (an
all-reduce of the flag) on the step to stop at, and the checkpoint is collective; a
worker whose agent died stops as on SIGTERM.

Every argument is checked when the object is made (``GpuplanError``, a ``ValueError``, naming the
field). The checkpoint stall is measured as the loop sees it (state dict, waiting for the previous
save, staging) and summarised at the end (``stall_summary()``, and one log line).

The state checkpointed: model and optimizer (DCP, sharded), the LR scheduler, the step, tokens
seen, the data position, RNG states of Python, NumPy and torch (CPU and CUDA), and a hash of the
run's config that a resume must match.

Under torchrun, destroy the process group in a ``finally`` (``end_step`` leaves through SystemExit):
left to interpreter teardown, DDP's gloo group can deadlock joining its worker thread.

The torchrun trap: torchrun's agent forwards SIGTERM to the workers and kills them 30 s later
(not configurable), and Slurm's default KillWait is 30 s too. Ask Slurm for an earlier warning
(``sbatch --signal=B:USR1@120``: SIGUSR1 to the batch shell 120 s before the end), have the batch
script forward it to the workers, and keep checkpoints short of that deadline (``deadline_s``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from gpuplan.errors import GpuplanError
from gpuplan.estimate.checkpoint_interval import daly_interval
from gpuplan.train import requeue, signals, validate
from gpuplan.train.checkpoint import CheckpointError, CheckpointManager
from gpuplan.train.stall import StallMeter
from gpuplan.train.state import config_hash, peak_memory, rng_state, set_rng_state, state_checksum, tensor_bytes

log = logging.getLogger("gpuplan.train")

EXIT_REQUEUE = 75  # EX_TEMPFAIL: stopped on a signal after a checkpoint; run the same command again
SIGNALS = signals.STOP_SIGNALS
NO_SCHEDULE = "leave every_steps, every_seconds and mtbf_s unset to checkpoint only on a signal"


def _flag(field: str, value) -> bool:
    if not isinstance(value, bool):
        raise GpuplanError(field, f"must be True or False, got {value!r}")
    return value


def _path(field: str, value) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise GpuplanError(field, f"must be a path, got {value!r}")
    return Path(value)


def _slurm_requeued() -> bool:
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0
    except ValueError:
        return False


class Resilient:
    def __init__(
        self,
        model,
        optimizer,
        scheduler=None,
        *,
        checkpoint_dir: str | Path,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        mtbf_s: float | None = None,
        keep: int = 2,
        async_save: bool = True,
        config: dict | None = None,
        telemetry: str | Path | None = None,  # "-": stdout
        plan: dict | None = None,  # the run's plan as ``gpuplan train`` flags (RunPlan fields), for telemetry
        deadline_s: float = 25.0,
        restart: bool = False,
    ):
        # every value checked now: a string or a float interval used to fail at the first step, and
        # 0 meant "never" without a word
        self.every_steps = validate.optional(validate.count, "every_steps", every_steps, fix=NO_SCHEDULE)
        self.every_seconds = validate.optional(validate.seconds, "every_seconds", every_seconds, fix=NO_SCHEDULE)
        self.mtbf_s = validate.optional(validate.seconds, "mtbf_s", mtbf_s, fix="the mean time between failures")
        self.deadline_s = validate.seconds("deadline_s", deadline_s)
        self.keep = validate.count(
            "keep", keep, minimum=2, fix="keep at least 2 checkpoints so that a damaged newest one has a fallback"
        )
        self.async_save, self.restart = _flag("async_save", async_save), _flag("restart", restart)
        if config is not None and not isinstance(config, dict):
            raise GpuplanError("config", f"must be a dict, got {type(config).__name__}")
        self.checkpoint_dir = _path("checkpoint_dir", checkpoint_dir)
        self.telemetry_path = None if telemetry is None else _path("telemetry", telemetry)
        if self.telemetry_path is not None and str(self.telemetry_path) != "-":
            # checked now: it used to fail after resume (after `restart` had archived the checkpoints)
            if self.telemetry_path.is_dir():
                raise GpuplanError(
                    "telemetry", f"{self.telemetry_path} is a directory", "name a file, or '-' for stdout"
                )
            if not self.telemetry_path.parent.is_dir():
                raise GpuplanError(
                    "telemetry",
                    f"{self.telemetry_path.parent} does not exist",
                    "create its directory, or name a file in one that exists",
                )
        if not isinstance(model, torch.nn.Module):
            raise GpuplanError("model", f"must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise GpuplanError("optimizer", f"must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if scheduler is not None and not all(hasattr(scheduler, f) for f in ("state_dict", "load_state_dict")):
            raise GpuplanError(
                "scheduler",
                f"must have state_dict() and load_state_dict() (an LR scheduler), got {type(scheduler).__name__}",
            )
        if plan is not None:  # checked now, with the reader's own rules: a bad field fails here, not in calibrate
            from gpuplan.estimate.run_record import RunPlan

            RunPlan.from_dict(plan, "Resilient(plan=...)")
        self.plan = plan
        self._memory_written = False
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.hash = config_hash(config or {})
        self.ckpt: CheckpointManager | None = None  # opened (and its directory locked) by __enter__
        self.step = 0
        self.tokens = 0
        self.data_position = 0
        self.resumed_from: int | None = None
        self.stall = StallMeter()
        self._old_handlers: dict = {}
        self._last_ckpt_time = time.monotonic()
        self._last_ckpt_step = 0
        self._step_start = time.perf_counter()
        self._train_start = time.perf_counter()
        self._ckpt_cost: float | None = None
        self._telemetry: TextIO | None = None  # opened by __enter__ when telemetry is asked for

    # -- context ----------------------------------------------------------------------------------------
    def __enter__(self) -> Resilient:
        signals.set_active(True)
        signals.set_finished(False)
        for sig in SIGNALS:  # signals.defer() may have recorded one already: it stays recorded
            self._old_handlers[sig] = signal.signal(sig, signals.record)
        if signals.under_torchrun():
            signals.watch_parent()
        try:
            self.ckpt = CheckpointManager(
                self.checkpoint_dir, keep=self.keep, async_save=self.async_save, config_hash=self.hash
            )
            if self._rank() == 0:
                requeue.clear(self.ckpt.dir)  # old markers must not requeue a later crash, nor end it as done
            if not self._scheduled() and self._rank() == 0:
                log.warning(
                    "no checkpoint schedule: checkpoints only on SIGTERM/SIGUSR1/SIGINT; a crash loses "
                    "everything since the start"
                )
            restart = self.restart
            if restart and _slurm_requeued():  # the same command runs again after a requeue
                log.warning(
                    "restart ignored: this is a requeue of the same Slurm job (SLURM_RESTART_COUNT=%s), resuming it",
                    os.environ["SLURM_RESTART_COUNT"],
                )
                restart = False
            if restart:
                self.ckpt.archive()
            # after a restart too: it finds nothing, and starts as a first start does
            self.resume()
            if self.telemetry_path and self._rank() == 0:
                self._telemetry = sys.stdout if str(self.telemetry_path) == "-" else open(self.telemetry_path, "a")
                if self.plan is not None:
                    self._write({"type": "plan", "schema": 1, "plan": self.plan})
            self._last_ckpt_time = time.monotonic()
            self._step_start = self._train_start = time.perf_counter()
            if self._agree(signals.received() is not None)[0]:  # it came while torch imported or we resumed
                self._emergency_exit()
        except BaseException:
            self._close(crashed=True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        crashed = exc_type is not None and not issubclass(exc_type, SystemExit)
        try:
            if self.ckpt is not None:
                if exc_type is None and self._scheduled() and self.step != self._last_ckpt_step:
                    # the loop ended between scheduled checkpoints: save its last step, as Megatron-LM
                    # (megatron/training/training.py: a final save when the last iteration is off
                    # the save interval) and torchtitan (components/checkpointer/dcp.py: last_step
                    # "forces a save regardless of the interval") do, so a rerun of a finished job
                    # (a requeue after it ended) finds the finished state. Collective: every rank
                    # leaves the loop at the same step
                    self.stall.save(self.checkpoint())
                # after a crash on this rank only, the others may never come: no collective then
                self.ckpt.wait(collective=not crashed)
                saved = not self._scheduled() or self.ckpt.committed == self.step
                if self._rank() == 0:
                    log.info("%s", self.stall.line(time.perf_counter() - self._train_start))
                    if exc_type is None and not saved:
                        # a rerun retrains from the last good checkpoint: not a finished job
                        log.error(
                            "the loop ended at step %d but its checkpoint failed (%s): no %s; a rerun resumes from %s",
                            self.step,
                            self.ckpt.last_error or "not committed",
                            requeue.FINISHED,
                            f"step {self.ckpt.committed}" if self.ckpt.committed is not None else "step 0",
                        )
                    elif exc_type is None:  # the loop ended on its own: a signal from now on has nothing to save
                        try:
                            requeue.write_finished(self.ckpt.dir, self.step)
                        except OSError as exc:  # the run is done: say so, do not turn it into a crash
                            log.warning("could not write %s (%s)", requeue.FINISHED, exc.strerror)
        finally:
            signals.set_finished(exc_type is None)
            self._close(crashed)

    def _close(self, crashed: bool) -> None:
        try:
            if self.ckpt is not None:
                if crashed:
                    self.ckpt.wait(collective=False)
                self.ckpt.close()
        finally:
            for sig, h in self._old_handlers.items():
                signal.signal(sig, h)
            self._old_handlers = {}
            signals.set_active(False)
            signals.clear()
            self._drop_telemetry()

    @property
    def _manager(self) -> CheckpointManager:
        """The checkpoint manager, which exists from ``__enter__`` on."""
        if self.ckpt is None:
            raise GpuplanError(
                "checkpoint_dir",
                "is not open: the run was used outside its `with` block",
                "use it as `with Resilient(...) as run:`",
            )
        return self.ckpt

    @staticmethod
    def _rank() -> int:
        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    # -- state --------------------------------------------------------------------------------------------
    def _state(self) -> dict:
        msd, osd = get_state_dict(self.model, self.optimizer)
        return {"model": msd, "optim": osd}

    def _extra(self) -> dict:
        return {
            "step": self.step,
            "tokens": self.tokens,
            "data_position": self.data_position,
            "rng": rng_state(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "config_hash": self.hash,
        }

    def resume(self) -> int:
        ckpt = self._manager
        if ckpt.empty():
            # nothing to load: no state dict either, whose building initialises the optimizer's
            # state with a step at lr 0 (torch.distributed.checkpoint.state_dict._init_optim_state:
            # AdamW's step count one ahead, Rprop's step sizes clamped to their minimum), so the
            # loop trains as it would unwrapped
            log.info("no checkpoint in %s: starting from step 0", ckpt.dir)
            return 0
        state = self._state()
        got = ckpt.load_latest(state)
        if got is None:
            log.info("no checkpoint in %s: starting from step 0", ckpt.dir)
            return 0
        step, extra = got
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if self.scheduler is not None and extra.get("scheduler") is not None:
            self.scheduler.load_state_dict(extra["scheduler"])
        self.step, self.tokens, self.data_position = extra["step"], extra["tokens"], extra["data_position"]
        set_rng_state(extra["rng"])
        self.resumed_from = self._last_ckpt_step = step
        return step

    def checkpoint(self) -> float:
        """Checkpoint now (collective). Returns the seconds the loop stood still, as it sees them:
        building the state dict, waiting for the previous save, staging (async) or writing (sync)."""
        t0 = time.perf_counter()
        self._manager.save(self.step, self._state(), self._extra())
        self._last_ckpt_time = time.monotonic()
        self._last_ckpt_step = self.step
        return time.perf_counter() - t0

    def stall_summary(self) -> dict:
        """Checkpoint stall so far: saves, p50_s, p95_s, max_s, mean_s, total_s, training_s, fraction."""
        return self.stall.summary(time.perf_counter() - self._train_start)

    # -- the loop -----------------------------------------------------------------------------------------
    def _scheduled(self) -> bool:
        """Checkpoints are on a schedule (with none, only a signal writes one: the user's choice)."""
        return bool(self.every_steps or self.every_seconds or self.mtbf_s)

    def _due(self) -> bool:
        if self.every_steps and self.step - self._last_ckpt_step >= self.every_steps:
            return True
        elapsed = time.monotonic() - self._last_ckpt_time
        if self.every_seconds and elapsed >= self.every_seconds:
            return True
        if self.mtbf_s:
            if self._ckpt_cost is None:  # checkpoint once right away to measure what one costs
                return True
            return elapsed >= daly_interval(max(self._ckpt_cost, 1e-6), self.mtbf_s)
        return False

    def _agree(self, *flags: bool) -> tuple[bool, ...]:
        """Every rank's flags OR-ed (one all-reduce for all of them)."""
        if dist.is_available() and dist.is_initialized():
            # a CPU tensor over the loop's gloo group: the default group may be NCCL, which has no
            # CPU backend ("No backend type associated with device type cpu"), and the save group
            # runs an asynchronous save's collectives in the background
            t = torch.tensor([1 if f else 0 for f in flags])
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._manager.loop_group)
            return tuple(bool(v) for v in t.tolist())
        return flags

    def end_step(self, tokens: int = 0, loss: float | torch.Tensor | None = None) -> None:
        """Call once after each optimizer step, with this rank's tokens of the step and, for the
        telemetry, its loss (a tensor is read with ``.item()``: one device sync, which the step's
        wall time needs anyway)."""
        self.step += 1
        self.tokens += tokens
        self.data_position += 1
        if loss is not None and self._telemetry:
            loss = float(loss.item() if isinstance(loss, torch.Tensor) else loss)
        elif torch.cuda.is_available() and torch.cuda.is_initialized() and self._telemetry:
            torch.cuda.synchronize()  # the wall time of the step, not of its launches
        step_s = time.perf_counter() - self._step_start
        stall = self._manager.poll()  # commits a finished async save (on rank 0, done in the background)
        self.stall.other(stall)
        stop, due = self._agree(signals.received() is not None, self._due())
        if due and not stop:
            t0 = time.perf_counter()
            self.checkpoint()
            if self.mtbf_s and self._ckpt_cost is None:
                self._manager.wait()
                self._ckpt_cost = time.perf_counter() - t0
                log.info(
                    "checkpoint cost %.3f s: Daly interval %.1f s for MTBF %.0f s",
                    self._ckpt_cost,
                    daly_interval(max(self._ckpt_cost, 1e-6), self.mtbf_s),
                    self.mtbf_s,
                )
            took = time.perf_counter() - t0
            self.stall.save(took)
            stall += took
        self._write_telemetry(step_s, tokens, stall, loss)
        if stop:
            self._emergency_exit()
        self._step_start = time.perf_counter()

    def _write(self, record: dict) -> None:
        if self._telemetry is None:  # stopped by a failed write earlier in this step
            return
        try:
            self._telemetry.write(json.dumps(record) + "\n")
            self._telemetry.flush()
        except OSError as exc:  # a full disk: the training goes on, without its telemetry
            log.warning("telemetry stopped: could not write %s (%s); training goes on", self.telemetry_path, exc)
            self._drop_telemetry()

    def _drop_telemetry(self) -> None:
        t, self._telemetry = self._telemetry, None
        if t is not None and t is not sys.stdout:
            try:
                t.close()
            except OSError:  # its buffered bytes had nowhere to go either
                pass

    def _write_telemetry(self, step_s: float, tokens: int, stall: float, loss) -> None:
        if not self._telemetry:
            return
        if not self._memory_written:  # after the first step: gradients and optimizer state exist now
            self._write({"type": "memory", **tensor_bytes(self.model, self.optimizer)})
            self._memory_written = True
        record = {
            "type": "step",
            "step": self.step,
            "step_s": step_s,
            "tokens": tokens,
            "tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
            **peak_memory(),
            "checkpoint_stall_s": stall,
        }
        if loss is not None:
            record["loss"] = loss
        self._write(record)

    def _emergency_exit(self) -> None:
        """Checkpoint this step (unless it is the one just resumed from), then exit 75; the log line
        says what is really on disk."""
        t0, ckpt = time.perf_counter(), self._manager
        trained = self.step != self._last_ckpt_step
        if trained:
            self.checkpoint()
        ckpt.wait()  # collective: every rank learns whether rank 0 committed it
        took = time.perf_counter() - t0
        name = signal.Signals(signals.received() or signal.SIGTERM).name
        done = ckpt.committed
        if not trained:
            what = (
                f"before training (its checkpoint of step {done} is current)"
                if done is not None
                else "before training: nothing to checkpoint"
            )
        elif done == self.step:
            what = f"after a checkpoint ({took:.2f} s)"
            if took > self.deadline_s:
                log.warning("emergency checkpoint took %.1f s, past the %.0f s deadline", took, self.deadline_s)
        else:
            why = ckpt.last_error or "the checkpoint failed"
            then = (
                f"a rerun resumes from step {done} ({self.step - done} steps lost)"
                if done is not None
                else "a rerun starts over from step 0"
            )
            what = f"WITHOUT a checkpoint of this step ({why}); {then}"
        if self._rank() == 0:
            try:
                requeue.write(ckpt.dir, self.step, name, checkpointed=done == self.step)
            except OSError as exc:
                log.error("could not write %s (%s): a torchrun job may not be requeued", requeue.NAME, exc.strerror)
        log.warning("stopped at step %d on %s %s; exit %d to be requeued", self.step, name, what, EXIT_REQUEUE)
        if self._telemetry:
            try:
                self._telemetry.flush()
            except OSError:
                self._drop_telemetry()
        sys.stdout.flush()
        raise SystemExit(EXIT_REQUEUE)


__all__ = ["Resilient", "EXIT_REQUEUE", "CheckpointError", "state_checksum", "config_hash"]
