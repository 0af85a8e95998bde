"""``Ant``: Gymnasium's ``Ant-v5`` reproduced exactly, from its own MJCF.

v5 defaults: frame skip 5 (dt = 0.05 s, RK4); observation ``qpos[2:]`` (13), ``qvel`` (14) and the
contact forces ``cfrc_ext[1:]`` of the 13 bodies clipped to ``[-1, 1]`` (78), 105 in all; reward
``dx/dt + healthy - 0.5 * sum(a^2) - 5e-4 * sum(clip(cfrc_ext)^2)`` with ``dx`` the finite
difference of the torso's ``xpos`` over the step; healthy while every state entry is finite and the
torso height ``qpos[2]`` lies in ``[0.2, 1.0]`` (closed), terminated otherwise; 1000-step time
limit; reset to ``qpos0 + U(-0.1, 0.1)`` and ``0.1 * N(0, 1)`` velocities.

The contact forces are Gymnasium's: ``mj_rnePostConstraint`` on the data after the step, which
under RK4 holds the last Runge-Kutta stage (see :func:`robolearn.sim.model.compile_model`).
"""

from __future__ import annotations

from robolearn.assets import gymnasium_asset
from robolearn.envs import InitialState, ObsGroup, ObsTerm, RewardTerm, TaskCfg, TerminationTerm, mdp

# Gymnasium's Ant-v5 is_healthy: finite state and torso height within [0.2, 1.0], bounds included.
HEALTHY = {"rule": mdp.height_in_range, "z_range": (0.2, 1.0), "closed": True, "finite_state": True}


def ant_cfg() -> TaskCfg:
    """The task config of ``Ant``."""
    return TaskCfg(
        mjcf=gymnasium_asset("ant.xml"),
        decimation=5,
        episode_length=1000,
        contact_forces=True,
        prev_fields=("xpos",),
        observations={
            # Gymnasium's observation includes the simulator's contact forces (privileged): allowed
            # here for parity; a real robot would need force sensing to match it.
            "policy": ObsGroup(
                allow_privileged=True,
                terms={
                    "joint_pos": ObsTerm(mdp.qpos, params={"start": 2}, unit="m|rad|quat"),
                    "joint_vel": ObsTerm(mdp.qvel, unit="m/s|rad/s"),
                    "contact_forces": ObsTerm(mdp.contact_forces, params={"clip": (-1.0, 1.0)}, unit="N|N*m"),
                }
            )
        },
        rewards={
            "forward": RewardTerm(mdp.body_velocity, weight=1.0, params={"body": "torso", "axis": 0}),
            "healthy": RewardTerm(mdp.healthy, weight=1.0, params=dict(HEALTHY)),
            "ctrl_cost": RewardTerm(mdp.action_l2, weight=-0.5),
            "contact_cost": RewardTerm(mdp.contact_force_l2, weight=-5e-4, params={"clip": (-1.0, 1.0)}),
        },
        terminations={"unhealthy": TerminationTerm(mdp.unhealthy, params=dict(HEALTHY))},
        initial_state=InitialState(mdp.noisy_state, params={"qpos_uniform": 0.1, "qvel_gaussian": 0.1}),
        description="Gymnasium Ant-v5: walk forward on four legs; 105-D observation with contact forces, 8-D torque action",
    )
