"""Small shared helpers: counter-based per-world random numbers, seeding, config checking.

Submodules load on first use (``robolearn.utils.WorldRNG`` imports torch then), so importing
``robolearn.utils.version`` from the package facade costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {"WorldRNG": "robolearn.utils.rng"}
"""Public names of the package and the submodule that defines each."""


def __getattr__(name: str) -> Any:
    """Import the submodule defining ``name`` on first access (PEP 562)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["WorldRNG"]
