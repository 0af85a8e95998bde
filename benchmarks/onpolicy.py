"""One on-policy iteration, as the benchmarks that drive an agent without the runner run it.

The benchmarks folder is not a package: scripts put this folder on ``sys.path`` and import it.
"""

from __future__ import annotations

from typing import Any

import torch

from robolearn.types import Transition


def collect(agent: Any, env: Any, obs: dict[str, torch.Tensor], num_steps: int) -> dict[str, torch.Tensor]:
    """``num_steps`` steps of every world into the agent's rollout (each stored with the pre-reset
    observation of ended worlds), then the returns; the next observation. The update is the caller's
    (a benchmark that times it alone, or :func:`ppo_iteration`).
    """
    for _ in range(num_steps):
        action = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
    agent.compute_returns(obs)
    return obs


def ppo_iteration(agent: Any, env: Any, obs: dict[str, torch.Tensor], num_steps: int,
                  ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One on-policy iteration (PPO, ReinFlow, DPPO): :func:`collect`, then the update; the next
    observation and the update's stats.
    """
    obs = collect(agent, env, obs, num_steps)
    return obs, agent.update()
