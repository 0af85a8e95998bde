"""On-policy rollout storage: ``[T, N, ...]`` batches, GAE with time-out bootstrapping, minibatches.

Episode ends come in two kinds and stay separate until here (DESIGN.md, "BatchedEnv"):

* ``terminated``: the MDP ended; the value after it is zero.
* ``truncated``: a time limit cut the episode; the true continuation value is ``V(final_obs)``.
  As in rsl_rl, it is folded into the reward, ``r + gamma * V(final_obs)``, and the step is then
  treated as an episode end, because the next stored observation belongs to a fresh episode.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from robolearn.types import Obs


@dataclass
class RolloutBatch:
    """One minibatch of flattened rollout samples, leading dim ``[B]``."""

    obs: Obs
    """Observation groups as stored (the agent decides whether they are normalised)."""
    actions: torch.Tensor
    """Actions taken, ``[B, A]``."""
    values: torch.Tensor
    """Critic values at collection time, ``[B]``."""
    returns: torch.Tensor
    """Value targets (advantages plus values), ``[B]``."""
    advantages: torch.Tensor
    """GAE advantages (normalised if :meth:`RolloutStorage.compute_returns` was asked to), ``[B]``."""
    log_probs: torch.Tensor
    """Log-probabilities of ``actions`` at collection time, ``[B]``."""
    action_mean: torch.Tensor
    """Policy mean at collection time, ``[B, A]`` (for the KL to the updated policy)."""
    action_std: torch.Tensor
    """Policy standard deviation at collection time, ``[B, A]``."""


class RolloutStorage:
    """Preallocated buffers for ``num_steps`` batched steps of ``num_envs`` worlds.

    Call :meth:`add` once per step, :meth:`compute_returns` once the buffer is full, iterate
    :meth:`mini_batches`, then :meth:`clear`. Nothing here reads a tensor back to the host.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shapes: Mapping[str, int | tuple[int, ...]],
        action_dim: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        """Allocate every buffer; ``obs_shapes`` maps each stored group to its per-world shape."""
        if num_steps < 1 or num_envs < 1:
            raise ValueError(f"RolloutStorage: num_steps and num_envs must be >= 1, got {num_steps}, {num_envs}")
        self.num_steps, self.num_envs, self.action_dim = int(num_steps), int(num_envs), int(action_dim)
        self.device = torch.device(device)
        t, n = self.num_steps, self.num_envs

        def zeros(*shape: int, kind: torch.dtype = dtype) -> torch.Tensor:
            return torch.zeros(t, n, *shape, device=self.device, dtype=kind)

        self.obs: Obs = {}
        for group, shape in obs_shapes.items():
            self.obs[group] = zeros(*((shape,) if isinstance(shape, int) else tuple(shape)))
        self.actions = zeros(self.action_dim)
        self.rewards = zeros()
        self.terminated = zeros(kind=torch.bool)
        self.truncated = zeros(kind=torch.bool)
        self.timeout_values = zeros()
        self.values = zeros()
        self.log_probs = zeros()
        self.action_mean = zeros(self.action_dim)
        self.action_std = zeros(self.action_dim)
        self.returns = zeros()
        self.advantages = zeros()
        self.step = 0

    @property
    def full(self) -> bool:
        """True once ``num_steps`` steps have been added."""
        return self.step >= self.num_steps

    def add(
        self,
        obs: Mapping[str, torch.Tensor],
        actions: torch.Tensor,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        values: torch.Tensor,
        log_probs: torch.Tensor,
        action_mean: torch.Tensor,
        action_std: torch.Tensor,
        timeout_values: torch.Tensor | None = None,
    ) -> None:
        """Record one batched step (all ``[N, ...]``).

        ``timeout_values`` is ``V(final_obs)`` per world; it is used only where ``truncated`` and
        not ``terminated`` (omit it to treat time-outs as plain episode ends, no bootstrap).
        """
        if self.full:
            raise RuntimeError(f"RolloutStorage is full ({self.num_steps} steps); call clear() after the update")
        i = self.step
        for group, buf in self.obs.items():
            buf[i].copy_(obs[group])
        self.actions[i].copy_(actions)
        self.rewards[i].copy_(rewards.reshape(self.num_envs))
        self.terminated[i].copy_(terminated.reshape(self.num_envs))
        self.truncated[i].copy_(truncated.reshape(self.num_envs))
        if timeout_values is None:
            self.timeout_values[i].zero_()
        else:
            self.timeout_values[i].copy_(timeout_values.reshape(self.num_envs))
        self.values[i].copy_(values.reshape(self.num_envs))
        self.log_probs[i].copy_(log_probs.reshape(self.num_envs))
        self.action_mean[i].copy_(action_mean)
        self.action_std[i].copy_(action_std)
        self.step += 1

    def clear(self) -> None:
        """Start a new rollout (buffers are overwritten, not reallocated)."""
        self.step = 0

    @torch.no_grad()
    def compute_returns(
        self, last_values: torch.Tensor, gamma: float, lam: float, normalize_advantages: bool = False
    ) -> None:
        """Fill ``advantages`` and ``returns`` with GAE(``gamma``, ``lam``).

        ``last_values`` is ``V`` of the observation after the last stored step, ``[N]``. A time-out
        adds ``gamma * V(final_obs)`` to that step's reward; any episode end (terminated or
        truncated) cuts the recursion, since the next stored step starts a new episode.
        """
        if not self.full:
            raise RuntimeError(f"compute_returns: the rollout holds {self.step} of {self.num_steps} steps")
        timeout = self.truncated & ~self.terminated
        rewards = self.rewards + gamma * self.timeout_values * timeout.to(self.rewards.dtype)
        not_done = (~(self.terminated | self.truncated)).to(self.rewards.dtype)
        next_values = torch.cat([self.values[1:], last_values.reshape(1, self.num_envs).to(self.values.dtype)])
        deltas = rewards + gamma * next_values * not_done - self.values
        advantage = torch.zeros_like(last_values, dtype=self.values.dtype).reshape(self.num_envs)
        for t in reversed(range(self.num_steps)):
            advantage = deltas[t] + gamma * lam * not_done[t] * advantage
            self.advantages[t] = advantage
        self.returns.copy_(self.advantages + self.values)
        if normalize_advantages:
            # Over the whole rollout, once, rather than per minibatch: small minibatches make noisy
            # statistics, and every minibatch then sees the same scale.
            adv = self.advantages
            self.advantages.copy_((adv - adv.mean()) / (adv.std() + 1e-8))

    def mini_batches(
        self, num_epochs: int, num_minibatches: int, generator: torch.Generator | None = None
    ) -> Iterator[RolloutBatch]:
        """Yield ``num_epochs * num_minibatches`` minibatches; each epoch is a fresh permutation of
        the ``T * N`` samples drawn from ``generator`` (reproducible when it is seeded).
        """
        total = self.num_steps * self.num_envs
        if not 1 <= num_minibatches <= total:
            raise ValueError(f"num_minibatches: expected 1..{total} (num_steps * num_envs), got {num_minibatches}")
        size = total // num_minibatches
        flat = {
            "actions": self.actions.flatten(0, 1),
            "values": self.values.flatten(),
            "returns": self.returns.flatten(),
            "advantages": self.advantages.flatten(),
            "log_probs": self.log_probs.flatten(),
            "action_mean": self.action_mean.flatten(0, 1),
            "action_std": self.action_std.flatten(0, 1),
        }
        obs = {group: buf.flatten(0, 1) for group, buf in self.obs.items()}
        gen_device = generator.device if generator is not None else torch.device("cpu")
        for _ in range(num_epochs):
            perm = torch.randperm(total, generator=generator, device=gen_device).to(self.device)
            for k in range(num_minibatches):
                idx = perm[k * size : (k + 1) * size]
                yield RolloutBatch(obs={g: o[idx] for g, o in obs.items()}, **{k2: v[idx] for k2, v in flat.items()})
