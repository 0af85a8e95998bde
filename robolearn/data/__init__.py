"""Data: on-policy rollout storage (replay buffers and offline datasets join with later issues)."""

from robolearn.data.rollout import RolloutBatch, RolloutStorage

__all__ = ["RolloutBatch", "RolloutStorage"]
