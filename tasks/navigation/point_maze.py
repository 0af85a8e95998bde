"""``PointMaze-UMaze`` / ``-Medium`` / ``-Large`` / ``-Fork`` (and ``-Dense``): a force-driven point mass in a maze.

The AntMaze situation sized for a CPU: a long-horizon navigation task with a **sparse** reward,
where offline data that rarely reaches the goal plus online fine-tuning is the interesting regime.
After D4RL's ``maze2d`` (Fu et al. 2020): the same layouts (U 5x5, medium 8x8, large 9x12, 1 m
cells), a fixed start in the bottom-left open cell and a fixed goal per layout, datasets from a
noisy waypoint planner (``tasks/navigation/planner.py``).

Model (own MJCF, generated from the layout): a sphere of 1 kg and radius 0.1 m on two slide
joints (x, y) with damping 2 N s/m, driven by two motors of gear 5 N (ctrl in [-1, 1], so a top
speed of about 2.5 m/s); walls are boxes filling the wall cells. Physics step 10 ms, 5 per control
step (20 Hz). Observation ``policy`` (6): position x, y (m), velocity x, y (m/s) and the goal x, y.

Reward: sparse, 1.0 while the point is strictly within :data:`GOAL_RADIUS` (0.5 m) of the goal,
else 0.0; the ``-Dense`` variants reward ``exp(-distance)`` instead. No termination (as maze2d):
episodes end at the time limit (UMaze 300, Medium 600, Large 800 control steps), so a good policy
reaches the goal and stays. Success: the episode's last state is inside the goal radius.

``PointMaze-Fork`` (not in D4RL; 150 steps) is the multimodal task: a block between start and goal
and two mirror-image routes around it; its planner (:class:`~.planner.ForkPlanner`) picks one at
random per episode, and :mod:`.fork` says which corridor a trajectory took.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from robolearn.envs import ActionTerm, InitialState, ObsGroup, ObsTerm, RewardTerm, SuccessTerm, TaskCfg, mdp

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

GOAL_RADIUS = 0.5
"""The sparse reward and success fire strictly inside this distance (m) of the goal."""

LAYOUTS: dict[str, tuple[str, ...]] = {
    # '#' wall, '.' open, 'S' start, 'G' goal; D4RL maze2d's U, medium and large mazes.
    "UMaze": (
        "#####",
        "#G..#",
        "###.#",
        "#S..#",
        "#####",
    ),
    "Medium": (
        "########",
        "#S.##..#",
        "#..#...#",
        "##...###",
        "#..#...#",
        "#.#..#.#",
        "#...#.G#",
        "########",
    ),
    "Large": (
        "############",
        "#S...#.....#",
        "#.##.#.#.#.#",
        "#......#...#",
        "#.####.###.#",
        "#..#.#.....#",
        "##.#.#.#.###",
        "#..#...#..G#",
        "############",
    ),
    # Not from D4RL: the multimodal task. A 3x2 block between start (bottom centre) and goal (top
    # centre), 2-cell corridors on either side: the left and right routes are mirror images, so
    # equally short, and a policy that averages them drives straight up into the block.
    "Fork": (
        "#########",
        "#...G...#",
        "#.......#",
        "#..###..#",
        "#..###..#",
        "#.......#",
        "#...S...#",
        "#########",
    ),
}
"""The mazes, row 0 at the top (largest y)."""

EPISODE_LENGTH: dict[str, int] = {"UMaze": 300, "Medium": 600, "Large": 800, "Fork": 150}
"""Control steps per episode (maze2d's time limits; Fork's path is about 8.5 m, some 90 steps)."""

_ORIGIN: dict[str, str] = {"Fork": " (two equally short routes around a central block)"}
"""How a layout not from D4RL describes itself."""


@dataclass(frozen=True)
class Maze:
    """A parsed layout: cell geometry, open cells, start and goal."""

    rows: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns)."""
        return len(self.rows), len(self.rows[0])

    def center(self, cell: tuple[int, int]) -> tuple[float, float]:
        """World x, y (m) of a cell's centre; the maze is centred on the origin, 1 m cells."""
        h, w = self.shape
        i, j = cell
        return float(j - (w - 1) / 2.0), float((h - 1) / 2.0 - i)

    def cell_of(self, x: float, y: float) -> tuple[int, int]:
        """The cell holding world point x, y."""
        h, w = self.shape
        return int(round((h - 1) / 2.0 - y)), int(round(x + (w - 1) / 2.0))

    def find(self, char: str) -> tuple[int, int]:
        """The one cell marked ``char``."""
        return next((i, j) for i, row in enumerate(self.rows) for j, c in enumerate(row) if c == char)

    @property
    def walls(self) -> list[tuple[int, int]]:
        """Wall cells."""
        return [(i, j) for i, row in enumerate(self.rows) for j, c in enumerate(row) if c == "#"]

    @property
    def open_cells(self) -> list[tuple[int, int]]:
        """Cells the point can be in."""
        return [(i, j) for i, row in enumerate(self.rows) for j, c in enumerate(row) if c != "#"]

    def next_cell(self, start: tuple[int, int], target: tuple[int, int]) -> tuple[int, int]:
        """The first cell on a shortest 4-connected path from ``start`` to ``target`` (BFS over the
        open cells); ``target`` itself when ``start`` is ``target`` or a neighbour of it.
        """
        if start == target:
            return target
        parents: dict[tuple[int, int], tuple[int, int]] = {target: target}
        queue = deque([target])  # search from the target: the parent of start is its next cell
        open_ = set(self.open_cells)
        while queue:
            cell = queue.popleft()
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                nxt = (cell[0] + di, cell[1] + dj)
                if nxt in open_ and nxt not in parents:
                    parents[nxt] = cell
                    if nxt == start:
                        return cell
                    queue.append(nxt)
        raise ValueError(f"cell {target} cannot be reached from {start}")


