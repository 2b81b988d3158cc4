"""A corpus of bad inputs over every subcommand, run as a new user would run them.

Each case runs ``gpuplan`` in a subprocess with a timeout and is scored on what issue 16 forbids:

* traceback: a Python traceback on stdout or stderr;
* hang: still running at ``--timeout`` seconds;
* nonfinite: NaN or Infinity in the output (JSON or text);
* negative: a negative amount of money, bytes or time in a JSON document, or ``$-`` in text;
* bad exit: an exit code other than 0 (answered), 2 (bad input) or 3 (the plan does not fit);
* accepted: a case marked ``reject`` (input that can only be a mistake) that exited 0;
* lost run: a case whose output path is bad that exited 2 only after the work (slow reject).

Run: ``python benchmarks/bad_input_corpus.py [--timeout 60] [--jobs 2] [--only SUBSTR] [--show] [--src DIR]``.
Results: ``bad_input_corpus.before.txt`` (main before issue 16, via ``--src``) and
``bad_input_corpus.after.txt`` (this branch), both with ``--timeout 60``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

EXIT_OK, EXIT_BAD_INPUT, EXIT_NO_FIT = 0, 2, 3


@dataclass
class Case:
    name: str
    args: list[str]
    reject: bool = False  # only a mistake can produce this input: exit 0 is "silent nonsense"
    fast: bool = False  # bad output path: must be refused before the work starts
    stdin: str | None = None


@dataclass
class Outcome:
    case: Case
    code: int | None
    seconds: float
    out: str
    err: str
    problems: list[str] = field(default_factory=list)


def _files(d: Path) -> dict[str, str]:
    """Bad and edge-case input files, written once into ``d``."""
    f: dict[str, bytes | str] = {
        "empty": "",
        "binary": bytes(range(256)) * 4,
        "latin1": "name,num_gpu\ncaf\xe9,1\n".encode("latin-1"),
        "openb_header_only": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n",
        "openb_cpu_only": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        + "".join(f"p{i},1000,1024,0,0,,BE,Running,{i},{i + 100},{i}\n" for i in range(20)),
        "openb_nan": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\np0,1,1,1,1000,,BE,Running,nan,inf,nan\n",
        "openb_negative_gpus": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\np0,1,1,-4,1000,,BE,Running,0,100,0\n",
        "openb_huge_gpus": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\np0,1,1,100000,1000,,BE,Running,0,100,0\n",
        "openb_short_row": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\np0,1\n",
        "openb_ok": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        + "".join(f"p{i},1000,1024,1,1000,,BE,Running,{i * 10},{i * 10 + 3600},{i * 10}\n" for i in range(30)),
        "philly_empty_list": "[]",
        "philly_jobs_dict": '{"jobs": []}',
        "philly_number": "42",
        "philly_list_of_numbers": "[1, 2, 3]",
        "philly_bad_date": '[{"jobid": "a", "submitted_time": "yesterday", "attempts": [{"start_time": "x", '
        '"end_time": "y", "detail": []}]}]',
        "helios_header_only": "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
        "end_time,duration,queue\n",
        "helios_nan": "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue\n1,u,v,j,1,1,1,COMPLETED,0,0,100,nan,0\n",
        "nodes_zero": "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0,V100\n",
        "nodes_negative": "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,-8,V100\n",
        "nodes_no_model_col": "sn,gpu\nn0,8\n",
        "reclaims_nan": "time_s,gpus\nnan,8\n",
        "reclaims_inf_gpus": "time_s,gpus\n10,inf\n",
        "reclaims_huge": "time_s,gpus\n" + "".join(f"{i},1\n" for i in range(0, 10)),
        "loads_nan.csv": "1,2,nan\n3,4,5\n",
        "loads_ragged.csv": "1,2,3\n4,5\n",
        "loads_negative.csv": "1,-2,3\n",
        "loads_empty.json": "[]",
        "loads_str.json": '{"loads": "abc"}',
        "loads_nested.json": "[[[1]]]",
        "loads_zero.csv": "0,0,0,0\n0,0,0,0\n",
        "loads_huge.csv": "1e308,1e308,1e308,1e308\n",
        "sstrace_short": "arrival_s,input_len,output_len\n0,100\n",
        "sstrace_negative": "arrival_s,input_len,output_len\n0,-100,10\n1,100,-5\n",
        "sstrace_nan": "arrival_s,input_len,output_len\nnan,100,10\n",
        "sstrace_zero_len": "arrival_s,input_len,output_len\n0,0,0\n",
        "sstrace_huge": "arrival_s,input_len,output_len\n0,100000000,10\n",
        "sstrace_header_only": "arrival_s,input_len,output_len\n",
        "sstrace_float_len": "arrival_s,input_len,output_len\n0,10.5,3\n",
        "sstrace_inf_arrival": "arrival_s,input_len,output_len\ninf,100,10\n",
        "config_malformed.json": "{not json",
        "config_empty.json": "",
        "config_list.json": "[1,2]",
        "config_binary.json": bytes(range(256)),
        "config_negative.json": json.dumps(
            {
                "model_type": "llama",
                "hidden_size": -4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            }
        ),
        "config_nan.json": '{"model_type": "llama", "hidden_size": NaN, "num_hidden_layers": 32, '
        '"num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}',
        "config_zero_layers.json": json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 0,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            }
        ),
        "config_str_hidden.json": json.dumps(
            {
                "model_type": "llama",
                "hidden_size": "4096",
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            }
        ),
        "config_bad_heads.json": json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 7,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            }
        ),
        "out.txt": "",
    }
    paths = {}
    for name, content in f.items():
        p = d / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        paths[name] = str(p)
    (d / "adir").mkdir(exist_ok=True)
    paths["adir"] = str(d / "adir")
    # A read-only directory stops nobody running as root: a file as the parent directory does
    paths["readonly_out"] = str(d / "out.txt" / "out.json")
    paths["missing_dir_png"] = "/nonexistent/dir/out.png"
    paths["missing_dir_json"] = "/nonexistent/dir/out.json"
    paths["missing"] = str(d / "does-not-exist.csv")
    return paths


NUM_FLOAT = ["nan", "inf", "-inf", "-1", "0", "1e308", "-0"]
NUM_INT = ["-1", "0", "1000000000000"]
DURATION = ["nan", "inf", "-1s", "0", "1e400s", "abc", "5 parsecs", "1e-30s", "1e30d"]
SIZE = ["nan", "inf", "-1G", "0", "1e400", "abc", "1 GiBB"]


def _sweep(
    prefix: list[str],
    flag: str,
    values: list[str],
    reject_values: set[str] | None = None,
    extra: list[str] | None = None,
) -> list[Case]:
    out = []
    for v in values:
        rej = reject_values is None or v in reject_values
        out.append(
            Case(
                f"{prefix[0]}{' ' + prefix[1] if len(prefix) > 1 and not prefix[1].startswith('-') else ''} {flag} {v}",
                prefix + [flag, v] + (extra or []),
                reject=rej,
            )
        )
    return out


def cases(p: dict[str, str]) -> list[Case]:
    c: list[Case] = []
    # -- first contact
    c += [
        Case("no arguments", []),
        Case("-h", ["-h"]),
        Case("--version", ["--version"]),
        Case("train -h", ["train", "-h"]),
        Case("cluster no args", ["cluster"]),
        Case("unknown command", ["trian"], reject=True),
    ]
    # -- train
    t = ["train", "llama-3.1-8b", "--json"]
    nonfinite = {"nan", "inf", "-inf", "-1", "1e308", "-0", "0"}
    c += _sweep(t, "--price", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(t, "--mfu", NUM_FLOAT + ["1.5"], reject_values=nonfinite | {"1.5"})
    c += _sweep(t, "--gpus", NUM_INT)
    c += _sweep(t, "--tp", ["-1", "0", "3", "1000000"])
    c += _sweep(t, "--seq-len", NUM_INT)
    c += _sweep(t, "--micro-batch", NUM_INT)
    c += _sweep(t, "--global-batch", ["-1", "0", "3", "1000000000000"], reject_values={"-1", "0", "3"})
    c += _sweep(t, "--tokens", SIZE + ["1e30", "2T"], reject_values=set(SIZE))
    c += _sweep(t, "--cuda-context-gib", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(t, "--allocator-fraction", NUM_FLOAT + ["5"], reject_values={"nan", "inf", "-inf", "-1", "1e308", "5"})
    c += _sweep(t, "--expert-imbalance", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0"})
    c += _sweep(t, "--zero", ["-1", "4", "99"])
    c += _sweep(t, "--vp", ["-1", "0", "1000"])
    c += _sweep(t, "--ep", ["-1", "0", "1000"])
    c += _sweep(t, "--dp", ["-1", "0", "3"])
    c += _sweep(t, "--cp", ["-1", "0", "3"])
    c += [
        Case("train 405b on 1 gpu", ["train", "llama-3.1-405b", "--gpus", "1", "--json"]),
        Case("train 405b on 1 gpu text", ["train", "llama-3.1-405b", "--gpus", "1"]),
        Case("train missing model", ["train", "no-such-model"], reject=True),
        Case("train config missing", ["train", p["missing"]], reject=True),
        Case("train empty model arg", ["train", ""], reject=True),
    ]
    for name in (
        "config_malformed.json",
        "config_empty.json",
        "config_list.json",
        "config_binary.json",
        "config_negative.json",
        "config_nan.json",
        "config_zero_layers.json",
        "config_str_hidden.json",
        "config_bad_heads.json",
        "binary",
        "empty",
    ):
        c.append(Case(f"train {name}", ["train", p[name], "--json"], reject=True))
    c.append(Case("train directory as model", ["train", p["adir"]], reject=True))
    # -- search
    s = ["search", "llama-3.1-8b", "--json"]
    c += _sweep(s, "--gpus", NUM_INT + ["1000000"])
    c += _sweep(
        s,
        "--global-batch",
        ["-1", "0", "nan", "inf", "1e400", "16MiB", "abc", "16M", "3"],
        reject_values={"-1", "0", "nan", "inf", "1e400", "abc"},
    )
    c += _sweep(s, "--price", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(s, "--top", NUM_INT)
    c += _sweep(s, "--seq-len", NUM_INT)
    c += [
        Case("search 405b on 1 gpu", ["search", "llama-3.1-405b", "--gpus", "1", "--json"]),
        Case("search bad objective", s + ["--objective", "speed"], reject=True),
    ]
    # -- serve
    v = ["serve", "llama-3.1-8b", "--json"]
    c += _sweep(v, "--price", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(
        v,
        "--gpu-memory-utilization",
        NUM_FLOAT + ["1.5"],
        reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0", "1.5"},
    )
    c += _sweep(
        v, "--prefix-hit-rate", NUM_FLOAT + ["1", "2"], reject_values={"nan", "inf", "-inf", "-1", "1e308", "2"}
    )
    c += _sweep(
        v,
        "--acceptance",
        NUM_FLOAT + ["2"],
        reject_values={"nan", "inf", "-inf", "-1", "1e308", "2"},
        extra=["--ngram"],
    )
    c += _sweep(v, "--target-tokens-per-s", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0"})
    c += _sweep(v, "--target-rps", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0"})
    c += _sweep(v, "--input-len", NUM_INT)
    c += _sweep(v, "--output-len", NUM_INT)
    c += _sweep(v, "--concurrency", NUM_INT)
    c += _sweep(v, "--block-size", NUM_INT + ["7"])
    c += _sweep(v, "--max-batched-tokens", NUM_INT + ["1"])
    c += _sweep(v, "--max-num-seqs", NUM_INT)
    c += _sweep(v, "--max-model-len", NUM_INT)
    c += _sweep(v, "--draft-len", NUM_INT, extra=["--ngram"])
    c += _sweep(
        v, "--tpot-slo", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"}, extra=["--target-rps", "1"]
    )
    c += _sweep(
        v, "--ttft-slo", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"}, extra=["--target-rps", "1"]
    )
    c += [
        Case("serve tpot-slo without target", v + ["--tpot-slo", "50ms"], reject=True),
        Case("serve itl-slo alias", v + ["--itl-slo", "50ms", "--target-rps", "1"]),
        Case("serve 405b on 1 gpu", ["serve", "llama-3.1-405b", "--json"]),
        Case("serve draft other vocabulary", v + ["--draft-model", "mistral-7b"], reject=True),
        Case("serve draft bad model", v + ["--draft-model", "nope"], reject=True),
        Case("serve ngram and draft", v + ["--ngram", "--draft-model", "llama-3.2-1b"], reject=True),
        Case("serve bad weights", v + ["--weights", "int3"], reject=True),
        Case("serve price -2 text", ["serve", "llama-3.1-8b", "--price", "-2"], reject=True),
    ]
    # -- serve-sim
    ss = ["serve-sim", "llama-3.1-8b", "--requests", "50", "--json"]
    c += _sweep(
        ss,
        "--rate",
        ["nan", "inf", "-1", "0", "1e308", "1,,2", "abc", "1,-2"],
        reject_values={"nan", "inf", "-1", "0", "1e308", "abc", "1,-2"},
    )
    c += _sweep(
        ["serve-sim", "llama-3.1-8b", "--rate", "1", "--json"],
        "--requests",
        ["-1", "0", "10000000"],
        reject_values={"-1", "0"},
    )
    c += _sweep(ss + ["--rate", "1"], "--seed", ["-1", "99999999999999999999"], reject_values=set())
    c += _sweep(
        ss + ["--rate", "1"],
        "--input-len",
        ["-5", "0", "nan", "100-50", "exp:-3", "exp:nan", "1e12", "abc"],
        reject_values={"-5", "0", "nan", "100-50", "exp:-3", "exp:nan", "abc"},
    )
    c += _sweep(
        ss + ["--rate", "1"],
        "--output-len",
        ["-5", "0", "nan", "exp:0", "1e12"],
        reject_values={"-5", "0", "nan", "exp:0"},
    )
    c += _sweep(ss + ["--rate", "1"], "--max-batched-tokens", ["-1", "0", "1"], reject_values={"-1", "0"})
    c += _sweep(ss + ["--rate", "1"], "--max-num-seqs", ["-1", "0"])
    c += _sweep(ss + ["--rate", "1"], "--block-size", ["-1", "0"])
    c += _sweep(ss + ["--rate", "1"], "--gpu-memory-utilization", ["nan", "inf", "-1", "0", "2"])
    c += _sweep(ss, "--ttft-slo", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    c += _sweep(ss, "--itl-slo", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    for name in (
        "sstrace_short",
        "sstrace_negative",
        "sstrace_nan",
        "sstrace_zero_len",
        "sstrace_huge",
        "sstrace_header_only",
        "sstrace_float_len",
        "sstrace_inf_arrival",
        "binary",
        "latin1",
        "empty",
        "missing",
        "adir",
    ):
        c.append(
            Case(
                f"serve-sim --trace {name}",
                ["serve-sim", "llama-3.1-8b", "--trace", p[name], "--json"],
                reject=name not in ("sstrace_huge", "sstrace_float_len"),
            )
        )
    c += [
        Case(
            "serve-sim rate and trace",
            ["serve-sim", "llama-3.1-8b", "--rate", "1", "--trace", p["sstrace_huge"], "--json"],
            reject=True,
        ),
        Case("serve-sim no rate", ["serve-sim", "llama-3.1-8b"], reject=True),
        Case("serve-sim --tpot-slo alias", ss + ["--tpot-slo", "50ms"]),
    ]
    # -- pipeline
    pl = ["pipeline", "--json"]
    c += _sweep(pl, "--stages", ["-1", "0", "1", "100000"], reject_values={"-1", "0"})
    c += _sweep(pl, "--microbatches", ["-1", "0", "1", "10000000"], reject_values={"-1", "0"})
    c += _sweep(pl, "--vp", ["-1", "0", "1000"], extra=["--schedule", "interleaved"], reject_values={"-1", "0"})
    for flag in ("--f", "--b", "--w", "--overlap", "--b-full"):
        c += _sweep(
            pl,
            flag,
            ["nan", "inf", "-1", "0", "1e308", "1,2", "abc", ""],
            reject_values={"nan", "inf", "-1", "1e308", "1,2", "abc", ""},
        )
    c += _sweep(pl, "--p2p", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(pl, "--activation-gib", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(pl + ["--trace", os.devnull], "--unit", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    c += _sweep(pl, "--schedule", ["nope", "", "1F1B"], reject_values={"nope", ""})
    for name in ("missing_dir_png", "adir", "out.txt", "readonly_out"):
        c.append(
            Case(
                f"pipeline --plot {name}",
                ["pipeline", "--stages", "16", "--microbatches", "64", "--plot", p[name]],
                reject=True,
                fast=True,
            )
        )
        c.append(
            Case(
                f"pipeline --trace {name}",
                ["pipeline", "--stages", "16", "--microbatches", "64", "--trace", p[name]],
                reject=name != "out.txt",
                fast=True,
            )
        )
    c.append(
        Case(
            "pipeline 16x256 plot",
            ["pipeline", "--stages", "16", "--microbatches", "256", "--plot", str(Path(p["adir"]) / "p.png")],
        )
    )
    # -- experts
    e = ["experts", "--synthetic", "1.0", "--json"]
    c += _sweep(["experts", "--json"], "--synthetic", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(e, "--layers", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += _sweep(e, "--experts", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += _sweep(e, "--replicas", NUM_INT + ["100"], reject_values={"-1", "0", "1000000000000", "100"})
    c += _sweep(e, "--gpus", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += _sweep(e, "--nodes", NUM_INT + ["3"], reject_values={"-1", "0", "1000000000000", "3"})
    c += _sweep(e, "--groups", NUM_INT + ["7"], reject_values={"-1", "0", "1000000000000", "7"})
    c += _sweep(e, "--top-k", ["-1", "0", "300"], reject_values={"-1", "0", "300"})
    c += _sweep(e, "--hidden", NUM_INT, reject_values={"-1", "0"})
    c += _sweep(e, "--dispatch-bytes", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0"})
    c += _sweep(e, "--seed", ["-1"], reject_values=set())
    c += [
        Case("experts bad policy", e + ["--policy", "x"], reject=True),
        Case("experts loads and synthetic", e + ["--loads", p["loads_nan.csv"]], reject=True),
    ]
    for name in (
        "loads_nan.csv",
        "loads_ragged.csv",
        "loads_negative.csv",
        "loads_empty.json",
        "loads_str.json",
        "loads_nested.json",
        "loads_zero.csv",
        "loads_huge.csv",
        "binary",
        "latin1",
        "empty",
        "missing",
        "adir",
    ):
        c.append(
            Case(
                f"experts --loads {name}",
                [
                    "experts",
                    "--loads",
                    p[name],
                    "--replicas",
                    "8",
                    "--gpus",
                    "4",
                    "--nodes",
                    "1",
                    "--groups",
                    "1",
                    "--json",
                ],
                reject=name not in ("loads_zero.csv",),
            )
        )
    # -- slurm
    sl = ["slurm", "--json"]
    c += [
        Case("slurm --gpus 60", sl + ["--gpus", "60", "--", "train.py"], reject=True),
        Case("slurm --gpus 64 --nodes 4", sl + ["--gpus", "64", "--nodes", "4", "--", "train.py"], reject=True),
        Case("slurm --gpus 0", sl + ["--gpus", "0", "--", "train.py"], reject=True),
        Case("slurm --nodes -1", sl + ["--nodes", "-1", "--", "train.py"], reject=True),
        Case("slurm --gpus-per-node 0", sl + ["--gpus-per-node", "0", "--", "train.py"]),  # a CPU-only job
        Case("slurm --gpus-per-node -3", sl + ["--gpus-per-node", "-3", "--", "train.py"], reject=True),
        Case(
            "slurm --gpus 16 --gpus-per-node 0",
            sl + ["--gpus", "16", "--gpus-per-node", "0", "--", "train.py"],
            reject=True,
        ),
        Case("slurm --time 99:99:99", sl + ["--time", "99:99:99", "--", "train.py"], reject=True),
        Case("slurm --time abc", sl + ["--time", "abc", "--", "train.py"], reject=True),
        Case("slurm --time 0", sl + ["--time", "0", "--", "train.py"], reject=True),
        Case("slurm --signal-before -1", sl + ["--signal-before", "-1", "--", "train.py"], reject=True),
        Case(
            "slurm --signal-before > time",
            sl + ["--time", "1:00", "--signal-before", "99999", "--", "train.py"],
            reject=True,
        ),
        Case("slurm no command", sl, reject=True),
        Case("slurm job name with newline", sl + ["--job-name", "a\nb", "--", "train.py"], reject=True),
        Case("slurm partition with space", sl + ["--partition", "a b", "--", "train.py"], reject=True),
        Case("slurm bad launcher", sl + ["--launcher", "mpirun", "--", "train.py"], reject=True),
    ]
    for name in ("missing_dir_json", "adir", "readonly_out"):
        c.append(Case(f"slurm --output {name}", sl + ["--output", p[name], "--", "train.py"], reject=True, fast=True))
    # -- checkpoint-interval
    ci = ["checkpoint-interval", "--json"]
    c += _sweep(ci + ["--cost", "60s"], "--mtbf", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    c += _sweep(ci + ["--mtbf", "3h"], "--cost", DURATION + ["10h"], reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    c += _sweep(
        ci + ["--mtbf", "3h", "--cost", "60s"],
        "--restart",
        DURATION,
        reject_values=set(DURATION) - {"1e-30s", "1e30d", "0"},
    )
    # -- collective
    co = ["collective", "all-reduce", "--json"]
    c += _sweep(
        co,
        "--size",
        SIZE + ["300B", "1GB", "1GiB", "1G", "-0"],
        reject_values={"nan", "inf", "-1G", "1e400", "abc", "1 GiBB"},
    )
    c += _sweep(co, "--ranks", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += _sweep(co, "--stride", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += [
        Case("collective bad kind", ["collective", "all-sum", "--json"], reject=True),
        Case("collective p2p", ["collective", "p2p", "--ranks", "2", "--json"]),
        Case("collective p2p 8 ranks", ["collective", "p2p", "--ranks", "8", "--json"]),
        Case("collective bad gpu", co + ["--gpu", "rtx-9090"], reject=True),
    ]
    # -- cluster whatif
    w = ["cluster", "whatif", "--json"]
    c += _sweep(w, "--hours", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0"})
    c += _sweep(w, "--price", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(w, "--gpus", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += _sweep(w, "--preempt-at", DURATION, reject_values=set(DURATION) - {"1e-30s", "0"})  # 0: nothing lost
    c += _sweep(w, "--cost", DURATION, reject_values=set(DURATION) - {"1e-30s"})
    c += _sweep(w, "--restart", DURATION, reject_values=set(DURATION) - {"1e-30s", "0"})
    c += _sweep(w, "--mtbf", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    c += _sweep(w, "--checkpoint", ["abc", "-1h", "0", "nan", "inf"], reject_values={"abc", "-1h", "0", "nan", "inf"})
    # -- tco
    tc = ["tco", "--capex", "2M", "--json"]
    for flag in ("--on-demand", "--spot", "--pue", "--kwh", "--staff", "--colo", "--utilisation"):
        c += _sweep(
            tc,
            flag,
            NUM_FLOAT,
            reject_values={"nan", "inf", "-inf", "-1", "1e308"}
            | ({"0", "-0"} if flag in ("--on-demand", "--pue", "--utilisation") else set()),
        )
    c += _sweep(tc, "--pue", ["0.5"], reject_values={"0.5"})
    c += _sweep(tc, "--utilisation", ["2"], reject_values={"2"})
    c += _sweep(tc, "--gpus", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += _sweep(tc, "--months", NUM_INT, reject_values={"-1", "0", "1000000000000"})
    c += _sweep(tc, "--capex", SIZE, reject_values=set(SIZE) - {"0"})
    c += _sweep(tc, "--spot-mtbf", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"}, extra=["--spot", "4"])
    c += _sweep(tc, "--checkpoint-cost", DURATION, reject_values=set(DURATION) - {"1e-30s"}, extra=["--spot", "4"])
    c += [Case("tco without capex", ["tco", "--gpus", "64", "--json"], reject=True)]
    # -- cluster sim
    cs = ["cluster", "sim", "--jobs", "200", "--gpus", "64", "--json"]
    c += _sweep(["cluster", "sim", "--json"], "--jobs", ["-1", "0"])
    c += _sweep(["cluster", "sim", "--jobs", "200", "--json"], "--gpus", NUM_INT + ["12"])
    c += _sweep(cs, "--gpus-per-node", NUM_INT)
    c += _sweep(cs, "--load", NUM_FLOAT + ["1000"], reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0"})
    c += _sweep(cs, "--spot-share", NUM_FLOAT + ["2"], reject_values={"nan", "inf", "-inf", "-1", "1e308", "2"})
    c += _sweep(cs, "--weibull", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308", "0", "-0"})
    c += _sweep(cs, "--spot-reclaim-per-hour", NUM_FLOAT + ["1e6"], reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(cs, "--price", NUM_FLOAT, reject_values={"nan", "inf", "-inf", "-1", "1e308"})
    c += _sweep(cs, "--seed", ["-1", "99999999999999999999"], reject_values=set())
    c += _sweep(
        cs, "--node-mtbf", DURATION + ["1s", "none", "llama3"], reject_values=set(DURATION) - {"1e-30s", "1e30d"}
    )
    c += _sweep(cs, "--restart", DURATION + ["1000h"], reject_values=set(DURATION) - {"1e-30s", "1e30d", "0"})
    c += _sweep(cs, "--repair", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    c += _sweep(cs, "--grace", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d", "0"})
    c += _sweep(
        cs, "--checkpoint", DURATION + ["daly", "never"], reject_values=set(DURATION) - {"1e-30s", "1e30d"} | {"never"}
    )
    c += _sweep(cs, "--checkpoint-cost", DURATION, reject_values=set(DURATION) - {"1e-30s", "1e30d"})
    c += _sweep(cs, "--policy", ["lifo"], reject_values={"lifo"})
    c += _sweep(cs, "--placement", ["random"], reject_values={"random"})
    c += _sweep(cs, "--trace-format", ["csv"], extra=["--trace", p["openb_ok"]], reject_values={"csv"})
    for name in (
        "openb_header_only",
        "openb_cpu_only",
        "openb_nan",
        "openb_negative_gpus",
        "openb_huge_gpus",
        "openb_short_row",
        "binary",
        "latin1",
        "empty",
        "missing",
        "adir",
    ):
        c.append(
            Case(
                f"cluster sim --trace {name}",
                ["cluster", "sim", "--gpus", "64", "--trace", p[name], "--json"],
                reject=name not in ("openb_huge_gpus",),
            )
        )
    for name in (
        "philly_empty_list",
        "philly_jobs_dict",
        "philly_number",
        "philly_list_of_numbers",
        "philly_bad_date",
        "binary",
        "empty",
    ):
        c.append(
            Case(
                f"cluster sim --trace {name} philly",
                ["cluster", "sim", "--gpus", "64", "--trace", p[name], "--trace-format", "philly", "--json"],
                reject=True,
            )
        )
    for name in ("helios_header_only", "helios_nan", "binary"):
        c.append(
            Case(
                f"cluster sim --trace {name} helios",
                ["cluster", "sim", "--gpus", "64", "--trace", p[name], "--trace-format", "helios", "--json"],
                reject=True,
            )
        )
    for name in ("nodes_zero", "nodes_negative", "nodes_no_model_col", "binary", "latin1", "empty", "missing"):
        c.append(Case(f"cluster sim --nodes-file {name}", cs + ["--nodes-file", p[name]], reject=True))
    for name in ("reclaims_nan", "reclaims_inf_gpus", "binary", "latin1", "empty", "missing"):
        c.append(Case(f"cluster sim --reclaims {name}", cs + ["--reclaims", p[name]], reject=True))
    c.append(Case("cluster sim --reclaims ok", cs + ["--reclaims", p["reclaims_huge"]]))
    big = ["cluster", "sim", "--jobs", "20000"]
    for name in ("missing_dir_png", "adir", "out.txt", "readonly_out"):
        c.append(Case(f"cluster sim --plot {name}", big + ["--plot", p[name]], reject=True, fast=True))
        c.append(
            Case(f"cluster sim --trace-out {name}", big + ["--trace-out", p[name]], reject=name != "out.txt", fast=True)
        )
    # -- validate / models / gpus
    c += [
        Case("validate bad kind", ["validate", "inference"], reject=True),
        Case("validate serving json", ["validate", "serving", "--json"]),
        Case("models json", ["models", "--json"]),
        Case("gpus json", ["gpus", "--json"]),
        Case("models extra arg", ["models", "x"], reject=True),
        Case("gpus --all", ["gpus", "--all"], reject=True),
    ]
    return c


_NONFINITE_TEXT = re.compile(r"(?<![A-Za-z_])(nan|inf|infinity)(?![A-Za-z_])", re.IGNORECASE)
_MONEY_OR_AMOUNT = re.compile(r"(usd|cost|price|bytes|gpu_hours|days|_s$|seconds|hours$|tokens_per_s)")


def _walk_negative(doc, path="") -> list[str]:
    """Keys naming money, bytes or time that hold a negative number."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if (
                isinstance(v, (int, float))
                and not isinstance(v, bool)
                and v < 0
                and _MONEY_OR_AMOUNT.search(str(k))
                and "error" not in str(k)
            ):
                found.append(f"{path}.{k}={v:g}")
            else:
                found += _walk_negative(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:200]):
            found += _walk_negative(v, f"{path}[{i}]")
    return found


