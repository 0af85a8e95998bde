"""Soft Actor-Critic (and REDQ by configuration): config, pure losses and the agent's verbs."""

from robolearn.algos.sac.agent import SAC
from robolearn.algos.sac.config import SACConfig
from robolearn.algos.sac.losses import actor_loss, alpha_loss, critic_loss, td_target

__all__ = ["SAC", "SACConfig", "actor_loss", "alpha_loss", "critic_loss", "td_target"]
