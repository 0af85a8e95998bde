"""``Quadrotor-Hover`` and ``Quadrotor-Track``: a Crazyflie 2.x-class quadrotor on its four motors.

After "Learning to Fly in Seconds" (Eschmann et al., 2024; L2F): the policy commands each motor
directly, at 100 Hz, and the critic sees more than the policy (asymmetric actor-critic).

Model ``assets/crazyflie2.xml`` (constants and their sources in ``assets/crazyflie2.py``).
Actions: four numbers in ``[-1, 1]``, motor M1..M4, mapped linearly to a commanded thrust in
``[0, MAX_THRUST]`` (``ctrl = 0.5 + 0.5 * a``); the motors follow through MuJoCo's own first-order
filter (the model doc says why there), whose state ``act`` is the motor state.

Observations:

* ``policy`` (what the vehicle's estimator and its own command log give, 22-D): position error to
  the reference (m), the body-to-world rotation matrix (row-major, 9), world-frame linear velocity
  error (m/s), body-frame angular velocity (rad/s), the last action (4).
* ``privileged`` (simulation only): the true state ``qpos, qvel``, the motor states ``act``
  (normalised thrusts) and every randomised draw. The default critic reads ``policy`` plus it.

Reward (L2F's shape: a constant for staying alive minus weighted costs, every one logged):
``alive`` +1; ``position`` ``-|p - p_ref|``; ``orientation`` ``-angle(R)`` (rad, the rotation
angle from level with yaw 0); ``linear_velocity`` ``-|v - v_ref|^2``; ``angular_velocity``
``-|w|^2``; ``action`` ``-|a - a_hover|^2`` (distance from the hover command, so that doing
nothing useful is not free and the hover thrust is what the penalty pulls towards). The position
and orientation costs are norms, not squares, so that they still pull at the centimetre and degree
scale the hover criterion measures.

Terminations: leaving a 2 m box around the reference (``out_of_box``), or tilting past 90 degrees
(``flipped``). Time-out after ``episode_length`` steps (5 s hover, 12 s = two laps track).

Randomised per episode (sim2real, each range commented where it is set): mass, inertia, thrust
coefficient (the actuators' gain) and motor time constant (the filter's ``dynprm``).

Initial state: a uniform position offset, a random rotation of bounded angle about a uniform
random axis, uniform linear and angular velocities; the bounds are ``initial_state.params``
(``position``, ``angle_deg``, ``velocity``, ``angular_velocity``), which a curriculum may widen.

``Quadrotor-Track``: the reference moves along a figure-eight (a Lissajous 1:2 curve)
``p_ref(t) = c + (A sin(w t), (A / 2) sin(2 w t), 0)``, ``w = 2 pi / T``; its parameters are the
:class:`Figure8` task parameter of the terms. The policy also sees the reference velocity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from robolearn.assets import asset_path
from robolearn.assets import crazyflie2 as cf
from robolearn.envs import (
    ActionTerm,
    CurriculumTerm,
    EventTerm,
    InitialState,
    ObsGroup,
    ObsTerm,
    RewardTerm,
    SuccessTerm,
    TaskCfg,
    TerminationTerm,
    mdp,
)
from robolearn.envs.curriculum import PerformanceGate
from robolearn.envs.validate import check_float
from robolearn.sim2real.randomization import randomize_field

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

# Free-joint layout of the body: qpos = (x, y, z, qw, qx, qy, qz), qvel = (vx, vy, vz in the world
# frame, wx, wy, wz in the body frame).
POS = slice(0, 3)
QUAT = slice(3, 7)
LIN_VEL = slice(0, 3)
ANG_VEL = slice(3, 6)

HISTORY_LENGTH = 16
"""Frames of the ``history`` group (the last actions, newest last)."""

HOVER_CENTER = (0.0, 0.0, 1.0)
"""The hover target (m), the model's ``target`` site and the body's start position."""


# -- the reference ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure8:
    """The reference trajectory, a task parameter of every term that reads it.

    ``amplitude = 0`` is a fixed point (hover). The curve: ``center + (A sin(w t), (A / 2)
    sin(2 w t), 0)`` with ``w = 2 pi / period`` and ``t`` the time since the episode began.
    """

    center: tuple[float, float, float] = HOVER_CENTER
    """Centre of the figure (m)."""
    amplitude: float = 0.0
    """Half-width ``A`` along x (m); the y half-width is ``A / 2``."""
    period: float = 6.0
    """Seconds per lap."""

    def __post_init__(self) -> None:
        """Refuse a bad setting, naming it."""
        if len(self.center) != 3:
            raise ValueError(f"Figure8.center: expected 3 coordinates, got {self.center!r}")
        for k, c in enumerate(self.center):
            check_float(f"Figure8.center[{k}]", c)
        check_float("Figure8.amplitude", self.amplitude, nonnegative=True)
        check_float("Figure8.period", self.period, positive=True)

    def at(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reference position and velocity ``[N, 3]`` each at times ``t`` ``[N]`` (s, float64)."""
        n = t.shape[0]
        pos = torch.tensor(self.center, dtype=torch.float64, device=t.device).expand(n, 3).clone()
        vel = torch.zeros(n, 3, dtype=torch.float64, device=t.device)
        if self.amplitude > 0.0:
            w = 2.0 * math.pi / self.period
            a = self.amplitude
            pos[:, 0] += a * torch.sin(w * t)
            pos[:, 1] += 0.5 * a * torch.sin(2.0 * w * t)
            vel[:, 0] = a * w * torch.cos(w * t)
            vel[:, 1] = a * w * torch.cos(2.0 * w * t)
        return pos, vel


