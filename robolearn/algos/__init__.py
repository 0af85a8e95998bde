"""Learning algorithms, one package each: ``config.py``, ``losses.py``, ``agent.py``."""

from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.algos.sac import SAC, SACConfig

__all__ = ["PPO", "SAC", "PPOConfig", "SACConfig"]
