"""Terms of the legged tasks: base-frame kinematics, foot contacts, gait rewards, commands.

The quadruped's ``qpos`` is ``[x y z, qw qx qy qz, 12 joints]`` and its ``qvel`` ``[vx vy vz
(world frame), wx wy wz (trunk frame), 12 joint rates]``, as MuJoCo lays out a free joint; the
terms below read those slices directly (the trunk's free joint comes first in the model).
Foot contacts come from the model's touch sensors (``sensordata[:, :4]``, one per foot in leg
order, then the trunk's, then thigh and calf of each leg): see ``assets/quadruped.xml``.

A few terms need memory across steps (the feet's air time, where the episode started); it is
kept in the env's buffers (:func:`gait_state`), created on first use, reset per world when that
world's episode restarts, and part of the env's checkpoint, so a resumed run continues with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from robolearn.assets.quadruped import FOOT_CONTACT_THRESHOLD

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

NUM_FEET = 4
"""Foot touch sensors come first in ``sensordata``."""
TRUNK_SENSOR = 4
"""Index of the trunk's touch sensor."""
LEG_SENSORS = slice(5, 13)
"""Thigh and calf touch sensors of the four legs."""
JOINTS = slice(7, 19)
"""The 12 joint angles in ``qpos``."""
JOINT_DOFS = slice(6, 18)
"""The 12 joint rates in ``qvel``."""


# -- frames ----------------------------------------------------------------------------------
def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``R(q)^T v`` for unit quaternions ``q`` ``[N, 4]`` (w, x, y, z) and vectors ``v`` ``[N, 3]``:
    a world-frame vector in the body frame.
    """
    w, u = q[:, :1], q[:, 1:]
    return v * (2.0 * w * w - 1.0) - torch.linalg.cross(u, v, dim=1) * (2.0 * w) + u * (2.0 * (u * v).sum(1, keepdim=True))


def base_lin_vel(env: BatchedEnv) -> torch.Tensor:
    """The trunk's linear velocity in its own frame ``[N, 3]`` (m/s). Privileged: a robot
    estimates it (no sensor measures it directly).
    """
    q = env.sim.qpos
    return quat_rotate_inverse(q[:, 3:7], env.sim.qvel[:, 0:3])


base_lin_vel.privileged = True  # type: ignore[attr-defined]


def base_ang_vel(env: BatchedEnv) -> torch.Tensor:
    """The trunk's angular velocity in its own frame ``[N, 3]`` (rad/s): the IMU gyro."""
    return env.sim.qvel[:, 3:6]


def projected_gravity(env: BatchedEnv) -> torch.Tensor:
    """The unit gravity vector in the trunk frame ``[N, 3]``: ``(0, 0, -1)`` when level (the IMU's
    attitude estimate).
    """
    q = env.sim.qpos[:, 3:7]
    down = torch.zeros(q.shape[0], 3, dtype=q.dtype, device=q.device)
    down[:, 2] = -1.0
    return quat_rotate_inverse(q, down)


def joint_pos_rel(env: BatchedEnv, default: tuple[float, ...]) -> torch.Tensor:
    """Joint angles minus the default pose ``[N, 12]`` (rad): the encoders."""
    return env.sim.qpos[:, JOINTS] - torch.as_tensor(default, dtype=torch.float64, device=env.device)


def joint_vel(env: BatchedEnv) -> torch.Tensor:
    """Joint rates ``[N, 12]`` (rad/s)."""
    return env.sim.qvel[:, JOINT_DOFS]


def foot_forces(env: BatchedEnv) -> torch.Tensor:
    """Normal contact force on each foot ``[N, 4]`` (N), from the touch sensors."""
    return env.sim.sensordata[:, :NUM_FEET]


def foot_contacts(env: BatchedEnv, threshold: float = FOOT_CONTACT_THRESHOLD) -> torch.Tensor:
    """1 where a foot touches the ground (touch reading above ``threshold`` newtons), else 0
    ``[N, 4]``. Privileged (a robot without foot sensors infers it).
    """
    return (env.sim.sensordata[:, :NUM_FEET] > threshold).to(torch.float64)


foot_contacts.privileged = True  # type: ignore[attr-defined]


def base_height(env: BatchedEnv) -> torch.Tensor:
    """Height of the trunk's centre above the world origin ``[N, 1]`` (m). Privileged."""
    return env.sim.qpos[:, 2:3]


base_height.privileged = True  # type: ignore[attr-defined]


