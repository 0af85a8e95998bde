"""The env core is device-neutral (DESIGN.md, "Device"): above the ``SimBackend`` boundary nothing
converts a tensor to NumPy or a Python value on the step path, and the same seed gives the same
trajectories.

Proof without a GPU: every registered task is reset and stepped with the tensor methods that
leave the device (``numpy``, ``cpu``, ``item``, ``tolist``, ``__bool__``, ``__int__``,
``__float__``, ``__index__``) patched, and under a dispatch mode that sees the host-syncing ops
(``_local_scalar_dense``, ``nonzero``, ``masked_select``, ``unique``, and indexing with a boolean
mask, whose kernel calls ``nonzero`` without dispatching it). A call is allowed only when the first caller
outside torch and NumPy is the backend (``robolearn.sim``) or the env's one place for host syncs
(``robolearn.envs.sync``, which documents why each remaining sync is needed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import robolearn
from robolearn.envs import RewardTerm, task_cfg
from robolearn.envs.batched_env import BatchedEnv

ALLOWED = ("robolearn.sim.", "robolearn.envs.sync")
"""Modules that may leave the device: the backend, and the env's documented sync point."""
TRANSPARENT = ("torch", "numpy")
"""Library frames skipped when looking for the code that asked (``np.asarray(t)`` calls ``t.numpy``)."""
PATCHED = ("numpy", "cpu", "item", "tolist", "__bool__", "__int__", "__float__", "__index__")
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim")


class HostSync(AssertionError):
    """A tensor left the device above the backend boundary."""


def _asker() -> str:
    """The module of the first frame outside the guard itself, torch and NumPy."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        own = name == __name__ and frame.f_code.co_name in _GUARD_FRAMES
        if not own and name.split(".")[0] not in TRANSPARENT:
            return name
        frame = frame.f_back  # type: ignore[assignment]
    return ""


def _check(what: str) -> None:
    module = _asker()
    if not module.startswith(ALLOWED):
        raise HostSync(f"{what} called from {module or '?'} (above the SimBackend boundary)")


class _SyncOps(TorchDispatchMode):
    """Refuses the host-syncing aten ops outside the allowed modules."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in SYNC_OPS:
            _check(f"aten.{name}")
        elif name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]
        ):
            # A boolean-mask index: its kernel runs nonzero without dispatching it again.
            _check(f"aten.{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


def _guard(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        _check(f"Tensor.{name}")
        return original(self, *args, **kwargs)

    return guarded


_GUARD_FRAMES = frozenset({"_asker", "_check", "__torch_dispatch__", "guarded"})
"""The guard's own functions, skipped when looking for the caller."""


@contextmanager
def no_host_sync() -> Iterator[None]:
    """Patch the leaving methods and enter the dispatch mode; restore both on exit."""
    originals = {name: getattr(torch.Tensor, name) for name in PATCHED}

    for name, original in originals.items():
        setattr(torch.Tensor, name, _guard(name, original))
    try:
        with _SyncOps():
            yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _actions(env: BatchedEnv, steps: int, seed: int) -> list[torch.Tensor]:
    """Random actions inside the bounds (made outside the guard)."""
    gen = torch.Generator().manual_seed(seed)
    low = env.ctrl_low.clamp(min=-1.0)
    high = env.ctrl_high.clamp(max=1.0)
    return [low + (high - low) * torch.rand(env.num_envs, env.action_dim, generator=gen, dtype=torch.float64)
            for _ in range(steps)]


def _rollout(env: BatchedEnv, actions: list[torch.Tensor], guarded: bool) -> list[torch.Tensor]:
    """Reset, then step through ``actions``; one flat record per step (obs groups, reward, dones)."""
    records = []
    ctx = no_host_sync() if guarded else _null()
    with ctx:
        obs, _ = env.reset(seed=env.seed)
        # Staggered episode ends: partial resets of some worlds while the others keep going.
        env.episode_length.copy_(torch.arange(env.num_envs, device=env.device) * 17)
        for action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            parts = [obs[g].to(torch.float64).flatten(1) for g in sorted(obs)]
            parts += [reward.unsqueeze(1).double(), terminated.unsqueeze(1).double(), truncated.unsqueeze(1).double()]
            records.append(torch.cat(parts, dim=1))
    return records


@contextmanager
def _null() -> Iterator[None]:
    yield


def _make(task: str, num_envs: int, seed: int) -> BatchedEnv:
    # Short episodes, so every task resets (fully and partially) inside the window.
    return robolearn.make(task, num_envs, seed=seed, nthread=1, episode_length=60)


@pytest.mark.parametrize("task", robolearn.list_tasks())
def test_every_task_steps_without_leaving_the_device(task: str) -> None:
    env = _make(task, 3, seed=5)
    records = _rollout(env, _actions(env, 200, seed=1), guarded=True)
    assert torch.isfinite(torch.stack(records)).all()


def test_the_guard_catches_a_host_sync_above_the_backend() -> None:
    # A reward term that reads a Python number (the per-step .item() of SB3's sac.py): the guard
    # must name it, or the test above proves nothing.
    def synced_reward(env: BatchedEnv) -> torch.Tensor:
        return torch.full((env.num_envs,), env.sim.qpos[0, 0].item(), dtype=torch.float64)

    cfg = task_cfg("Pendulum-Swingup")
    cfg.rewards["synced"] = RewardTerm(synced_reward)
    env = BatchedEnv(cfg, 2, seed=0, nthread=1)
    with pytest.raises(HostSync, match=r"Tensor.item called from tests\.test_device_neutral"), no_host_sync():
        env.step(torch.zeros(2, env.action_dim))

    def masked(env: BatchedEnv) -> torch.Tensor:
        q = env.sim.qpos[:, 0]
        return torch.zeros_like(q).index_put((q > -1e9,), q[q > -1e9])  # a mask index: nonzero inside

    cfg.rewards = {"masked": RewardTerm(masked)}
    env = BatchedEnv(cfg, 2, seed=0, nthread=1)
    with pytest.raises(HostSync, match="aten.index with a boolean mask called from tests"), no_host_sync():
        env.step(torch.zeros(2, env.action_dim))


@pytest.mark.parametrize("task", ["HalfCheetah-DR", "Cartpole-Balance-DR", "Reacher"])
def test_same_seed_same_trajectory_and_worlds_are_independent(task: str) -> None:
    env_a, env_b = _make(task, 3, seed=11), _make(task, 3, seed=11)
    actions = _actions(env_a, 150, seed=2)
    a = torch.stack(_rollout(env_a, actions, guarded=False))
    b = torch.stack(_rollout(env_b, actions, guarded=False))
    assert torch.equal(a, b)
    # Another seed: other draws (initial states, noise, randomised parameters).
    c = torch.stack(_rollout(_make(task, 3, seed=12), actions, guarded=False))
    assert not torch.equal(a, c)
    # World 0 of a 2-world env with the same seed and world-0 actions follows the same trajectory:
    # its streams and its physics do not depend on how many other worlds there are.
    env_d = _make(task, 2, seed=11)
    d = torch.stack(_rollout(env_d, [x[:2] for x in actions], guarded=False))
    assert torch.equal(d[:, 0], a[:, 0])
