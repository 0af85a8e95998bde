"""Data: on-policy rollout storage and the device replay buffer (offline datasets join with issue 6)."""

from robolearn.data.replay import ReplayBuffer
from robolearn.data.rollout import RolloutBatch, RolloutStorage

__all__ = ["ReplayBuffer", "RolloutBatch", "RolloutStorage"]
