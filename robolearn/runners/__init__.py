"""Runners: the training and evaluation loops, and the checkpoints they write and resume from.

So far this holds the checkpoint layer; the on-policy, off-policy, offline, offline-to-online and
distillation loops join it in later issues.
"""

from robolearn.runners.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]