HOVER = Figure8()
"""The hover reference: a fixed point 1 m above the floor."""

TRACK = Figure8(amplitude=0.5, period=6.0)
"""The tracking reference: a 1 m x 0.5 m figure-eight, 6 s per lap (peak speed 0.74 m/s, at the centre)."""


def reference(env: BatchedEnv, ref: Figure8) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference position and velocity ``[N, 3]`` at each world's current episode time."""
    if ref.amplitude == 0.0:  # hover: no time dependence; built once per (reference, device, N)
        key = (ref, env.device, env.num_envs)
        fixed = _FIXED.get(key)
        if fixed is None:
            pos = torch.tensor(ref.center, dtype=torch.float64, device=env.device).expand(env.num_envs, 3)
            fixed = _FIXED[key] = (pos, torch.zeros(env.num_envs, 3, dtype=torch.float64, device=env.device))
        return fixed
    return ref.at(env.episode_length.to(torch.float64) * env.dt)


# Fixed references by (reference, device, number of worlds): read-only tensors that several terms
# read at every step, so they are not rebuilt each time.
_FIXED: dict[tuple[Figure8, torch.device, int], tuple[torch.Tensor, torch.Tensor]] = {}


# -- geometry ----------------------------------------------------------------------------------------
def rotation_matrix(quat: torch.Tensor) -> torch.Tensor:
    """Body-to-world rotation matrices ``[N, 3, 3]`` of unit quaternions ``(w, x, y, z)`` ``[N, 4]``."""
    w, x, y, z = quat.unbind(dim=1)
    r = torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=1,
    )
    return r.reshape(-1, 3, 3)


def attitude_angle(quat: torch.Tensor) -> torch.Tensor:
    """Rotation angle ``[N]`` (rad, in ``[0, pi]``) of each attitude from level with yaw 0."""
    return 2.0 * torch.atan2(torch.linalg.vector_norm(quat[:, 1:], dim=1), quat[:, 0].abs())


# -- observations ------------------------------------------------------------------------------------
def position_error(env: BatchedEnv, ref: Figure8 = HOVER) -> torch.Tensor:
    """``p - p_ref`` ``[N, 3]`` (m, world frame)."""
    return env.sim.qpos[:, POS] - reference(env, ref)[0]


def rotation(env: BatchedEnv) -> torch.Tensor:
    """The body-to-world rotation matrix, row-major ``[N, 9]``: continuous, unlike Euler angles,
    and without the quaternion's double cover.
    """
    return rotation_matrix(env.sim.qpos[:, QUAT]).reshape(-1, 9)


def velocity_error(env: BatchedEnv, ref: Figure8 = HOVER) -> torch.Tensor:
    """``v - v_ref`` ``[N, 3]`` (m/s, world frame)."""
    return env.sim.qvel[:, LIN_VEL] - reference(env, ref)[1]


def angular_velocity(env: BatchedEnv) -> torch.Tensor:
    """Body-frame angular velocity ``[N, 3]`` (rad/s): what the gyroscope measures."""
    return env.sim.qvel[:, ANG_VEL]


def reference_velocity(env: BatchedEnv, ref: Figure8 = TRACK) -> torch.Tensor:
    """The reference's velocity ``[N, 3]`` (m/s): the feed-forward a tracking policy needs."""
    return reference(env, ref)[1]


