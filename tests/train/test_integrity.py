"""Damage to a checkpoint, file by file: every way storage breaks a file of the newest checkpoint is
caught before its data is used (checksums in the marker), the directory is quarantined (renamed,
never deleted), the one before is loaded, and the run ends with the uninterrupted checksum. With
no good checkpoint left the start fails with one line naming each directory, and keeps failing
until --restart, rather than silently starting over."""

import json
import shutil

import pytest

from tests.train.conftest import checksum, finish, run_forked

STEPS = 30
FILES = [".metadata", "__0_0.distcp", "extra.pt", "COMPLETE"]


def _args(ckpt, *extra):
    return ["--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--quiet", *extra]


def truncate(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def zero(p):
    p.write_bytes(bytes(p.stat().st_size))


def delete(p):
    p.unlink()


def flip(p):  # one bit in the middle: tensor data in a shard, a field in the metadata, a digit in the marker
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x01
    p.write_bytes(bytes(b))


DAMAGE = {"truncate": truncate, "zero": zero, "delete": delete, "flip": flip}


@pytest.fixture(scope="module")
def pristine(tiny, tmp_path_factory):
    """A finished run's directory: checkpoints of steps 20 and 30."""
    d = tmp_path_factory.mktemp("pristine")
    assert run_forked(tiny, _args(d / "ckpt"), d / "out") == 0
    assert sorted(p.name for p in (d / "ckpt").glob("step-*")) == ["step-00000020", "step-00000030"]
    assert set(FILES) <= {p.name for p in (d / "ckpt" / "step-00000030").iterdir()}
    return d / "ckpt"


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_file_in_the_newest_checkpoint_is_quarantined_and_the_previous_one_loads(
    tiny, tmp_path, pristine, reference_for, name, damage
):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(pristine, ckpt)
    DAMAGE[damage](ckpt / "step-00000030" / name)
    out = tmp_path / "out"
    assert run_forked(tiny, _args(ckpt), out) == 0, out.read_text()[-1500:]
    log = out.read_text()
    assert "Traceback" not in log
    warnings = [line for line in log.splitlines() if "damaged checkpoint step-00000030" in line]
    assert len(warnings) == 1, log  # one line that says what and where
    assert "resumed from step-00000020" in log
    kept = list(ckpt.glob("step-00000030.corrupt-*"))
    assert len(kept) == 1 and kept[0].is_dir()  # quarantined, not deleted
    assert checksum(out) == reference_for(STEPS)


def test_no_loadable_checkpoint_is_one_error_naming_each_and_only_restart_starts_over(
    tiny, tmp_path, pristine, reference_for
):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(pristine, ckpt)
    flip(ckpt / "step-00000030" / "__0_0.distcp")
    truncate(ckpt / "step-00000020" / "extra.pt")
    out = tmp_path / "out"
    assert run_forked(tiny, _args(ckpt), out) == 2
    errors = [line for line in out.read_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.read_text()
    assert "step-00000030: __0_0.distcp does not match" in errors[0]
    assert "step-00000020: extra.pt has" in errors[0] and "`restart`" in errors[0]
    # the next start must not take the quarantined directories for "no checkpoint yet"
    assert run_forked(tiny, _args(ckpt), out) == 2
    assert "only damaged ones" in out.read_text()
    assert finish(tiny, ckpt, out, _args(ckpt, "--restart")) == reference_for(STEPS)
    assert len(list(ckpt.glob("old-runs/*/step-*.corrupt-*"))) == 2  # moved aside, still there


def test_a_marker_without_checksums_still_loads(tiny, tmp_path, pristine, reference_for):
    """Checkpoints written before checksums list their files by name only: they load, unverified."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(pristine, ckpt)
    for d in ckpt.glob("step-*"):
        marker = json.loads((d / "COMPLETE").read_text())
        marker["files"] = sorted(marker["files"])
        del marker["self_crc32"], marker["digest"], marker["bytes"]
        (d / "COMPLETE").write_text(json.dumps(marker))
    shutil.rmtree(ckpt / "step-00000030")
    out = tmp_path / "out"
    assert run_forked(tiny, _args(ckpt), out) == 0
    assert "resumed from step-00000020" in out.read_text()
    assert checksum(out) == reference_for(STEPS)
