"""TD3+BC: config, pure losses and the agent's verbs."""

from robolearn.algos.td3bc.agent import TD3BC
from robolearn.algos.td3bc.config import TD3BCConfig
from robolearn.algos.td3bc.losses import actor_loss, critic_loss, smoothed_target_action

__all__ = ["TD3BC", "TD3BCConfig", "actor_loss", "critic_loss", "smoothed_target_action"]
