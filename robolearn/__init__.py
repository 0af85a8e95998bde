"""robolearn: batched MuJoCo simulation, RL learners and a sim2real path in one package.

``robolearn.make(task_id, num_envs)`` builds a batched environment of a registered task;
``robolearn.list_tasks()`` names them; ``robolearn.load_policy(run_dir)`` loads a trained run's
deterministic policy.

Importing the package has no side effects: it loads neither MuJoCo, Gymnasium, the task families
nor the CLI. The task families register on first use (``make``, ``list_tasks``); Gymnasium ids
``robolearn/<TaskId>-v0`` are registered by ``import robolearn.gym`` (or in one line,
``gymnasium.make("robolearn.gym:robolearn/HalfCheetah-v0")``), and by ``make``/``list_tasks``
whenever Gymnasium is already imported.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from robolearn.utils.version import VERSION as __version__

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv
    from robolearn.runners.policy import LoadedPolicy


def _load_tasks() -> None:
    # Task families are entry-point plugins the env registry loads on first lookup (envs never
    # import tasks, DESIGN.md); the facade only adds the Gymnasium ids for users of Gymnasium.
    from robolearn.envs.registry import load_task_plugins

    load_task_plugins()
    if "gymnasium" in sys.modules:  # keep gymnasium.make working for users who already use it
        from robolearn.envs.gym_adapter import register_gymnasium_envs

        register_gymnasium_envs()


def make(task_id: str, num_envs: int = 1, **kwargs: Any) -> BatchedEnv:
    """Build ``num_envs`` worlds of task ``task_id`` (see :func:`robolearn.envs.make` for options);
    an unknown id lists the known ones and any task family that failed to load.
    """
    _load_tasks()
    from robolearn.envs.registry import make as _make

    return _make(task_id, num_envs, **kwargs)


def list_tasks() -> list[str]:
    """Every registered task id (of the task families that imported)."""
    _load_tasks()
    from robolearn.envs.registry import list_tasks as _list

    return _list()


def load_policy(run_dir: str | os.PathLike[str], device: str = "cpu") -> LoadedPolicy:
    """The newest checkpoint of a training run as a deterministic policy.

    Rebuilds the agent from ``run_dir/config.json`` and ``policy_spec.json`` (no simulator needed)
    and returns an object whose ``act(obs_dict)`` gives actions ``[N, A]`` (under
    ``torch.inference_mode``), with ``.spec`` (the run's ``policy_spec.json``), ``.cfg`` and
    ``.module()`` (the plain ``obs -> action`` network that export traces).
    """
    from robolearn.runners.policy import load_policy as _load

    return _load(run_dir, device=device)


__all__ = ["__version__", "list_tasks", "load_policy", "make"]