def _strict(text: str):
    def bad(token):
        raise ValueError(f"non-finite JSON number {token}")

    return json.loads(text, parse_constant=bad)


def judge(o: Outcome, fast_limit_s: float) -> None:
    text = o.out + o.err
    if o.code is None:
        o.problems.append("hang")
        return
    if "Traceback (most recent call last)" in text:
        o.problems.append("traceback")
    if o.code not in (EXIT_OK, EXIT_BAD_INPUT, EXIT_NO_FIT):
        o.problems.append(f"exit {o.code}")
    if "--json" in o.case.args and o.code in (EXIT_OK, EXIT_NO_FIT) and o.out.strip():
        try:
            doc = _strict(o.out)
        except ValueError as exc:
            o.problems.append("nonfinite" if "non-finite" in str(exc) else f"bad json ({exc})")
            doc = None
        if doc is not None:
            neg = _walk_negative(doc)
            if neg:
                o.problems.append("negative " + ", ".join(neg[:3]))
    elif o.code == EXIT_OK:
        if _NONFINITE_TEXT.search(o.out):
            o.problems.append("nonfinite")
        if re.search(r"\$-|-\$", o.out):
            o.problems.append("negative money")
    if o.case.reject and o.code == EXIT_OK:
        o.problems.append("accepted")
    if o.case.fast and o.code != EXIT_OK and o.seconds > fast_limit_s:
        o.problems.append(f"lost run (refused after {o.seconds:.0f} s)")
    if o.code == EXIT_BAD_INPUT:
        lines = [x for x in o.err.strip().splitlines() if x.strip()]
        if len(lines) != 1 or not lines[0].startswith("error: "):
            o.problems.append("not one error line")