# -- memory across steps ---------------------------------------------------------------------
@dataclass
class GaitState:
    """Per-world memory of one env: how long each foot has been in the air, and where each
    episode started. The tensors are the env's checkpointed buffers (``BatchedEnv.buffer``), so a
    resumed run continues with them.
    """

    air_time: torch.Tensor
    """Seconds since each foot last touched ``[N, 4]``."""
    last_contact: torch.Tensor
    """Contact of each foot at the previous step ``[N, 4]`` bool."""
    start_xy: torch.Tensor
    """The trunk's ``(x, y)`` at the episode's start ``[N, 2]``."""


def gait_state(env: BatchedEnv) -> GaitState:
    """The env's :class:`GaitState` over its buffers ``gait/*``, created on first use (the start
    positions from the current trunk positions).
    """
    fresh = not env.has_buffer("gait/start_xy")
    state = GaitState(
        air_time=env.buffer("gait/air_time", (NUM_FEET,)),
        last_contact=env.buffer("gait/last_contact", (NUM_FEET,), torch.bool, False),
        start_xy=env.buffer("gait/start_xy", (2,)),
    )
    if fresh:
        state.start_xy.copy_(env.sim.qpos[:, :2])
    return state


def record_start(env: BatchedEnv, env_ids: torch.Tensor) -> None:
    """Remember where worlds ``env_ids`` start (called by the initial-state terms after placing them)."""
    state = gait_state(env)
    # index_fill_: `x[ids] = 0.0` copies a host scalar to the device, a synchronising copy on CUDA.
    state.air_time.index_fill_(0, env_ids, 0.0)
    state.last_contact.index_fill_(0, env_ids, False)


# -- rewards ---------------------------------------------------------------------------------
def track_lin_vel_xy(env: BatchedEnv, command: str = "base_velocity", std: float = 0.5) -> torch.Tensor:
    """``exp(-|v_xy - c_xy|^2 / std^2)``: tracking of the commanded planar velocity (trunk frame)."""
    err = base_lin_vel(env)[:, :2] - env.command_manager.values[command][:, :2]
    return torch.exp(-(err * err).sum(1) / (std * std))


def track_ang_vel_z(env: BatchedEnv, command: str = "base_velocity", std: float = 0.5) -> torch.Tensor:
    """``exp(-(w_z - c_yaw)^2 / std^2)``: tracking of the commanded yaw rate."""
    err = env.sim.qvel[:, 5] - env.command_manager.values[command][:, 2]
    return torch.exp(-(err * err) / (std * std))


def lin_vel_z_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared vertical trunk velocity (bouncing); weight it negatively."""
    vz = base_lin_vel(env)[:, 2]
    return vz * vz


def ang_vel_xy_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared roll and pitch rates (wobbling); weight it negatively."""
    w = env.sim.qvel[:, 3:5]
    return (w * w).sum(1)


def flat_orientation_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared horizontal part of the projected gravity (tilt); weight it negatively."""
    g = projected_gravity(env)[:, :2]
    return (g * g).sum(1)


def base_height_l2(env: BatchedEnv, target: float, terrain: object | None = None) -> torch.Tensor:
    """``(z - target)^2`` of the trunk above the ground (the terrain under it, if given); weight it
    negatively.
    """
    z = env.sim.qpos[:, 2]
    if terrain is not None:
        z = z - terrain.height_at(env.sim.qpos[:, :2])  # type: ignore[attr-defined]
    return (z - target) ** 2


def torques_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared actuator efforts (N*m)^2 summed; the task must list ``actuator_force`` in its data fields."""
    tau = env.sim.data_field("actuator_force")
    return (tau * tau).sum(1)


def joint_acc_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared joint accelerations of the last substep; the task must list ``qacc`` in its data fields."""
    a = env.sim.data_field("qacc")[:, JOINT_DOFS]
    return (a * a).sum(1)


def action_rate_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared change of the action since the last step (jerky targets); weight it negatively."""
    d = env.action - env.prev_action
    return (d * d).sum(1)


def undesired_contacts(env: BatchedEnv, threshold: float = FOOT_CONTACT_THRESHOLD) -> torch.Tensor:
    """Number of thigh and calf links touching the ground (knees dragging); weight it negatively."""
    return (env.sim.sensordata[:, LEG_SENSORS] > threshold).sum(1).to(torch.float64)


