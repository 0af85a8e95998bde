"""Flow Q-learning: config, pure losses, the one-step policy and the agent's verbs."""

from robolearn.algos.fql.agent import FQL
from robolearn.algos.fql.config import FQLConfig
from robolearn.algos.fql.losses import actor_loss, aggregate, critic_loss, flow_actions, flow_loss
from robolearn.algos.fql.networks import NoisyPolicy, OneStepPolicy

__all__ = ["FQL", "FQLConfig", "NoisyPolicy", "OneStepPolicy", "actor_loss", "aggregate", "critic_loss", "flow_actions", "flow_loss"]
