"""Choosing the checkpoint to resume from (checkpoint.py): the newest that passes its marker, its
config hash and its checksums; the damaged ones are quarantined, never deleted."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from gpuplan.train import integrity
from gpuplan.train.ckpt_disk import CORRUPT, MARKER, PREFIX, fsync_dir, step_of

log = logging.getLogger("gpuplan.train")


# -- loading -------------------------------------------------------------------------------------
def quarantine(directory: Path, path: Path, reason: str, why: str) -> str:
    """Rename a damaged checkpoint ``step-N.corrupt-<reason>`` (never deleted); what was done, in words."""
    target = path.with_name(f"{path.name}{CORRUPT}{reason}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{CORRUPT}{reason}-{n}")
    try:
        os.rename(path, target)
        fsync_dir(directory)
        moved = f"moved to {target.name}"
    except OSError as exc:  # a read-only directory, say: still skip it
        moved = f"could not move it aside ({exc.strerror})"
    return f"{path.name}: {why}, {moved}"


def newest_good(directory: Path, config_hash: str, problems: list[str]):
    """Rank 0: the newest checkpoint that passes its marker, config and checksums, quarantining
    those that do not. ("load", step, path) | ("config", field, message, fix) | None."""
    for path in sorted(
        (p for p in directory.glob(f"{PREFIX}*") if step_of(p) is not None and p.is_dir()),
        key=lambda p: step_of(p) or 0,
        reverse=True,
    ):
        step = step_of(path)
        try:
            try:
                marker = json.loads((path / MARKER).read_text())
            except FileNotFoundError:
                raise integrity.Damaged("no-marker", f"no {MARKER} marker") from None
            except (OSError, ValueError) as exc:
                raise integrity.Damaged("marker", f"corrupt marker ({exc})") from None
            if not isinstance(marker, dict) or marker.get("step") != step:
                raise integrity.Damaged("marker", "corrupt marker (it does not describe this checkpoint)")
            integrity.check_seal(marker)
            if config_hash and marker.get("config_hash") not in ("", config_hash):
                return (
                    "config",
                    "checkpoint_dir",
                    f"{path} was written by a different model or config (hash {marker.get('config_hash')}, "
                    f"this run {config_hash})",
                    "use another `checkpoint_dir`, or `restart` to start over",
                )
            integrity.verify(path, marker.get("files"))
        except integrity.Damaged as exc:
            problems.append(quarantine(directory, path, exc.reason, exc.detail))
            log.warning("damaged checkpoint %s; trying the one before", problems[-1])
            continue
        return ("load", step, str(path))
    return None


def model_mismatch(path: str | Path, state: dict) -> str | None:
    """How the model of ``state`` differs from the one that wrote the DCP checkpoint at ``path``
    (a tensor it lacks, or of another shape), or None; None as well when its metadata cannot be
    read (a damaged checkpoint: loading it says so). A mismatch is the wrong model, not damage."""
    import torch.distributed.checkpoint as dcp

    try:
        meta = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    except Exception:  # noqa: BLE001 (unreadable metadata is for the load to report as damage)
        return None
    for name, tensor in state.get("model", {}).items():
        key = f"model.{name}"
        shape = tuple(getattr(tensor, "shape", ()))
        if key not in meta:
            return f"it has no {name!r}"
        size = getattr(meta[key], "size", None)
        if size is not None and tuple(size) != shape:
            return f"its {name!r} is {tuple(size)}, this model's {shape}"
    return None
