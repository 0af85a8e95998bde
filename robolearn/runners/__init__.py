"""Runners: the training and evaluation loops, and the checkpoints they write and resume from.

The on-policy, off-policy and offline loops share one :class:`BaseRunner`; evaluation, the eval
command and data collection share one :func:`rollout`.
"""

from robolearn.runners.base import BaseRunner, RunInterrupted, RunnerConfig, TrainingDiverged
from robolearn.runners.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from robolearn.runners.off_policy import OffPolicyRunner
from robolearn.runners.offline import OfflineRunner
from robolearn.runners.on_policy import OnPolicyRunner
from robolearn.runners.rollout import RolloutResult, RolloutStep, VideoSpec, rollout
from robolearn.runners.rundir import RunDirError, RunLock

__all__ = [
    "CheckpointError",
    "BaseRunner",
    "CheckpointManager",
    "OffPolicyRunner",
    "OfflineRunner",
    "OnPolicyRunner",
    "RolloutResult",
    "RolloutStep",
    "RunDirError",
    "RunInterrupted",
    "RunLock",
    "RunnerConfig",
    "TrainingDiverged",
    "VideoSpec",
    "rollout",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]
