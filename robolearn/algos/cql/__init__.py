"""CQL(H) and Cal-QL (``calibrated=True``): config, pure losses and the agent's verbs."""

from robolearn.algos.cql.agent import CQL
from robolearn.algos.cql.config import CalQLConfig, CQLConfig
from robolearn.algos.cql.losses import (
    CQLSamples,
    actor_loss,
    alpha_prime_loss,
    conservative_gap,
    critic_loss,
    sample_actions,
)

__all__ = [
    "CQL",
    "CQLConfig",
    "CQLSamples",
    "CalQLConfig",
    "actor_loss",
    "alpha_prime_loss",
    "conservative_gap",
    "critic_loss",
    "sample_actions",
]
