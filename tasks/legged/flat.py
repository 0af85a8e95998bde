"""``Quadruped-Flat``: a Go1-class quadruped tracks base-velocity commands on flat ground.

The recipe is legged_gym's / Isaac Lab's velocity-tracking task for Go1 and A1, written as
robolearn terms: 50 Hz joint-position actions (``default + 0.25 * a`` rad) through PD servos
(kp 20, kd 0.5) at a 5 ms physics step; a ``(vx, vy, yaw rate)`` command redrawn every 10 s;
observations a robot has (gyro, gravity direction from the IMU, command, encoders, last action)
and, for the critic, what only the simulator knows (trunk velocity, foot contacts, the friction
and mass draws, the full state). Reward weights are scales times the control period ``dt = 0.02
s``, as legged_gym applies them (``REWARD_SCALES`` says where they differ from legged_gym's), so
the tracking terms earn at most 2.25 per second of walking: 45 over a full 20 s episode.
"""

from __future__ import annotations

from robolearn.assets import quadruped as go1
from robolearn.envs import (
    ActionTerm,
    CommandTerm,
    CurriculumTerm,
    EventTerm,
    InitialState,
    NoiseCfg,
    ObsGroup,
    ObsTerm,
    RewardTerm,
    TaskCfg,
    TerminationTerm,
    mdp,
)
from robolearn.sim2real.randomization import push_by_velocity, randomize_field
from robolearn.tasks.legged import mdp as legged
from robolearn.tasks.legged.curriculum import RangeGate

DT = 0.02
"""Control period (s): 5 ms physics x 4."""

COMMAND = "base_velocity"
"""Name of the velocity command term."""

COMMAND_RANGES = {"lin_vel_x": (-1.0, 1.0), "lin_vel_y": (-0.6, 0.6), "ang_vel_z": (-1.0, 1.0)}
"""The task's command ranges (m/s, m/s, rad/s): what an evaluation without the curriculum draws
from, and where the command curriculum starts before it widens them."""

COMMAND_LIMITS = {"lin_vel_x": (-2.0, 2.0), "lin_vel_y": (-1.0, 1.0), "ang_vel_z": (-2.0, 2.0)}
"""The widest the command curriculum takes them (Go1's top trotting speed is about 2 m/s)."""

# Reward scales after legged_gym (legged_robot_config.py, a1_config.py) and Isaac Lab's Go1
# velocity task, multiplied by DT as legged_gym applies them. legged_gym clips each step's total
# reward at zero ("only_positive_rewards"), without which the early policy's penalties outweigh its
# tracking reward and falling becomes the best move; robolearn's reward manager sums without a
# clip, so instead the tracking terms take Isaac Lab's larger weights (1.5, 0.75), the air-time
# reward its flat-ground 0.25, and a fall costs 2 (one step's ``termination`` term): more than the
# penalties of a whole episode of clumsy standing.
REWARD_SCALES = {
    "track_lin_vel_xy": 1.5,
    "track_ang_vel_z": 0.75,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "orientation": -1.0,
    "base_height": -10.0,
    "torques": -2e-4,
    "joint_acc": -2.5e-7,
    "action_rate": -0.01,
    "feet_air_time": 0.25,
    "collision": -1.0,
    "termination": -2.0 / DT,
}


def command_curriculum() -> dict[str, CurriculumTerm]:
    """legged_gym's command curriculum: once the ended episodes track well (the tracking term
    earns at least 80% of its maximum per second of a full episode, averaged over 256 episodes) widen the forward
    speed range by 0.1 m/s at each end, up to :data:`COMMAND_LIMITS`; the yaw-rate range likewise on
    its own term. Neither shrinks again (legged_gym's rule: a range, once mastered, stays). Each
    logs the upper end of its range.
    """
    terms = {}
    for key, reward, weight in (
        ("lin_vel_x", "track_lin_vel_xy", REWARD_SCALES["track_lin_vel_xy"]),
        ("ang_vel_z", "track_ang_vel_z", REWARD_SCALES["track_ang_vel_z"]),
    ):
        terms[f"command_{key}"] = CurriculumTerm(
            RangeGate,
            params={
                "target": f"commands.{COMMAND}.params.{key}",
                "start": list(COMMAND_RANGES[key]),
                "end": list(COMMAND_LIMITS[key]),
                "step": [0.1, 0.1],
                # The measure is the weighted episode sum per second of a full episode: weight x
                # DT x (1 / DT) per second at perfect tracking, so 0.8 x weight is 80% of it.
                "measure": f"reward_per_s/{reward}",
                "threshold": 0.8 * weight,
                "min_episodes": 256,
            },
        )
    return terms


def policy_group() -> ObsGroup:
    """What the robot measures, with legged_gym's scales and noise levels (noise x scale)."""
    return ObsGroup(
        terms={
            "base_ang_vel": ObsTerm(legged.base_ang_vel, scale=0.25, noise=NoiseCfg("uniform", 0.2), unit="rad/s"),
            "projected_gravity": ObsTerm(legged.projected_gravity, noise=NoiseCfg("uniform", 0.05), unit="1"),
            "command": ObsTerm(mdp.command, params={"name": COMMAND}, unit="m/s|rad/s"),
            "joint_pos": ObsTerm(
                legged.joint_pos_rel, params={"default": go1.DEFAULT_JOINT_POS}, noise=NoiseCfg("uniform", 0.01), unit="rad"
            ),
            "joint_vel": ObsTerm(legged.joint_vel, scale=0.05, noise=NoiseCfg("uniform", 1.5), unit="rad/s"),
            "last_action": ObsTerm(mdp.last_action, unit="1"),
        }
    )


