"""PointMaze-Fork (tasks/navigation): the multimodal maze of issue 14. Two equally short routes,
a planner that takes each in about half of its episodes and reaches the goal by both, the sparse
reward, the corridor statistic the BC benchmark reports, and ``robolearn data build`` for it.
"""

from __future__ import annotations

import pytest
import torch

import robolearn
from robolearn.cli.main import main
from robolearn.data import Dataset
from robolearn.runners.collect import collect_episodes
from robolearn.tasks.navigation.fork import (
    corridor_of,
    mode_coverage,
    obstacle_box,
    route_length,
    route_waypoints,
)
from robolearn.tasks.navigation.planner import ForkPlanner, WaypointPlanner, make_planner
from robolearn.tasks.navigation.point_maze import GOAL_RADIUS, maze

FORK = maze("Fork")


def test_the_two_routes_are_equally_short_and_the_block_is_a_detour():
    assert FORK.rows == tuple(row[::-1] for row in FORK.rows)  # mirror symmetric about x = 0
    (si, sj), (gi, gj) = FORK.find("S"), FORK.find("G")
    assert route_length(FORK, "left") == route_length(FORK, "right") == 9
    assert abs(si - gi) + abs(sj - gj) == 5  # straight up is 5 cells: the block costs 4
    cell, steps = (si, sj), 0  # the unrestricted BFS finds the same length (no third, shorter route)
    while cell != (gi, gj):
        cell, steps = FORK.next_cell(cell, (gi, gj)), steps + 1
    assert steps == 9
    assert obstacle_box(FORK) == (-1.5, 1.5, -1.0, 1.0)
    assert route_waypoints(FORK, "left") == [(-2.5, -1.5), (-2.5, 1.5), (0.0, 2.5)]
    assert route_waypoints(FORK, "right") == [(2.5, -1.5), (2.5, 1.5), (0.0, 2.5)]
    # A lopsided block: the narrow left corridor is the long way round, and route_length says so.
    lopsided = FORK.__class__(("########", "#...G..#", "#.###..#", "#.###..#", "#...S..#", "########"))
    assert (route_length(lopsided, "left"), route_length(lopsided, "right")) == (9, 5)


def test_the_first_demonstrated_actions_are_mirror_images_whose_average_hits_the_block():
    sx, sy = FORK.center(FORK.find("S"))
    obs = {"policy": torch.tensor([[sx, sy, 0.0, 0.0, 0.0, 2.5]] * 2, dtype=torch.float64)}
    planner = ForkPlanner(FORK, 2, noise=0.0)
    planner.route = ["left", "right"]
    planner._last = obs["policy"][:, :2].clone()  # not a new episode: keep the routes set above
    a = planner(obs)
    # KP * (waypoint - start) = 4 * (-+2.5, 1), scaled (not clipped per axis) to the bounds.
    assert a.tolist() == [pytest.approx([-1.0, 0.4]), pytest.approx([1.0, 0.4])]
    mean = a.mean(0)
    x_lo, x_hi, y_lo, _ = obstacle_box(FORK)
    assert float(mean[0]) == pytest.approx(0.0) and float(mean[1]) > 0 and x_lo < sx < x_hi and sy < y_lo


def test_the_planner_splits_its_episodes_between_the_routes_and_reaches_the_goal_by_both():
    n = 64
    env = robolearn.make("PointMaze-Fork", n, seed=0)
    planner = ForkPlanner(FORK, n, noise=0.2, generator=torch.Generator().manual_seed(0))
    episodes = collect_episodes(env, planner, episodes=2 * n, seed=0, progress=False)
    env.close()
    modes = [corridor_of(ep["observations"]["policy"][:, :2], FORK) for ep in episodes]
    drawn = [side for _, side in planner.choices[: 2 * n]]
    assert [w for w, _ in planner.choices[: 2 * n]] == list(range(n)) * 2  # one draw per world per episode
    assert modes == drawn  # each episode went through the corridor of the route drawn for it
    assert 0.35 <= modes.count("left") / len(modes) <= 0.65
    last = torch.stack([ep["observations"]["policy"][-1, :2].double() for ep in episodes])
    success = torch.linalg.vector_norm(last - torch.tensor(FORK.center(FORK.find("G")), dtype=torch.float64), dim=1) < GOAL_RADIUS
    assert bool(success.all())
    returns = torch.stack([ep["rewards"].double().sum() for ep in episodes])
    assert float(returns.min()) > 30  # arrives in well under the 150 steps and stays


def _place(env, xy: tuple[float, float]) -> None:
    """Put world 0's point at rest at world position ``xy`` (the slide joints measure from the start)."""
    sx, sy = FORK.center(FORK.find("S"))
    qpos = env.sim.qpos.clone()
    qpos[0, 0], qpos[0, 1] = xy[0] - sx, xy[1] - sy
    env.sim.reset(torch.tensor([0]), qpos[:1], torch.zeros_like(env.sim.qvel[:1]))


