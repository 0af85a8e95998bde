"""Stochastic actors for off-policy and offline learners (SAC, REDQ, CQL, Cal-QL)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from robolearn.nn.mlp import MLP

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _as_bound(value: torch.Tensor | Sequence[float] | float, action_dim: int, name: str) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float32).flatten()
    if t.numel() == 1:
        t = t.expand(action_dim).clone()
    if t.numel() != action_dim:
        raise ValueError(f"{name}: expected {action_dim} values, got {t.numel()}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: a tanh-squashed actor needs finite action bounds, got {t.tolist()}")
    return t


class TanhGaussianActor(nn.Module):
    """A diagonal Gaussian over pre-squash actions ``u``, squashed as ``a = offset + scale * tanh(u)``.

    ``log_prob`` is the density of ``a`` itself: the Gaussian's log-density minus the log-determinant
    of the squash, ``sum(log(scale) + log(1 - tanh(u)^2))``, the latter in the overflow-free form
    ``2 * (log 2 - u - softplus(-2u))`` (tanh saturates, ``1 - tanh^2`` underflows to 0 and its log
    to -inf; the softplus form stays finite).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        layer_norm: bool = False,
        action_low: torch.Tensor | Sequence[float] | float = -1.0,
        action_high: torch.Tensor | Sequence[float] | float = 1.0,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
    ) -> None:
        """Build the trunk ``MLP(obs_dim -> 2 * action_dim)``; the bounds set the squash's scale and offset."""
        super().__init__()
        if log_std_min >= log_std_max:
            raise ValueError(f"log_std_min ({log_std_min}) must be below log_std_max ({log_std_max})")
        low = _as_bound(action_low, action_dim, "action_low")
        high = _as_bound(action_high, action_dim, "action_high")
        if not bool((high > low).all()):
            raise ValueError(
                f"action_high must exceed action_low, got low={low.tolist()} high={high.tolist()}"
            )
        self.net = MLP(obs_dim, 2 * action_dim, hidden, activation, layer_norm)
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_offset", (high + low) / 2.0)

    def distribution_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-squash ``(mean, log_std)``; log_std is squashed smoothly into ``[log_std_min, log_std_max]``."""
        mean, raw = self.net(obs).chunk(2, dim=-1)
        # tanh-rescaling instead of clamp keeps a gradient at the bounds (CleanRL/SpinningUp practice).
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def squash_log_det(self, u: torch.Tensor) -> torch.Tensor:
        """``log |da/du|`` summed over action dims, ``[...]``."""
        log_one_minus_tanh_sq = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return (log_one_minus_tanh_sq + self.action_scale.log()).sum(-1)

    def forward(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``(action[B, A], log_prob[B])`` with the reparameterisation trick.

        ``deterministic`` returns the squashed mean (and its log-density under the policy).
        ``generator`` draws the noise from a given stream for reproducibility; ``noise`` (standard
        normal ``[B, A]``, drawn by the caller) replaces the draw, so a compiled update needs no
        generator inside the graph.
        """
        mean, log_std = self.distribution_params(obs)
        if deterministic:
            eps = torch.zeros_like(mean)
        elif noise is not None:
            eps = noise
        else:
            eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * eps
        gauss_logp = (-0.5 * eps.square() - log_std - _LOG_SQRT_2PI).sum(-1)
        action = self.action_offset + self.action_scale * torch.tanh(u)
        return action, gauss_logp - self.squash_log_det(u)

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """Log-density of given in-bounds actions ``[B, A]`` (offline losses, e.g. behaviour cloning terms).

        Actions are clipped ``eps`` inside the bounds before ``atanh`` so dataset actions sitting
        exactly on a bound stay finite.
        """
        mean, log_std = self.distribution_params(obs)
        y = ((action - self.action_offset) / self.action_scale).clamp(-1.0 + eps, 1.0 - eps)
        u = torch.atanh(y)
        z = (u - mean) * torch.exp(-log_std)
        gauss_logp = (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)
        return gauss_logp - self.squash_log_det(u)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean action ``[B, A]`` (evaluation and deployment)."""
        mean, _ = self.distribution_params(obs)
        return self.action_offset + self.action_scale * torch.tanh(mean)


__all__: list[str] = ["TanhGaussianActor"]
