"""Batched physics: the ``SimBackend`` contract and its backends (DESIGN.md, "SimBackend")."""

from __future__ import annotations

import importlib

import mujoco

from robolearn.sim.backend import RANDOMIZABLE_FIELDS, SimBackend
from robolearn.sim.model import ModelError, compile_model, load_model, load_spec
from robolearn.sim.mujoco_backend import MujocoBackend
from robolearn.sim.names import NameResolver, names_of
from robolearn.sim.reference_backend import ReferenceBackend

BACKENDS: dict[str, type] = {"mujoco": MujocoBackend, "reference": ReferenceBackend}
"""Backend classes by the name ``robolearn.make(..., backend=)`` accepts (imported with this package)."""

LAZY_BACKENDS: dict[str, str] = {"warp": "robolearn.sim.warp_backend:WarpBackend"}
"""Backends imported on first use, as ``module:class``: ``warp`` pulls in warp and mujoco_warp
(a second of imports and a Warp runtime), which ``import robolearn`` must not pay for."""


def make_backend(name: str, model: mujoco.MjModel, num_worlds: int, **kwargs: object) -> SimBackend:
    """Construct backend ``name`` over ``model``; an unknown name lists the known ones."""
    if name not in BACKENDS and name in LAZY_BACKENDS:
        module, cls = LAZY_BACKENDS[name].split(":")
        BACKENDS[name] = getattr(importlib.import_module(module), cls)
    if name not in BACKENDS:
        known = sorted({*BACKENDS, *LAZY_BACKENDS})
        raise ValueError(f"backend: unknown backend {name!r}; expected one of {', '.join(known)}")
    return BACKENDS[name](model, num_worlds, **kwargs)


__all__ = [
    "BACKENDS",
    "LAZY_BACKENDS",
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
