"""The env core is device-neutral (DESIGN.md, "Device"): above the ``SimBackend`` boundary nothing
converts a tensor to NumPy or a Python value on the step path, and the same seed gives the same
trajectories.

Proof without a GPU: every registered task is reset and stepped under
``robolearn.utils.hostsync.forbid_host_syncs`` (the tensor methods that leave the device patched,
and a dispatch mode that sees the host-syncing aten ops, boolean-mask indexing included). A sync is
allowed only when it comes from the backend (``robolearn.sim``) or the env's one place for host
syncs (``robolearn.envs.sync``, which documents why each remaining sync is needed).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
import torch

import robolearn
from robolearn.envs import RewardTerm, task_cfg
from robolearn.envs.batched_env import BatchedEnv
from robolearn.utils.hostsync import ENV_SYNC_POINTS, HostSync, SyncProfile, forbid_host_syncs


def no_host_sync() -> AbstractContextManager[SyncProfile]:
    """The env's guard: only the backend and ``robolearn.envs.sync`` may leave the device."""
    return forbid_host_syncs(allowed=ENV_SYNC_POINTS)


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
    with pytest.raises(HostSync, match=r"Tensor.item from tests\.test_device_neutral\.synced_reward"), no_host_sync():
        env.step(torch.zeros(2, env.action_dim))

    def masked(env: BatchedEnv) -> torch.Tensor:
        q = env.sim.qpos[:, 0]
        return torch.zeros_like(q).index_put((q > -1e9,), q[q > -1e9])  # a mask index: nonzero inside

    cfg.rewards = {"masked": RewardTerm(masked)}
    env = BatchedEnv(cfg, 2, seed=0, nthread=1)
    with pytest.raises(HostSync, match=r"aten.index with a boolean mask from tests\.test_device_neutral\.masked"), no_host_sync():
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
