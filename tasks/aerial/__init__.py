"""Aerial robots: a Crazyflie-2.x-class quadrotor (``Quadrotor-Hover``, ``Quadrotor-Track``)."""

from robolearn.envs.registry import register

from .quadrotor import quadrotor_hover_cfg, quadrotor_track_cfg

register(
    "Quadrotor-Hover",
    quadrotor_hover_cfg,
    "Crazyflie 2.x hover from random starts: per-motor thrusts through a first-order motor model, 100 Hz, 5 s",
)
register(
    "Quadrotor-Track",
    quadrotor_track_cfg,
    "Crazyflie 2.x figure-eight tracking (1 m x 0.5 m, 6 s laps): per-motor thrusts, 100 Hz, 12 s",
)
