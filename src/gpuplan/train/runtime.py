"""A training loop that survives preemption: checkpoint on a schedule, stop cleanly on a signal,
resume exactly.

    with Resilient(model, optimizer, checkpoint_dir="ckpt", every_steps=50, config=cfg) as run:
        while run.step < total_steps:
            loss = train_step(batch_for(run.step))   # data indexed by run.step resumes exactly
            run.end_step(tokens=batch_tokens)

``end_step`` advances the step, writes a telemetry line, checkpoints when the interval is due
(every N steps, every T seconds, or Daly's optimum from ``mtbf_s`` and the measured checkpoint
cost), and, when SIGTERM, SIGUSR1 or SIGINT arrived during the step, writes a checkpoint and
exits with ``EXIT_REQUEUE`` (75, EX_TEMPFAIL: "try again", which the sbatch script ``gpuplan
slurm`` writes turns into a requeue). Under torchrun every rank calls ``end_step``; the ranks
agree (an all-reduce of the flag) on the step to stop at, and the checkpoint is collective.

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

import hashlib
import json
import logging
import random
import resource
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from gpuplan.estimate.checkpoint_interval import daly_interval
from gpuplan.train.checkpoint import CheckpointError, CheckpointManager

log = logging.getLogger("gpuplan.train")

EXIT_REQUEUE = 75  # EX_TEMPFAIL: stopped on a signal after a checkpoint; run the same command again
SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def state_checksum(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> str:
    """sha256 over the model's and the optimizer's tensors, in a fixed order."""
    h = hashlib.sha256()

    def feed(prefix: str, obj) -> None:
        if isinstance(obj, torch.Tensor):
            h.update(prefix.encode())
            h.update(obj.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                feed(f"{prefix}.{k}", obj[k])
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                feed(f"{prefix}.{i}", v)
        elif isinstance(obj, (int, float, str, bool)) or obj is None:
            h.update(f"{prefix}={obj!r}".encode())

    feed("model", model.state_dict())
    if optimizer is not None:
        feed("optim", optimizer.state_dict())
    return h.hexdigest()


def _rng_state() -> dict:
    out = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np
        out["numpy"] = np.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def _set_rng_state(s: dict) -> None:
    random.setstate(s["python"])
    torch.set_rng_state(s["torch"])
    if "numpy" in s:
        import numpy as np
        np.random.set_state(s["numpy"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def _peak_memory() -> tuple[float, str]:
    if torch.cuda.is_available():
        return float(torch.cuda.max_memory_allocated()), "cuda"
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024), "rss"


class Resilient:
    def __init__(self, model, optimizer, scheduler=None, *, checkpoint_dir: str | Path, every_steps: int | None = None,
                 every_seconds: float | None = None, mtbf_s: float | None = None, keep: int = 2,
                 async_save: bool = True, config: dict | None = None, telemetry: str | Path | None = None,  # "-": stdout
                 deadline_s: float = 25.0, restart: bool = False):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.every_steps, self.every_seconds, self.mtbf_s = every_steps, every_seconds, mtbf_s
        self.deadline_s = deadline_s
        self.restart = restart
        self.hash = config_hash(config or {})
        self.ckpt = CheckpointManager(checkpoint_dir, keep=keep, async_save=async_save, config_hash=self.hash)
        self.telemetry_path = Path(telemetry) if telemetry else None
        self.step = 0
        self.tokens = 0
        self.data_position = 0
        self.resumed_from: int | None = None
        self._signal: int | None = None
        self._old_handlers: dict = {}
        self._last_ckpt_time = time.monotonic()
        self._last_ckpt_step = 0
        self._step_start = time.perf_counter()
        self._stall = 0.0
        self._ckpt_cost: float | None = None
        self._telemetry = None

    # -- context ----------------------------------------------------------------------------------------
    def __enter__(self) -> "Resilient":
        for sig in SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        if self.restart:
            log.warning("--restart: ignoring any checkpoint in %s", self.ckpt.dir)
        else:
            self.resume()
        if self.telemetry_path and self._rank() == 0:
            self._telemetry = sys.stdout if str(self.telemetry_path) == "-" else open(self.telemetry_path, "a")
        self._last_ckpt_time = time.monotonic()
        self._step_start = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.ckpt.wait()
        finally:
            for sig, h in self._old_handlers.items():
                signal.signal(sig, h)
            if self._telemetry and self._telemetry is not sys.stdout:
                self._telemetry.close()

    def _on_signal(self, signum, frame) -> None:
        if self._signal is None:
            log.warning("received %s: finishing the step, then a checkpoint", signal.Signals(signum).name)
        self._signal = signum

    @staticmethod
    def _rank() -> int:
        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    # -- state --------------------------------------------------------------------------------------------
    def _state(self) -> dict:
        msd, osd = get_state_dict(self.model, self.optimizer)
        return {"model": msd, "optim": osd}

    def _extra(self) -> dict:
        return {"step": self.step, "tokens": self.tokens, "data_position": self.data_position, "rng": _rng_state(),
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                "config_hash": self.hash}

    def resume(self) -> int:
        state = self._state()
        got = self.ckpt.load_latest(state)
        if got is None:
            log.info("no checkpoint in %s: starting from step 0", self.ckpt.dir)
            return 0
        step, extra = got
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if self.scheduler is not None and extra.get("scheduler") is not None:
            self.scheduler.load_state_dict(extra["scheduler"])
        self.step, self.tokens, self.data_position = extra["step"], extra["tokens"], extra["data_position"]
        _set_rng_state(extra["rng"])
        self.resumed_from = self._last_ckpt_step = step
        return step

    def checkpoint(self) -> float:
        """Checkpoint now; returns the stall in seconds."""
        stall = self.ckpt.save(self.step, self._state(), self._extra())
        self._last_ckpt_time = time.monotonic()
        self._last_ckpt_step = self.step
        return stall

    # -- the loop -----------------------------------------------------------------------------------------
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

    def _agree(self, flag: bool) -> bool:
        if dist.is_available() and dist.is_initialized():
            t = torch.tensor([1 if flag else 0])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return bool(t.item())
        return flag

    def end_step(self, tokens: int = 0) -> None:
        """Call once after each optimizer step."""
        self.step += 1
        self.tokens += tokens
        self.data_position += 1
        step_s = time.perf_counter() - self._step_start
        self.ckpt.poll()
        stall = 0.0
        stop = self._agree(self._signal is not None)
        due = self._agree(self._due()) if not stop else False
        if due:
            t0 = time.perf_counter()
            stall = self.checkpoint()
            if self.mtbf_s and self._ckpt_cost is None:
                self.ckpt.wait()
                self._ckpt_cost = time.perf_counter() - t0
                log.info("checkpoint cost %.3f s: Daly interval %.1f s for MTBF %.0f s", self._ckpt_cost,
                         daly_interval(max(self._ckpt_cost, 1e-6), self.mtbf_s), self.mtbf_s)
        self._write_telemetry(step_s, tokens, stall)
        if stop:
            self._emergency_exit()
        self._step_start = time.perf_counter()

    def _write_telemetry(self, step_s: float, tokens: int, stall: float) -> None:
        if not self._telemetry:
            return
        peak, kind = _peak_memory()
        self._telemetry.write(json.dumps({"step": self.step, "step_s": step_s, "tokens": tokens,
                                          "tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
                                          "peak_memory_bytes": peak, "memory_kind": kind,
                                          "checkpoint_stall_s": stall}) + "\n")
        self._telemetry.flush()

    def _emergency_exit(self) -> None:
        t0 = time.perf_counter()
        if self._last_ckpt_step != self.step or self.ckpt.pending is not None:
            if self._last_ckpt_step != self.step:
                self.checkpoint()
            self.ckpt.wait()
        took = time.perf_counter() - t0
        if took > self.deadline_s:
            log.warning("emergency checkpoint took %.1f s, past the %.0f s deadline", took, self.deadline_s)
        name = signal.Signals(self._signal).name
        log.warning("stopped at step %d on %s after a checkpoint (%.2f s); exit %d to be requeued", self.step, name,
                    took, EXIT_REQUEUE)
        if self._telemetry:
            self._telemetry.flush()
        sys.stdout.flush()
        raise SystemExit(EXIT_REQUEUE)


__all__ = ["Resilient", "EXIT_REQUEUE", "CheckpointError", "state_checksum", "config_hash"]
