"""Proximal Policy Optimisation: config, pure losses and the agent's verbs."""

from robolearn.algos.ppo.agent import PPO
from robolearn.algos.ppo.config import PPOConfig

__all__ = ["PPO", "PPOConfig"]
