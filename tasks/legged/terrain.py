"""A height-field terrain of tiles in rows of increasing difficulty, generated deterministically.

The terrain is a grid of ``num_levels x num_cols`` square tiles (legged_gym's terrain curriculum
layout): the level (difficulty) grows along +x, one tile per level, and the columns along +y cycle
through the kinds ``slope`` (a pyramid rising to a flat top), ``rough`` (uniform noise on a coarse
grid, interpolated), ``stairs_up`` (concentric steps rising to the middle) and ``stairs_down``
(falling to it). Difficulty ``d = level / (num_levels - 1)`` sets the slope (up to ``max_slope``),
the noise amplitude (up to ``max_rough``) and the step height (up to ``max_step``). Every tile has a
flat square in its middle where robots spawn; a flat border surrounds the grid.

Generation depends only on the :class:`TerrainCfg` (its ``seed`` feeds NumPy's PCG64 for the rough
tiles), so every env built from one config gets bit-identical heights; :func:`build_terrain` caches
them per config. The heights enter MuJoCo as an ``hfield`` asset written into the MJCF text
(:meth:`Terrain.mjcf`), and the terms read the same heights through :meth:`Terrain.height_at`
(bilinear between samples; MuJoCo's surface splits each cell into two triangles, which differs
from it by at most a millimetre on the rough tiles and not at all at the samples).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

KINDS: tuple[str, ...] = ("slope", "rough", "stairs_up", "stairs_down")
"""Tile kinds, cycled over the columns."""


@dataclass(frozen=True)
class TerrainCfg:
    """The terrain's layout and difficulty; every field enters the generated heights."""

    num_levels: int = 6
    """Rows of tiles along x, easiest first."""
    num_cols: int = 4
    """Tiles per level along y (kinds cycle over them)."""
    tile_size: float = 4.0
    """Side of a tile (m)."""
    resolution: float = 0.1
    """Height-sample spacing (m)."""
    border: float = 2.0
    """Flat margin around the grid (m)."""
    platform: float = 1.2
    """Side of the flat spawn square in each tile's middle (m)."""
    max_slope: float = 0.3
    """Rise over run of the hardest slope tile."""
    max_rough: float = 0.06
    """Peak-to-peak noise (m) of the hardest rough tile (plus 1 cm at level 0)."""
    max_step: float = 0.12
    """Step height (m) of the hardest stair tiles (plus 2 cm at level 0)."""
    step_width: float = 0.35
    """Tread depth of the stairs (m)."""
    seed: int = 0
    """Seed of the rough tiles' noise."""

    def __post_init__(self) -> None:
        """Refuse values that make no terrain, naming the field."""
        for name in ("num_levels", "num_cols"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"terrain.{name}: expected an integer >= 1, got {value!r}")
        for name in ("tile_size", "resolution", "step_width"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"terrain.{name}: expected a positive number, got {value!r}")
        if not 0 < self.platform < self.tile_size:
            raise ValueError(f"terrain.platform: expected a side in (0, tile_size={self.tile_size}), got {self.platform!r}")