def motor_state(env: BatchedEnv) -> torch.Tensor:
    """The motors' filter states ``act`` ``[N, 4]`` (thrust / MAX_THRUST of the nominal rotor). Privileged."""
    return env.sim.data_field("act")


motor_state.privileged = True  # type: ignore[attr-defined]


# -- rewards -----------------------------------------------------------------------------------------
def position_cost(env: BatchedEnv, ref: Figure8 = HOVER) -> torch.Tensor:
    """``|p - p_ref|`` ``[N]`` (m)."""
    return torch.linalg.vector_norm(position_error(env, ref), dim=1)


def orientation_cost(env: BatchedEnv) -> torch.Tensor:
    """The attitude's rotation angle from level, yaw 0 ``[N]`` (rad)."""
    return attitude_angle(env.sim.qpos[:, QUAT])


def linear_velocity_cost(env: BatchedEnv, ref: Figure8 = HOVER) -> torch.Tensor:
    """``|v - v_ref|^2`` ``[N]``."""
    e = velocity_error(env, ref)
    return (e * e).sum(dim=1)


def angular_velocity_cost(env: BatchedEnv) -> torch.Tensor:
    """``|w|^2`` ``[N]``."""
    w = env.sim.qvel[:, ANG_VEL]
    return (w * w).sum(dim=1)


def action_cost(env: BatchedEnv, hover_action: float = cf.HOVER_ACTION) -> torch.Tensor:
    """``|a - a_hover|^2`` ``[N]``: the distance of the commands from the hover command."""
    d = env.action - hover_action
    return (d * d).sum(dim=1)


# -- terminations and success --------------------------------------------------------------------------
def out_of_box(env: BatchedEnv, half_size: float = 1.0, ref: Figure8 = HOVER) -> torch.Tensor:
    """True where the vehicle is farther than ``half_size`` (m) from the reference along some axis."""
    return (position_error(env, ref).abs() > half_size).any(dim=1)


def flipped(env: BatchedEnv, max_tilt_deg: float = 90.0) -> torch.Tensor:
    """True where the body's z axis is tilted more than ``max_tilt_deg`` from the world's."""
    q = env.sim.qpos[:, QUAT]
    # R[2, 2] = cos(tilt) = 1 - 2 (x^2 + y^2).
    cos_tilt = 1.0 - 2.0 * (q[:, 1] * q[:, 1] + q[:, 2] * q[:, 2])
    return cos_tilt < math.cos(math.radians(max_tilt_deg))


def hovering(
    env: BatchedEnv, max_distance: float = 0.05, max_angle_deg: float = 5.0, ref: Figure8 = HOVER
) -> torch.Tensor:
    """True where the vehicle is within ``max_distance`` (m) of the reference and its attitude
    within ``max_angle_deg`` of level with yaw 0: the hover criterion at one instant ``[N]`` bool.
    """
    near = position_cost(env, ref) <= max_distance
    level = orientation_cost(env) <= math.radians(max_angle_deg)
    return near & level


