"""Runners: the training and evaluation loops, and the checkpoints they write and resume from.

The on-policy loop is here; the off-policy, offline, offline-to-online and distillation loops
join it with their issues.
"""

from robolearn.runners.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from robolearn.runners.on_policy import OnPolicyRunner, RunnerConfig, TrainingDiverged

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "OnPolicyRunner",
    "RunnerConfig",
    "TrainingDiverged",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]