@pytest.mark.parametrize(("offset", "reward"), [(0.0, 1.0), (GOAL_RADIUS - 0.01, 1.0), (GOAL_RADIUS + 0.01, 0.0), (2.0, 0.0)])
def test_the_reward_is_sparse_one_strictly_inside_the_goal_radius(offset, reward):
    env = robolearn.make("PointMaze-Fork", 1, seed=0)
    env.reset(seed=0)
    gx, gy = FORK.center(FORK.find("G"))
    _place(env, (gx + offset, gy))
    _, r, *_ = env.step(torch.zeros(1, 2))  # at rest, no force: it stays where it was put
    assert float(r[0]) == reward
    env.close()


def test_the_dense_variant_is_registered_and_rewards_exp_minus_distance():
    env = robolearn.make("PointMaze-Fork-Dense", 1, seed=0)
    env.reset(seed=0)
    gx, gy = FORK.center(FORK.find("G"))
    _place(env, (gx, gy - 2.0))
    _, r, *_ = env.step(torch.zeros(1, 2))
    assert float(r[0]) == pytest.approx(torch.exp(torch.tensor(-2.0)).item(), rel=1e-4)
    assert env.max_episode_length == 150
    env.close()


def _path(*points: tuple[float, float], per: int = 20) -> torch.Tensor:
    """A polyline through ``points``, ``per`` samples a segment (and the last point)."""
    p = torch.tensor(points, dtype=torch.float64)
    t = torch.linspace(0, 1, per + 1, dtype=torch.float64)[:-1, None]
    segs = [a + t * (b - a) for a, b in zip(p[:-1], p[1:], strict=True)]
    return torch.cat([*segs, p[-1:]])


LEFT = _path((0.0, -2.5), (-2.5, -1.5), (-2.5, 1.5), (0.0, 2.5))
RIGHT = LEFT * torch.tensor([-1.0, 1.0], dtype=torch.float64)


@pytest.mark.parametrize(
    ("xy", "mode"),
    [
        (LEFT, "left"),
        (RIGHT, "right"),
        (_path((0.0, -2.5), (0.0, -1.15)), "neither"),  # drove straight at the block and stayed
        (_path((0.0, -2.5), (-1.6, -1.5), (-1.6, 0.0)), "neither"),  # into the left corridor, not past the block
        (_path((0.0, -2.5), (-2.0, -1.5), (-2.0, 0.5), (-2.0, -1.5), (2.0, -1.5), (2.0, 1.5), (0.0, 2.5)), "right"),
        (_path((0.0, -2.5), (-1.6, -1.5), (-1.6, 1.2), (0.0, 2.5)), "left"),  # just outside the block's edge
    ],
)
def test_corridor_of_hand_built_trajectories(xy, mode):
    assert corridor_of(xy, FORK) == mode


def test_mode_coverage_counts_fractions_and_rejects_bad_input():
    stuck = _path((0.0, -2.5), (0.0, -1.15))
    assert mode_coverage([LEFT, LEFT, RIGHT, stuck], FORK) == {"left": 0.5, "right": 0.25, "neither": 0.25}
    with pytest.raises(ValueError, match=r"xy: expected positions \[T, 2\], got shape \(5,\)"):
        corridor_of(torch.zeros(5), FORK)
    with pytest.raises(ValueError, match="expected a wall block inside the border"):
        obstacle_box(maze("UMaze").__class__(("###", "#.#", "###")))


def test_the_other_layouts_keep_their_waypoint_planner():
    m = maze("UMaze")
    gx, gy = m.center(m.find("G"))
    obs = {"policy": torch.tensor([[0.3, -0.9, 0.1, 0.0, gx, gy]], dtype=torch.float32)}
    made = make_planner("UMaze", m, 1, noise=0.3, generator=torch.Generator().manual_seed(5))
    plain = WaypointPlanner(m, 1, noise=0.3, generator=torch.Generator().manual_seed(5))
    assert type(made) is WaypointPlanner and torch.equal(made(obs), plain(obs))
    assert type(make_planner("Fork", FORK, 1, diverse=True)) is WaypointPlanner  # diverse: random cells
    assert type(make_planner("Fork", FORK, 1)) is ForkPlanner


def test_data_build_writes_a_two_mode_expert_set_for_the_fork(tmp_path):
    assert main(["data", "build", f"root={tmp_path}", "tasks=[PointMaze-Fork]", "transitions=2400", "num_envs=8",
                 "datasets=[expert]", "expert_noise=0.2"]) == 0
    ds = Dataset.load(tmp_path / "PointMaze-Fork" / "expert.h5")
    assert ds.num_episodes == 16 and ds.metadata.task_id == "PointMaze-Fork"
    assert ds.metadata.extra["success_rate"] == 1.0
    cover = mode_coverage([ds.episode(i)["observations"]["policy"][:, :2] for i in range(ds.num_episodes)], FORK)
    assert cover["left"] >= 0.2 and cover["right"] >= 0.2 and cover["neither"] == 0.0
