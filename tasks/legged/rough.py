"""``Quadruped-Rough``: ``Quadruped-Flat``'s robot and MDP on a height-field terrain with a
terrain-level curriculum (legged_gym's rough-terrain recipe).

The terrain (:mod:`.terrain`: slopes, rough ground and stairs in rows of increasing difficulty)
is generated when the config is built, identically every time. Each world has a level
(``task.terrain_level``, per world once the ``terrain_levels`` curriculum term owns it) and a
column (its index modulo the columns); it spawns on the flat middle of that tile, above the terrain
there. When its episode ends, a world that walked more than half a tile is promoted, one that
walked less than half of what its commands asked for is demoted (:func:`.curriculum.walk_score`
with the generic ``Levels`` term). The privileged group adds a height scan around the trunk.
Without the curriculum (``curriculum={}``, how evaluations are built) every world stays on level
``task_params["terrain_level"]`` (0 unless overridden).
"""

from __future__ import annotations

import functools

from robolearn.assets import quadruped as go1
from robolearn.envs import CurriculumTerm, ObsTerm, TaskCfg
from robolearn.envs.curriculum import Levels
from robolearn.tasks.legged.curriculum import walk_score
from robolearn.tasks.legged.flat import privileged_group, quadruped_flat_cfg, rewards
from robolearn.tasks.legged.terrain import TerrainCfg, build_terrain, height_scan

TERRAIN = TerrainCfg()
"""The terrain of ``Quadruped-Rough``: 6 levels x 4 columns of 4 m tiles."""


def quadruped_rough_cfg(terrain_cfg: TerrainCfg = TERRAIN) -> TaskCfg:
    """The task config of ``Quadruped-Rough`` on the terrain of ``terrain_cfg``."""
    terrain = build_terrain(terrain_cfg)
    cfg = quadruped_flat_cfg()
    cfg.mjcf = terrain.mjcf(go1.MJCF)
    cfg.task_params = {"terrain_level": 0.0}
    cfg.observations["privileged"] = privileged_group(
        {"height_scan": ObsTerm(height_scan, params={"terrain": terrain}, unit="m")}
    )
    cfg.rewards = rewards(terrain=terrain)
    cfg.initial_state.params = {**cfg.initial_state.params, "terrain": terrain, "xy": 0.1}
    cfg.curriculum = {
        **cfg.curriculum,
        "terrain_levels": CurriculumTerm(
            Levels,
            params={
                "target": "task.terrain_level",
                "num_levels": terrain_cfg.num_levels,
                "measure": functools.partial(walk_score, tile_size=terrain_cfg.tile_size),
                "promote_threshold": 1.5,
                "demote_threshold": 0.5,
                "init_level": 0,
            },
        ),
    }
    cfg.description = "Quadruped-Flat on a height-field terrain (slopes, rough, stairs) with a terrain-level curriculum"
    return cfg
