"""Navigation tasks: the point-mass mazes of D4RL's maze2d and the two-route Fork, with sparse and
dense goal rewards.
"""

from functools import partial

from robolearn.envs.registry import register

from .point_maze import LAYOUTS, point_maze_cfg

_ORIGIN = {"Fork": "two equally short routes around a central block"}

for _layout in LAYOUTS:
    _what = _ORIGIN.get(_layout, "D4RL maze2d")
    register(
        f"PointMaze-{_layout}",
        partial(point_maze_cfg, _layout),
        f"point mass in the {_layout} maze ({_what}); sparse reward 1 within 0.5 m of the goal",
    )
    register(
        f"PointMaze-{_layout}-Dense",
        partial(point_maze_cfg, _layout, dense=True),
        f"point mass in the {_layout} maze ({_what}); dense reward exp(-distance to the goal)",
    )
