"""Legged robots: a 12-DoF Go1-class quadruped (``Quadruped-Flat``, ``Quadruped-Rough``)."""

from robolearn.envs.registry import register

from .flat import quadruped_flat_cfg, quadruped_flat_nodr_cfg
from .rough import quadruped_rough_cfg

register(
    "Quadruped-Flat",
    quadruped_flat_cfg,
    "Go1-class quadruped tracks (vx, vy, yaw rate) commands on flat ground; friction/payload draws, pushes",
)
register(
    "Quadruped-Flat-NoDR",
    quadruped_flat_nodr_cfg,
    "Quadruped-Flat without randomisation (no friction/payload draws, no pushes): the robustness baseline",
)
register(
    "Quadruped-Rough",
    quadruped_rough_cfg,
    "Quadruped-Flat on a generated height field (slopes, rough, stairs; 6 levels) with a terrain-level curriculum",
)
