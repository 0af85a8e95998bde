"""The off-policy runner: step every world, store the transitions, update (SAC and its kin).

One iteration is ``cfg.steps_per_iteration`` control steps of every world, each followed by
``agent.update()`` (which runs ``utd_ratio`` gradient steps once enough data is stored). Logging,
evaluation and checkpoints happen between iterations; the checkpoint carries the replay buffer, so
a resumed run continues exactly.
"""

from __future__ import annotations

import torch

from robolearn.runners import distributed
from robolearn.runners.base import BaseRunner
from robolearn.types import NonFiniteValue, Transition


class OffPolicyRunner(BaseRunner):
    """Trains an off-policy algorithm (SAC) on a batched env and writes a run directory."""

    times_updates = True  # each agent.update() (its gradient steps) is timed; acting, physics and storing are the rest

    def _iteration_length(self) -> int:
        """One iteration is ``cfg.steps_per_iteration`` control steps of every world (of every rank)."""
        return int(self.cfg.steps_per_iteration) * int(self.env.num_envs) * self.world_size

    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        def collect_and_learn() -> dict[str, torch.Tensor]:
            nonlocal obs
            stats: dict[str, torch.Tensor] = {}
            for _ in range(self.cfg.steps_per_iteration):
                action = self.agent.act(obs)
                if self.dist is not None:
                    # The ranks stop together: one that left the loop alone would leave the others
                    # waiting in the next update's gradient all-reduce (one small collective a step).
                    if not distributed.all_true(bool(torch.isfinite(action).all())):
                        break
                try:
                    next_obs, reward, terminated, truncated, info = self.env.step(action)
                except NonFiniteValue:
                    # An update of this iteration broke the actor: stop acting on it; the guard
                    # finds the non-finite parameters and undoes the iteration's updates. The env
                    # refused the action before its physics saw it, and its own check is the only
                    # host sync this costs (no second isfinite read per step here).
                    break
                self.agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
                self._record(info)
                obs = next_obs
                stats = self._timed_update(self.agent.update) or stats
            return stats

        # The guard covers the whole iteration: if its updates blew up, the networks go back to
        # where the iteration started (the data it collected stays in the buffer).
        stats = self._guarded(collect_and_learn)
        return obs, stats
