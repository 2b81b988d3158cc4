"""The library names inputs as fields; the CLI shows them as its flags (errors.py, cli/flags.py)."""

import ast
import json
import re
from pathlib import Path

import pytest

from gpuplan.cli.app import main
from gpuplan.cli.flags import as_flags, flags
from gpuplan.errors import field_ref


def test_field_references_become_flags_and_other_backticks_stay():
    text = f"try {field_ref('gpus', 16)} or {field_ref('seq_len', 4096)}; relax {field_ref('max_tp')}"
    assert text == "try `gpus=16` or `seq_len=4096`; relax `max_tp`"
    assert as_flags(text) == "try --gpus 16 or --seq-len 4096; relax --max-tp"
    # a command to run, or a name that is no flag of any command, is left as written
    assert as_flags("run `gpuplan gpus`, use `with Resilient(...)` or `no_such_field`") == (
        "run `gpuplan gpus`, use `with Resilient(...)` or `no_such_field`"
    )


def test_a_library_error_reaches_the_command_line_with_the_flag(capsys):
    with pytest.raises(SystemExit) as exc:  # tp 16 does not fit the 8-GPU NVLink domain: no plan meets it
        main(["search", "llama-3.1-8b", "--gpus", "16", "--global-batch", "64", "--tp", "16", "--json"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: gpus:") and "--tp/--pp/--cp/--ep/--dp" in err and "`" not in err


def test_an_on_off_field_is_shown_as_the_flags_form():
    assert as_flags("drop `sp=false`, or pass `sp=true`") == "drop --no-sp, or pass --sp"
    assert as_flags(f"use {field_ref('tp_overlap', False)}") == "use --no-tp-overlap"


def test_the_human_rendering_shows_flags_and_json_keeps_fields(capsys):
    args = ["train", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--global-batch", "64", "--micro-batch", "4"]
    with pytest.raises(SystemExit):
        main([*args, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["suggestions"][0]["change"] == "`zero=1`" and doc["suggestions"][0]["changes"] == {"zero": 1}
    with pytest.raises(SystemExit):
        main(args)
    out, err = capsys.readouterr()
    assert "try --zero 1: " in out and "try --tp 4 (dp 2): " in out and "`" not in out
    assert err.rstrip().endswith("try --zero 1 (checked: it fits)")


# -- The library never names a CLI flag (issue 15): messages, fixes, reasons and labels name fields.
# Strings in src/gpuplan outside cli/ (docstrings aside) that still contain a flag of a gpuplan
# command, each with the reason it may: (file, a piece of the string) -> why.
SRC = Path(__file__).resolve().parents[2] / "src" / "gpuplan"
ALLOWED = {
    ("slurm.py", "#SBATCH --"): "sbatch's own options, written into the generated job script",
    ("slurm.py", '--checkpoint-dir "$CKPT_DIR"'): "the generated script's command line for the user's run",
    ("estimate/profile.py", "gpuplan calibrate RUN... --out"): "names another command to run, whole",
    ("estimate/profile.py", "apply with --calibration"): "a comment line written into the profile file",
    ("estimate/run_record.py", '`against="llama-3.1-8b --gpus 8"`'): "the value of `against` is a command line",
    ("report/page.py", "<code>--json</code>"): "the report says which output of the command it embeds",
    ("specs/framework.py", "megatron/training/arguments.py"): "Megatron-LM's own flags, quoted as the source",
}
FLAG = re.compile(r"--[a-z][a-z0-9-]*(?![a-z0-9-])")
MADE = re.compile(r"(^|[\s(/])--([a-z][a-z0-9-]*-)?$")  # "(--{name}", "(--max-{name}"


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def strings_naming_flags(root: Path = SRC) -> list[tuple[str, str]]:
    """(file, string) of every string constant outside cli/ that names a gpuplan flag."""
    known = flags()
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("cli/"):
            continue
        tree = ast.parse(path.read_text(), rel)
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if any(f in known for f in FLAG.findall(node.value)):
                    out.append((rel, node.value))
            if isinstance(node, ast.JoinedStr):  # f"... (--{name})": a flag made from a field's name
                parts = node.values
                for a, b in zip(parts, parts[1:]):
                    if isinstance(a, ast.Constant) and isinstance(b, ast.FormattedValue) and MADE.search(str(a.value)):
                        out.append((rel, ast.unparse(node)))
    return out


def test_no_library_message_names_a_cli_flag():
    found = strings_naming_flags()
    named = [(f, s) for f, s in found if not any(f == af and piece in s for af, piece in ALLOWED)]
    assert named == [], "write these as field references (gpuplan.errors.field_ref): " + repr(named)
    # every allowance is still needed: one that matches nothing is stale
    stale = [key for key in ALLOWED if not any(f == key[0] and key[1] in s for f, s in found)]
    assert stale == []


def test_the_flag_scan_finds_a_flag_in_a_message():
    # the scan itself: a flag of the CLI is found, a field reference and another tool's flag are not
    known = flags()
    assert [f for f in FLAG.findall("set --pp > 1") if f in known] == ["--pp"]
    assert [f for f in FLAG.findall("set `pp` > 1, srun --ntasks-per-node 8") if f in known] == []


def test_the_flag_scan_finds_flags_in_code_but_not_in_docstrings(tmp_path):
    (tmp_path / "estimate").mkdir()
    (tmp_path / "estimate" / "bad.py").write_text(
        'def why(name):\n    """Run it with --pp 2."""\n    return f"{name} not asked for (--{name})", f"above (--max-{name})", "use --vp 1"\n'
    )
    found = strings_naming_flags(tmp_path)
    assert [f for f, _ in found] == ["estimate/bad.py"] * 3
    assert not any("Run it with" in s for _, s in found)
