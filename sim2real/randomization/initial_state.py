"""Initial-state noise: where a world starts an episode, per joint.

:func:`joint_noise_state` is an initial-state function for :class:`~robolearn.envs.InitialState`
(``(env, env_ids, **params) -> (qpos, qvel)``), which the env calls at every reset, first while it
is built: a bad joint name or range fails there, before anything steps. Its draws come from the
resetting worlds' own streams, like every event's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from robolearn.sim.names import names_of
from robolearn.sim2real.randomization.common import Range, Selector, check_name, check_range

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv


def joint_noise_state(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    *,
    qpos_ranges: Mapping[Selector, Range] | None = None,
    qvel_ranges: Mapping[Selector, Range] | None = None,
    name: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Initial state ``qpos0 + U(range)`` and ``U(range)`` velocities, per joint, for ``InitialState``.

    Joints not named keep ``qpos0`` and zero velocity. :func:`robolearn.envs.mdp.noisy_state` adds
    one range to every coordinate; this one gives each joint its own (a wide hinge spread, a small
    height jitter ...).

    Args:
        env: the environment.
        env_ids: the worlds being reset.
        qpos_ranges: ``{joint: (low, high)}`` offsets from ``qpos0``: hinge/slide joint names,
            ``"<free joint>/x|y|z"`` or qpos indices.
        qvel_ranges: ``{dof: (low, high)}`` velocities, dofs as in
            :class:`~robolearn.sim2real.randomization.pushes.push_by_velocity`.
        name: if given, record the offsets ``[qpos offsets..., velocities...]`` under this name (the
            state itself is already in the privileged ``true_state``; this is for datasets).
    """
    check_name("initial_state.name", name)
    names = names_of(env.model)
    n = env_ids.numel()
    qpos = env.default_qpos.expand(n, -1).clone()
    qvel = torch.zeros(n, env.model.nv, dtype=torch.float64, device=env.device)
    drawn = []
    for which, ranges, target in (("qpos_ranges", qpos_ranges, qpos), ("qvel_ranges", qvel_ranges, qvel)):
        if not ranges:
            continue
        where = f"initial_state.{which}"
        if not isinstance(ranges, Mapping):
            raise ValueError(f"{where}: expected a mapping of joint to (low, high), got {ranges!r}")
        cols: list[int] = []
        bounds: list[Range] = []
        for key, rng in ranges.items():
            found = [names.qpos_address(key, where)] if target is qpos else names.dofs(key, where)
            pair = check_range(f"{where}[{key!r}]", rng, "uniform")
            cols += found
            bounds += [pair] * len(found)
        if len(set(cols)) != len(cols):
            raise ValueError(f"{where}: a coordinate is named twice in {list(ranges)}")
        b = torch.as_tensor(bounds, dtype=torch.float64, device=env.device)
        offset = b[:, 0] + (b[:, 1] - b[:, 0]) * env.draw_uniform(env_ids, len(cols))
        target[:, cols] += offset
        drawn.append(offset)
    if name is not None and drawn:
        env.record_drawn(name, env_ids, torch.cat(drawn, dim=1))
    return qpos, qvel


__all__ = ["joint_noise_state"]
