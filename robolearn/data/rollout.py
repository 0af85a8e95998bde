"""On-policy rollout storage: ``[T, N, ...]`` batches, GAE with time-out bootstrapping, minibatches.

Episode ends come in two kinds and stay separate until here (DESIGN.md, "BatchedEnv"):

* ``terminated``: the MDP ended; the value after it is zero.
* ``truncated``: a time limit cut the episode; the true continuation value is ``V(final_obs)``.
  As in rsl_rl, it is folded into the reward, ``r + gamma * V(final_obs)``, and the step is then
  treated as an episode end, because the next stored observation belongs to a fresh episode.

Recurrent learners also store hidden states (``hidden_shapes``): only at the first step of each
``chunk_length``-step chunk, since truncated BPTT re-runs a chunk from there. :meth:`chunk_batches`
then yields whole chunks ``[L, B, ...]`` with the episode ends inside them (``resets``) and a mask
of the padding that completes a last, shorter chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

from robolearn.types import Obs


def gae_recursion(deltas: torch.Tensor, not_done: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """GAE's backward pass over a rollout ``[T, N]``: ``A_t = delta_t + gamma * lam * not_done_t * A_{t+1}``
    (``A_T = 0``), given the TD errors ``deltas`` and ``not_done`` (0 where an episode ended at step
    ``t``, which cuts the recursion: the next step starts a new episode). Shared by the rollout
    storage and the learners that keep their own rollouts (the distillation student).
    """
    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages


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


@dataclass
class ChunkBatch:
    """A minibatch of whole rollout chunks for truncated BPTT: time-major ``[L, B, ...]``.

    Chunk ``b`` holds steps ``c*L .. c*L+L-1`` of one world; steps past the rollout's end are
    padding (``valid`` false; zeros elsewhere, ones in ``action_std``).
    """

    obs: Obs
    """Observation groups as stored, ``[L, B, ...]``."""
    actions: torch.Tensor
    """Actions, ``[L, B, A]``."""
    values: torch.Tensor
    """Critic values at collection time, ``[L, B]``."""
    returns: torch.Tensor
    """Value targets, ``[L, B]``."""
    advantages: torch.Tensor
    """GAE advantages, ``[L, B]``."""
    log_probs: torch.Tensor
    """Log-probabilities at collection time, ``[L, B]``."""
    action_mean: torch.Tensor
    """Policy mean at collection time, ``[L, B, A]``."""
    action_std: torch.Tensor
    """Policy standard deviation at collection time, ``[L, B, A]``."""
    hidden: dict[str, torch.Tensor]
    """Each stored hidden state at the chunk's first step, ``[B, *shape]``."""
    resets: torch.Tensor
    """``[L, B]`` bool: an episode ended just before this step, so the memory restarts from zero
    (always false at step 0: the stored state already starts there)."""
    valid: torch.Tensor
    """``[L, B]`` bool: a real step (false on padding)."""


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
        hidden_shapes: Mapping[str, tuple[int, ...]] | None = None,
        chunk_length: int | None = None,
    ) -> None:
        """Allocate every buffer; ``obs_shapes`` maps each stored group to its per-world shape.

        ``hidden_shapes`` (recurrent learners) maps each hidden-state name to its per-world shape;
        it is stored at the first step of every ``chunk_length``-step chunk (default: the rollout).
        """
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
        self.chunk_length = int(chunk_length) if chunk_length is not None else t
        if self.chunk_length < 1:
            raise ValueError(f"RolloutStorage: chunk_length must be >= 1, got {chunk_length}")
        self.num_chunks = -(-t // self.chunk_length)
        self.hidden: dict[str, torch.Tensor] = {
            name: torch.zeros(self.num_chunks, n, *shape, device=self.device, dtype=dtype)
            for name, shape in (hidden_shapes or {}).items()
        }

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
        hidden: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        """Record one batched step (all ``[N, ...]``).

        ``timeout_values`` is ``V(final_obs)`` per world; it is used only where ``truncated`` and
        not ``terminated`` (omit it to treat time-outs as plain episode ends, no bootstrap).
        ``hidden`` holds the hidden states the step's actions were computed from (required when the
        storage was built with ``hidden_shapes``; kept at chunk starts only).
        """
        if self.full:
            raise RuntimeError(f"RolloutStorage is full ({self.num_steps} steps); call clear() after the update")
        i = self.step
        if self.hidden:
            if hidden is None or set(hidden) != set(self.hidden):
                got = sorted(hidden) if hidden is not None else None
                raise ValueError(f"RolloutStorage.add: hidden must hold {sorted(self.hidden)}, got {got}")
            if i % self.chunk_length == 0:
                for name, buf in self.hidden.items():
                    buf[i // self.chunk_length].copy_(hidden[name])
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
        self,
        last_values: torch.Tensor,
        gamma: float,
        lam: float,
        normalize_advantages: bool = False,
        reduce_mean: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        """Fill ``advantages`` and ``returns`` with GAE(``gamma``, ``lam``).

        ``last_values`` is ``V`` of the observation after the last stored step, ``[N]``. A time-out
        adds ``gamma * V(final_obs)`` to that step's reward; any episode end (terminated or
        truncated) cuts the recursion, since the next stored step starts a new episode.
        ``reduce_mean`` (data-parallel training: the mean over ranks) makes the advantage
        normalisation use the statistics of all ranks' rollouts together (one collective).
        """
        if not self.full:
            raise RuntimeError(f"compute_returns: the rollout holds {self.step} of {self.num_steps} steps")
        timeout = self.truncated & ~self.terminated
        rewards = self.rewards + gamma * self.timeout_values * timeout.to(self.rewards.dtype)
        not_done = (~(self.terminated | self.truncated)).to(self.rewards.dtype)
        next_values = torch.cat([self.values[1:], last_values.reshape(1, self.num_envs).to(self.values.dtype)])
        deltas = rewards + gamma * next_values * not_done - self.values
        self.advantages.copy_(gae_recursion(deltas, not_done, gamma, lam))
        self.returns.copy_(self.advantages + self.values)
        if normalize_advantages:
            # Over the whole rollout, once, rather than per minibatch: small minibatches make noisy
            # statistics, and every minibatch then sees the same scale.
            adv = self.advantages
            if reduce_mean is None:
                self.advantages.copy_((adv - adv.mean()) / (adv.std() + 1e-8))
            else:
                # The combined rollout's mean and (unbiased) variance from the ranks' mean count,
                # sum and centred sum of squares; the rank count cancels except in Bessel's n - 1,
                # where the mean count stands for the total (a relative error below 1/n).
                n = float(adv.numel())
                stats = reduce_mean(torch.stack([adv.new_tensor(n), adv.sum(), adv.square().sum()]))
                mean = stats[1] / stats[0]
                var = (stats[2] / stats[0] - mean.square()).clamp_min(0.0) * n / max(n - 1.0, 1.0)
                self.advantages.copy_((adv - mean) / (var.sqrt() + 1e-8))

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

    def chunk_batches(
        self, num_epochs: int, num_minibatches: int, generator: torch.Generator | None = None
    ) -> Iterator[ChunkBatch]:
        """Yield ``num_epochs * num_minibatches`` minibatches of whole chunks (truncated BPTT).

        The rollout is cut into ``num_chunks`` chunks of ``chunk_length`` steps per world (the last
        one padded); each epoch shuffles the ``num_chunks * N`` chunks with ``generator`` and splits
        them into ``num_minibatches`` sets.
        """
        if not self.hidden:
            raise RuntimeError("chunk_batches: this storage keeps no hidden states (build it with hidden_shapes)")
        total = self.num_chunks * self.num_envs
        if not 1 <= num_minibatches <= total:
            raise ValueError(
                f"num_minibatches: expected 1..{total} (chunks x worlds = {self.num_chunks} x {self.num_envs}), "
                f"got {num_minibatches}"
            )
        size = total // num_minibatches
        length, padded = self.chunk_length, self.num_chunks * self.chunk_length
        done = self.terminated | self.truncated
        # An episode that ended at step t-1 restarts the memory before step t; a chunk's first step
        # needs no reset (the stored state was taken after it).
        resets = torch.zeros_like(done)
        resets[1:] = done[:-1]
        valid = torch.ones_like(done)

        def chunked(buf: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
            # [T, N, ...] -> padded [C*L, N, ...] -> [C, L, N, ...] -> [L, C*N, ...] (chunk c*N + n).
            pad = torch.full((padded - self.num_steps, *buf.shape[1:]), fill, dtype=buf.dtype, device=buf.device)
            full = torch.cat([buf, pad]).reshape(self.num_chunks, length, *buf.shape[1:])
            return full.transpose(0, 1).flatten(1, 2)

        flat = {
            "actions": chunked(self.actions),
            "values": chunked(self.values),
            "returns": chunked(self.returns),
            "advantages": chunked(self.advantages),
            "log_probs": chunked(self.log_probs),
            "action_mean": chunked(self.action_mean),
            # Padding of one: a KL or log-probability evaluated on a padded step stays finite.
            "action_std": chunked(self.action_std, fill=1.0),
        }
        obs = {group: chunked(buf) for group, buf in self.obs.items()}
        starts = {name: buf.flatten(0, 1) for name, buf in self.hidden.items()}
        resets_c, valid_c = chunked(resets), chunked(valid)
        resets_c[0] = False
        gen_device = generator.device if generator is not None else torch.device("cpu")
        for _ in range(num_epochs):
            perm = torch.randperm(total, generator=generator, device=gen_device).to(self.device)
            for k in range(num_minibatches):
                idx = perm[k * size : (k + 1) * size]
                yield ChunkBatch(
                    obs={g: o[:, idx] for g, o in obs.items()},
                    **{name: v[:, idx] for name, v in flat.items()},
                    hidden={name: h[idx] for name, h in starts.items()},
                    resets=resets_c[:, idx],
                    valid=valid_c[:, idx],
                )
