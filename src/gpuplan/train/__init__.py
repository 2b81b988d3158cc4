"""Resilient training runtime (optional extra ``gpuplan[train]``): the only package that imports torch."""

from gpuplan.train.runtime import EXIT_REQUEUE, Resilient, config_hash, state_checksum
from gpuplan.train.checkpoint import CheckpointError, CheckpointManager

__all__ = ["EXIT_REQUEUE", "Resilient", "config_hash", "state_checksum", "CheckpointError", "CheckpointManager"]
