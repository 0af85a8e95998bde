"""The maze tasks (tasks/navigation): layouts, the sparse reward's radius, walls that hold, the
waypoint planner's datasets and ``robolearn data build`` for a maze.
"""

from __future__ import annotations

import math

import pytest
import torch

import robolearn
from robolearn.cli.main import main
from robolearn.data import Dataset
from robolearn.tasks.navigation.planner import WaypointPlanner
from robolearn.tasks.navigation.point_maze import GOAL_RADIUS, LAYOUTS, maze


@pytest.mark.parametrize(("layout", "shape", "blocked"), [("UMaze", (5, 5), 18), ("Medium", (8, 8), 38), ("Large", (9, 12), 62)])
def test_layouts_parse_and_the_goal_is_reachable(layout, shape, blocked):
    m = maze(layout)
    blocked_cells = m.walls
    assert m.shape == shape and len(blocked_cells) == blocked
    assert all(len(row) == shape[1] for row in LAYOUTS[layout])
    # BFS from the start reaches the goal: walk next_cell until there.
    cell, goal, steps = m.find("S"), m.find("G"), 0
    while cell != goal:
        cell, steps = m.next_cell(cell, goal), steps + 1
        assert cell in m.open_cells and steps < 100
    assert steps >= {"UMaze": 6, "Medium": 10, "Large": 15}[layout]  # a maze, not an open field


def test_unknown_layout_names_the_field():
    with pytest.raises(ValueError, match=r"layout: unknown maze 'Tiny'; valid choices: UMaze, Medium, Large"):
        maze("Tiny")


def _place(env, xy: tuple[float, float]) -> None:
    """Put world 0's point at world position ``xy`` (the slide joints measure from the start cell)."""
    m = maze("UMaze")
    sx, sy = m.center(m.find("S"))
    qpos = env.sim.qpos.clone()
    qpos[0, 0], qpos[0, 1] = xy[0] - sx, xy[1] - sy
    env.sim.reset(torch.tensor([0]), qpos[:1], torch.zeros_like(env.sim.qvel[:1]))


@pytest.mark.parametrize(("offset", "reward"), [(GOAL_RADIUS - 1e-3, 1.0), (GOAL_RADIUS + 1e-3, 0.0), (0.0, 1.0)])
def test_sparse_reward_fires_exactly_inside_the_goal_radius(offset, reward):
    from robolearn.tasks.navigation.point_maze import sparse_goal

    env = robolearn.make("PointMaze-UMaze", 1, seed=0)
    env.reset(seed=0)
    m = maze("UMaze")
    gx, gy = m.center(m.find("G"))
    start = m.center(m.find("S"))
    _place(env, (gx + offset, gy))
    assert float(sparse_goal(env, start, (gx, gy))[0]) == reward


def test_dense_reward_is_exp_of_minus_distance_and_the_observation_is_world_position():
    from robolearn.tasks.navigation.point_maze import dense_goal

    env = robolearn.make("PointMaze-UMaze-Dense", 1, seed=0)
    env.reset(seed=0)
    m = maze("UMaze")
    goal, start = m.center(m.find("G")), m.center(m.find("S"))
    _place(env, (goal[0] + 0.3, goal[1] - 0.4))
    assert float(dense_goal(env, start, goal)[0]) == pytest.approx(math.exp(-0.5))
    obs, reward, *_ = env.step(torch.zeros(1, 2))
    x = obs["policy"][0].double()
    assert x[4:].tolist() == pytest.approx(list(goal))
    assert float(reward[0]) == pytest.approx(math.exp(-float(torch.linalg.vector_norm(x[:2] - x[4:]))), rel=1e-5)


def test_the_point_cannot_cross_a_wall():
    # From the start cell (bottom-left) push straight up: the wall row between start and goal holds.
    env = robolearn.make("PointMaze-UMaze", 1, seed=0)
    obs, _ = env.reset(seed=0)
    m = maze("UMaze")
    start_y = m.center(m.find("S"))[1]
    for _ in range(100):
        obs, *_ = env.step(torch.tensor([[0.0, 1.0]]))
    y = float(obs["policy"][0, 1])
    assert start_y + 0.3 < y < start_y + 0.5  # held at the cell edge 0.5 up, minus the ball's radius
    assert float(obs["policy"][0, 3]) == pytest.approx(0.0, abs=0.05)  # and stopped there


def test_expert_planner_reaches_the_goal_and_the_diverse_one_mostly_does_not(tmp_path):
    assert main(["data", "build", f"root={tmp_path}", "tasks=[PointMaze-UMaze]", "transitions=6000", "num_envs=4",
                 "datasets=[expert,diverse]", "expert_noise=0.3"]) == 0
    expert = Dataset.load(tmp_path / "PointMaze-UMaze" / "expert.h5")
    diverse = Dataset.load(tmp_path / "PointMaze-UMaze" / "diverse.h5")
    random = Dataset.load(tmp_path / "PointMaze-UMaze" / "random.h5")  # built for the reference
    assert expert.metadata.extra["success_rate"] >= 0.9
    assert diverse.metadata.extra["success_rate"] <= 0.5
    assert expert.metadata.ref_expert_return == pytest.approx(float(expert.episode_returns().mean()))
    assert diverse.metadata.ref_random_return == pytest.approx(float(random.episode_returns().mean()))
    assert float(random.episode_returns().mean()) < float(diverse.episode_returns().mean()) < float(expert.episode_returns().mean())
    assert bool(expert.timeouts.any()) and not bool(expert.terminals.any())  # time limits, never terminal
    assert expert.metadata.task_id == "PointMaze-UMaze"


def test_planner_actions_are_in_bounds_and_head_for_the_next_cell():
    m = maze("UMaze")
    planner = WaypointPlanner(m, 1, noise=0.0)
    sx, sy = m.center(m.find("S"))
    gx, gy = m.center(m.find("G"))
    action = planner({"policy": torch.tensor([[sx, sy, 0.0, 0.0, gx, gy]])})
    assert action.shape == (1, 2) and bool((action.abs() <= 1).all())
    assert float(action[0, 0]) > 0.9 and abs(float(action[0, 1])) < 1e-6  # the path leaves the start cell eastwards


def test_hopper_recipe_refuses_a_maze_dataset(tmp_path, capsys):
    assert main(["data", "build", f"root={tmp_path}", "tasks=[Hopper]", "datasets=[diverse]"]) != 0
    assert "diverse" in capsys.readouterr().err
