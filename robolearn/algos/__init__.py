"""Learning algorithms, one package each: ``config.py``, ``losses.py``, ``agent.py``."""

from robolearn.algos.bc import BC, BCConfig
from robolearn.algos.cql import CQL, CalQLConfig, CQLConfig
from robolearn.algos.iql import IQL, IQLConfig
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.algos.sac import SAC, SACConfig
from robolearn.algos.td3bc import TD3BC, TD3BCConfig

__all__ = [
    "BC",
    "CQL",
    "IQL",
    "PPO",
    "SAC",
    "TD3BC",
    "BCConfig",
    "CQLConfig",
    "CalQLConfig",
    "IQLConfig",
    "PPOConfig",
    "SACConfig",
    "TD3BCConfig",
]
