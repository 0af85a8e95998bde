"""Behaviour cloning (and the pieces every offline learner shares): config, pure loss, agent."""

from robolearn.algos.bc.agent import BC
from robolearn.algos.bc.config import BCConfig
from robolearn.algos.bc.losses import bc_loss
from robolearn.nn.offline import DeterministicActor, ObsNormalization

__all__ = ["BC", "BCConfig", "DeterministicActor", "ObsNormalization", "bc_loss"]
