"""Action-chunk execution: what a policy that predicts ``H`` actions at once does between its plans.

A chunked policy sees the last ``obs_history`` observations, predicts a chunk of ``horizon``
actions, and the executor plays ``execute`` of them before asking for the next chunk (``execute``
<= ``horizon``; Diffusion Policy's ``n_action_steps``). With ``ensemble="exp"`` it replans every
step instead and plays, for the current step, the exponentially weighted mean of every chunk that
covers it (ACT's temporal ensembling, Zhao et al. 2023: weights ``exp(-decay * i)`` with ``i = 0``
for the oldest prediction still covering the step, so older predictions weigh more, as in ACT).

The same objects run in simulation (``[N]`` worlds, the learner's policy module) and on a robot
(``N = 1``, the deploy runtime), in plain torch like the rest of :mod:`robolearn.spec`, so the
chunk semantics a policy was evaluated with are the semantics it is deployed with. The executor
is stateful per world; :meth:`ChunkExecutor.reset` restarts the worlds an episode ended in (the
observation history refills with the next observation, the queued actions are dropped).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

ENSEMBLES = ("none", "exp")
"""Chunk execution modes: play ``execute`` actions per plan, or replan every step and ensemble."""


@dataclass(frozen=True)
class ChunkSpec:
    """How a chunked policy is run (module doc); recorded in the policy spec and the manifest."""

    horizon: int = 1
    """Actions predicted per plan (``H``)."""
    execute: int = 1
    """Actions played per plan (``k``, ``1 <= k <= H``); 1 with ``ensemble="exp"``."""
    obs_history: int = 1
    """Observations the policy is conditioned on, the newest last."""
    ensemble: str = "none"
    """``"none"`` or ``"exp"`` (temporal ensembling, module doc)."""
    ensemble_decay: float = 0.01
    """``exp(-decay * i)`` weights of the ensemble (ACT's ``m``)."""

    def __post_init__(self) -> None:
        """Refuse an inconsistent spec, naming the field."""
        if self.horizon < 1:
            raise ValueError(f"horizon: expected >= 1, got {self.horizon}")
        if not 1 <= self.execute <= self.horizon:
            raise ValueError(f"execute: expected 1..horizon ({self.horizon}), got {self.execute}")
        if self.obs_history < 1:
            raise ValueError(f"obs_history: expected >= 1, got {self.obs_history}")
        if self.ensemble not in ENSEMBLES:
            raise ValueError(f"ensemble: expected one of {', '.join(ENSEMBLES)}, got {self.ensemble!r}")
        if self.ensemble == "exp" and self.execute != 1:
            raise ValueError(f"execute: temporal ensembling replans every step, so execute must be 1, got {self.execute}")
        if not (math.isfinite(self.ensemble_decay) and self.ensemble_decay >= 0):
            raise ValueError(f"ensemble_decay: expected a finite number >= 0, got {self.ensemble_decay}")

    def to_dict(self) -> dict:
        """The spec as plain JSON values."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ChunkSpec:
        """The spec from :meth:`to_dict`'s output; unknown keys are an error naming them."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"chunking: unknown fields {sorted(unknown)}; expected {sorted(cls.__dataclass_fields__)}")
        return cls(**data)


class ChunkExecutor:
    """Per-world observation history and action queue of a chunked policy (module doc).

    Use per control step::

        cond = ex.observe(obs)                  # [N, obs_history * obs_dim], oldest first
        need = ex.needs_plan()                  # [N] bool: worlds that must be given a chunk now
        if need.any(): ex.plan(chunks, need)    # chunks [N, H, A] (rows of other worlds ignored)
        action = ex.act()                       # [N, A]
    """

    def __init__(self, spec: ChunkSpec, num_worlds: int, obs_dim: int, action_dim: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        """Empty history and queues for ``num_worlds`` worlds."""
        self.spec = spec
        self.n, self.obs_dim, self.action_dim = int(num_worlds), int(obs_dim), int(action_dim)
        h = spec.horizon
        self.history = torch.zeros(self.n, spec.obs_history, obs_dim, device=device, dtype=dtype)
        self._fresh = torch.ones(self.n, dtype=torch.bool, device=device)
        # Queue: a ring of the last H chunks' predictions per future step. For "none" only slot 0 is used.
        self.buffer = torch.zeros(self.n, h, h, action_dim, device=device, dtype=dtype)
        """``[N, H (plans, newest last), H (steps ahead), A]``: predictions of the last ``H`` plans."""
        self.valid = torch.zeros(self.n, h, h, dtype=torch.bool, device=device)
        self.played = torch.full((self.n,), spec.execute, dtype=torch.long, device=device)
        """Actions played from the current plan (``execute``: none left, a plan is due)."""
        decay = torch.exp(-spec.ensemble_decay * torch.arange(h, dtype=torch.float64))
        self._weights = decay.to(device=device, dtype=dtype)

    def reset(self, done: torch.Tensor | None = None) -> None:
        """Restart the worlds where ``done[N]`` (all when ``None``): history and queue emptied."""
        mask = self._mask(done, "done")
        # Out of place throughout: state built under torch.inference_mode (an evaluation rollout)
        # must stay updatable outside it (a reset between rollouts), and vice versa.
        self._fresh = self._fresh | mask
        self.valid = self.valid & ~mask.reshape(-1, 1, 1)
        self.played = torch.where(mask, torch.full_like(self.played, self.spec.execute), self.played)

    def _mask(self, flags: torch.Tensor | None, name: str) -> torch.Tensor:
        """``flags[N]`` as a bool mask on the executor's device (all worlds when ``None``)."""
        if flags is None:
            return torch.ones(self.n, dtype=torch.bool, device=self.history.device)
        mask = flags.to(device=self.history.device, dtype=torch.bool).reshape(-1)
        if mask.shape[0] != self.n:
            raise ValueError(f"{name}: expected {self.n} flags (one per world), got {mask.shape[0]}")
        return mask

    def observe(self, obs: torch.Tensor) -> torch.Tensor:
        """Push this step's observations ``[N, obs_dim]``; return the condition
        ``[N, obs_history * obs_dim]`` (a restarted world's history is its first observation repeated).
        """
        obs = obs.to(device=self.history.device, dtype=self.history.dtype).reshape(self.n, self.obs_dim)
        shifted = torch.cat([self.history[:, 1:], obs.unsqueeze(1)], dim=1)
        filled = obs.unsqueeze(1).expand_as(self.history)
        self.history = torch.where(self._fresh.reshape(-1, 1, 1), filled, shifted)
        self._fresh = torch.zeros_like(self._fresh)
        return self.history.reshape(self.n, -1)

    def needs_plan(self) -> torch.Tensor:
        """``[N]`` bool: the worlds whose next action needs a new chunk."""
        if self.spec.ensemble == "exp":
            return torch.ones(self.n, dtype=torch.bool, device=self.history.device)
        return self.played >= self.spec.execute

    def plan(self, chunks: torch.Tensor, worlds: torch.Tensor | None = None) -> None:
        """Take new chunks ``[N, H, A]`` for the worlds where ``worlds[N]`` (all when ``None``)."""
        mask = self._mask(worlds, "worlds")
        chunks = chunks.to(device=self.buffer.device, dtype=self.buffer.dtype)
        if tuple(chunks.shape) != (self.n, self.spec.horizon, self.action_dim):
            raise ValueError(f"chunks: expected [{self.n}, {self.spec.horizon}, {self.action_dim}], got {list(chunks.shape)}")
        m3 = mask.reshape(-1, 1, 1)
        if self.spec.ensemble == "exp":
            # the plans age by one step: drop the oldest, shift each older plan's steps by one
            old = torch.cat([self.buffer[:, 1:, 1:], torch.zeros_like(self.buffer[:, 1:, :1])], dim=2)
            old_valid = torch.cat([self.valid[:, 1:, 1:], torch.zeros_like(self.valid[:, 1:, :1])], dim=2)
            new_buf = torch.cat([old, chunks.unsqueeze(1)], dim=1)
            new_valid = torch.cat([old_valid, torch.ones_like(self.valid[:, :1])], dim=1)
            self.buffer = torch.where(m3.unsqueeze(-1), new_buf, self.buffer)
            self.valid = torch.where(m3, new_valid, self.valid)
        else:
            # only the newest slot is used: replace it where planned
            self.buffer = torch.cat([self.buffer[:, :-1], torch.where(m3, chunks, self.buffer[:, -1]).unsqueeze(1)], dim=1)
            self.valid = torch.cat([self.valid[:, :-1], (self.valid[:, -1] | mask.reshape(-1, 1)).unsqueeze(1)], dim=1)
            self.played = torch.where(mask, torch.zeros_like(self.played), self.played)

    def act(self) -> torch.Tensor:
        """The actions ``[N, A]`` of the current step; advances the queue."""
        if self.spec.ensemble == "exp":
            # step 0 of every valid plan predicts the current step; the oldest plan is index 0
            pred = self.buffer[:, :, 0]  # [N, H plans, A]
            valid = self.valid[:, :, 0]
            # weights exp(-m * i), i = 0 for the oldest valid plan
            order = torch.cumsum(valid.to(torch.long), dim=1) - 1
            w = torch.where(valid, self._weights[order.clamp_min(0)], torch.zeros((), dtype=pred.dtype, device=pred.device))
            return (w.unsqueeze(-1) * pred).sum(1) / w.sum(1, keepdim=True).clamp_min(1e-12)
        idx = self.played.clamp(max=self.spec.horizon - 1)
        action = self.buffer[:, -1].gather(1, idx.reshape(-1, 1, 1).expand(-1, 1, self.action_dim)).squeeze(1)
        self.played = self.played + 1
        return action
