"""A Hugging Face causal LM trained on random tokens under gpuplan's resilient runtime, writing the
telemetry that ``gpuplan calibrate`` and ``gpuplan compare`` read.

    python examples/train_hf.py llama-3.2-1b --gpu h100-sxm --seq-len 4096 --micro-batch 2 \\
        --steps 30 --telemetry run.jsonl
    gpuplan compare run.jsonl            # predicted vs measured step time and peak memory

The model is built from the config.json facts in gpuplan's catalog (or a config.json path) with
random weights: nothing is downloaded. It trains as the Hugging Face Trainer does with
``bf16=True`` (gpuplan's ``--framework hf`` profile): fp32 parameters and gradients, bf16 autocast,
fused AdamW, SDPA attention (its flash backend on CUDA), ``--recompute full`` is
``gradient_checkpointing_enable()`` (every decoder layer). Under torchrun every rank trains a
DDP replica. The telemetry's first line is the plan in ``gpuplan train``'s flags, so the run
compares with its prediction without restating it.
"""

from __future__ import annotations

if __name__ == "__main__":
    from gpuplan.train import signals

    signals.defer()  # before torch's import: a preemption signal from now on ends the run cleanly

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import torch

from gpuplan.errors import GpuplanError
from gpuplan.train import Resilient, validate


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other bad input
        raise GpuplanError("arguments", message, "see --help")


def hf_config(model: str) -> tuple[str, dict]:
    """(the name the plan uses, the config.json dict) for a catalog id or a config.json path."""
    from gpuplan import catalog

    if Path(model).exists():
        path = Path(model) / "config.json" if Path(model).is_dir() else Path(model)
        return str(path), json.loads(path.read_text())
    return model, catalog.model_entry(model.lower())["config"]


def build(config: dict, attention: str):
    import transformers

    cfg = transformers.AutoConfig.for_model(**config)
    cfg.use_cache = False
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attention)


def parse(argv=None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a gpuplan catalog id or a config.json path")
    ap.add_argument("--gpu", default=None, help="the gpuplan catalog id of this GPU, for the plan record")
    ap.add_argument("--seq-len", default="2048")
    ap.add_argument("--micro-batch", default="1")
    ap.add_argument("--steps", default="30")
    ap.add_argument("--recompute", choices=("none", "full"), default="none")
    ap.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa")
    ap.add_argument("--checkpoint-dir", default="checkpoints/hf")
    ap.add_argument("--checkpoint-every", default=None, help="steps between checkpoints (default: only on a signal)")
    ap.add_argument("--telemetry", default="-", help="JSON-lines file (default: -, print them)")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager, as the Trainer)")
    ap.add_argument(
        "--profile-trace",
        default=None,
        help="write a PyTorch profiler Chrome trace of two steps after warm-up (gpuplan compare --trace reads it)",
    )
    args = ap.parse_args(argv)
    for name in ("seq_len", "micro_batch", "steps"):
        setattr(args, name, validate.parse_count(f"--{name.replace('_', '-')}", getattr(args, name)))
    args.seed = validate.parse_count("--seed", args.seed, minimum=0)
    if args.checkpoint_every is not None:
        args.checkpoint_every = validate.parse_count("--checkpoint-every", args.checkpoint_every)
    return args


def main(argv=None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    name, config = hf_config(args.model)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if distributed:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    world = torch.distributed.get_world_size() if distributed else 1
    rank = torch.distributed.get_rank() if distributed else 0
    torch.manual_seed(args.seed)
    with device:  # initialised where it trains: a CPU init of a billion parameters takes minutes
        model = build(config, args.attention)  # fp32 parameters, as the Trainer keeps them
    if args.recompute == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    if args.compile:
        net = torch.compile(net)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=cuda)
    plan = {
        "model": name,
        "gpus": world,
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "global_batch": args.micro_batch * world,
        "precision": "bf16",
        "recompute": args.recompute,
        "optimizer": "adamw",
        "framework": "hf",
        "attention": "flash" if args.attention == "sdpa" else "eager",
        "sp": False,
    }
    profiler = None
    if args.profile_trace and rank == 0:
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        wait = max(0, min(args.steps - 3, 5))  # past the first steps' allocator and cuBLAS warm-up
        profiler = profile(
            activities=acts,
            schedule=schedule(wait=wait, warmup=1, active=2, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(args.profile_trace),
        )
        profiler.start()
    if args.gpu:
        plan["gpu"] = args.gpu
    vocab = config["vocab_size"]
    try:
        with Resilient(
            model,
            opt,
            checkpoint_dir=args.checkpoint_dir,
            every_steps=args.checkpoint_every,
            config={**config, "seed": args.seed, "world": world},
            telemetry=args.telemetry if rank == 0 else None,
            plan=plan,
        ) as run:
            g = torch.Generator(device=device)
            while run.step < args.steps:
                g.manual_seed(args.seed * 1_000_003 + run.data_position * 7919 + rank)
                ids = torch.randint(0, vocab, (args.micro_batch, args.seq_len), device=device, generator=g)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                    loss = net(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                run.end_step(tokens=ids.numel(), loss=loss.detach())
                if profiler is not None:
                    profiler.step()
    finally:
        if profiler is not None:
            profiler.stop()
        if distributed:
            del net
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GpuplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
