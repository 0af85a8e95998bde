"""``Hopper``: Gymnasium's ``Hopper-v5`` reproduced exactly, from its own MJCF.

v5 defaults: frame skip 4 (dt = 0.008 s); observation ``qpos[1:]`` (5) and ``qvel`` clipped to
``[-10, 10]`` (6); reward ``dx/dt + healthy - 1e-3 * sum(a^2)`` with ``dx`` the finite difference
of the root x over the step and ``healthy`` 1 while the hopper stands; terminated when it stops
standing (torso z > 0.7, |pitch| < 0.2, every entry of ``concat(qpos, qvel)[2:]`` within 100,
all judged on the state after the step); 1000-step time limit; reset to ``qpos0 + U(-5e-3, 5e-3)``
and ``U(-5e-3, 5e-3)`` velocities.
"""

from __future__ import annotations

from typing import Any

from robolearn.assets import gymnasium_asset
from robolearn.envs import InitialState, ObsGroup, ObsTerm, RewardTerm, TaskCfg, TerminationTerm, mdp

# Gymnasium's is_healthy for Hopper-v5: open intervals on torso height, pitch and the state.
HEALTHY: dict[str, Any] = {
    "z_range": (0.7, float("inf")),
    "angle_range": (-0.2, 0.2),
    "state_range": (-100.0, 100.0),
}


def planar_walker_cfg(mjcf: str, healthy: dict[str, Any], description: str) -> TaskCfg:
    """The Gymnasium v5 planar-walker MDP shared by Hopper and Walker2d; they differ in the model
    and the healthy rule only.
    """
    return TaskCfg(
        mjcf=mjcf,
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
            "healthy": RewardTerm(mdp.healthy, weight=1.0, params=dict(healthy)),
            "ctrl_cost": RewardTerm(mdp.action_l2, weight=-1e-3),
        },
        terminations={"unhealthy": TerminationTerm(mdp.unhealthy, params=dict(healthy))},
        initial_state=InitialState(mdp.noisy_state, params={"qpos_uniform": 5e-3, "qvel_uniform": 5e-3}),
        description=description,
    )


def hopper_cfg() -> TaskCfg:
    """The task config of ``Hopper``."""
    return planar_walker_cfg(
        gymnasium_asset("hopper.xml"),
        HEALTHY,
        "Gymnasium Hopper-v5: hop forward without falling; 11-D observation, 3-D torque action",
    )
