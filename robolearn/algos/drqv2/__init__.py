"""DrQ-v2 (data-regularised Q-learning from pixels): config, pure losses and the agent's verbs."""

from robolearn.algos.drqv2.agent import DrQV2
from robolearn.algos.drqv2.config import DrQV2Config
from robolearn.algos.drqv2.losses import actor_loss, critic_loss, noisy_action, nstep_target

__all__ = ["DrQV2", "DrQV2Config", "actor_loss", "critic_loss", "noisy_action", "nstep_target"]
