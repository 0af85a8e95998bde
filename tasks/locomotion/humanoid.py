"""``Humanoid``: Gymnasium's ``Humanoid-v5`` reproduced exactly, from its own MJCF.

v5 defaults: frame skip 5 (dt = 0.015 s, RK4); observation ``qpos[2:]`` (22), ``qvel`` (23), the
com-based inertias ``cinert[1:]`` (130) and velocities ``cvel[1:]`` (78) of the 13 bodies, the
actuator forces ``qfrc_actuator[6:]`` (17) and the contact forces ``cfrc_ext[1:]`` (78, not
clipped), 348 in all; reward ``1.25 * dx/dt + 5 * healthy - 0.1 * sum(ctrl^2) - min(5e-7 *
sum(cfrc_ext^2), 10)`` with ``dx`` the finite difference of the centre of mass over the step;
healthy while the torso height ``qpos[2]`` lies in ``(1.0, 2.0)`` (open), terminated otherwise;
1000-step time limit; reset to ``qpos0 + U(-0.01, 0.01)`` and ``U(-0.01, 0.01)`` velocities.

As in Gymnasium, ``cinert``, ``cvel`` and ``qfrc_actuator`` are read as ``mj_step`` leaves them (the
last Runge-Kutta stage of the last substep), and the contact forces are computed after the step.
"""

from __future__ import annotations

from robolearn.assets import gymnasium_asset
from robolearn.envs import InitialState, ObsGroup, ObsTerm, RewardTerm, TaskCfg, TerminationTerm, mdp

# Gymnasium's Humanoid-v5 is_healthy: 1.0 < torso height < 2.0, bounds excluded.
HEALTHY = {"rule": mdp.height_in_range, "z_range": (1.0, 2.0)}


def humanoid_cfg() -> TaskCfg:
    """The task config of ``Humanoid``."""
    return TaskCfg(
        mjcf=gymnasium_asset("humanoid.xml"),
        decimation=5,
        episode_length=1000,
        contact_forces=True,
        data_fields=("cinert", "qfrc_actuator"),
        prev_fields=("xipos",),
        observations={
            # Gymnasium's observation includes the simulator's contact forces (privileged): allowed
            # here for parity; a real robot would need force sensing to match it.
            "policy": ObsGroup(
                allow_privileged=True,
                terms={
                    "joint_pos": ObsTerm(mdp.qpos, params={"start": 2}, unit="m|rad|quat"),
                    "joint_vel": ObsTerm(mdp.qvel, unit="m/s|rad/s"),
                    "com_inertia": ObsTerm(mdp.data_field, params={"name": "cinert", "first": 1}, unit="kg|kg*m|kg*m^2"),
                    "com_velocity": ObsTerm(mdp.data_field, params={"name": "cvel", "first": 1}, unit="rad/s|m/s"),
                    "actuator_forces": ObsTerm(mdp.data_field, params={"name": "qfrc_actuator", "first": 6}, unit="N*m"),
                    "contact_forces": ObsTerm(mdp.contact_forces, unit="N|N*m"),
                }
            )
        },
        rewards={
            "forward": RewardTerm(mdp.com_velocity, weight=1.25, params={"axis": 0}),
            "healthy": RewardTerm(mdp.healthy, weight=5.0, params=dict(HEALTHY)),
            "ctrl_cost": RewardTerm(mdp.action_l2, weight=-0.1),
            "contact_cost": RewardTerm(mdp.contact_force_l2, weight=-5e-7, params={"max_cost": 10.0 / 5e-7}),
        },
        terminations={"unhealthy": TerminationTerm(mdp.unhealthy, params=dict(HEALTHY))},
        initial_state=InitialState(mdp.noisy_state, params={"qpos_uniform": 1e-2, "qvel_uniform": 1e-2}),
        description="Gymnasium Humanoid-v5: walk forward without falling; 348-D observation, 17-D torque action",
    )
