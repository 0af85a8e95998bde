"""Classic control tasks after the DeepMind Control Suite: rewards in [0, 1] over 1000 steps.

A return of 1000 is the maximum of every task here, so "solved" means the same on each.
"""

from robolearn.envs.registry import register

from .cartpole import cartpole_balance_cfg, cartpole_swingup_cfg
from .cartpole_dr import cartpole_balance_dr_cfg
from .pendulum import pendulum_swingup_cfg
from .pixels import cartpole_swingup_pixels_cfg

register(
    "Cartpole-Balance",
    cartpole_balance_cfg,
    "DMC cartpole-balance: keep a near-upright pole up; smooth reward in [0, 1], 1000 steps",
)
register(
    "Cartpole-Swingup",
    cartpole_swingup_cfg,
    "DMC cartpole-swingup: swing a hanging pole up and balance it; smooth reward in [0, 1], 1000 steps",
)
register(
    "Pendulum-Swingup",
    pendulum_swingup_cfg,
    "DMC pendulum-swingup: pump a torque-limited pendulum up and hold it; sparse reward, 1000 steps",
)
register(
    "Cartpole-Balance-DR",
    cartpole_balance_dr_cfg,
    "Cartpole-Balance randomised for sim2real: masses, damping, motor, pushes, sensor noise and latency",
)
register(
    "Cartpole-Swingup-Pixels",
    cartpole_swingup_pixels_cfg,
    "Cartpole-Swingup from 84x84 RGB camera images (image group); state critic group for asymmetric setups",
)