class Terrain:
    """Generated heights and their lookups (see the module doc)."""

    def __init__(self, cfg: TerrainCfg) -> None:
        """Generate the heights of ``cfg``."""
        self.cfg = cfg
        c = cfg
        self.tile_samples = round(c.tile_size / c.resolution)
        border = round(c.border / c.resolution)
        nx = 2 * border + c.num_levels * self.tile_samples + 1
        ny = 2 * border + c.num_cols * self.tile_samples + 1
        self.size_x = (nx - 1) * c.resolution
        """Extent along x (m); the grid spans ``[0, size_x] x [0, size_y]``."""
        self.size_y = (ny - 1) * c.resolution
        """Extent along y (m)."""
        heights = np.zeros((nx, ny))  # heights[i, j] at x = i * res, y = j * res
        rng = np.random.Generator(np.random.PCG64(c.seed))
        n = self.tile_samples
        for level in range(c.num_levels):
            d = level / max(1, c.num_levels - 1)
            for col in range(c.num_cols):
                kind = KINDS[col % len(KINDS)]
                i0, j0 = border + level * n, border + col * n
                heights[i0 : i0 + n + 1, j0 : j0 + n + 1] = self._tile(kind, d, rng)
        self.heights = heights
        """Heights ``[nx, ny]`` (m), row ``i`` at ``x = i * resolution``, column ``j`` at ``y = j * resolution``."""
        self._torch: dict[torch.device, torch.Tensor] = {}

    def _tile(self, kind: str, d: float, rng: np.random.Generator) -> np.ndarray:
        """One tile's ``(n + 1) x (n + 1)`` heights, difficulty ``d`` in ``[0, 1]``."""
        c, n = self.cfg, self.tile_samples
        u = np.linspace(-c.tile_size / 2, c.tile_size / 2, n + 1)
        # Chebyshev distance from the tile's middle beyond the platform: 0 on it, growing outwards.
        r = np.maximum(np.abs(u)[:, None], np.abs(u)[None, :])
        out = np.maximum(r - c.platform / 2, 0.0)
        edge = c.tile_size / 2 - c.platform / 2
        if kind == "slope":
            slope = c.max_slope * d
            return slope * (edge - out)  # a pyramid: its flat top at slope * edge, the rim at 0
        if kind == "rough":
            amp = 0.01 + c.max_rough * d
            coarse = max(2, round(c.tile_size / 0.25)) + 1  # noise on a 25 cm grid, bilinear between
            grid = rng.uniform(-amp / 2, amp / 2, size=(coarse, coarse))
            v = np.linspace(0, coarse - 1, n + 1)
            lo = np.minimum(np.floor(v).astype(int), coarse - 2)
            f = v - lo
            rows = grid[lo] * (1 - f)[:, None] + grid[lo + 1] * f[:, None]
            tile = rows[:, lo] * (1 - f)[None, :] + rows[:, lo + 1] * f[None, :]
            tile[r <= c.platform / 2] = 0.0
            return tile
        step = 0.02 + c.max_step * d
        steps = np.floor(out / c.step_width + 1e-9)
        total = math.floor(edge / c.step_width + 1e-9)
        if kind == "stairs_up":
            return step * (total - steps)  # highest on the platform
        return -step * (total - steps)  # stairs_down: the platform at the bottom

    # -- lookups -----------------------------------------------------------------------------
    def _table(self, device: torch.device) -> torch.Tensor:
        t = self._torch.get(device)
        if t is None:
            t = self._torch[device] = torch.as_tensor(self.heights, dtype=torch.float64, device=device)
        return t

    def height_at(self, xy: torch.Tensor, footprint: bool = False) -> torch.Tensor:
        """Terrain height ``[...]`` under points ``xy`` ``[..., 2]`` (bilinear; 0 outside the grid);
        with ``footprint``, the highest height within 0.3 m (where a robot's feet may land).
        """
        if footprint:
            offsets = torch.tensor(
                [[dx, dy] for dx in (-0.3, 0.0, 0.3) for dy in (-0.3, 0.0, 0.3)], dtype=xy.dtype, device=xy.device
            )
            return self.height_at(xy.unsqueeze(-2) + offsets).amax(dim=-1)
        table = self._table(xy.device)
        res = self.cfg.resolution
        gx, gy = xy[..., 0] / res, xy[..., 1] / res
        nx, ny = table.shape
        inside = (gx >= 0) & (gx <= nx - 1) & (gy >= 0) & (gy <= ny - 1)
        gx, gy = gx.clamp(0, nx - 1), gy.clamp(0, ny - 1)
        i0 = gx.floor().long().clamp(max=nx - 2)
        j0 = gy.floor().long().clamp(max=ny - 2)
        fx, fy = gx - i0, gy - j0
        h = (
            table[i0, j0] * (1 - fx) * (1 - fy)
            + table[i0 + 1, j0] * fx * (1 - fy)
            + table[i0, j0 + 1] * (1 - fx) * fy
            + table[i0 + 1, j0 + 1] * fx * fy
        )
        return torch.where(inside, h, torch.zeros_like(h))

    def tile_center(self, level: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        """Middle ``[..., 2]`` (m) of the tiles at ``level`` and ``col`` (integer-valued tensors)."""
        c = self.cfg
        x = c.border + (level.to(torch.float64) + 0.5) * c.tile_size
        y = c.border + (col.to(torch.float64) + 0.5) * c.tile_size
        return torch.stack([x, y], dim=-1)

    def origins(self, env: BatchedEnv, env_ids: torch.Tensor, level_param: str = "terrain_level") -> torch.Tensor:
        """Spawn points ``[len(env_ids), 2]``: the middle of each world's tile, its level from
        ``env.task_params[level_param]`` (per world, or one level for all) and its column
        ``world index % num_cols``.
        """
        levels = env.task_params[level_param]
        level = levels[env_ids] if levels.ndim > 0 else levels.expand(env_ids.numel())
        level = level.round().clamp(0, self.cfg.num_levels - 1)
        return self.tile_center(level, env_ids % self.cfg.num_cols)

    # -- MJCF --------------------------------------------------------------------------------
    def mjcf(self, base: str | Path) -> str:
        """The MJCF text of ``base`` (a file with ``<!-- TERRAIN_ASSET -->`` and ``<!-- TERRAIN_GEOM -->``
        markers) with this terrain as an ``hfield`` in place of the flat ground plane.

        MuJoCo's height field holds ``nrow x ncol`` samples, rows along y (the first at the far,
        +y edge) and columns along x, normalised to ``[0, 1]`` and scaled by its elevation size:
        the samples are written transposed and flipped, shifted by their minimum, and the geom is
        placed at that minimum.
        """
        text = Path(base).read_text()
        for marker in ("<!-- TERRAIN_ASSET -->", "<!-- TERRAIN_GEOM -->"):
            if marker not in text:
                raise ValueError(f"terrain: the MJCF {str(base)!r} has no {marker} marker")
        h = self.heights.T[::-1]  # [ny, nx], the first row at +y (checked against mj_ray in the tests)
        lo, hi = float(h.min()), float(h.max())
        span = max(hi - lo, 1e-6)
        data = " ".join(f"{v:.6g}" for v in ((h - lo) / span).ravel())
        nrow, ncol = h.shape
        asset = (
            f'<hfield name="terrain" nrow="{nrow}" ncol="{ncol}" '
            f'size="{self.size_x / 2:.6g} {self.size_y / 2:.6g} {span:.6g} 0.1" elevation="{data}"/>'
        )
        geom = (
            f'<geom name="terrain" type="hfield" hfield="terrain" pos="{self.size_x / 2:.6g} {self.size_y / 2:.6g} {lo:.6g}" '
            'material="ground" contype="0" conaffinity="1" friction="1.0 0.005 0.0001"/>'
        )
        text = text.replace("<!-- TERRAIN_ASSET -->", asset).replace("<!-- TERRAIN_GEOM -->", geom)
        # The plane below the terrain stays as the world beyond it (sunk by the terrain's depth).
        return text.replace('<geom name="ground" type="plane"', f'<geom name="ground" pos="0 0 {min(lo, 0.0) - 0.01:.6g}" type="plane"')


@functools.lru_cache(maxsize=8)
def build_terrain(cfg: TerrainCfg) -> Terrain:
    """The terrain of ``cfg``, generated once per process (it is deterministic)."""
    return Terrain(cfg)


def height_scan(
    env: BatchedEnv,
    terrain: Terrain,
    size: tuple[float, float] = (1.0, 0.6),
    spacing: float = 0.2,
) -> torch.Tensor:
    """Trunk height above the terrain at a grid of points around the trunk, aligned with its
    heading: ``size`` (length, width in m) sampled every ``spacing`` m, ``[N, points]`` (m),
    clipped to ``[-1, 1]``. Privileged: legged_gym's height measurements, for a teacher's critic
    (a student would get it from a depth camera or not at all).
    """
    qpos = env.sim.qpos
    xs = torch.arange(-size[0] / 2, size[0] / 2 + 1e-9, spacing, dtype=torch.float64, device=env.device)
    ys = torch.arange(-size[1] / 2, size[1] / 2 + 1e-9, spacing, dtype=torch.float64, device=env.device)
    local = torch.stack(torch.meshgrid(xs, ys, indexing="ij"), dim=-1).reshape(-1, 2)  # [P, 2]
    w, z = qpos[:, 3], qpos[:, 6]
    yaw = torch.atan2(2.0 * (w * z + qpos[:, 4] * qpos[:, 5]), 1.0 - 2.0 * (qpos[:, 5] ** 2 + z * z))
    c, s = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
    px = qpos[:, 0:1] + c * local[:, 0] - s * local[:, 1]
    py = qpos[:, 1:2] + s * local[:, 0] + c * local[:, 1]
    ground = terrain.height_at(torch.stack([px, py], dim=-1))
    return (qpos[:, 2:3] - ground).clamp(-1.0, 1.0)


height_scan.privileged = True  # type: ignore[attr-defined]
