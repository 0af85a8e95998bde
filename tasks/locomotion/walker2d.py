"""``Walker2d``: Gymnasium's ``Walker2d-v5`` reproduced exactly, from its own MJCF.

v5 defaults: the ``walker2d_v5.xml`` model (both feet with friction 0.9); frame skip 4
(dt = 0.008 s); observation ``qpos[1:]`` (8) and ``qvel`` clipped to ``[-10, 10]`` (9); reward
``dx/dt + healthy - 1e-3 * sum(a^2)`` with ``healthy`` 1 while the walker stands; terminated when
it stops standing (0.8 < torso z < 2, |pitch| < 1, judged on the state after the step); 1000-step
time limit; reset to ``qpos0 + U(-5e-3, 5e-3)`` and ``U(-5e-3, 5e-3)`` velocities.
"""

from __future__ import annotations

from typing import Any

from robolearn.assets import gymnasium_asset
from robolearn.envs import InitialState, ObsGroup, ObsTerm, RewardTerm, TaskCfg, TerminationTerm, mdp

# Gymnasium's is_healthy for Walker2d-v5: open intervals on torso height and pitch only.
HEALTHY: dict[str, Any] = {"z_range": (0.8, 2.0), "angle_range": (-1.0, 1.0)}


def walker2d_cfg() -> TaskCfg:
    """The task config of ``Walker2d``."""
    return TaskCfg(
        mjcf=gymnasium_asset("walker2d_v5.xml"),
        decimation=4,
        episode_length=1000,
        observations={
            "policy": ObsGroup(
                terms={
                    "joint_pos": ObsTerm(mdp.qpos, params={"start": 1}, unit="m|rad"),
                    "joint_vel": ObsTerm(mdp.qvel, clip=(-10.0, 10.0), unit="m/s|rad/s"),
                }
            )
        },
        rewards={
            "forward": RewardTerm(mdp.forward_velocity, weight=1.0, params={"qpos_index": 0}),
            "healthy": RewardTerm(mdp.healthy, weight=1.0, params=dict(HEALTHY)),
            "ctrl_cost": RewardTerm(mdp.action_l2, weight=-1e-3),
        },
        terminations={"unhealthy": TerminationTerm(mdp.unhealthy, params=dict(HEALTHY))},
        initial_state=InitialState(mdp.noisy_state, params={"qpos_uniform": 5e-3, "qvel_uniform": 5e-3}),
        description="Gymnasium Walker2d-v5: walk forward without falling; 17-D observation, 6-D torque action",
    )