def privileged_group(extra: dict[str, ObsTerm] | None = None) -> ObsGroup:
    """What only the simulator knows: trunk velocity, foot contacts, the draws, the full state."""
    terms = {
        "base_lin_vel": ObsTerm(legged.base_lin_vel, scale=2.0, unit="m/s"),
        "foot_contacts": ObsTerm(legged.foot_contacts, unit="1"),
        "drawn": ObsTerm(mdp.drawn, params={"names": ["friction", "payload"]}),
        "state": ObsTerm(mdp.true_state),
    }
    terms.update(extra or {})
    return ObsGroup(terms=terms, enable_noise=False)


def rewards(terrain: object | None = None) -> dict[str, RewardTerm]:
    """The reward terms, weights ``REWARD_SCALES x DT``."""
    w = {k: v * DT for k, v in REWARD_SCALES.items()}
    cmd = {"command": COMMAND}
    return {
        "track_lin_vel_xy": RewardTerm(legged.track_lin_vel_xy, w["track_lin_vel_xy"], {**cmd, "std": 0.5}),
        "track_ang_vel_z": RewardTerm(legged.track_ang_vel_z, w["track_ang_vel_z"], {**cmd, "std": 0.5}),
        "lin_vel_z": RewardTerm(legged.lin_vel_z_l2, w["lin_vel_z"]),
        "ang_vel_xy": RewardTerm(legged.ang_vel_xy_l2, w["ang_vel_xy"]),
        "orientation": RewardTerm(legged.flat_orientation_l2, w["orientation"]),
        # Target a little under the kinematic standing height: the PD loop sags under the weight.
        "base_height": RewardTerm(
            legged.base_height_l2, w["base_height"], {"target": go1.STAND_HEIGHT - 0.01, "terrain": terrain}
        ),
        "torques": RewardTerm(legged.torques_l2, w["torques"]),
        "joint_acc": RewardTerm(legged.joint_acc_l2, w["joint_acc"]),
        "action_rate": RewardTerm(legged.action_rate_l2, w["action_rate"]),
        "feet_air_time": RewardTerm(legged.feet_air_time, w["feet_air_time"], {**cmd, "target": 0.5}),
        "collision": RewardTerm(legged.undesired_contacts, w["collision"]),
        "termination": RewardTerm(legged.fell, w["termination"]),
    }


def randomization(pushes: bool = True) -> dict[str, EventTerm]:
    """Friction and payload draws per episode, and pushes."""
    events = {
        # Ground from wet tiles to rubber mats: the feet's sliding friction (they govern foot
        # contacts, priority 1) x U(0.4, 1.25) of 1.0, one draw per world for all four feet.
        "friction": EventTerm(
            randomize_field,
            mode="reset",
            params={
                "field": "friction",
                "elements": list(go1.FOOT_NAMES),
                "axes": [0],
                "range": (0.4, 1.25),
                "shared": True,
                "name": "friction",
            },
        ),
        # Payload and battery spread: trunk mass + U(-1, 2) kg (legged_gym's added_mass range,
        # widened upwards for a carried sensor pack).
        "payload": EventTerm(
            randomize_field,
            mode="reset",
            params={"field": "mass", "elements": ["trunk"], "range": (-1.0, 2.0), "operation": "add", "name": "payload"},
        ),
    }
    if pushes:
        # Shoves: every 10-15 s the trunk's horizontal velocity jumps by U(-1, 1) m/s per axis.
        events["push"] = EventTerm(
            push_by_velocity,
            mode="interval",
            interval_range_s=(10.0, 15.0),
            params={"velocity_range": {"root/x": (-1.0, 1.0), "root/y": (-1.0, 1.0)}},
        )
    return events


def quadruped_flat_cfg() -> TaskCfg:
    """The task config of ``Quadruped-Flat``."""
    return TaskCfg(
        mjcf=go1.MJCF,
        decimation=4,
        timestep=0.005,
        episode_length=1000,  # 20 s
        data_fields=("actuator_force", "qacc"),
        actions={
            "joint_pos": ActionTerm(
                kind="joint_pos",
                actuators=list(go1.JOINT_NAMES),
                scale=go1.ACTION_SCALE,
                offset=list(go1.DEFAULT_JOINT_POS),
                clip=(-100.0, 100.0),  # legged_gym's clip_actions: a guard, not a working range
                kp=go1.KP,
                kd=go1.KD,
            )
        },
        observations={"policy": policy_group(), "privileged": privileged_group()},
        commands={
            COMMAND: CommandTerm(
                legged.velocity_command, dim=3, params=dict(COMMAND_RANGES), resampling_time_s=(10.0, 10.0)
            )
        },
        rewards=rewards(),
        terminations={
            "trunk_contact": TerminationTerm(legged.trunk_contact),
            "flipped": TerminationTerm(legged.flipped, params={"max_tilt_deg": 60.0}),
        },
        events=randomization(),
        curriculum=command_curriculum(),
        initial_state=InitialState(
            legged.stand_state,
            params={"default": go1.DEFAULT_JOINT_POS, "height": go1.SPAWN_HEIGHT, "joint_scale": (0.9, 1.1)},
        ),
        description="Go1-class quadruped tracks (vx, vy, yaw rate) commands on flat ground; 12 joint-position actions",
    )


def quadruped_flat_nodr_cfg() -> TaskCfg:
    """``Quadruped-Flat`` without randomisation (no friction or payload draws, no pushes): the
    baseline of the robustness benchmark. Its privileged group has no draws to show.
    """
    cfg = quadruped_flat_cfg()
    cfg.events = {}
    cfg.observations["privileged"].terms.pop("drawn")
    cfg.description = "Quadruped-Flat without friction/payload randomisation and pushes"
    return cfg
