"""Batched physics: the ``SimBackend`` contract and its backends (DESIGN.md, "SimBackend")."""

from __future__ import annotations

import mujoco

from robolearn.sim.backend import RANDOMIZABLE_FIELDS, SimBackend
from robolearn.sim.model import ModelError, compile_model, load_model, load_spec
from robolearn.sim.mujoco_backend import MujocoBackend
from robolearn.sim.names import NameResolver, names_of
from robolearn.sim.reference_backend import ReferenceBackend

BACKENDS: dict[str, type] = {"mujoco": MujocoBackend, "reference": ReferenceBackend}
"""Backend classes by the name ``robolearn.make(..., backend=)`` accepts."""


def make_backend(name: str, model: mujoco.MjModel, num_worlds: int, **kwargs: object) -> SimBackend:
    """Construct backend ``name`` over ``model``; an unknown name lists the known ones."""
    if name not in BACKENDS:
        raise ValueError(f"backend: unknown backend {name!r}; expected one of {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name](model, num_worlds, **kwargs)


__all__ = [
    "BACKENDS",
    "RANDOMIZABLE_FIELDS",
    "ModelError",
    "MujocoBackend",
    "NameResolver",
    "ReferenceBackend",
    "SimBackend",
    "compile_model",
    "load_model",
    "load_spec",
    "make_backend",
    "names_of",
]
