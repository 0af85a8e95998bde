"""The on-policy runner: collect ``num_steps`` per world, compute returns, update (PPO).

Everything else (evaluation, logging, checkpoints, resume, the NaN guard) is :class:`BaseRunner`.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from robolearn.runners.base import BaseRunner, RunnerConfig
from robolearn.types import Transition


class OnPolicyRunner(BaseRunner):
    """Trains an on-policy algorithm (PPO) on a batched env and writes a run directory."""

    def __init__(
        self,
        env: Any,
        agent: Any,
        cfg: RunnerConfig,
        run_dir: str | os.PathLike[str],
        *,
        eval_env: Any | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """One iteration is ``agent.cfg.num_steps`` control steps of every world, then an update."""
        super().__init__(env, agent, cfg, run_dir, eval_env=eval_env, config=config)
        self.steps_per_iteration = int(agent.cfg.num_steps) * int(env.num_envs)

    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        for _ in range(self.agent.cfg.num_steps):
            action = self.agent.act(obs)
            next_obs, reward, terminated, truncated, info = self.env.step(action)
            self.agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
            self._record_episodes(info)
            obs = next_obs
        self.agent.compute_returns(obs)
        return obs, self._guarded(self.agent.update)
