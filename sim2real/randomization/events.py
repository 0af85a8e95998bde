"""The domain-randomisation event terms in one namespace; each is defined in its concept's module.

* :mod:`.fields`: model-field draws (:class:`randomize_field`), servo gains
  (:class:`randomize_pd_gains`) and motor strength (:class:`randomize_motor_strength`).
* :mod:`.pushes`: velocity kicks (:class:`push_by_velocity`) and body wrenches
  (:class:`apply_external_wrench`), at intervals.
* :mod:`.initial_state`: per-joint initial-state noise (:func:`joint_noise_state`).
* :mod:`.common`: the term base class, distributions, ranges and draws they share.
"""

from robolearn.sim2real.randomization.common import DISTRIBUTIONS, GAUSSIAN_CLIP, OPERATIONS, EventTermBase
from robolearn.sim2real.randomization.fields import (
    randomize_field,
    randomize_motor_strength,
    randomize_pd_gains,
)
from robolearn.sim2real.randomization.initial_state import joint_noise_state
from robolearn.sim2real.randomization.pushes import apply_external_wrench, push_by_velocity

__all__ = [
    "DISTRIBUTIONS",
    "GAUSSIAN_CLIP",
    "OPERATIONS",
    "EventTermBase",
    "apply_external_wrench",
    "joint_noise_state",
    "push_by_velocity",
    "randomize_field",
    "randomize_motor_strength",
    "randomize_pd_gains",
]
