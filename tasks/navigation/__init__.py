"""Navigation tasks: the point-mass mazes of D4RL's maze2d, with sparse and dense goal rewards."""

from functools import partial

from robolearn.envs.registry import register

from .point_maze import LAYOUTS, point_maze_cfg

for _layout in LAYOUTS:
    register(
        f"PointMaze-{_layout}",
        partial(point_maze_cfg, _layout),
        f"point mass in the {_layout} maze (D4RL maze2d); sparse reward 1 within 0.5 m of the goal",
    )
    register(
        f"PointMaze-{_layout}-Dense",
        partial(point_maze_cfg, _layout, dense=True),
        f"point mass in the {_layout} maze (D4RL maze2d); dense reward exp(-distance to the goal)",
    )
