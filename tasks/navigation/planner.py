"""The maze datasets' behaviour policy: a noisy waypoint planner over the maze graph (as D4RL's
maze2d was collected), for ``robolearn data build`` and the tests.

Each control step, per world: the point's cell, the next cell on a shortest path to the world's
target cell (BFS over open cells), and a PD command towards that cell's centre (towards the target
point itself once in the target cell), clipped to the action bounds, plus Gaussian noise. With
``diverse`` every world walks to random open cells, a new one each time it arrives, so the data
covers the maze but seldom ends at the goal (D4RL's "diverse" sets).

``PointMaze-Fork``'s expert is :class:`ForkPlanner` instead (:func:`make_planner` picks): the cell
graph has many equally short paths there, and BFS's tie-break would always take the same one; the
fork planner draws the left or right route per episode, so the demonstrations have two modes.
"""

from __future__ import annotations

import torch

from .fork import SIDES, Side, route_waypoints
from .point_maze import Maze

KP = 4.0
"""Proportional gain (action units per metre to the waypoint)."""
KD = 0.6
"""Derivative gain (action units per m/s)."""


class WaypointPlanner:
    """Batched behaviour policy ``obs -> action [N, 2]`` for a maze task's ``policy`` observations."""

    def __init__(self, m: Maze, num_envs: int, *, noise: float = 0.1, diverse: bool = False,
                 generator: torch.Generator | None = None) -> None:
        """``m``: the maze; ``noise``: action noise std (action units); ``diverse``: walk to random cells."""
        self.maze = m
        self.noise = float(noise)
        self.diverse = diverse
        self.generator = generator or torch.Generator().manual_seed(0)
        self.cells = m.open_cells
        goal = m.find("G")
        self.targets = [self._random_cell() if diverse else goal for _ in range(num_envs)]
        self._next: dict[tuple[tuple[int, int], tuple[int, int]], tuple[int, int]] = {}

    def _random_cell(self) -> tuple[int, int]:
        return self.cells[int(torch.randint(len(self.cells), (1,), generator=self.generator))]

    def _step_to(self, cell: tuple[int, int], target: tuple[int, int]) -> tuple[int, int]:
        key = (cell, target)
        if key not in self._next:  # BFS once per (cell, target) pair
            self._next[key] = self.maze.next_cell(cell, target)
        return self._next[key]

    def __call__(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Actions for observations ``policy = [x, y, vx, vy, goal_x, goal_y]``."""
        x = obs["policy"].detach().double().cpu()
        out = torch.empty(x.shape[0], 2, dtype=torch.float64)
        for w in range(x.shape[0]):
            px, py, vx, vy = (float(v) for v in x[w, :4])
            cell = self.maze.cell_of(px, py)
            if cell not in self.cells:  # numerically inside a wall's cell edge: aim at the nearest open one
                cell = min(self.cells, key=lambda c: (self.maze.center(c)[0] - px) ** 2 + (self.maze.center(c)[1] - py) ** 2)
            if self.diverse and cell == self.targets[w]:
                self.targets[w] = self._random_cell()
            wx, wy = self.maze.center(self._step_to(cell, self.targets[w]))
            out[w, 0] = KP * (wx - px) - KD * vx
            out[w, 1] = KP * (wy - py) - KD * vy
        out += self.noise * torch.randn(out.shape, generator=self.generator, dtype=torch.float64)
        return out.clamp(-1.0, 1.0).to(obs["policy"].dtype).to(obs["policy"].device)


NEW_EPISODE_JUMP = 0.5
"""A world whose point moved farther than this (m) in one control step was reset: the point's top
speed (about 2.5 m/s per axis, 0.05 s per step) covers under 0.2 m. Collection loops do not tell a
plain callable policy where episodes end, so the fork planner reads it off the positions."""
SWITCH_RADIUS = 0.5
"""The fork planner moves on to the route's next waypoint within this distance (m) of the current one."""


class ForkPlanner:
    """Batched behaviour policy of ``PointMaze-Fork``: per world and per episode, the left or the
    right route (a fair coin from ``generator``), followed waypoint by waypoint with a PD command.

    The command towards the current waypoint is scaled down (not clipped per axis) to the action
    bounds, so the point heads straight at the waypoint and the two routes' first actions are mirror
    images (up-left, up-right) whose average points straight at the block. Gaussian noise is added
    after, then the result is clipped. ``route[w]`` is world ``w``'s current route and ``choices``
    every ``(world, route)`` drawn, in order.
    """

    def __init__(self, m: Maze, num_envs: int, *, noise: float = 0.1, generator: torch.Generator | None = None) -> None:
        """``m``: the Fork maze; ``noise``: action noise std (action units)."""
        if num_envs < 1:
            raise ValueError(f"num_envs: expected an integer >= 1, got {num_envs!r}")
        self.maze = m
        self.noise = float(noise)
        self.generator = generator or torch.Generator().manual_seed(0)
        self.routes = {side: torch.tensor(route_waypoints(m, side), dtype=torch.float64) for side in SIDES}
        self.route: list[Side] = ["left"] * num_envs
        self.stage = torch.zeros(num_envs, dtype=torch.long)
        self.choices: list[tuple[int, Side]] = []
        self._last: torch.Tensor | None = None

    def _new_episode(self, w: int) -> None:
        side = SIDES[int(torch.randint(2, (1,), generator=self.generator))]
        self.route[w] = side
        self.stage[w] = 0
        self.choices.append((w, side))

    def __call__(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Actions for observations ``policy = [x, y, vx, vy, goal_x, goal_y]``."""
        x = obs["policy"].detach().double().cpu()
        pos, vel = x[:, :2], x[:, 2:4]
        if self._last is None or self._last.shape != pos.shape:
            new = torch.ones(pos.shape[0], dtype=torch.bool)
        else:
            new = torch.linalg.vector_norm(pos - self._last, dim=1) > NEW_EPISODE_JUMP
        self._last = pos.clone()
        for w in new.nonzero().flatten().tolist():  # one coin per new episode, in world order
            self._new_episode(w)
        paths = torch.stack([self.routes[side] for side in self.route])  # [N, waypoints, 2]
        rows = torch.arange(x.shape[0])
        last = paths.shape[1] - 1
        near = torch.linalg.vector_norm(paths[rows, self.stage] - pos, dim=1) < SWITCH_RADIUS
        self.stage = torch.where(near & (self.stage < last), self.stage + 1, self.stage)
        cmd = KP * (paths[rows, self.stage] - pos) - KD * vel
        out = cmd / cmd.abs().amax(dim=1, keepdim=True).clamp(min=1.0)
        out += self.noise * torch.randn(out.shape, generator=self.generator, dtype=torch.float64)
        return out.clamp(-1.0, 1.0).to(obs["policy"].dtype).to(obs["policy"].device)


def make_planner(layout: str, m: Maze, num_envs: int, *, noise: float = 0.1, diverse: bool = False,
                 generator: torch.Generator | None = None) -> WaypointPlanner | ForkPlanner:
    """The behaviour policy of the ``layout`` maze's planner datasets: :class:`ForkPlanner` for the
    Fork's goal-directed data, else (every D4RL layout, and the Fork's ``diverse`` data, which walks
    to random cells) :class:`WaypointPlanner`, exactly as before the Fork existed.
    """
    if layout == "Fork" and not diverse:
        return ForkPlanner(m, num_envs, noise=noise, generator=generator)
    return WaypointPlanner(m, num_envs, noise=noise, diverse=diverse, generator=generator)


__all__ = ["KD", "KP", "NEW_EPISODE_JUMP", "SWITCH_RADIUS", "ForkPlanner", "WaypointPlanner", "make_planner"]
