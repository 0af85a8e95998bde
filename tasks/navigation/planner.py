"""The maze datasets' behaviour policy: a noisy waypoint planner over the maze graph (as D4RL's
maze2d was collected), for ``robolearn data build`` and the tests.

Each control step, per world: the point's cell, the next cell on a shortest path to the world's
target cell (BFS over open cells), and a PD command towards that cell's centre (towards the target
point itself once in the target cell), clipped to the action bounds, plus Gaussian noise. With
``diverse`` every world walks to random open cells, a new one each time it arrives, so the data
covers the maze but seldom ends at the goal (D4RL's "diverse" sets).
"""

from __future__ import annotations

import torch

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


__all__ = ["KD", "KP", "WaypointPlanner"]
