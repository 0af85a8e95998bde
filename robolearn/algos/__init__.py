"""Learning algorithms, one package each: ``config.py``, ``losses.py``, ``agent.py``."""

from robolearn.algos.ppo import PPO, PPOConfig

__all__ = ["PPO", "PPOConfig"]
