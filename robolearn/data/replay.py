"""A device ring buffer of transitions for off-policy learners (SAC, REDQ, RLPD, WSRL).

Batched in and batched out: ``add`` writes the N transitions of one vectorised env step with one
indexed copy per field, ``sample`` draws indices with a caller-owned ``torch.Generator`` so a run
replays exactly. The write pointer and the fill level are host-side Python ints that only ``add``
changes, so neither ``add`` nor ``sample`` reads anything back from the device.

Time-outs are not terminal. A transition stores ``next_obs`` — for worlds that finished in this
step, the pre-reset observation (``info["final_obs"]`` of :class:`robolearn.envs.BatchedEnv`) —
and ``terminated`` only, so targets bootstrap from the true final state across a truncation.
``truncated`` may be recorded too (offline datasets want ``timeouts``), but no loss needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from robolearn.types import Batch, Obs


class ReplayBuffer:
    """Ring buffer of ``capacity`` transitions on one device; storage is allocated on the first ``add``."""

    def __init__(self, capacity: int, device: str | torch.device = "cpu") -> None:
        """``capacity``: transitions kept (oldest overwritten first); ``device``: where storage lives."""
        if int(capacity) < 1:
            raise ValueError(f"capacity: expected an integer >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.ptr = 0
        """Next slot to write."""
        self.size = 0
        """Number of valid transitions (<= capacity)."""
        self.storage: dict[str, Any] = {}

    def __len__(self) -> int:
        """Number of stored transitions."""
        return self.size

    def _allocate(
        self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, extras: Mapping[str, torch.Tensor]
    ) -> None:
        def like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
            return torch.zeros((self.capacity, *t.shape[1:]), dtype=dtype or t.dtype, device=self.device)

        self.storage = {
            "obs": {k: like(v) for k, v in obs.items()},
            "next_obs": {k: like(v) for k, v in obs.items()},
            "action": like(action),
            "reward": like(reward),
            "terminated": like(reward, torch.bool),
            "truncated": like(reward, torch.bool),
            "extras": {k: like(v) for k, v in extras.items()},
        }

    @torch.no_grad()
    def add(
        self,
        obs: Mapping[str, torch.Tensor],
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: Mapping[str, torch.Tensor],
        terminated: torch.Tensor,
        truncated: torch.Tensor | None = None,
        extras: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        """Store N transitions at once (all tensors ``[N, ...]``; groups of ``obs`` and ``next_obs`` match).

        ``next_obs`` must already hold the pre-reset observation for worlds that ended this step.
        ``extras``: per-transition fields beside the core ones (Cal-QL's ``mc_return``), the same keys
        at every call; :meth:`gather` hands them back in ``Batch.extras``.
        If N exceeds the capacity only the last ``capacity`` transitions are kept.
        """
        n = int(action.shape[0])
        extras = dict(extras or {})
        if not self.storage:
            self._allocate(dict(obs), action, reward, extras)
        if set(obs) != set(self.storage["obs"]) or set(next_obs) != set(self.storage["obs"]):
            raise ValueError(
                f"observation groups {sorted(obs)} / {sorted(next_obs)} differ from the stored {sorted(self.storage['obs'])}"
            )
        stored_extras = self.storage.setdefault("extras", {})
        if set(extras) != set(stored_extras):
            raise ValueError(f"extras {sorted(extras)} differ from the stored {sorted(stored_extras)}")
        start = max(n - self.capacity, 0)
        m = n - start
        idx = (self.ptr + torch.arange(m, device=self.device)) % self.capacity
        s = self.storage
        for k in s["obs"]:
            s["obs"][k][idx] = obs[k][start:].to(self.device, s["obs"][k].dtype)
            s["next_obs"][k][idx] = next_obs[k][start:].to(self.device, s["next_obs"][k].dtype)
        s["action"][idx] = action[start:].to(self.device, s["action"].dtype)
        s["reward"][idx] = reward[start:].to(self.device, s["reward"].dtype)
        s["terminated"][idx] = terminated[start:].to(self.device, torch.bool)
        trunc = (
            truncated[start:]
            if truncated is not None
            else torch.zeros(m, dtype=torch.bool, device=self.device)
        )
        s["truncated"][idx] = trunc.to(self.device, torch.bool)
        for k, t in s["extras"].items():
            t[idx] = extras[k][start:].to(self.device, t.dtype)
        self.ptr = (self.ptr + m) % self.capacity
        self.size = min(self.size + m, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """Draw ``batch_size`` transitions uniformly with replacement; ``generator`` (on the buffer's
        device) makes the draw reproducible.
        """
        if self.size == 0:
            raise RuntimeError("ReplayBuffer.sample: the buffer is empty")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator, device=self.device)
        return self.gather(idx)

    def gather(self, idx: torch.Tensor) -> Batch:
        """The transitions at slots ``idx[B]`` as a :class:`~robolearn.types.Batch`."""
        s = self.storage
        return Batch(
            obs={k: v[idx] for k, v in s["obs"].items()},
            action=s["action"][idx],
            reward=s["reward"][idx],
            next_obs={k: v[idx] for k, v in s["next_obs"].items()},
            terminated=s["terminated"][idx],
            truncated=s["truncated"][idx],
            extras={k: v[idx] for k, v in s.get("extras", {}).items()},
        )

    def state_dict(self) -> dict[str, Any]:
        """Storage (only the filled part), pointer and fill level, so a checkpoint resumes the buffer."""

        def cut(t: torch.Tensor) -> torch.Tensor:
            return t[: self.size].clone()

        storage: dict[str, Any] = {}
        for key, value in self.storage.items():
            storage[key] = {g: cut(t) for g, t in value.items()} if isinstance(value, dict) else cut(value)
        return {"capacity": self.capacity, "ptr": self.ptr, "size": self.size, "storage": storage}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (the capacity must match)."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"capacity: checkpoint has {state['capacity']}, this buffer {self.capacity}")
        self.ptr, self.size = int(state["ptr"]), int(state["size"])
        self.storage = {}
        if not state["storage"]:
            return

        def grow(t: torch.Tensor) -> torch.Tensor:
            full = torch.zeros((self.capacity, *t.shape[1:]), dtype=t.dtype, device=self.device)
            full[: t.shape[0]] = t.to(self.device)
            return full

        for key, value in state["storage"].items():
            self.storage[key] = (
                {g: grow(t) for g, t in value.items()} if isinstance(value, dict) else grow(value)
            )


__all__: list[str] = ["ReplayBuffer"]
