"""MJCF models and per-robot constants. Imports nothing from robolearn (DESIGN.md).

Models of our own live beside this file; the Gymnasium-parity tasks load the MJCF files the
``gymnasium`` package ships, located here without importing gymnasium.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
"""Folder of robolearn's own MJCF files."""


def asset_path(name: str) -> Path:
    """Path of one of robolearn's own MJCF files, or a FileNotFoundError listing those that exist."""
    path = ASSETS_DIR / name
    if not path.is_file():
        known = sorted(p.name for p in ASSETS_DIR.glob("*.xml"))
        raise FileNotFoundError(f"asset {name!r} not found in {ASSETS_DIR}; available: {', '.join(known)}")
    return path


def gymnasium_asset(name: str) -> Path:
    """Path of an MJCF file shipped by the installed gymnasium package (``envs/mujoco/assets``)."""
    spec = importlib.util.find_spec("gymnasium")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("gymnasium is not installed; the Gymnasium-parity tasks load its MJCF files")
    path = Path(next(iter(spec.submodule_search_locations))) / "envs" / "mujoco" / "assets" / name
    if not path.is_file():
        raise FileNotFoundError(f"gymnasium ships no MJCF {name!r} (looked at {path})")
    return path
