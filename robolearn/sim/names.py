"""MuJoCo names to indices, resolved once per model: the one resolver every term, event and
perturbation uses (DESIGN.md, "SimBackend").

:func:`names_of` builds, the first time a model is seen (when the env is built), a table of every
named element of every kind; afterwards a lookup is a dictionary access, not a MuJoCo call, and
an unknown name is reported with the model's names of that kind. Selectors are names or indices;
joints' degrees of freedom and ``qpos`` coordinates also take ``"<joint>/<axis>"`` (free joint:
``x y z wx wy wz`` for dofs, ``x y z`` for positions; ball joint: ``wx wy wz``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np

Selector = str | int
"""An element given by name or by index."""

KINDS: dict[str, tuple[mujoco.mjtObj, str]] = {
    "body": (mujoco.mjtObj.mjOBJ_BODY, "nbody"),
    "joint": (mujoco.mjtObj.mjOBJ_JOINT, "njnt"),
    "geom": (mujoco.mjtObj.mjOBJ_GEOM, "ngeom"),
    "site": (mujoco.mjtObj.mjOBJ_SITE, "nsite"),
    "camera": (mujoco.mjtObj.mjOBJ_CAMERA, "ncam"),
    "light": (mujoco.mjtObj.mjOBJ_LIGHT, "nlight"),
    "material": (mujoco.mjtObj.mjOBJ_MATERIAL, "nmat"),
    "actuator": (mujoco.mjtObj.mjOBJ_ACTUATOR, "nu"),
    "tendon": (mujoco.mjtObj.mjOBJ_TENDON, "ntendon"),
    "sensor": (mujoco.mjtObj.mjOBJ_SENSOR, "nsensor"),
    "pair": (mujoco.mjtObj.mjOBJ_PAIR, "npair"),
    "equality": (mujoco.mjtObj.mjOBJ_EQUALITY, "neq"),
}
"""Element kinds by the word messages use, with MuJoCo's object type and count field."""

FREE_DOFS = ("x", "y", "z", "wx", "wy", "wz")
BALL_DOFS = ("wx", "wy", "wz")
_NDOF = {int(mujoco.mjtJoint.mjJNT_FREE): 6, int(mujoco.mjtJoint.mjJNT_BALL): 3}


def as_list(value: Any) -> list[Any]:
    """``value`` as a list (a lone name or index becomes a one-item list)."""
    if isinstance(value, (str, int, np.integer)):
        return [value]
    return list(value)