# -- initial state -------------------------------------------------------------------------------------
def random_start(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    position: float = 0.5,
    angle_deg: float = 30.0,
    velocity: float = 0.5,
    angular_velocity: float = 1.0,
    ref: Figure8 = HOVER,
    motor_low: float = 0.9,
    motor_high: float = 1.1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Start at the reference's first point plus ``U(-position, position)`` per axis (m), rotated
    by ``U(0, angle_deg)`` degrees about a uniform random axis, with linear velocity
    ``U(-velocity, velocity)`` per axis (m/s, world) and angular velocity
    ``U(-angular_velocity, angular_velocity)`` per axis (rad/s, body). Each motor's state (its
    first-order lag, MuJoCo's actuator activation) starts at ``U(motor_low, motor_high)`` times the
    nominal hover command, drawn per motor: the vehicle is in flight when an episode starts, not
    sitting with its motors stopped.
    """
    where = "initial_state.params"
    check_float(f"{where}.position", position, nonnegative=True)
    check_float(f"{where}.angle_deg", angle_deg, nonnegative=True)
    if angle_deg > 180.0:
        raise ValueError(f"{where}.angle_deg: expected a rotation angle in [0, 180], got {angle_deg!r}")
    check_float(f"{where}.velocity", velocity, nonnegative=True)
    check_float(f"{where}.angular_velocity", angular_velocity, nonnegative=True)
    check_float(f"{where}.motor_low", motor_low, nonnegative=True)
    check_float(f"{where}.motor_high", motor_high, nonnegative=True)
    if motor_low > motor_high or motor_high * cf.HOVER_COMMAND > 1.0:
        raise ValueError(
            f"{where}.motor_low/motor_high: expected 0 <= motor_low <= motor_high <= {1 / cf.HOVER_COMMAND:.3f} "
            f"(a command in [0, 1]), got motor_low={motor_low!r}, motor_high={motor_high!r}"
        )
    n = env_ids.numel()
    start = torch.tensor(ref.center, dtype=torch.float64, device=env.device)  # p_ref(0) = center
    qpos = torch.empty(n, 7, dtype=torch.float64, device=env.device)
    qpos[:, POS] = start + env.draw_uniform(env_ids, 3, -position, position)
    axis = env.draw_normal(env_ids, 3)
    axis = axis / torch.linalg.vector_norm(axis, dim=1, keepdim=True).clamp_min(1e-12)
    half = 0.5 * math.radians(angle_deg) * env.draw_uniform(env_ids, 1)
    qpos[:, 3:4] = torch.cos(half)
    qpos[:, 4:7] = torch.sin(half) * axis
    qvel = torch.cat(
        [
            env.draw_uniform(env_ids, 3, -velocity, velocity),
            env.draw_uniform(env_ids, 3, -angular_velocity, angular_velocity),
        ],
        dim=1,
    )
    act = cf.HOVER_COMMAND * env.draw_uniform(env_ids, 4, motor_low, motor_high)
    return qpos, qvel, act


# -- configs ---------------------------------------------------------------------------------------------
def _randomization() -> dict[str, EventTerm]:
    """The per-episode physical parameter draws both tasks share (ranges commented per line)."""
    return {
        # Battery variant, deck or marker add-ons and build spread: mass x U(0.95, 1.05).
        "mass": EventTerm(
            randomize_field, mode="reset", params={"field": "mass", "elements": [cf.BODY], "range": (0.95, 1.05)}
        ),
        # Mass distribution (battery placement, add-ons) and identification error of [F15]'s
        # pendulum measurement: every principal inertia x one U(0.9, 1.1) draw (shape kept).
        "inertia": EventTerm(
            randomize_field,
            mode="reset",
            params={"field": "inertia", "elements": [cf.BODY], "range": (0.9, 1.1), "shared": "axes"},
        ),
        # Propeller wear and chips, motor spread, battery voltage sag: each rotor's thrust
        # coefficient (thrust per unit command) x U(0.95, 1.05), drawn per rotor.
        "thrust_coefficient": EventTerm(
            randomize_field,
            mode="reset",
            params={"field": "actuator_gain", "axes": [0], "range": (0.95, 1.05), "name": "thrust_coefficient"},
        ),
        # Motor time constant: the coreless motors' spin-up differs with wear and temperature, and
        # the nominal value is the least certain constant: tau x U(0.7, 1.3), one draw per vehicle.
        "motor_time_constant": EventTerm(
            randomize_field,
            mode="reset",
            params={
                "field": "actuator_dynprm", "axes": [0], "range": (0.7, 1.3), "shared": True,
                "name": "motor_time_constant",
            },
        ),
    }


def _curriculum() -> dict[str, CurriculumTerm]:
    """L2F's curriculum, as performance gates rather than a fixed schedule (so it does not depend on
    the number of worlds or the step rate): the start spread widens one step whenever the last 256
    ended episodes lived on average at least 90 % of the full episode, and the penalties on action
    and velocity (which at full weight make an untrained policy prefer to crash) grow one step
    whenever at least half of them ended hovering (the task's success). Each ends at the task's
    declared value, which is what an evaluation env built with ``curriculum={}`` runs.
    """

    def gate(target: str, start: float, end: float, step: float, measure: str, threshold: float) -> CurriculumTerm:
        return CurriculumTerm(
            PerformanceGate,
            params={
                "target": target, "start": start, "end": end, "step": step, "measure": measure,
                "threshold": threshold, "min_episodes": 256,
            },
        )

    return {
        "start_position": gate("initial_state.params.position", 0.1, 0.5, 0.05, "length", 0.9),
        "start_angle": gate("initial_state.params.angle_deg", 5.0, 30.0, 3.125, "length", 0.9),
        "start_velocity": gate("initial_state.params.velocity", 0.1, 0.5, 0.05, "length", 0.9),
        "start_angular_velocity": gate("initial_state.params.angular_velocity", 0.2, 1.0, 0.1, "length", 0.9),
        "action_penalty": gate("rewards.action.weight", -0.005, -0.02, 0.0025, "success", 0.5),
        "velocity_penalty": gate("rewards.linear_velocity.weight", -0.01, -0.05, 0.005, "success", 0.5),
        "angular_velocity_penalty": gate("rewards.angular_velocity.weight", -0.002, -0.01, 0.001, "success", 0.5),
    }


def _quadrotor_cfg(ref: Figure8, episode_length: int, description: str) -> TaskCfg:
    """Build a quadrotor task config following the reference ``ref`` (module doc)."""
    policy_terms = {
        "position_error": ObsTerm(position_error, params={"ref": ref}, unit="m"),
        "rotation": ObsTerm(rotation),
        "velocity_error": ObsTerm(velocity_error, params={"ref": ref}, unit="m/s"),
        "angular_velocity": ObsTerm(angular_velocity, unit="rad/s"),
        "last_action": ObsTerm(mdp.last_action),
    }
    if ref.amplitude > 0.0:
        policy_terms["reference_velocity"] = ObsTerm(reference_velocity, params={"ref": ref}, unit="m/s")
    return TaskCfg(
        mjcf=asset_path("crazyflie2.xml"),
        decimation=1,  # 10 ms physics step = the 100 Hz control period
        episode_length=episode_length,
        observations={
            "policy": ObsGroup(terms=policy_terms),
            # The motors lag their commands by 0.15 s (15 control steps) and their state is not
            # measured on the vehicle: the policy infers it from its own recent commands, as L2F's
            # does from its action history. 16 frames cover one time constant.
            "history": ObsGroup(terms={"actions": ObsTerm(mdp.last_action)}, history_length=HISTORY_LENGTH),
            "privileged": ObsGroup(
                terms={
                    "state": ObsTerm(mdp.true_state),
                    "motor_state": ObsTerm(motor_state),
                    "drawn": ObsTerm(mdp.drawn),
                },
                enable_noise=False,
            ),
        },
        # a in [-1, 1] -> ctrl = 0.5 + 0.5 a in [0, 1] -> commanded thrust ctrl * MAX_THRUST.
        actions={"motors": ActionTerm(kind="torque", actuators=list(cf.MOTORS), scale=0.5, offset=0.5, clip=(-1.0, 1.0))},
        rewards={
            "alive": RewardTerm(mdp.alive, weight=1.0),
            "position": RewardTerm(position_cost, weight=-1.0, params={"ref": ref}),
            "orientation": RewardTerm(orientation_cost, weight=-0.2),
            "linear_velocity": RewardTerm(linear_velocity_cost, weight=-0.05, params={"ref": ref}),
            "angular_velocity": RewardTerm(angular_velocity_cost, weight=-0.01),
            "action": RewardTerm(action_cost, weight=-0.02),
        },
        terminations={
            "out_of_box": TerminationTerm(out_of_box, params={"half_size": 1.0, "ref": ref}),
            "flipped": TerminationTerm(flipped, params={"max_tilt_deg": 90.0}),
        },
        events=_randomization(),
        initial_state=InitialState(
            random_start,
            # Each motor starts at hover thrust +-10 % (per motor), so an episode begins in flight.
            params={"position": 0.5, "angle_deg": 30.0, "velocity": 0.5, "angular_velocity": 1.0, "ref": ref,
                    "motor_low": 0.9, "motor_high": 1.1},
        ),
        curriculum=_curriculum(),
        success=SuccessTerm(hovering, params={"ref": ref}),
        data_fields=("act",),
        description=description,
    )


def quadrotor_hover_cfg() -> TaskCfg:
    """Return the config of ``Quadrotor-Hover``: reach and hold a point from a random start."""
    return _quadrotor_cfg(
        HOVER, 500, "Crazyflie 2.x hover from random starts: 4 motor thrusts, 100 Hz, L2F reward, 5 s"
    )


def quadrotor_track_cfg() -> TaskCfg:
    """Return the config of ``Quadrotor-Track``: follow a figure-eight reference."""
    return _quadrotor_cfg(
        TRACK, 1200, "Crazyflie 2.x figure-eight tracking (1 m x 0.5 m, 6 s laps): 4 motor thrusts, 100 Hz, 12 s"
    )
