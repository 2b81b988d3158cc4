"""Every subcommand driven with generated bad values and bad files: it answers (0), refuses the input
in one line (2) or says the plan does not fit (3); never a traceback, never NaN or Infinity in its
JSON, and never a long run. The number of examples is bounded so the whole test stays well under a
minute on two cores."""

import json
import time

from hypothesis import HealthCheck, given, settings, strategies as st

from gpuplan.cli.app import main

# Small sizes keep each run short: what matters is what the bad value does, not the workload
BASES = {
    "train": ["train", "llama-3.2-1b", "--gpus", "8", "--json"],
    "search": ["search", "llama-3.2-1b", "--gpus", "8", "--json"],
    "serve": ["serve", "llama-3.2-1b", "--json"],
    "serve-sim": ["serve-sim", "llama-3.2-1b", "--rate", "2", "--requests", "20", "--json"],
    "pipeline": ["pipeline", "--stages", "4", "--microbatches", "8", "--json"],
    "experts": [
        "experts",
        "--synthetic",
        "1",
        "--layers",
        "2",
        "--experts",
        "16",
        "--replicas",
        "16",
        "--gpus",
        "4",
        "--nodes",
        "2",
        "--groups",
        "4",
        "--top-k",
        "2",
        "--json",
    ],
    "slurm": ["slurm", "--json"],
    "checkpoint-interval": ["checkpoint-interval", "--mtbf", "3h", "--cost", "60s", "--json"],
    "collective": ["collective", "all-reduce", "--json"],
    "whatif": ["cluster", "whatif", "--json"],
    "tco": ["tco", "--capex", "2M", "--json"],
    "cluster-sim": ["cluster", "sim", "--gpus", "16", "--jobs", "30", "--json"],
}
FLAGS = {
    "train": [
        "--gpus",
        "--tp",
        "--pp",
        "--seq-len",
        "--micro-batch",
        "--global-batch",
        "--tokens",
        "--mfu",
        "--price",
        "--cuda-context-gib",
        "--allocator-fraction",
        "--expert-imbalance",
        "--zero",
    ],
    "search": ["--gpus", "--seq-len", "--global-batch", "--top", "--price"],
    "serve": [
        "--tp",
        "--input-len",
        "--output-len",
        "--concurrency",
        "--price",
        "--gpu-memory-utilization",
        "--block-size",
        "--max-batched-tokens",
        "--prefix-hit-rate",
        "--target-rps",
        "--itl-slo",
        "--ttft-slo",
    ],
    "serve-sim": [
        "--rate",
        "--requests",
        "--input-len",
        "--output-len",
        "--seed",
        "--max-batched-tokens",
        "--block-size",
        "--ttft-slo",
    ],
    "pipeline": ["--stages", "--microbatches", "--f", "--b", "--w", "--p2p", "--activation-gib", "--unit"],
    "experts": [
        "--synthetic",
        "--layers",
        "--experts",
        "--replicas",
        "--gpus",
        "--nodes",
        "--groups",
        "--top-k",
        "--dispatch-bytes",
        "--seed",
    ],
    "slurm": ["--gpus", "--nodes", "--gpus-per-node", "--time", "--signal-before"],
    "checkpoint-interval": ["--mtbf", "--cost", "--restart"],
    "collective": ["--size", "--ranks", "--stride"],
    "whatif": ["--hours", "--price", "--gpus", "--preempt-at", "--checkpoint-cost", "--restart", "--mtbf"],
    "tco": ["--gpus", "--on-demand", "--spot", "--pue", "--kwh", "--utilisation", "--months", "--capex"],
    "cluster-sim": [
        "--gpus-per-node",
        "--load",
        "--spot-share",
        "--weibull",
        "--spot-reclaim-per-hour",
        "--price",
        "--seed",
        "--node-mtbf",
        "--restart",
        "--repair",
        "--grace",
        "--checkpoint",
        "--checkpoint-cost",
    ],
}
BAD = st.one_of(
    st.sampled_from(
        [
            "nan",
            "-nan",
            "inf",
            "-inf",
            "Infinity",
            "-1",
            "0",
            "-0",
            "1e308",
            "1e400",
            "99999999999999999999",
            "",
            " ",
            "abc",
            "1,2",
            "1e-320",
            "0.5",
            "3",
            "-1s",
            "5 parsecs",
            "1GB",
            "1GiB",
            "1e30d",
            "1000h",
            "exp:nan",
            "10-1",
            "\x00",
            "é",
            "1_000",
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.text(max_size=8),
)
FILE_BYTES = st.one_of(
    st.sampled_from(
        [
            b"",
            b"\x00\x01\x02",
            "caf\xe9".encode("latin-1"),
            b"[]",
            b'{"jobs": []}',
            b"{not json",
            b"NaN",
            b"time_s,gpus\nnan,1\n",
            b"arrival_s,input_len,output_len\n0,-1,5\n",
            b"1,2\n3\n",
            b"sn,gpu,model\nn0,0,A\n",
            b"a,b\n" * 3,
        ]
    ),
    st.binary(max_size=64),
)
FILE_FLAGS = [
    ("serve-sim", ["serve-sim", "llama-3.2-1b", "--json", "--trace"]),
    ("experts", ["experts", "--replicas", "8", "--gpus", "4", "--nodes", "1", "--groups", "1", "--json", "--loads"]),
    ("cluster-sim", ["cluster", "sim", "--gpus", "16", "--json", "--trace"]),
    ("cluster-sim", ["cluster", "sim", "--gpus", "16", "--json", "--trace-format", "philly", "--trace"]),
    ("cluster-sim", ["cluster", "sim", "--gpus", "16", "--jobs", "20", "--json", "--nodes-file"]),
    ("cluster-sim", ["cluster", "sim", "--gpus", "16", "--jobs", "20", "--json", "--reclaims"]),
    ("train", ["train", "--json", "--gpus", "8"]),
]


def run(args, capsys):
    t0 = time.perf_counter()
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err, time.perf_counter() - t0


def no_constant(token):
    raise AssertionError(f"{token} in JSON output")


def check(args, capsys, bound_s=20.0):
    code, out, err, seconds = run(args, capsys)
    assert code in (0, 2, 3), (args, code, err)
    assert "Traceback" not in out + err, args
    assert seconds < bound_s, (args, seconds)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
    elif out.strip():
        json.loads(out, parse_constant=no_constant)


SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(data=st.data())
def test_every_subcommand_answers_or_refuses_a_bad_value_in_one_line(capsys, data):
    command = data.draw(st.sampled_from(sorted(BASES)))
    flag = data.draw(st.sampled_from(FLAGS[command]))
    value = data.draw(BAD)
    args = (
        BASES[command][:1]
        + (BASES[command][1:2] if command in ("whatif", "cluster-sim") else [])
        + [flag, value]
        + BASES[command][2 if command in ("whatif", "cluster-sim") else 1 :]
    )
    if command == "slurm":
        args += ["--", "train.py"]
    check(args, capsys)


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(which=st.integers(0, len(FILE_FLAGS) - 1), content=FILE_BYTES)
def test_every_reader_answers_or_refuses_a_bad_file_in_one_line(tmp_path_factory, capsys, which, content):
    path = tmp_path_factory.mktemp("bad") / ("input.json" if FILE_FLAGS[which][0] == "train" else "input.csv")
    path.write_bytes(content)
    _, args = FILE_FLAGS[which]
    if args[0] == "train":
        args = ["train", str(path)] + args[2:]
    else:
        args = args + [str(path)]
    check(args, capsys)
