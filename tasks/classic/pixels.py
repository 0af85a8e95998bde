"""``Cartpole-Swingup-Pixels``: DMC cart-pole swing-up seen through a camera.

Same model, dynamics, initial state, reward and time-out as ``Cartpole-Swingup``; only the
observations differ:

- ``image``: the ``fixed`` camera (the whole rail, the pole up and hanging down), RGB uint8
  ``[N, 84, 84, 3]`` rendered at every control step, without shadows (see
  :func:`~robolearn.envs.camera.camera_rgb`). What a pixel actor reads, and what a robot's camera
  would deliver: a deployable group.
- ``critic``: the state task's 5-D ``policy`` observation, clean, for asymmetric learners (actor on
  pixels, critic on state). A pixels-only learner ignores it.

There is no ``policy`` group: nothing but pixels is available to the actor. Action repeat and frame
stacking (DrQ-v2 uses 8 and 3 for cart-pole) belong to the learner's config, not to the task.
"""

from __future__ import annotations

from robolearn.envs import TaskCfg
from robolearn.envs.camera import pixel_task

from .cartpole import cartpole_swingup_cfg

IMAGE_SIZE = 84
"""Default square image size (DrQ-v2's)."""


def cartpole_swingup_pixels_cfg(size: int = IMAGE_SIZE, camera: str = "fixed") -> TaskCfg:
    """Return the config of ``Cartpole-Swingup-Pixels`` (``size`` x ``size`` images from ``camera``)."""
    cfg = pixel_task(cartpole_swingup_cfg(), camera, size)
    cfg.description = (
        f"DMC cartpole-swingup from pixels: {size}x{size} RGB uint8 image group, 5-D state critic group, "
        "1-D force, reward in [0, 1], 1000 steps"
    )
    return cfg
