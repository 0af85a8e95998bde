"""robolearn: batched MuJoCo simulation, RL learners and a sim2real path in one package.

``robolearn.make(task_id, num_envs)`` builds a batched environment of a registered task;
``robolearn.list_tasks()`` names them; ``robolearn.load_policy(run_dir)`` loads a trained run's
deterministic policy.

Importing the package also registers every task with Gymnasium as ``robolearn/<TaskId>-v0``
(:func:`robolearn.envs.gym_adapter.register_gymnasium_envs`), so
``gymnasium.make("robolearn/HalfCheetah-v0")`` works after ``import robolearn``; ``make`` and
``list_tasks`` repeat it, idempotently, for tasks registered later.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from robolearn.utils.version import VERSION as __version__

if TYPE_CHECKING:
    from robolearn.cli.build import LoadedPolicy
    from robolearn.envs.batched_env import BatchedEnv


def _load_tasks() -> None:
    # The task families register themselves on import; envs may not import tasks (DESIGN.md),
    # so the package facade does it, and then registers them with Gymnasium too.
    import robolearn.tasks  # noqa: F401
    from robolearn.envs.gym_adapter import register_gymnasium_envs

    register_gymnasium_envs()


def make(task_id: str, num_envs: int = 1, **kwargs: Any) -> BatchedEnv:
    """Build ``num_envs`` worlds of task ``task_id`` (see :func:`robolearn.envs.make` for options)."""
    _load_tasks()
    from robolearn.envs.registry import make as _make

    return _make(task_id, num_envs, **kwargs)


def list_tasks() -> list[str]:
    """Every registered task id."""
    _load_tasks()
    from robolearn.envs.registry import list_tasks as _list

    return _list()


def load_policy(run_dir: str | os.PathLike[str], device: str = "cpu") -> LoadedPolicy:
    """The latest checkpoint of a training run as a deterministic policy.

    Rebuilds the agent from ``run_dir/config.json``, loads the newest checkpoint and returns an
    object whose ``act(obs_dict)`` gives actions ``[N, A]`` (under ``torch.inference_mode``), with
    ``.spec`` (the run's ``policy_spec.json``), ``.cfg`` and ``.module()`` (the plain
    ``obs -> action`` network that export traces).
    """
    _load_tasks()
    from robolearn.cli.build import load_policy as _load

    return _load(run_dir, device=device)


_load_tasks()

__all__ = ["__version__", "list_tasks", "load_policy", "make"]
