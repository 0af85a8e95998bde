"""Manipulation tasks; ``Reacher`` reproduces Gymnasium's ``Reacher-v5`` step for step."""

from robolearn.envs.registry import register
from robolearn.tasks.manipulation.reacher import reacher_cfg

register("Reacher", reacher_cfg, "Gymnasium Reacher-v5, exactly: reach a random target, 50 steps")
