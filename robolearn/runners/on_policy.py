"""The on-policy runner: collect ``num_steps`` per world, compute returns, update (PPO).

Everything else (evaluation, logging, checkpoints, resume, the NaN guard) is :class:`BaseRunner`.
"""

from __future__ import annotations

import torch

from robolearn.runners.base import BaseRunner
from robolearn.types import Transition


class OnPolicyRunner(BaseRunner):
    """Trains an on-policy algorithm (PPO) on a batched env and writes a run directory."""

    times_updates = True  # the update (epochs of minibatches) is timed; acting, physics, storing and GAE are the rest

    def _iteration_length(self) -> int:
        """One iteration is ``agent.cfg.num_steps`` control steps of every world (of every rank), then an update."""
        return int(self.agent.cfg.num_steps) * int(self.env.num_envs) * self.world_size

    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        for _ in range(self.agent.cfg.num_steps):
            action = self.agent.act(obs)
            next_obs, reward, terminated, truncated, info = self.env.step(action)
            self.agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
            self._record(info)
            obs = next_obs
        self.agent.compute_returns(obs)
        return obs, self._guarded(lambda: self._timed_update(self.agent.update))
