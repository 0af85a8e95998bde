"""The task registry: ids to config factories, ``make`` and ``list_tasks``.

Task families are plugins: every installed distribution may declare an entry point in the group
:data:`TASK_PLUGIN_GROUP` (robolearn's own: ``robolearn = "robolearn.tasks:load"`` in
``pyproject.toml``), a callable that registers its tasks. They are loaded once, on the first
lookup, so neither ``import robolearn`` nor ``import robolearn.envs`` imports a task family, envs
never name one in code (DESIGN.md), and a package of one's own tasks registers the same way.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch

from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.cfg import TaskCfg

log = logging.getLogger(__name__)

_REGISTRY: dict[str, tuple[Callable[[], TaskCfg], str]] = {}

TASK_PLUGIN_GROUP = "robolearn.tasks"
"""Entry-point group of task-family plugins."""

PLUGIN_ERRORS: dict[str, BaseException] = {}
"""Task plugins (or families within one) that failed to load, with their errors."""

_plugins_loaded = False

GYMNASIUM_TWINS: dict[str, str] = {
    "HalfCheetah": "HalfCheetah-v5",
    "Hopper": "Hopper-v5",
    "Walker2d": "Walker2d-v5",
    "Ant": "Ant-v5",
    "Humanoid": "Humanoid-v5",
    "Reacher": "Reacher-v5",
}
"""Task id -> the Gymnasium env it reproduces step for step as registered (model, observation,
reward, termination, time limit and start-state noise; float64, relative 1e-6: the parity tests
``tests/test_locomotion_parity.py`` and ``tests/test_halfcheetah_parity.py``). A task built with
overrides is another MDP and has no twin."""


def load_task_plugins() -> dict[str, BaseException]:
    """Call every :data:`TASK_PLUGIN_GROUP` entry point once; return what failed to load.

    A plugin that raises is logged and skipped (the others still register); a plugin may return a
    mapping of its own sub-families that failed, which is merged in.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return PLUGIN_ERRORS
    _plugins_loaded = True
    for entry in importlib.metadata.entry_points(group=TASK_PLUGIN_GROUP):
        try:
            failed = entry.load()()
        except Exception as exc:  # one broken plugin must not hide the others' tasks
            PLUGIN_ERRORS[entry.name] = exc
            log.warning("task plugin %r (%s) failed to load: %s: %s", entry.name, entry.value, type(exc).__name__, exc)
            continue
        if isinstance(failed, Mapping):
            PLUGIN_ERRORS.update(failed)
    return PLUGIN_ERRORS


def register(task_id: str, factory: Callable[[], TaskCfg], description: str = "") -> None:
    """Register ``factory`` (returning a fresh :class:`TaskCfg`) under ``task_id``."""
    if task_id in _REGISTRY:
        raise ValueError(f"task {task_id!r} is already registered")
    _REGISTRY[task_id] = (factory, description)


def list_tasks() -> list[str]:
    """Registered task ids, sorted (task plugins load on the first call)."""
    load_task_plugins()
    return sorted(_REGISTRY)


def task_cfg(task_id: str, **overrides: Any) -> TaskCfg:
    """A fresh config of ``task_id`` with ``overrides`` applied (``a__b__c=v`` reaches nested fields)."""
    if task_id not in _REGISTRY:
        load_task_plugins()
    if task_id not in _REGISTRY:
        close = difflib.get_close_matches(task_id, list(_REGISTRY), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        broken = "".join(
            f"; task family {name!r} failed to load ({type(exc).__name__}: {exc})" for name, exc in PLUGIN_ERRORS.items()
        )
        raise ValueError(f"task_id: unknown task {task_id!r}{hint}; known tasks: {', '.join(list_tasks())}{broken}")
    cfg = _REGISTRY[task_id][0]()
    for key, value in overrides.items():
        _apply_override(cfg, key, value, task_id)
    return cfg


def make(
    task_id: str,
    num_envs: int = 1,
    *,
    device: str | torch.device = "cpu",
    backend: str = "mujoco",
    seed: int | None = None,
    dtype: torch.dtype = torch.float32,
    nthread: int | None = None,
    sim_options: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> BatchedEnv:
    """Build a :class:`BatchedEnv` of ``num_envs`` worlds of a registered task (``sim_options``: further
    backend arguments, e.g. ``{"graph_capture": True}`` for Warp on CUDA; the rest are task overrides).
    """
    cfg = task_cfg(task_id, **overrides)
    return BatchedEnv(
        cfg, num_envs, device=device, backend=backend, seed=seed, dtype=dtype, nthread=nthread, task_id=task_id,
        sim_options=sim_options,
    )


def _apply_override(cfg: Any, key: str, value: Any, task_id: str) -> None:
    """Set ``cfg.<path>`` where ``key`` is ``field`` or ``field__sub__...``; dict entries by key."""
    path = key.split("__")
    node: Any = cfg
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        where = ".".join(path[: depth + 1])
        if isinstance(node, dict):
            if part not in node:
                raise ValueError(f"override {key!r}: {where!r} is not in task {task_id!r}; choices: {', '.join(node)}")
            if last:
                node[part] = value
            node = node[part]
        elif dataclasses.is_dataclass(node):
            names = [f.name for f in dataclasses.fields(node)]
            if part not in names:
                raise ValueError(
                    f"override {key!r}: {type(node).__name__} has no field {part!r}; choices: {', '.join(names)}"
                )
            if last:
                setattr(node, part, value)
            node = getattr(node, part)
        else:
            raise ValueError(f"override {key!r}: {where!r} is a value, not a config section")
