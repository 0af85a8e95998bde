"""FQL's one-step policy: an MLP of (observation, noise) to an action, the policy that acts."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from robolearn.nn.mlp import MLP
from robolearn.nn.offline import action_bounds


class OneStepPolicy(nn.Module):
    """``mu_omega(s, z)``: ``MLP([obs, z]) -> x`` in the model's ``[-1, 1]`` action space (the BC
    flow's), mapped to env units by the bounds' affine map.

    ``squash="clip"`` (FQL) leaves ``x`` unbounded for the distillation term and clips it where an
    action is used (the critic, the env); clipping inside the distillation would leave an output
    outside the box without any gradient to bring it back. ``squash="tanh"`` bounds ``x`` smoothly.
    The observation comes first in the input row, so the offline learners' first-layer folding of
    the observation statistics applies unchanged (the noise columns are left alone).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256, 256),
        activation: str = "relu",
        layer_norm: bool = False,
        action_low: torch.Tensor | Sequence[float] | float = -1.0,
        action_high: torch.Tensor | Sequence[float] | float = 1.0,
        squash: str = "clip",
    ) -> None:
        """Build ``MLP(obs_dim + action_dim -> action_dim)`` and the bounds' scale and offset."""
        super().__init__()
        if squash not in ("clip", "tanh"):
            raise ValueError(f"squash: expected clip or tanh, got {squash!r}")
        low, high = action_bounds(action_low, action_high, action_dim)
        self.net = MLP(obs_dim + action_dim, action_dim, hidden, activation, layer_norm)
        self.obs_dim, self.action_dim, self.squash = obs_dim, action_dim, squash
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_offset", (high + low) / 2.0)

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) if self.squash == "tanh" else x

    def model_action(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The policy's output ``[B, A]`` in the model space, before clipping (what is distilled)."""
        return self._out(self.net(torch.cat([obs, noise], dim=-1)))

    def to_env(self, x: torch.Tensor) -> torch.Tensor:
        """Model-space actions to env units, clipped to the bounds."""
        return self.action_offset + self.action_scale * x.clamp(-1.0, 1.0)

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """In-bounds env actions ``[B, A]`` for observations ``[B, obs_dim]`` and noise ``[B, A]``."""
        return self.to_env(self.model_action(obs, noise))

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The action at ``z = 0``, ``forward(obs, 0)``.

        Computed without building a zero tensor: at ``z = 0`` the noise columns of the first layer
        contribute nothing, so the first layer is applied to the observation columns alone. The
        graph then has no batch-size-dependent constant, which keeps export tracing exact.
        """
        first = self.net[0]
        h = F.linear(obs, first.weight[:, : self.obs_dim], first.bias)
        for layer in list(self.net)[1:]:
            h = layer(h)
        return self.to_env(self._out(h))


class NoisyPolicy(nn.Module):
    """``(obs, noise) -> action``: the one-step policy of raw observations with its noise an explicit
    input (the observation statistics as buffers): what a stochastic deployment or an export with
    the noise as an input traces; at ``noise = 0`` it is the learner's ``policy_module()``.
    """

    def __init__(self, actor: OneStepPolicy, mean: torch.Tensor | None = None, std: torch.Tensor | None = None) -> None:
        """Wrap ``actor``; no statistics means identity."""
        super().__init__()
        self.actor = actor
        self.register_buffer("mean", torch.zeros(actor.obs_dim) if mean is None else mean.detach().clone())
        self.register_buffer("std", torch.ones(actor.obs_dim) if std is None else std.detach().clone())

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """In-bounds env actions ``[B, A]`` for raw observations and noise ``[B, A]``."""
        return self.actor((obs - self.mean) / self.std, noise)


__all__ = ["NoisyPolicy", "OneStepPolicy"]
