"""``Reacher-Pixels``: Gymnasium's ``Reacher`` seen through a camera.

Same model, dynamics, initial state, rewards and 50-step time-out as ``Reacher``; only the
observations differ:

- ``image``: RGB uint8 ``[N, 84, 84, 3]`` at every control step, looking straight down on the
  arena (its 0.6 m square fills the frame) from a :class:`~robolearn.sim.render.FreeCamera`:
  Gymnasium's ``reacher.xml`` declares no camera, and a free camera needs no edit of the upstream
  model. The view is the same in every world and episode.
- ``critic``: the state task's 10-D ``policy`` observation, clean, for asymmetric learners.

As for ``Cartpole-Swingup-Pixels``, there is no ``policy`` group, and action repeat and frame
stacking belong to the learner.
"""

from __future__ import annotations

from robolearn.envs import TaskCfg
from robolearn.envs.camera import pixel_task
from robolearn.sim.render import FreeCamera

from .reacher import reacher_cfg

TOP_DOWN = FreeCamera(lookat=(0.0, 0.0, 0.0), distance=0.8, azimuth=90.0, elevation=-90.0)
"""Straight down on the arena: at 0.8 m, the model's 45-degree field of view spans 0.66 m."""


def reacher_pixels_cfg(size: int = 84) -> TaskCfg:
    """Return the config of ``Reacher-Pixels`` (``size`` x ``size`` images)."""
    cfg = pixel_task(reacher_cfg(), TOP_DOWN, size)
    cfg.description = (
        f"Gymnasium Reacher-v5 from pixels: {size}x{size} RGB uint8 image group, 10-D state critic group, "
        "2-D torque, 50 steps"
    )
    return cfg
