"""Locomotion tasks that reproduce Gymnasium's MuJoCo v5 tasks step for step."""

from robolearn.envs.registry import register
from robolearn.tasks.locomotion.ant import ant_cfg
from robolearn.tasks.locomotion.half_cheetah import half_cheetah_cfg
from robolearn.tasks.locomotion.half_cheetah_dr import half_cheetah_dr_cfg
from robolearn.tasks.locomotion.hopper import hopper_cfg
from robolearn.tasks.locomotion.humanoid import humanoid_cfg
from robolearn.tasks.locomotion.walker2d import walker2d_cfg

register("HalfCheetah", half_cheetah_cfg, "Gymnasium HalfCheetah-v5, exactly: run forward, 1000 steps")
register("Hopper", hopper_cfg, "Gymnasium Hopper-v5, exactly: hop forward without falling, 1000 steps")
register("Walker2d", walker2d_cfg, "Gymnasium Walker2d-v5, exactly: walk forward without falling, 1000 steps")
register("Ant", ant_cfg, "Gymnasium Ant-v5, exactly: walk forward on four legs, contact forces observed, 1000 steps")
register("Humanoid", humanoid_cfg, "Gymnasium Humanoid-v5, exactly: walk forward without falling, 1000 steps")
register("HalfCheetah-DR", half_cheetah_dr_cfg, "HalfCheetah randomised for sim2real: masses, friction, damping, motors, pushes, noise, latency")