def feet_air_time(
    env: BatchedEnv, command: str = "base_velocity", target: float = 0.5, threshold: float = FOOT_CONTACT_THRESHOLD
) -> torch.Tensor:
    """legged_gym's air-time reward: at each touchdown, ``air_time - target`` seconds, summed over
    the feet that land this step, and nothing while the command asks to stand (|c_xy| < 0.1 m/s).
    Long steps earn, shuffling costs. Updates the env's :class:`GaitState` (call it once per step).
    """
    state = gait_state(env)
    # First step of an episode: forget the previous episode's feet (a select, not a host sync).
    fresh = (env.episode_length == 1).unsqueeze(1)
    state.air_time.masked_fill_(fresh, 0.0)
    state.last_contact.masked_fill_(fresh, False)
    contact = env.sim.sensordata[:, :NUM_FEET] > threshold
    # A foot counts as down if it touches now or touched last step: the contact sensor of a
    # foot landing on its edge flickers for a step (legged_gym's "contact_filt").
    filt = contact | state.last_contact
    first = (state.air_time > 0) & filt
    state.air_time += env.dt
    reward = ((state.air_time - target) * first).sum(1)
    state.air_time *= ~filt
    state.last_contact = contact
    moving = torch.linalg.vector_norm(env.command_manager.values[command][:, :2], dim=1) > 0.1
    return reward * moving


# -- terminations ----------------------------------------------------------------------------
def trunk_contact(env: BatchedEnv, threshold: float = FOOT_CONTACT_THRESHOLD) -> torch.Tensor:
    """True where the trunk touches the ground (a fall)."""
    return env.sim.sensordata[:, TRUNK_SENSOR] > threshold


def flipped(env: BatchedEnv, max_tilt_deg: float = 60.0) -> torch.Tensor:
    """True where the trunk is tilted more than ``max_tilt_deg`` from level."""
    return projected_gravity(env)[:, 2] > -math.cos(math.radians(max_tilt_deg))


def fell(env: BatchedEnv, max_tilt_deg: float = 60.0) -> torch.Tensor:
    """1 where the episode ends in a fall this step (trunk contact or tilt beyond ``max_tilt_deg``),
    else 0: weight it negatively as a termination penalty.
    """
    return (trunk_contact(env) | flipped(env, max_tilt_deg)).to(torch.float64)


# -- commands --------------------------------------------------------------------------------
def velocity_command(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    lin_vel_x: tuple[float, float] = (-1.0, 1.0),
    lin_vel_y: tuple[float, float] = (-1.0, 1.0),
    ang_vel_z: tuple[float, float] = (-1.0, 1.0),
    small: float = 0.2,
) -> torch.Tensor:
    """Base-velocity commands ``[len(env_ids), 3]``: ``(vx, vy, yaw rate)`` uniform in their
    ranges, in the trunk frame; a planar command under ``small`` m/s becomes exactly zero
    (legged_gym's rule), so some worlds learn to stand still.
    """
    u = env.draw_uniform(env_ids, 3)
    lows = torch.tensor([lin_vel_x[0], lin_vel_y[0], ang_vel_z[0]], dtype=torch.float64, device=env.device)
    highs = torch.tensor([lin_vel_x[1], lin_vel_y[1], ang_vel_z[1]], dtype=torch.float64, device=env.device)
    cmd = lows + u * (highs - lows)
    keep = torch.linalg.vector_norm(cmd[:, :2], dim=1, keepdim=True) >= small
    cmd[:, :2] *= keep
    return cmd


# -- initial state ---------------------------------------------------------------------------
def stand_state(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    default: tuple[float, ...],
    height: float,
    joint_scale: tuple[float, float] = (1.0, 1.0),
    yaw: float = math.pi,
    xy: float = 0.0,
    terrain: object | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The standing pose at ``height`` above the ground, at rest: joints at ``default`` times a
    factor ``U(joint_scale)`` (legged_gym's reset spread), heading ``U(-yaw, yaw)``, position
    ``U(-xy, xy)`` about the origin or, with a ``terrain``, about the centre of each world's tile
    (its level and column, :meth:`Terrain.origins`) and above the terrain there.
    """
    n = env_ids.numel()
    q = torch.zeros(n, env.model.nq, dtype=torch.float64, device=env.device)
    u = env.draw_uniform(env_ids, 15)
    d = torch.as_tensor(default, dtype=torch.float64, device=env.device)
    q[:, JOINTS] = d * (joint_scale[0] + u[:, :12] * (joint_scale[1] - joint_scale[0]))
    half = (u[:, 12] * 2.0 - 1.0) * yaw * 0.5
    q[:, 3], q[:, 6] = torch.cos(half), torch.sin(half)
    q[:, 0:2] = (u[:, 13:15] * 2.0 - 1.0) * xy
    if terrain is None:
        q[:, 2] = height
    else:
        q[:, 0:2] += terrain.origins(env, env_ids)  # type: ignore[attr-defined]
        q[:, 2] = height + terrain.height_at(q[:, 0:2], footprint=True)  # type: ignore[attr-defined]
    gait_state(env).start_xy[env_ids] = q[:, 0:2]
    record_start(env, env_ids)
    return q, torch.zeros(n, env.model.nv, dtype=torch.float64, device=env.device)
