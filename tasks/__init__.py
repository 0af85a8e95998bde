"""Task families; :func:`load` imports them, and importing a family registers its tasks.

Nothing is imported with this package itself: ``robolearn.make`` and ``robolearn.list_tasks`` call
:func:`load` on first use. A family that fails to import is logged and remembered; the other
families still register, so one broken family breaks neither ``import robolearn`` nor the rest.
"""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)

FAMILIES: tuple[str, ...] = ("classic", "locomotion", "manipulation", "navigation", "aerial", "legged")
"""The task families shipped with robolearn (sub-packages of ``robolearn.tasks``)."""

BROKEN: dict[str, BaseException] = {}
"""Families whose import failed, with the error (empty when every family loaded)."""

_loaded = False


def load() -> dict[str, BaseException]:
    """Import every family once (registering its tasks); return the families that failed."""
    global _loaded
    if not _loaded:
        _loaded = True
        for family in FAMILIES:
            try:
                importlib.import_module(f"{__name__}.{family}")
            except Exception as exc:  # a broken family must not take the others down
                BROKEN[family] = exc
                log.warning("task family %r failed to import and is unavailable: %s: %s", family, type(exc).__name__, exc)
    return BROKEN
