"""The task registry: ids to config factories, ``make`` and ``list_tasks``."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Any

import torch

from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.cfg import TaskCfg

_REGISTRY: dict[str, tuple[Callable[[], TaskCfg], str]] = {}


def register(task_id: str, factory: Callable[[], TaskCfg], description: str = "") -> None:
    """Register ``factory`` (returning a fresh :class:`TaskCfg`) under ``task_id``."""
    if task_id in _REGISTRY:
        raise ValueError(f"task {task_id!r} is already registered")
    _REGISTRY[task_id] = (factory, description)


def list_tasks() -> list[str]:
    """Registered task ids, sorted."""
    return sorted(_REGISTRY)


def task_cfg(task_id: str, **overrides: Any) -> TaskCfg:
    """A fresh config of ``task_id`` with ``overrides`` applied (``a__b__c=v`` reaches nested fields)."""
    if task_id not in _REGISTRY:
        close = difflib.get_close_matches(task_id, list(_REGISTRY), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"task_id: unknown task {task_id!r}{hint}; known tasks: {', '.join(list_tasks())}")
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
    **overrides: Any,
) -> BatchedEnv:
    """Build a :class:`BatchedEnv` of ``num_envs`` worlds of a registered task."""
    cfg = task_cfg(task_id, **overrides)
    return BatchedEnv(
        cfg, num_envs, device=device, backend=backend, seed=seed, dtype=dtype, nthread=nthread, task_id=task_id
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
