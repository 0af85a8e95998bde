"""Legged robots: a 12-DoF Go1-class quadruped (``Quadruped-Flat``, ``Quadruped-Rough``)."""

from robolearn.envs.registry import register

from .flat import quadruped_flat_cfg, quadruped_flat_nodr_cfg

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
