"""Every interval, count and size is checked before anything runs: a bad one is one line naming
the flag (or the field, for the library) and exit 2; 0 never silently means "never"."""

import subprocess
import sys

import pytest

from gpuplan.errors import GpuplanError
from tests.train.conftest import EXAMPLE, run_forked

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--checkpoint-every", "0"], "--checkpoint-every"),
        (["--checkpoint-every", "-5"], "--checkpoint-every"),
        (["--checkpoint-every", "1.5"], "--checkpoint-every"),
        (["--checkpoint-every", "ten"], "--checkpoint-every"),
        (["--steps", "-3"], "--steps"),
        (["--steps", "0"], "--steps"),
        (["--checkpoint-seconds", "0"], "--checkpoint-seconds"),
        (["--checkpoint-seconds", "nan"], "--checkpoint-seconds"),
        (["--mtbf", "-1"], "--mtbf"),
        (["--keep", "1"], "--keep"),
        (["--seed", "-1"], "--seed"),
        (["--no-checkpoint", "--checkpoint-every", "5"], "--no-checkpoint"),
    ],
)
def test_a_bad_number_on_the_command_line_names_its_flag(tiny, argv, flag):
    with pytest.raises(GpuplanError) as e:
        tiny.parse(argv)
    assert e.value.field == flag and "\n" not in str(e.value)


def test_the_script_prints_one_line_and_exits_2_with_no_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), "--checkpoint-every", "0", "--checkpoint-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "error: --checkpoint-every: must be a positive integer, got 0; give the number of "
        "steps between checkpoints, or --no-checkpoint to checkpoint only on a signal"
    ]
    assert not list(tmp_path.iterdir())  # nothing was created


def test_no_checkpoint_must_be_spelled_out_and_warns(tiny, tmp_path):
    out = tmp_path / "out"
    assert (
        run_forked(tiny, ["--steps", "20", "--no-checkpoint", "--checkpoint-dir", str(tmp_path / "c"), "--quiet"], out)
        == 0
    )
    assert "--no-checkpoint: no scheduled checkpoints" in out.read_text()
    assert not list((tmp_path / "c").glob("step-*"))


@pytest.mark.parametrize(
    "field, value",
    [
        ("every_steps", 0),
        ("every_steps", -1),
        ("every_steps", 1.5),
        ("every_steps", "10"),
        ("every_steps", True),
        ("every_seconds", 0),
        ("every_seconds", "60"),
        ("every_seconds", float("inf")),
        ("mtbf_s", -3600),
        ("keep", 1),
        ("keep", 2.0),
        ("deadline_s", 0),
        ("async_save", "yes"),
        ("restart", 1),
        ("checkpoint_dir", None),
    ],
)
def test_the_library_refuses_a_bad_argument_naming_the_field(tmp_path, field, value):
    from gpuplan.train import Resilient

    model = torch.nn.Linear(2, 2)
    kw = {"checkpoint_dir": tmp_path / "c", "every_steps": 10, field: value}
    with pytest.raises(ValueError) as e:  # GpuplanError is a ValueError
        Resilient(model, torch.optim.SGD(model.parameters(), lr=0.1), **kw)
    assert isinstance(e.value, GpuplanError) and e.value.field == field
    assert not (tmp_path / "c").exists()  # refused before touching the disk


def test_a_telemetry_path_a_model_or_a_scheduler_that_cannot_work_is_refused_when_made(tmp_path):
    # they failed after resume (telemetry: after `restart` had archived the checkpoints) or at the
    # first checkpoint (a scheduler without a state dict), with a raw error
    from gpuplan.train import Resilient

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cases = [
        ("telemetry", dict(telemetry=tmp_path)),
        ("telemetry", dict(telemetry=tmp_path / "missing" / "t.jsonl")),
        ("scheduler", dict(scheduler="cosine")),
    ]
    for field, kw in cases:
        with pytest.raises(GpuplanError) as e:
            Resilient(model, opt, checkpoint_dir=tmp_path / "c", every_steps=10, **kw)
        assert e.value.field == field
    with pytest.raises(GpuplanError) as e:
        Resilient(None, opt, checkpoint_dir=tmp_path / "c", every_steps=10)
    assert e.value.field == "model"
    with pytest.raises(GpuplanError) as e:
        Resilient(model, None, checkpoint_dir=tmp_path / "c", every_steps=10)
    assert e.value.field == "optimizer"
    assert not (tmp_path / "c").exists()
