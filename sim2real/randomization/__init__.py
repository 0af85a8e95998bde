"""Domain randomisation, latency, noise and actuator models for the batched env.

* :mod:`.events`: event terms over per-world model fields and state (masses, friction, damping,
  gains, motor strength, gravity; pushes, wrenches, initial-state noise), validated at build time.
* :mod:`.latency`: observation delay (lag, jitter, hold), action delay, control-period jitter.
* :mod:`.actuators`: ideal PD, DC motor with a torque-speed envelope, delayed PD, per substep.

Every value drawn is per world, reproducible from the env's seed, and recorded in ``env.drawn``
(privileged observations via ``mdp.drawn``, ``info["drawn"]`` for datasets).
"""

from robolearn.sim2real.randomization.actuators import DCMotor, DelayedPD, IdealPD
from robolearn.sim2real.randomization.events import (
    apply_external_wrench,
    joint_noise_state,
    push_by_velocity,
    randomize_field,
    randomize_motor_strength,
    randomize_pd_gains,
)
from robolearn.sim2real.randomization.latency import ActionDelay, ControlJitter, ObservationDelay

__all__ = [
    "ActionDelay",
    "ControlJitter",
    "DCMotor",
    "DelayedPD",
    "IdealPD",
    "ObservationDelay",
    "apply_external_wrench",
    "joint_noise_state",
    "push_by_velocity",
    "randomize_field",
    "randomize_motor_strength",
    "randomize_pd_gains",
]