def check_index(value: Any, count: int, where: str, what: str) -> int:
    """An integer index in ``[0, count)``, or a ValueError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{where}: expected {what} names or indices, got {value!r}")
    if not 0 <= int(value) < count:
        raise ValueError(f"{where}: {what} index {value} out of range [0, {count})")
    return int(value)


class NameResolver:
    """Name tables of one compiled model, built once; see the module doc."""

    def __init__(self, model: mujoco.MjModel) -> None:
        """Read every element name of every kind in :data:`KINDS` from ``model``."""
        self.model = model
        self._labels: dict[str, list[str]] = {}
        self._ids: dict[str, dict[str, int]] = {}
        for kind, (obj, count) in KINDS.items():
            labels = [mujoco.mj_id2name(model, obj, i) or f"#{i}" for i in range(int(getattr(model, count)))]
            self._labels[kind] = labels
            self._ids[kind] = {name: i for i, name in enumerate(labels) if not name.startswith("#")}

    def count(self, kind: str) -> int:
        """How many elements of ``kind`` the model has."""
        return len(self._labels[kind])

    def label(self, kind: str, i: int) -> str:
        """Element ``i``'s name, or ``#i`` if it has none."""
        return self._labels[kind][i]

    def labels(self, kind: str, ids: Sequence[int] | None = None) -> list[str]:
        """Names (or ``#i``) of elements ``ids`` of ``kind`` (all by default)."""
        names = self._labels[kind]
        return list(names) if ids is None else [names[i] for i in ids]

    def id(self, kind: str, item: Selector, where: str) -> int:
        """The index of one element of ``kind`` given by name or index."""
        if isinstance(item, str):
            i = self._ids[kind].get(item)
            if i is None:
                plural = "bodies" if kind == "body" else f"{kind}s"
                raise ValueError(f"{where}: unknown {kind} {item!r}; the model's {plural} are {self._labels[kind]}")
            return i
        return check_index(item, self.count(kind), where, kind)

    def ids(self, kind: str, items: Sequence[Selector] | Selector | None, where: str) -> list[int]:
        """Indices of elements of ``kind`` by name or index, in the order given (``None``: all)."""
        if items is None:
            return list(range(self.count(kind)))
        return [self.id(kind, item, where) for item in as_list(items)]

    def dofs(self, item: Selector, where: str) -> list[int]:
        """The dofs of a joint name, of ``"<joint>/<axis>"``, or one dof index."""
        model = self.model
        if not isinstance(item, str):
            return [check_index(item, model.nv, where, "dof")]
        name, _, axis = item.partition("/")
        j = self.id("joint", name, where)
        jtype, adr = int(model.jnt_type[j]), int(model.jnt_dofadr[j])
        if not axis:
            return list(range(adr, adr + _NDOF.get(jtype, 1)))
        axes: tuple[str, ...] = ()
        if jtype == mujoco.mjtJoint.mjJNT_FREE:
            axes = FREE_DOFS
        elif jtype == mujoco.mjtJoint.mjJNT_BALL:
            axes = BALL_DOFS
        if axis not in axes:
            kind = mujoco.mjtJoint(jtype).name[6:].lower()
            expected = f"one of {list(axes)}" if axes else f"the bare name {name!r}"
            raise ValueError(f"{where}: joint {name!r} ({kind}) has no dof {axis!r}; expected {expected}")
        return [adr + axes.index(axis)]

    def dof_label(self, dof: int) -> str:
        """``joint`` or ``joint/axis`` of a dof, for messages."""
        model = self.model
        j = int(model.dof_jntid[dof])
        k = dof - int(model.jnt_dofadr[j])
        jtype = int(model.jnt_type[j])
        name = self.label("joint", j)
        if jtype == mujoco.mjtJoint.mjJNT_FREE:
            return f"{name}/{FREE_DOFS[k]}"
        if jtype == mujoco.mjtJoint.mjJNT_BALL:
            return f"{name}/{BALL_DOFS[k]}"
        return name

    def qpos_address(self, item: Selector, where: str) -> int:
        """The ``qpos`` coordinate of a hinge/slide joint name, of ``"<free joint>/x|y|z"``, or an index."""
        model = self.model
        if not isinstance(item, str):
            return check_index(item, model.nq, where, "qpos")
        name, _, axis = item.partition("/")
        j = self.id("joint", name, where)
        jtype, adr = int(model.jnt_type[j]), int(model.jnt_qposadr[j])
        if jtype in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE) and not axis:
            return adr
        if jtype == mujoco.mjtJoint.mjJNT_FREE and axis in ("x", "y", "z"):
            return adr + "xyz".index(axis)
        raise ValueError(
            f"{where}: {item!r}: additive noise applies to hinge and slide joints and to a free joint's "
            "position ('<joint>/x', '/y', '/z'); a quaternion cannot take it"
        )


_CACHE: dict[int, tuple[mujoco.MjModel, NameResolver]] = {}
_CACHE_SIZE = 64
"""Models whose tables are kept: an env builds its resolver once and holds it itself."""


def names_of(model: mujoco.MjModel) -> NameResolver:
    """The resolver of ``model``, built on first use and kept (with the model, so its id cannot be
    reused by another object) for every later lookup.
    """
    hit = _CACHE.get(id(model))
    if hit is None or hit[0] is not model:
        hit = (model, NameResolver(model))
        _CACHE[id(model)] = hit
        while len(_CACHE) > _CACHE_SIZE:  # oldest first (dicts keep insertion order)
            del _CACHE[next(iter(_CACHE))]
    return hit[1]
