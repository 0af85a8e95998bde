"""Runners: the training and evaluation loops, and the checkpoints they write and resume from.

The on-policy and off-policy loops are here; the offline, offline-to-online and distillation loops
join it with their issues.
"""

from robolearn.runners.base import BaseRunner, RunnerConfig, TrainingDiverged
from robolearn.runners.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from robolearn.runners.off_policy import OffPolicyRunner
from robolearn.runners.on_policy import OnPolicyRunner

__all__ = [
    "CheckpointError",
    "BaseRunner",
    "CheckpointManager",
    "OffPolicyRunner",
    "OnPolicyRunner",
    "RunnerConfig",
    "TrainingDiverged",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]
