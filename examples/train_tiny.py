"""A small GPT trained on synthetic tokens on CPU, checkpointed by gpuplan's resilient runtime.

    python examples/train_tiny.py --steps 200 --checkpoint-dir ckpt --checkpoint-every 25 --seed 0

Kill it with SIGTERM (or SIGUSR1, or Ctrl-C) at any point and run the same command again until it
finishes: the last line, ``final_checksum=...``, is the same as for an uninterrupted run. Exit
code 75 means "stopped on a signal: run me again" (after a checkpoint, unless the log says
otherwise), 2 a bad argument or checkpoint directory (one line). Under torchrun (gloo on CPU) every
rank trains a replica with DDP and the checkpoint is collective.
"""

from __future__ import annotations

if __name__ == "__main__":
    # first, before torch's import (seconds): a preemption signal from now on is recorded and ends
    # the run with exit 75 once the loop starts, instead of killing it or raising KeyboardInterrupt
    from gpuplan.train import signals

    signals.defer()

import argparse
import logging
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpuplan.errors import GpuplanError
from gpuplan.train import Resilient, state_checksum, validate


class Block(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads, self.drop = heads, nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp(self.ln2(x)))


class TinyGPT(nn.Module):
    def __init__(
        self, vocab: int = 256, d: int = 64, layers: int = 2, heads: int = 4, ctx: int = 32, dropout: float = 0.1
    ):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, dropout) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def batch(seed: int, position: int, rank: int, size: int = 8, ctx: int = 32, vocab: int = 256):
    """Synthetic tokens for a data position: a function of (seed, position, rank), so resuming at a
    position replays exactly the data an uninterrupted run would have seen."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + position * 7919 + rank)
    x = torch.randint(0, vocab, (size, ctx + 1), generator=g)
    return x[:, :-1], x[:, 1:]


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other bad input
        raise GpuplanError("arguments", message, "see --help")


NEVER = "or --no-checkpoint to checkpoint only on a signal"


def parse(argv=None) -> argparse.Namespace:
    """The command line, every number checked (GpuplanError naming the flag): no 0, no negative,
    no 1.5 where a count belongs."""
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="200", help="optimizer steps in all")
    ap.add_argument("--checkpoint-dir", default="checkpoints/tiny")
    ap.add_argument("--checkpoint-every", default=None, help="steps between checkpoints (default 25)")
    ap.add_argument("--checkpoint-seconds", default=None, help="seconds between checkpoints")
    ap.add_argument("--mtbf", default=None, help="seconds: checkpoint at Daly's interval")
    ap.add_argument(
        "--no-checkpoint", action="store_true", help="no scheduled checkpoints (still one on SIGTERM/SIGUSR1/SIGINT)"
    )
    ap.add_argument("--keep", default="2", help="checkpoints kept (at least 2)")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--sync", action="store_true", help="synchronous checkpoints (default: async)")
    ap.add_argument("--telemetry", default="-", help="JSON-lines file (default: -, print them)")
    ap.add_argument(
        "--restart", action="store_true", help="start over: move the directory's checkpoints to old-runs/<time>/"
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    args.steps = validate.parse_count("--steps", args.steps, fix="the number of optimizer steps to train")
    args.keep = validate.parse_count("--keep", args.keep, minimum=2, fix="keep at least 2 checkpoints")
    args.seed = validate.parse_count("--seed", args.seed, minimum=0)
    schedule = [f for f in ("checkpoint_every", "checkpoint_seconds", "mtbf") if getattr(args, f) is not None]
    if args.no_checkpoint and schedule:
        raise GpuplanError("--no-checkpoint", f"contradicts --{schedule[0].replace('_', '-')}", "give one of them")
    if not args.no_checkpoint and args.checkpoint_every is None and not schedule:
        args.checkpoint_every = "25"
    if args.checkpoint_every is not None:
        args.checkpoint_every = validate.parse_count(
            "--checkpoint-every", args.checkpoint_every, fix=f"give the number of steps between checkpoints, {NEVER}"
        )
    if args.checkpoint_seconds is not None:
        args.checkpoint_seconds = validate.parse_seconds(
            "--checkpoint-seconds", args.checkpoint_seconds, fix=f"give the seconds between checkpoints, {NEVER}"
        )
    if args.mtbf is not None:
        args.mtbf = validate.parse_seconds("--mtbf", args.mtbf, fix="the mean time between failures in seconds")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    if args.no_checkpoint:
        logging.getLogger("gpuplan.train").warning(
            "--no-checkpoint: no scheduled checkpoints; only a signal writes one, a crash loses the run"
        )
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    distributed = "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = 0
    if distributed:
        torch.distributed.init_process_group("gloo")
        rank = torch.distributed.get_rank()
    torch.manual_seed(args.seed)
    model = TinyGPT()
    net = nn.parallel.DistributedDataParallel(model) if distributed else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
    )
    config = {
        "model": "tiny-gpt",
        "d": 64,
        "layers": 2,
        "seed": args.seed,
        "steps": args.steps,
        "world": torch.distributed.get_world_size() if distributed else 1,
    }
    telemetry = os.devnull if args.quiet and args.telemetry == "-" else args.telemetry
    try:
        with Resilient(
            model,
            opt,
            sched,
            checkpoint_dir=args.checkpoint_dir,
            every_steps=args.checkpoint_every,
            every_seconds=args.checkpoint_seconds,
            mtbf_s=args.mtbf,
            keep=args.keep,
            async_save=not args.sync,
            config=config,
            telemetry=telemetry,
            restart=args.restart,
        ) as run:
            while run.step < args.steps:
                x, y = batch(args.seed, run.data_position, rank)
                loss = F.cross_entropy(net(x).flatten(0, 1), y.flatten())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                run.end_step(tokens=x.numel())  # raises SystemExit(75) after a signal and a checkpoint
        if rank == 0:
            print(f"final_checksum={state_checksum(model, opt)}", flush=True)
    finally:
        if distributed:
            # also on the SystemExit of a preemption: left to interpreter teardown, DDP's gloo group
            # deadlocks joining its worker thread, and the process never exits
            del net
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GpuplanError as exc:  # bad input (a flag, a directory in use, no loadable checkpoint): one line
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
