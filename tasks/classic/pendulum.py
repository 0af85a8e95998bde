"""``Pendulum-Swingup``: the DeepMind Control Suite pendulum swing-up task.

Model ``assets/pendulum.xml`` (DMC's): the motor gives at most 1 N m against the 4.9 N m gravity
needs at horizontal, so the policy must pump energy over several swings. One 20 ms physics step
per control step and 1000 steps per episode: DMC's 20 s time limit.

Reward (sparse, as DMC): ``tolerance(cos(angle), bounds=(cos(bound), 1))`` with no margin, i.e.
1 while the pole is within ``bound`` of upright and 0 otherwise. DMC's bound is 8 degrees
(``_ANGLE_BOUND = 8`` in ``dm_control/suite/pendulum.py``); it is the reward term's
``angle_bound_deg`` parameter. The initial angle is uniform in ``[-pi, pi)`` at rest.

Observation (``policy``, 3-D): cos and sin of the angle, angular velocity. No termination: only
the 1000-step time-out, reported as ``truncated``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from robolearn.assets import asset_path
from robolearn.envs import ActionTerm, InitialState, ObsGroup, ObsTerm, RewardTerm, SuccessTerm, TaskCfg, mdp

from .rewards import tolerance

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

HINGE = 0
"""Index of the hinge (angle, 0 = upright) in ``qpos``/``qvel``."""

DMC_ANGLE_BOUND_DEG = 8.0
"""DMC's pendulum reward bound: rewarded within this many degrees of upright."""


def upright_sparse(env: BatchedEnv, angle_bound_deg: float = DMC_ANGLE_BOUND_DEG) -> torch.Tensor:
    """1 where the pole is within ``angle_bound_deg`` of upright, else 0 (``[N]``, float64)."""
    cos_bound = math.cos(math.radians(angle_bound_deg))
    return tolerance(torch.cos(env.sim.qpos[:, HINGE]), bounds=(cos_bound, 1.0))


def random_angle_state(env: BatchedEnv, env_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Angle uniform in ``[-pi, pi)``, at rest (DMC ``swingup``)."""
    qpos = env.draw_uniform(env_ids, 1, -math.pi, math.pi)
    return qpos, torch.zeros(env_ids.numel(), 1, dtype=torch.float64, device=env.device)


def pendulum_swingup_cfg() -> TaskCfg:
    """Return the config of ``Pendulum-Swingup``."""
    return TaskCfg(
        mjcf=asset_path("pendulum.xml"),
        decimation=1,
        episode_length=1000,
        observations={
            "policy": ObsGroup(
                terms={
                    "cos_sin": ObsTerm(mdp.hinge_cos_sin, params={"qpos_index": HINGE}),
                    "ang_vel": ObsTerm(mdp.qvel, params={"start": HINGE, "stop": HINGE + 1}, unit="rad/s"),
                }
            )
        },
        # MuJoCo clamps ctrl to [-1, 1] anyway; clipping here states the bounds in the task.
        actions={"torque": ActionTerm(kind="torque", clip=(-1.0, 1.0))},
        rewards={"upright": RewardTerm(upright_sparse, weight=1.0)},
        initial_state=InitialState(random_angle_state),
        success=SuccessTerm(mdp.hinge_upright, params={"qpos_index": HINGE, "max_angle_deg": DMC_ANGLE_BOUND_DEG}),
        description="DMC pendulum-swingup: pump energy, hold upright; sparse reward, 1-D torque, 1000 steps",
    )
