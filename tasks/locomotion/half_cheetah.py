"""``HalfCheetah``: Gymnasium's ``HalfCheetah-v5`` reproduced exactly, from its own MJCF.

v5 defaults: frame skip 5 (dt = 0.05 s); observation ``qpos[1:]`` (8) and ``qvel`` (9), x position
excluded; reward ``1.0 * dx/dt - 0.1 * sum(a^2)`` with ``dx`` the finite difference of the root x
over the step; no termination; 1000-step time limit; reset to ``qpos0 + U(-0.1, 0.1)`` and
``qvel0 + 0.1 * N(0, 1)``.
"""

from __future__ import annotations

from robolearn.assets import gymnasium_asset
from robolearn.envs import InitialState, ObsGroup, ObsTerm, RewardTerm, TaskCfg, mdp


def half_cheetah_cfg() -> TaskCfg:
    """The task config of ``HalfCheetah``."""
    return TaskCfg(
        mjcf=gymnasium_asset("half_cheetah.xml"),
        decimation=5,
        episode_length=1000,
        observations={
            "policy": ObsGroup(
                terms={
                    "joint_pos": ObsTerm(mdp.qpos, params={"start": 1}, unit="m|rad"),
                    "joint_vel": ObsTerm(mdp.qvel, unit="m/s|rad/s"),
                }
            )
        },
        rewards={
            "forward": RewardTerm(mdp.forward_velocity, weight=1.0, params={"qpos_index": 0}),
            "ctrl_cost": RewardTerm(mdp.action_l2, weight=-0.1),
        },
        initial_state=InitialState(mdp.noisy_state, params={"qpos_uniform": 0.1, "qvel_gaussian": 0.1}),
        description="Gymnasium HalfCheetah-v5: run forward; 17-D observation, 6-D torque action",
    )
