"""Domain randomisation, latency, noise and actuator models for the batched env.

* Event terms, classes validated when the env is built (:mod:`.common`): model-field draws incl.
  PD gains and motor strength (:mod:`.fields`), pushes and wrenches (:mod:`.pushes`), per-joint
  initial-state noise (:mod:`.initial_state`), appearance for cameras (:mod:`.visual`: colours,
  lights, camera pose and field of view); :mod:`.events` lists them all.
* :mod:`.perturbations`: the sim2sim gate's model shifts, the same operations with fixed values.
* :mod:`.latency`: observation delay (lag, jitter, hold), action delay, control-period jitter.
* :mod:`.actuators`: ideal PD, DC motor with a torque-speed envelope, delayed PD, per substep.

Every value drawn is per world, reproducible from the env's seed, and recorded in ``env.drawn``
(privileged observations via ``mdp.drawn``, ``info["drawn"]`` for datasets).
"""

from robolearn.sim2real.randomization.actuators import DCMotor, DelayedPD, IdealPD
from robolearn.sim2real.randomization.common import EventTermBase
from robolearn.sim2real.randomization.fields import (
    randomize_field,
    randomize_motor_strength,
    randomize_pd_gains,
)
from robolearn.sim2real.randomization.initial_state import joint_noise_state
from robolearn.sim2real.randomization.latency import ActionDelay, ControlJitter, ObservationDelay
from robolearn.sim2real.randomization.pushes import apply_external_wrench, push_by_velocity
from robolearn.sim2real.randomization.visual import randomize_visual

__all__ = [
    "ActionDelay",
    "ControlJitter",
    "DCMotor",
    "DelayedPD",
    "EventTermBase",
    "IdealPD",
    "ObservationDelay",
    "apply_external_wrench",
    "joint_noise_state",
    "push_by_velocity",
    "randomize_field",
    "randomize_motor_strength",
    "randomize_pd_gains",
    "randomize_visual",
]
