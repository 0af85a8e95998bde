"""Manipulation tasks; ``Reacher`` reproduces Gymnasium's ``Reacher-v5`` step for step."""

from robolearn.envs.registry import register
from robolearn.tasks.manipulation.reacher import reacher_cfg
from robolearn.tasks.manipulation.reacher_pixels import reacher_pixels_cfg

register("Reacher", reacher_cfg, "Gymnasium Reacher-v5, exactly: reach a random target, 50 steps")
register(
    "Reacher-Pixels",
    reacher_pixels_cfg,
    "Reacher from 84x84 RGB images of the free camera (image group); state critic group for asymmetric setups",
)
