"""The README's worked numbers are what the commands print: each number is read from README.md and
compared with the command's JSON at the precision the README prints it."""

import json
import re
import shlex
from pathlib import Path

from gpuplan.cli.app import main

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
GiB = 2**30


def run_json(args, capsys):
    try:
        main(args + ["--json"])
    except SystemExit as exc:
        assert exc.code == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def close(readme_value: str, actual: float, scale: float = 1.0) -> None:
    """Equal at the README's printed precision: half a unit of its last digit."""
    digits = readme_value.split(".")[1] if "." in readme_value else ""
    mantissa = digits.split("e")[0]
    tolerance = 0.5 * 10 ** -len(mantissa) * (10 ** int(readme_value.split("e")[1]) if "e" in readme_value else 1)
    assert abs(actual / scale - number(readme_value)) <= tolerance * 1.0001, (readme_value, actual / scale)


def worked_example_args() -> list[str]:
    block = section("Two commands")
    line = next(x for x in block.splitlines() if "gpuplan train" in x)
    return shlex.split(line.split(".venv/bin/gpuplan ", 1)[1])


def test_the_worked_example_memory_table_is_what_train_prints(capsys):
    doc = run_json(worked_example_args(), capsys)
    per = doc["memory"]["per_gpu"]
    text = section("What the worked example says")
    rows = dict(re.findall(r"^\| \**([a-z]+)\**[^|]*\| \**([0-9.,]+)\** \|$", text, re.M))
    keys = {
        "weights": "weights",
        "gradients": "gradients",
        "optimizer": "optimizer",
        "master": "master_weights",
        "activations": "activations",
        "other": "other",
        "total": "total",
    }
    assert set(rows) == set(keys), rows
    for row, key in keys.items():
        close(rows[row], per[key], GiB)
    capacity = re.search(r"of ([0-9.]+) GiB \(H100", text).group(1)
    close(capacity, doc["memory"]["gpu_capacity"], GiB)


def test_the_worked_example_time_and_cost_are_what_train_prints(capsys):
    doc = run_json(worked_example_args(), capsys)
    text = " ".join(section("What the worked example says").split())
    m = re.search(
        r"Predicted \(no `--mfu`\): ([0-9.e]+) FLOPs per token .*?6·N·D would say ([0-9.e]+)\), "
        r"([0-9.]+) s per step at MFU ([0-9.]+)% \(HFU ([0-9.]+)%\), ([0-9,]+) tokens/s per GPU, "
        r"([0-9,]+) days, ([0-9,]+) GPU-hours, \$([0-9.]+)M at \$([0-9.]+)/GPU-hour",
        text,
    )
    assert m, "the README's worked-example sentence changed shape"
    per_token, six_nd, step, mfu, hfu, tok_s, days, gpu_hours, musd, price = m.groups()
    close(per_token, doc["flops"]["per_token"])
    close(six_nd, doc["flops"]["six_nd_total"] / doc["training"]["tokens"])
    close(step, doc["time"]["step_s"])
    close(mfu, doc["mfu"], 0.01)
    close(hfu, doc["hfu"], 0.01)
    close(tok_s, doc["tokens_per_s_per_gpu"])
    close(days, doc["time"]["days"])
    close(gpu_hours, doc["gpu_hours"])
    close(musd, doc["cost_usd"], 1e6)
    close(price, doc["price"]["usd_per_gpu_hour"])
    b = doc["performance"]["breakdown_s"]
    parts = re.search(
        r"The step: ([0-9.]+) s of GEMMs.*? ([0-9.]+) s selective recompute, ([0-9.]+) s of exposed TP"
        r".*? ([0-9.]+) s pipeline bubble, ([0-9.]+) s PP send/recv",
        text,
    )
    assert parts, "the README's step breakdown sentence changed shape"
    for value, key in zip(parts.groups(), ("compute", "recompute", "tp_comm", "bubble", "pp_comm")):
        close(value, b[key])


def test_the_whatif_usage_line_quotes_what_whatif_prints(capsys):
    usage = section("Usage")
    m = re.search(
        r"gpuplan cluster whatif (.*?)\[--json\]\s+# \$([0-9,]+) lost with no checkpoint, \$([0-9,]+) with "
        r"hourly ones",
        usage,
        re.S,
    )
    assert m, "the README's whatif line changed shape"
    args = shlex.split(m.group(1).replace("\\\n", " "))
    doc = run_json(["cluster", "whatif"] + args, capsys)
    by = {p["checkpoint"]: p for p in doc["policies"]}
    assert round(by["none"]["lost_usd"]) == number(m.group(2))
    assert round(by["1h"]["lost_usd"]) == number(m.group(3))
