"""Resilient training runtime (optional extra ``gpuplan[train]``): the only package that imports torch.

The names below load lazily, so that ``gpuplan.train.signals`` (installed before ``import torch``,
which takes seconds) and the other torch-free helpers import without torch.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "EXIT_REQUEUE": "runtime",
    "Resilient": "runtime",
    "config_hash": "runtime",
    "state_checksum": "runtime",
    "CheckpointError": "checkpoint",
    "CheckpointManager": "checkpoint",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"gpuplan.train.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'gpuplan.train' has no attribute {name!r}")
