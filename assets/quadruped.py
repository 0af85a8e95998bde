"""Constants of robolearn's 12-DoF quadruped (``quadruped.xml``): a Unitree-Go1-class robot.

Dimensions and masses follow Unitree's published Go1 figures, as its URDF (``go1_description`` in
unitree_ros) and the spec sheet state them: trunk 5.204 kg, a 0.376 x 0.094 x 0.114 m body; hips
at (+-0.1881, +-0.04675) m from the trunk centre, 0.68 kg each, the thigh joint 0.08 m outboard of
the hip joint; thigh and calf 0.213 m long, 1.009 kg and 0.166 kg; a 0.02 m foot sphere of 0.06 kg.
Total 12.9 kg (the spec sheet rounds to "about 12 kg" with its battery). Joint ranges, torque
and speed limits are the URDF's: hip +-0.863 rad, thigh -0.686..4.501 rad, calf -2.818..-0.888 rad;
23.7 N*m at hip and thigh, 35.55 N*m at the calf (its 1.55:1 linkage on the same motor).
Gains and the standing pose are those legged_gym trains A1/Go1 with (``a1_config.py``): kp = 20
N*m/rad, kd = 0.5 N*m*s/rad (MuJoCo Playground's Go1 uses kp = 35 and a symmetric stance), actions
scaled by 0.25 rad around legged_gym's crouched stance (hip +-0.1, thigh 0.8 front / 1.0 rear,
calf -1.5 rad).

Imports nothing from robolearn (DESIGN.md: assets import nothing).
"""

from __future__ import annotations

import math
from pathlib import Path

MJCF = Path(__file__).resolve().parent / "quadruped.xml"
"""The model file."""

LEGS: tuple[str, ...] = ("FR", "FL", "RR", "RL")
"""Leg prefixes in joint order: front right, front left, rear right, rear left (Unitree's order)."""

JOINT_KINDS: tuple[str, ...] = ("hip", "thigh", "calf")
"""Joints per leg, proximal to distal: abduction (about x), hip flexion and knee (about y)."""

JOINT_NAMES: tuple[str, ...] = tuple(f"{leg}_{kind}" for leg in LEGS for kind in JOINT_KINDS)
"""The 12 actuated joints in action order (actuators carry the same names)."""

FOOT_NAMES: tuple[str, ...] = tuple(f"{leg}_foot" for leg in LEGS)
"""Foot geoms, sites and touch sensors, in leg order."""

TRUNK = "trunk"
"""The floating base body (its free joint is ``root``)."""

# -- geometry and masses (Go1 URDF) -----------------------------------------------------------
TRUNK_SIZE = (0.3762, 0.0935, 0.114)
"""Trunk box, full lengths x, y, z (m)."""
TRUNK_MASS = 5.204
"""kg."""
HIP_OFFSET = (0.1881, 0.04675)
"""Hip joint from the trunk centre, |x| and |y| (m)."""
HIP_MASS = 0.680
"""kg, one hip link (motor housing)."""
THIGH_OFFSET = 0.08
"""Thigh joint outboard of the hip joint along y (m)."""
THIGH_LENGTH = 0.213
"""Thigh joint to knee (m)."""
THIGH_MASS = 1.009
"""kg (includes the knee motor)."""
CALF_LENGTH = 0.213
"""Knee to foot centre (m)."""
CALF_MASS = 0.166
"""kg."""
FOOT_RADIUS = 0.02
"""m."""
FOOT_MASS = 0.06
"""kg."""
TOTAL_MASS = TRUNK_MASS + 4 * (HIP_MASS + THIGH_MASS + CALF_MASS + FOOT_MASS)
"""12.86 kg."""

# -- joints and actuators -------------------------------------------------------------------
JOINT_RANGE: dict[str, tuple[float, float]] = {
    "hip": (-0.863, 0.863),
    "thigh": (-0.686, 4.501),
    "calf": (-2.818, -0.888),
}
"""Joint limits per kind (rad)."""
TORQUE_LIMIT: dict[str, float] = {"hip": 23.7, "thigh": 23.7, "calf": 35.55}
"""Peak joint torque per kind (N*m): the actuators' ``forcerange``."""
VELOCITY_LIMIT: dict[str, float] = {"hip": 30.1, "thigh": 30.1, "calf": 20.06}
"""Joint speed limits per kind (rad/s), for deployment checks (MuJoCo does not enforce them)."""

KP = 20.0
"""Position gain of the joint PD loop (N*m/rad), legged_gym's A1/Go1 stiffness."""
KD = 0.5
"""Damping gain (N*m*s/rad)."""
ACTION_SCALE = 0.25
"""Radians of joint target per unit of action (legged_gym's ``action_scale``)."""

STAND_POSE: dict[str, tuple[float, float, float]] = {"front": (0.1, 0.8, -1.5), "rear": (0.1, 1.0, -1.5)}
"""Default (hip, thigh, calf) angles of a left leg, front and rear (rad); right legs mirror the
hip's sign. legged_gym's A1/Go1 stance: the rear thighs swing 0.2 rad further back, which puts the
rear feet 8 cm behind their hips and widens the support polygon backwards; under kp = 20 the
symmetric stance of Playground (which uses kp = 35) sits back onto its rear knees."""


def _default_angle(leg: str, kind: str) -> float:
    angle = STAND_POSE["front" if leg.startswith("F") else "rear"][JOINT_KINDS.index(kind)]
    return -angle if kind == "hip" and leg.endswith("R") else angle


DEFAULT_JOINT_POS: tuple[float, ...] = tuple(_default_angle(leg, kind) for leg in LEGS for kind in JOINT_KINDS)
"""The standing pose in :data:`JOINT_NAMES` order (rad): action 0 holds it."""


def _leg_height(hip: float, thigh: float, calf: float) -> float:
    """Height of the hip joint above the foot's contact point, by the leg's forward kinematics
    (the hip roll tips the leg plane, and raises the outboard thigh joint).
    """
    down = THIGH_LENGTH * math.cos(thigh) + CALF_LENGTH * math.cos(thigh + calf)
    return down * math.cos(hip) - THIGH_OFFSET * math.sin(hip) + FOOT_RADIUS


STAND_HEIGHT: float = 0.5 * (_leg_height(*STAND_POSE["front"]) + _leg_height(*STAND_POSE["rear"]))
"""Trunk-centre height (m) with the feet on flat ground in the standing pose (the mean of front
and rear hip heights; the trunk pitches 1.4 degrees nose-up between them): 0.317 m. Under gravity
the PD loop sags a few centimetres below it."""

SPAWN_HEIGHT: float = STAND_HEIGHT + 0.02
"""Height the trunk is placed at on reset: 2 cm above standing, so no foot starts in the ground."""

FOOT_CONTACT_THRESHOLD = 1.0
"""Touch-sensor reading (N) above which a foot counts as in contact."""