def run_case(case: Case, exe: list[str], timeout: float, cwd: str, src: str | None = None) -> Outcome:
    t0 = time.perf_counter()
    env = dict(os.environ, COLUMNS="80", PYTHONWARNINGS="ignore")
    if src:  # another checkout's source, e.g. `git archive main | tar -x -C /tmp/main` for the before numbers
        env["PYTHONPATH"] = src
    try:
        r = subprocess.run(
            exe + case.args,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=env,
            input=case.stdin or "",
            errors="replace",
        )
        return Outcome(case, r.returncode, time.perf_counter() - t0, r.stdout, r.stderr)
    except subprocess.TimeoutExpired:
        return Outcome(case, None, time.perf_counter() - t0, "", "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang")
    ap.add_argument("--fast-limit", type=float, default=8.0, help="seconds a bad output path may take to refuse")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--show", action="store_true", help="print every failing case")
    ap.add_argument("--json", dest="json_out", default=None, help="write per-case results here")
    ap.add_argument("--src", default=None, help="run gpuplan from this source folder (PYTHONPATH) instead")
    a = ap.parse_args()
    exe = [sys.executable, "-m", "gpuplan.cli"]
    with tempfile.TemporaryDirectory(prefix="gpuplan-corpus-") as d:
        paths = _files(Path(d))
        todo = [x for x in cases(paths) if a.only in x.name]
        with ThreadPoolExecutor(a.jobs) as pool:
            outcomes = list(pool.map(lambda x: run_case(x, exe, a.timeout, d, a.src), todo))
    for o in outcomes:
        judge(o, a.fast_limit)
    counts: dict[str, dict[str, int]] = {}
    kinds = (
        "traceback",
        "hang",
        "nonfinite",
        "negative",
        "exit",
        "accepted",
        "lost run",
        "not one error line",
        "bad json",
    )
    for o in outcomes:
        sub = o.case.args[0] if o.case.args else "(none)"
        if sub == "cluster" and len(o.case.args) > 1:
            sub = f"cluster {o.case.args[1]}"
        row = counts.setdefault(sub, {"cases": 0} | {k: 0 for k in kinds})
        row["cases"] += 1
        for p in o.problems:
            for k in kinds:
                if p.startswith(k):
                    row[k] += 1
    total = {"cases": 0} | {k: 0 for k in kinds}
    print(f"{'subcommand':<22}" + "".join(f"{k[:10]:>11}" for k in total))
    for sub, row in sorted(counts.items()):
        print(f"{sub:<22}" + "".join(f"{row[k]:>11}" for k in total))
        for k in total:
            total[k] += row[k]
    print(f"{'total':<22}" + "".join(f"{total[k]:>11}" for k in total))
    if a.show:
        for o in outcomes:
            if o.problems:
                tail = (o.err.strip().splitlines() or o.out.strip().splitlines() or [""])[-1][:160]
                print(f"- {o.case.name!r} [{o.code}, {o.seconds:.1f}s]: {'; '.join(o.problems)} | {tail}")
    if a.json_out:
        Path(a.json_out).write_text(
            json.dumps(
                [
                    {
                        "name": o.case.name,
                        "args": o.case.args,
                        "code": o.code,
                        "seconds": round(o.seconds, 2),
                        "problems": o.problems,
                    }
                    for o in outcomes
                ],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
