"""The page's forms, read from the CLI's own options (flag, default, help), so the page cannot
drift from the commands: a form only chooses which options to show and offers catalog choices."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from gpuplan.specs import schedules


@dataclass(frozen=True)
class Field:
    name: str  # the command's parameter name, also the query-string key
    flag: str | None  # None: the positional argument
    label: str
    help: str
    default: str  # as the form shows it ("" for none)
    cli_default: str = ""  # the command's own: a value equal to it is left off the command line
    checkbox: bool = False
    repeat: bool = False  # a flag given once per comma-separated value (cluster whatif --checkpoint)
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # other names an error may use for it (the flag's spellings)


@dataclass(frozen=True)
class Form:
    key: str  # in the URL: ?cmd=serve-sim
    title: str
    path: tuple[str, ...]  # the CLI words: ("cluster", "whatif")
    report: str  # the gpuplan.report name of its document
    names: tuple[str, ...]  # the options shown, in order
    defaults: dict[str, str] = field(default_factory=dict)  # the page's own where the CLI's is slow
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)


SCHEDULES = tuple(s.train_name for s in schedules.training())  # the registry's, as train names them
FRAMEWORKS = ("generic", "megatron", "nemo", "torchtitan", "deepspeed", "hf")
WEIGHTS = ("bf16", "fp16", "fp8", "fp8-wo", "int8", "int4-awq", "int4-gptq", "nf4", "q4_k_m", "q8_0", "nvfp4", "mxfp4")
KV = ("bf16", "fp16", "fp8", "int8", "nvfp4")

FORMS: tuple[Form, ...] = (
    Form(
        "train",
        "Train",
        ("train",),
        "train",
        (
            "model",
            "gpu",
            "gpus",
            "tp",
            "pp",
            "cp",
            "ep",
            "etp",
            "vp",
            "zero",
            "seq_len",
            "micro_batch",
            "global_batch",
            "tokens",
            "recompute",
            "precision",
            "optimizer",
            "schedule",
            "framework",
            "price",
            "mfu",
        ),
        defaults={"model": "llama-3.1-8b"},
        choices={
            "recompute": ("none", "selective", "full"),
            "precision": ("bf16", "fp16", "fp32", "fp8"),
            "optimizer": ("adamw", "adamw8bit", "sgd", "adafactor"),
            "schedule": SCHEDULES,
            "framework": FRAMEWORKS,
            "zero": ("0", "1", "2", "3"),
        },
    ),
    Form(
        "search",
        "Search plans",
        ("search",),
        "search",
        (
            "model",
            "gpu",
            "gpus",
            "seq_len",
            "global_batch",
            "precision",
            "objective",
            "top",
            "framework",
            "price",
            "max_tp",
            "max_pp",
        ),
        defaults={"model": "llama-3.1-8b", "top": "20"},
        choices={
            "objective": ("throughput", "cost"),
            "precision": ("bf16", "fp16", "fp32", "fp8"),
            "framework": FRAMEWORKS,
        },
    ),
    Form(
        "serve",
        "Serve",
        ("serve",),
        "serve",
        (
            "model",
            "gpu",
            "tp",
            "pp",
            "weights",
            "kv",
            "input_len",
            "output_len",
            "concurrency",
            "max_throughput",
            "itl_slo",
            "ttft_slo",
            "target_rps",
            "price",
        ),
        defaults={"model": "llama-3.1-8b"},
        choices={"weights": WEIGHTS, "kv": KV},
    ),
    Form(
        "serve-sim",
        "Serve, simulated",
        ("serve-sim",),
        "serve-sim",
        (
            "model",
            "gpu",
            "tp",
            "weights",
            "kv",
            "rate",
            "requests",
            "input_len",
            "output_len",
            "ttft_slo",
            "itl_slo",
            "seed",
        ),
        defaults={"model": "llama-3.1-8b", "rate": "1,2,4,8", "requests": "300"},
        choices={"weights": WEIGHTS, "kv": KV},
    ),
    Form(
        "pipeline",
        "Pipeline",
        ("pipeline",),
        "pipeline",
        ("schedule", "stages", "microbatches", "vp", "f", "b", "w", "p2p", "unit"),
        choices={"schedule": tuple(s.name for s in schedules.REGISTRY)},
    ),
    Form(
        "whatif",
        "Preemption what-if",
        ("cluster", "whatif"),
        "cluster whatif",
        ("gpus", "gpu", "hours", "preempt_at", "checkpoint", "cost", "restart", "mtbf", "price"),
    ),
    Form(
        "cluster-sim",
        "Cluster, simulated",
        ("cluster", "sim"),
        "cluster sim",
        ("gpus", "gpus_per_node", "jobs", "load", "policy", "placement", "node_mtbf", "checkpoint", "seed", "price"),
        defaults={"gpus": "256", "jobs": "1000"},
        choices={
            "policy": ("fifo", "priority", "backfill"),
            "placement": ("pack", "spread", "topology"),
            "node_mtbf": ("llama3", "rsc1", "rsc2", "none"),
            "checkpoint": ("none", "daly", "sigterm", "1h"),
        },
    ),
    Form(
        "checkpoint",
        "Checkpoint interval",
        ("checkpoint-interval",),
        "checkpoint-interval",
        ("mtbf", "cost", "restart"),
        defaults={"mtbf": "3.1h", "cost": "60s"},
    ),
    Form(
        "tco",
        "Rent or own (TCO)",
        ("tco",),
        "tco",
        ("gpus", "gpu", "on_demand", "spot", "capex", "pue", "kwh", "staff", "utilisation", "months"),
        defaults={"capex": "2.5M"},
    ),
)

BY_KEY = {f.key: f for f in FORMS}


def _command(path: tuple[str, ...]) -> Any:
    from gpuplan.cli.app import click_command

    cmd: Any = click_command()
    for word in path:
        cmd = cmd.commands[word]
    return cmd


def _text(value: Any) -> str:
    if value is None or value is False:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@functools.lru_cache(maxsize=32)  # one entry per form
def fields(key: str) -> tuple[Field, ...]:
    """The form's fields, from the click parameters of its command."""
    from gpuplan import catalog

    form = BY_KEY[key]
    params = {p.name: p for p in _command(form.path).params}
    choices = {"model": tuple(catalog.model_ids()), "gpu": tuple(catalog.gpu_ids()), **form.choices}
    out = []
    for name in form.names:
        p = params[name]
        option = p.param_type_name == "option"
        opts = tuple(p.opts) if option else ()
        out.append(
            Field(
                name=name,
                flag=opts[0] if option else None,
                label=name.replace("_", " "),
                help=(getattr(p, "help", None) or "").strip(),
                default=form.defaults.get(name, _text(p.default if option else None)),
                cli_default=_text(p.default if option else None),
                checkbox=bool(getattr(p, "is_flag", False)),
                repeat=bool(getattr(p, "multiple", False)),
                choices=choices.get(name, ()),
                aliases=tuple(o.lstrip("-").replace("-", "_") for o in opts),
            )
        )
    return tuple(out)


def argv(key: str, query: dict[str, str]) -> list[str]:
    """The command line of a submitted form: the words, the positional argument, then each flag
    whose value differs from the command's default (so it reads as a person would type it)."""
    form = BY_KEY[key]
    args, flags = list(form.path), []
    for f in fields(key):
        value = query.get(f.name, "").strip()
        if f.checkbox:
            if value in ("on", "true", "1"):
                flags.append(f.flag or "")
            continue
        if f.flag is None:
            args.append(value)  # empty: the command says the argument is missing
            continue
        if not value or value == f.cli_default:
            continue
        if f.repeat:
            for part in value.split(","):
                flags += [f.flag, part.strip()]
        else:
            flags += [f.flag, value]
    return args + flags


def field_for(key: str, name: str) -> str | None:
    """The form field an error names: its parameter name or any spelling of its flag
    (``checkpoint_cost`` is whatif's ``cost``, given as --checkpoint-cost)."""
    name = name.lstrip("-").replace("-", "_").lower()
    for f in fields(key):
        if name == f.name or name in f.aliases:
            return f.name
    return None
