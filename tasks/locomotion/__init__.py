"""Locomotion tasks that reproduce Gymnasium's MuJoCo v5 tasks step for step."""

from robolearn.envs.registry import register
from robolearn.tasks.locomotion.half_cheetah import half_cheetah_cfg

register("HalfCheetah", half_cheetah_cfg, "Gymnasium HalfCheetah-v5, exactly: run forward, 1000 steps")
