"""Geometry and the mode statistic of ``PointMaze-Fork``, the multimodal maze.

The layout (``LAYOUTS["Fork"]``) puts a wall block between the start (bottom centre) and the goal
(top centre), with a corridor on either side. This module derives from the layout alone:

* :func:`obstacle_box`: the block's world extent (the interior wall cells' bounding box);
* :func:`route_waypoints`: the planner's two routes, start -> below the corridor -> above it -> goal,
  straight segments through the corridor's centre line;
* :func:`route_length`: the shortest 4-connected path (BFS) from start to goal that may use only one
  of the corridors, the proof that the two routes are equally good;
* :func:`corridor_of` / :func:`mode_coverage`: which corridor a trajectory went through, the
  statistic that tells a policy that represents both modes from one that averages them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Literal

import torch

from .point_maze import Maze

Side = Literal["left", "right"]
"""A route around the block."""
Mode = Literal["left", "right", "neither"]
"""Which corridor a trajectory went through; ``neither``: it never got past the block."""
SIDES: tuple[Side, Side] = ("left", "right")
"""Both routes, in the order the planner numbers them (0 left, 1 right)."""


def _interior_walls(m: Maze) -> list[tuple[int, int]]:
    h, w = m.shape
    inner = [(i, j) for (i, j) in m.walls if 0 < i < h - 1 and 0 < j < w - 1]
    if not inner:
        raise ValueError(f"maze: expected a wall block inside the border (the Fork layout), found none in {m.rows}")
    return inner


def obstacle_cells(m: Maze) -> tuple[int, int, int, int]:
    """Rows and columns of the block: ``(first row, last row, first column, last column)``."""
    inner = _interior_walls(m)
    rows, cols = [i for i, _ in inner], [j for _, j in inner]
    return min(rows), max(rows), min(cols), max(cols)


def obstacle_box(m: Maze) -> tuple[float, float, float, float]:
    """The block's world extent ``(x_lo, x_hi, y_lo, y_hi)`` (m), cell edges included."""
    r0, r1, c0, c1 = obstacle_cells(m)
    x_lo, y_hi = m.center((r0, c0))
    x_hi, y_lo = m.center((r1, c1))
    return x_lo - 0.5, x_hi + 0.5, y_lo - 0.5, y_hi + 0.5


def _corridor(m: Maze, side: Side) -> list[tuple[int, int]]:
    """The open cells beside the block on ``side``, in the block's rows."""
    r0, r1, c0, c1 = obstacle_cells(m)
    return [(i, j) for (i, j) in m.open_cells if r0 <= i <= r1 and (j < c0 if side == "left" else j > c1)]


def route_waypoints(m: Maze, side: Side) -> list[tuple[float, float]]:
    """The planner's route on ``side``: the corridor's centre line one row below and one row above
    the block, then the goal (world x, y in m). The segments stay clear of the block: the corridor
    is entered and left diagonally from the rows next to it.
    """
    if side not in SIDES:
        raise ValueError(f"side: expected one of {SIDES}, got {side!r}")
    r0, r1, _, _ = obstacle_cells(m)
    cells = _corridor(m, side)
    if not cells:
        raise ValueError(f"maze: no open corridor {side} of the block in {m.rows}")
    xs = [m.center(c)[0] for c in cells]
    x = (min(xs) + max(xs)) / 2.0
    below, above = m.center((r1 + 1, 0))[1], m.center((r0 - 1, 0))[1]
    return [(x, below), (x, above), m.center(m.find("G"))]


def route_length(m: Maze, side: Side) -> int:
    """Steps of the shortest 4-connected path from start to goal that keeps out of the corridor on
    the other side (BFS over the open cells); raises if there is none.
    """
    banned = set(_corridor(m, "right" if side == "left" else "left"))
    open_ = set(m.open_cells) - banned
    start, goal = m.find("S"), m.find("G")
    dist = {start: 0}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            return dist[cell]
        for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nxt = (cell[0] + di, cell[1] + dj)
            if nxt in open_ and nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    raise ValueError(f"side: no path from start to goal through the {side} corridor")


def corridor_of(xy: torch.Tensor, m: Maze) -> Mode:
    """Which corridor the trajectory ``xy [T, 2]`` (world x, y in m) went through.

    The block's rows are the band ``y_lo <= y <= y_hi``. Find the first state above the band (past
    the block); the last state before it inside the band says the side: ``x < x_lo`` left,
    ``x > x_hi`` right. ``neither`` when the trajectory never rises above the band from inside it
    (stuck below the block, or pressed against it). A trajectory that tried one corridor, came
    back and went up the other counts for the one it went up.
    """
    if xy.ndim != 2 or xy.shape[1] < 2:
        raise ValueError(f"xy: expected positions [T, 2], got shape {tuple(xy.shape)}")
    x_lo, x_hi, y_lo, y_hi = obstacle_box(m)
    x, y = xy[:, 0].double(), xy[:, 1].double()
    above = (y > y_hi).nonzero().flatten()
    if above.numel() == 0:
        return "neither"
    inside = ((y >= y_lo) & (y <= y_hi)).nonzero().flatten()
    inside = inside[inside < above[0]]
    if inside.numel() == 0:
        return "neither"
    last_x = float(x[inside[-1]])
    return "left" if last_x < x_lo else "right" if last_x > x_hi else "neither"


def mode_coverage(trajectories: Iterable[torch.Tensor], m: Maze) -> dict[str, float]:
    """Fractions of ``trajectories`` (each ``[T, >=2]``, x and y first) through each corridor:
    ``{"left", "right", "neither"}``, summing to 1.
    """
    modes = [corridor_of(t, m) for t in trajectories]
    if not modes:
        raise ValueError("trajectories: expected at least one")
    return {k: sum(mo == k for mo in modes) / len(modes) for k in ("left", "right", "neither")}


def modes_of(trajectories: Sequence[torch.Tensor], m: Maze) -> list[Mode]:
    """:func:`corridor_of` of each trajectory, in order."""
    return [corridor_of(t, m) for t in trajectories]


__all__ = [
    "SIDES",
    "Mode",
    "Side",
    "corridor_of",
    "mode_coverage",
    "modes_of",
    "obstacle_box",
    "obstacle_cells",
    "route_length",
    "route_waypoints",
]
