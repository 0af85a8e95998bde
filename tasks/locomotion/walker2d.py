"""``Walker2d``: Gymnasium's ``Walker2d-v5`` reproduced exactly, from its own MJCF.

v5 defaults: the ``walker2d_v5.xml`` model (both feet with friction 0.9); frame skip 4
(dt = 0.008 s); observation ``qpos[1:]`` (8) and ``qvel`` clipped to ``[-10, 10]`` (9); reward
``dx/dt + healthy - 1e-3 * sum(a^2)`` with ``healthy`` 1 while the walker stands; terminated when
it stops standing (0.8 < torso z < 2, |pitch| < 1, judged on the state after the step); 1000-step
time limit; reset to ``qpos0 + U(-5e-3, 5e-3)`` and ``U(-5e-3, 5e-3)`` velocities.
"""

from __future__ import annotations

from typing import Any

from robolearn.assets import gymnasium_asset
from robolearn.envs import TaskCfg
from robolearn.tasks.locomotion.hopper import planar_walker_cfg

# Gymnasium's is_healthy for Walker2d-v5: open intervals on torso height and pitch only.
HEALTHY: dict[str, Any] = {"z_range": (0.8, 2.0), "angle_range": (-1.0, 1.0)}


def walker2d_cfg() -> TaskCfg:
    """The task config of ``Walker2d``."""
    return planar_walker_cfg(
        gymnasium_asset("walker2d_v5.xml"),
        HEALTHY,
        "Gymnasium Walker2d-v5: walk forward without falling; 17-D observation, 6-D torque action",
    )
