"""The library names inputs as fields; the CLI shows them as its flags (errors.py, cli/flags.py)."""

import pytest

from gpuplan.cli.app import main
from gpuplan.cli.flags import as_flags
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