def maze(layout: str) -> Maze:
    """The parsed layout called ``layout``; an unknown name lists the valid ones."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: unknown maze {layout!r}; valid choices: {', '.join(LAYOUTS)}")
    return Maze(LAYOUTS[layout])


def maze_xml(m: Maze) -> str:
    """The MJCF of a maze: floor, one box per wall cell, and the actuated point mass at the start."""
    sx, sy = m.center(m.find("S"))
    gx, gy = m.center(m.find("G"))
    walls = "\n".join(
        f'    <geom name="wall_{i}_{j}" type="box" pos="{x:g} {y:g} 0.25" size="0.5 0.5 0.25" rgba="0.45 0.5 0.6 1"/>'
        for (i, j) in m.walls
        for x, y in [m.center((i, j))]
    )
    h, w = m.shape
    return f"""<mujoco model="point_maze">
  <compiler angle="radian"/>
  <option timestep="0.01" integrator="implicitfast"/>
  <visual><global offwidth="640" offheight="480"/></visual>
  <worldbody>
    <light pos="0 0 8" dir="0 0 -1"/>
    <camera name="top" pos="0 0 {max(h, w) * 1.1:g}" xyaxes="1 0 0 0 1 0"/>
    <geom name="floor" type="plane" size="{w / 2 + 1:g} {h / 2 + 1:g} 0.1" rgba="0.9 0.9 0.9 1"/>
{walls}
    <site name="goal" pos="{gx:g} {gy:g} 0.01" size="{GOAL_RADIUS:g} 0.005" type="cylinder" rgba="0.2 0.8 0.2 0.4"/>
    <body name="point" pos="{sx:g} {sy:g} 0.1">
      <joint name="x" type="slide" axis="1 0 0" damping="2"/>
      <joint name="y" type="slide" axis="0 1 0" damping="2"/>
      <geom name="ball" type="sphere" size="0.1" mass="1" rgba="0.9 0.3 0.2 1"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="fx" joint="x" gear="5" ctrllimited="true" ctrlrange="-1 1"/>
    <motor name="fy" joint="y" gear="5" ctrllimited="true" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


def _position(env: BatchedEnv, start_xy: tuple[float, float]) -> torch.Tensor:
    """World x, y ``[N, 2]``: the slide joints measure displacement from the body's start position."""
    offset = torch.tensor(start_xy, dtype=env.sim.qpos.dtype, device=env.sim.qpos.device)
    return env.sim.qpos[:, :2] + offset


