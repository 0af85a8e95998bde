"""Implicit Q-Learning: config, pure losses and the agent's verbs."""

from robolearn.algos.iql.agent import IQL
from robolearn.algos.iql.config import IQLConfig
from robolearn.algos.iql.losses import actor_loss, critic_loss, expectile_loss, value_loss

__all__ = ["IQL", "IQLConfig", "actor_loss", "critic_loss", "expectile_loss", "value_loss"]
