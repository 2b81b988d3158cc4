"""Resilient training runtime (optional extra ``gpuplan[train]``): the only package that imports torch."""

from gpuplan.train.runtime import EXIT_REQUEUE, Resilient, config_hash, state_checksum  # noqa: F401
from gpuplan.train.checkpoint import CheckpointError, CheckpointManager  # noqa: F401