def position(env: BatchedEnv, start_xy: tuple[float, float]) -> torch.Tensor:
    """Observation term: the point's world position ``[N, 2]`` (m)."""
    return _position(env, start_xy)


def goal(env: BatchedEnv, goal_xy: tuple[float, float]) -> torch.Tensor:
    """Observation term: the goal's position ``[N, 2]`` (m), the same in every world."""
    g = torch.tensor(goal_xy, dtype=env.sim.qpos.dtype, device=env.sim.qpos.device)
    return g.expand(env.num_envs, 2)


def goal_distance(env: BatchedEnv, start_xy: tuple[float, float], goal_xy: tuple[float, float]) -> torch.Tensor:
    """Distance (m) from the point to the goal ``[N]``."""
    g = torch.tensor(goal_xy, dtype=env.sim.qpos.dtype, device=env.sim.qpos.device)
    return torch.linalg.vector_norm(_position(env, start_xy) - g, dim=1)


def sparse_goal(env: BatchedEnv, start_xy: tuple[float, float], goal_xy: tuple[float, float],
                radius: float = GOAL_RADIUS) -> torch.Tensor:
    """1 strictly inside ``radius`` of the goal, else 0 (``[N]``, float64)."""
    return (goal_distance(env, start_xy, goal_xy) < radius).to(torch.float64)


def dense_goal(env: BatchedEnv, start_xy: tuple[float, float], goal_xy: tuple[float, float]) -> torch.Tensor:
    """``exp(-distance to the goal)`` (``[N]``, in (0, 1])."""
    return torch.exp(-goal_distance(env, start_xy, goal_xy))


def at_goal(env: BatchedEnv, start_xy: tuple[float, float], goal_xy: tuple[float, float],
            radius: float = GOAL_RADIUS) -> torch.Tensor:
    """Success: strictly inside ``radius`` of the goal (``[N]`` bool)."""
    return goal_distance(env, start_xy, goal_xy) < radius


def start_noise(env: BatchedEnv, env_ids: torch.Tensor, spread: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """The start cell's centre plus ``U(-spread, spread)`` in x and y, at rest."""
    qpos, qvel = mdp.default_state(env, env_ids)
    qpos += env.draw_uniform(env_ids, env.model.nq, -spread, spread)
    return qpos, qvel


def point_maze_cfg(layout: str = "UMaze", dense: bool = False) -> TaskCfg:
    """The config of ``PointMaze-<layout>`` (``-Dense`` with ``dense``)."""
    m = maze(layout)
    start_xy, goal_xy = m.center(m.find("S")), m.center(m.find("G"))
    where = {"start_xy": start_xy, "goal_xy": goal_xy}
    reward = RewardTerm(dense_goal, weight=1.0, params=where) if dense else RewardTerm(sparse_goal, weight=1.0, params=where)
    return TaskCfg(
        mjcf=maze_xml(m),
        decimation=5,
        episode_length=EPISODE_LENGTH[layout],
        observations={
            "policy": ObsGroup(
                terms={
                    "position": ObsTerm(position, params={"start_xy": start_xy}, unit="m"),
                    "velocity": ObsTerm(mdp.qvel, params={"start": 0, "stop": 2}, unit="m/s"),
                    "goal": ObsTerm(goal, params={"goal_xy": goal_xy}, unit="m"),
                }
            )
        },
        actions={"force": ActionTerm(kind="torque", clip=(-1.0, 1.0))},
        rewards={"goal": reward},
        initial_state=InitialState(start_noise),
        success=SuccessTerm(at_goal, params=where),
        description=f"point mass in the {layout} maze{_ORIGIN.get(layout, ' of D4RL maze2d')}; {'dense' if dense else 'sparse'} goal reward",
    )


__all__ = [
    "EPISODE_LENGTH",
    "GOAL_RADIUS",
    "LAYOUTS",
    "Maze",
    "at_goal",
    "dense_goal",
    "goal_distance",
    "maze",
    "maze_xml",
    "point_maze_cfg",
    "sparse_goal",
]
