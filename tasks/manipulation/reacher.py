"""``Reacher``: Gymnasium's ``Reacher-v5`` reproduced exactly, from its own MJCF.

A two-link planar arm brings its fingertip to a target. The target is two slide joints of the
model, so it is part of the state (``qpos[2:4]``) and ``set_state`` carries it. v5 defaults:
frame skip 2 (dt = 0.02 s); observation ``cos(q[:2])`` (2), ``sin(q[:2])`` (2), target position
``qpos[2:4]`` (2), arm velocities ``qvel[:2]`` (2) and the x, y of fingertip minus target (2);
reward ``-|fingertip - target| - sum(a^2)`` (3-D distance); no termination; 50-step time limit;
reset to ``qpos0 + U(-0.1, 0.1)`` for the arm, a target uniform in the disc of radius 0.2, arm
velocities ``U(-5e-3, 5e-3)`` and a still target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from robolearn.assets import gymnasium_asset
from robolearn.envs import InitialState, ObsGroup, ObsTerm, RewardTerm, TaskCfg, mdp
from robolearn.envs.sync import host_nonzero

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

GOAL_RADIUS = 0.2
"""The target is drawn uniformly in the open disc of this radius around the arm's base."""


def qpos_cos(env: BatchedEnv, stop: int) -> torch.Tensor:
    """``cos(qpos[:, :stop])``: the arm's angles as continuous features."""
    return torch.cos(env.sim.qpos[:, :stop])


def qpos_sin(env: BatchedEnv, stop: int) -> torch.Tensor:
    """``sin(qpos[:, :stop])``: the arm's angles as continuous features."""
    return torch.sin(env.sim.qpos[:, :stop])


def reacher_reset(
    env: BatchedEnv, env_ids: torch.Tensor, arm_uniform: float = 0.1, vel_uniform: float = 5e-3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gymnasium's ``Reacher-v5.reset_model``, each world from its own stream.

    The arm gets ``qpos0 + U(-arm_uniform, arm_uniform)`` (the target entries are drawn too and
    then overwritten, as Gymnasium does); the target is drawn from ``U(-0.2, 0.2)^2`` until it
    falls strictly inside the disc of radius 0.2 (rejection sampling, so uniform in the disc);
    velocities are ``U(-vel_uniform, vel_uniform)`` with the target's set to zero.
    """
    qpos, qvel = mdp.default_state(env, env_ids)
    qpos += env.draw_uniform(env_ids, env.model.nq, -arm_uniform, arm_uniform)
    goal = torch.empty(env_ids.numel(), 2, dtype=torch.float64, device=env.device)
    pending: torch.Tensor | None = torch.arange(env_ids.numel(), device=env.device)
    # Redraw only the rejected worlds: each world's stream advances exactly as its own loop would.
    # Which worlds to redraw is a host decision (robolearn.envs.sync), at reset only: each round
    # keeps a world with probability pi/4, so a reset takes ~1.3 rounds per world on average.
    while pending is not None:
        draw = env.draw_uniform(env_ids[pending], 2, -GOAL_RADIUS, GOAL_RADIUS)
        inside = torch.linalg.vector_norm(draw, dim=1) < GOAL_RADIUS
        goal[pending] = torch.where(inside.unsqueeze(1), draw, goal[pending])
        rejected = host_nonzero(~inside)
        pending = None if rejected is None else pending[rejected]
    qpos[:, -2:] = goal
    qvel += env.draw_uniform(env_ids, env.model.nv, -vel_uniform, vel_uniform)
    qvel[:, -2:] = 0.0
    return qpos, qvel


def reacher_cfg() -> TaskCfg:
    """The task config of ``Reacher``."""
    return TaskCfg(
        mjcf=gymnasium_asset("reacher.xml"),
        decimation=2,
        episode_length=50,
        observations={
            "policy": ObsGroup(
                terms={
                    "joint_cos": ObsTerm(qpos_cos, params={"stop": 2}),
                    "joint_sin": ObsTerm(qpos_sin, params={"stop": 2}),
                    "target_pos": ObsTerm(mdp.qpos, params={"start": 2}, unit="m"),
                    "joint_vel": ObsTerm(mdp.qvel, params={"stop": 2}, unit="rad/s"),
                    "fingertip_to_target": ObsTerm(
                        mdp.body_offset,
                        params={"body": "fingertip", "reference": "target", "dims": 2},
                        unit="m",
                    ),
                }
            )
        },
        rewards={
            "distance": RewardTerm(
                mdp.body_distance, weight=-1.0, params={"body": "fingertip", "reference": "target"}
            ),
            "ctrl_cost": RewardTerm(mdp.action_l2, weight=-1.0),
        },
        initial_state=InitialState(reacher_reset),
        description="Gymnasium Reacher-v5: bring a 2-link arm's fingertip to a target; 10-D observation, 2-D torque",
    )
