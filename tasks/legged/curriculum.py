"""Curriculum pieces of the legged tasks, on top of :mod:`robolearn.envs.curriculum`.

* :class:`RangeGate`: the generic performance gate over a ``(low, high)`` command range, logging
  the range's upper end (the gate itself logs the mean of its value, which is 0 for a symmetric
  range that widens at both ends).
* :func:`walk_score`: legged_gym's terrain-curriculum rule as a measure for the generic
  :class:`~robolearn.envs.curriculum.Levels` term: 2 for a world that walked more than half a tile
  from its spawn point (promote), 0 for one that covered less than half the distance its command
  asked for over the episode (demote), 1 otherwise (hold); thresholds 1.5 and 0.5 then promote and
  demote exactly those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from robolearn.envs.curriculum import PerformanceGate
from robolearn.tasks.legged.mdp import gait_state

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv


class RangeGate(PerformanceGate):
    """:class:`~robolearn.envs.curriculum.PerformanceGate` over a ``(low, high)`` range that reports
    the range's upper end instead of its mean.
    """

    def __init__(self, env: BatchedEnv, **kwargs: object) -> None:
        """As the gate; the logged value starts at the range's upper end."""
        super().__init__(env, **kwargs)  # type: ignore[arg-type]
        self.value = self.current.max()

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> torch.Tensor:
        """Accumulate, decide and write as the gate; report the upper end."""
        super().__call__(env, env_ids)
        return self.current.max()


def walk_score(
    env: BatchedEnv, env_ids: torch.Tensor, tile_size: float, command: str = "base_velocity"
) -> torch.Tensor:
    """The ended episodes of ``env_ids`` scored 2 (walked over ``tile_size / 2`` from the spawn
    point: promote), 0 (walked under half of ``|command_xy| x episode duration``: demote) or 1, as
    float64 ``[len(env_ids)]``. Read before the reset, so ``qpos`` is where each episode ended.
    """
    start = gait_state(env).start_xy[env_ids]
    walked = torch.linalg.vector_norm(env.sim.qpos[env_ids, :2] - start, dim=1)
    asked = torch.linalg.vector_norm(env.command_manager.values[command][env_ids, :2], dim=1)
    up = walked > tile_size / 2
    down = (walked < 0.5 * asked * env.max_episode_length * env.dt) & ~up
    return 1.0 + up.to(torch.float64) - down.to(torch.float64)
