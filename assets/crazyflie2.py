"""Constants of the Crazyflie 2.x-class quadrotor in ``crazyflie2.xml`` (imports nothing from robolearn).

Sources, cited per constant below:

* [BC] Bitcraze, Crazyflie 2.1 datasheet (https://www.bitcraze.io): take-off weight 27 g,
  92 mm motor-to-motor diagonal, 7 x 16 mm coreless DC motors, 45 mm propellers.
* [F15] J. Förster, "System Identification of the Crazyflie 2.0 Nano Quadrocopter", BSc thesis,
  ETH Zürich, 2015: inertia tensor (bifilar pendulum) and the torque-to-thrust ratio of a rotor.
* [L2F] J. Eschmann, D. Albani, G. Loianno, "Learning to Fly in Seconds", IEEE RA-L 2024, and its
  simulator's Crazyflie parameter set (github.com/arplaboratory/learning-to-fly,
  ``include/learning_to_fly_in_seconds/simulator/parameters/dynamics/crazy_flie.h``, the base
  ``crazy_flie`` set: thrust constant 3.16e-10, torque constant 0.005964552, action limit 21702 rpm,
  "T, RPM time constant" 0.15 s): thrust coefficient over RPM, maximum RPM, motor time constant.
  Variants in the same file use 0.01-0.03 s; the motor time constant is the first thing to
  re-identify on hardware, which is also why the tasks randomise it.

Frame: x forward, y left, z up (MuJoCo's). Rotors in the X layout of the Crazyflie firmware:
M1 front-right, M2 back-right, M3 back-left, M4 front-left; M1 and M3 spin clockwise seen from
above, M2 and M4 counter-clockwise (Bitcraze's motor map), so the reaction torque of M1/M3 on the
body points +z and that of M2/M4 -z.
"""

from __future__ import annotations

import math

GRAVITY = 9.81
"""Gravitational acceleration (m/s^2), as the MJCF's default ``gravity``."""

MASS = 0.027
"""Take-off mass (kg) with the stock 250 mAh battery [BC]."""

ARM_LENGTH = 0.046
"""Centre-to-rotor-axis distance (m): half of the 92 mm motor-to-motor diagonal [BC]."""

ROTOR_OFFSET = ARM_LENGTH / math.sqrt(2.0)
"""x and y offset of each rotor from the centre (m) in the X layout: ``ARM_LENGTH / sqrt(2)``."""

INERTIA = (16.571710e-6, 16.655602e-6, 29.261652e-6)
"""Principal moments of inertia ``(Ixx, Iyy, Izz)`` (kg m^2) [F15]; its small products of inertia
(under 2e-6) are dropped, so the body frame is the principal frame."""

THRUST_COEFFICIENT = 3.16e-10
"""Rotor thrust per RPM squared (N / rpm^2): ``F = k_f * rpm^2`` [L2F]."""

MAX_RPM = 21702.0
"""Largest rotor speed (rpm) at full battery [L2F]."""

MAX_THRUST = THRUST_COEFFICIENT * MAX_RPM**2
"""Largest thrust of one rotor (N): ``k_f * MAX_RPM^2`` = 0.149 N, close to the 0.16 N per rotor
of [F15]'s PWM-to-thrust curve at full PWM; thrust-to-weight about 2.25."""

TORQUE_TO_THRUST = 0.005964552
"""Reaction (drag) torque about the rotor axis per newton of thrust (N m / N = m) [F15]: the yaw
moment a rotor exerts on the body is ``+-TORQUE_TO_THRUST * F``."""

MOTOR_TIME_CONSTANT = 0.15
"""First-order time constant of the rotor speed response (s) [L2F]; see the module doc."""

SPIN_DIRECTIONS = (-1, 1, -1, 1)
"""Spin of M1..M4 about +z (seen from above, +1 counter-clockwise): M1/M3 clockwise [BC]."""

YAW_TORQUE_SIGNS = tuple(-s for s in SPIN_DIRECTIONS)
"""Sign of each rotor's reaction torque on the body about +z: opposite to its spin."""

HOVER_THRUST = MASS * GRAVITY / 4.0
"""Thrust of each rotor (N) that holds the nominal vehicle still: a quarter of its weight."""

HOVER_COMMAND = HOVER_THRUST / MAX_THRUST
"""The normalised command in ``[0, 1]`` (the MJCF's ``ctrl``) that gives :data:`HOVER_THRUST`."""

HOVER_ACTION = 2.0 * HOVER_COMMAND - 1.0
"""The policy action in ``[-1, 1]`` (mapped to ``[0, MAX_THRUST]``) that gives hover thrust."""

MOTORS = ("m1", "m2", "m3", "m4")
"""Actuator (and rotor site) names in action order."""

BODY = "cf2"
"""Name of the free-flying body."""
