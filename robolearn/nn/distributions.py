"""Diagonal Gaussian policy heads: a learnable, state-independent standard deviation around a mean.

The helpers are plain tensor functions so that losses (KL, log-probabilities of stored actions)
can use them without building ``torch.distributions`` objects, whose argument validation costs a
host sync per construction.
"""

from __future__ import annotations

import math

import torch
from torch import nn

_LOG_2PI = math.log(2.0 * math.pi)

STD_TYPES: tuple[str, ...] = ("log", "scalar")
"""How :class:`DiagGaussian` parameterises the standard deviation: ``log`` learns ``log std``,
``scalar`` learns ``std`` itself (rsl_rl's default; clamped positive when read)."""


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Log-density of ``actions[..., A]`` under ``N(mean, diag(std^2))``, summed over the last dim."""
    z = (actions - mean) / std
    return (-0.5 * z.square() - std.log() - 0.5 * _LOG_2PI).sum(dim=-1)


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian with standard deviations ``std[..., A]``, summed over the last dim."""
    return (0.5 + 0.5 * _LOG_2PI + std.log()).sum(dim=-1)


class DiagGaussian(nn.Module):
    """A state-independent standard deviation, learnable, to pair with a network that outputs the mean.

    ``std_type="log"`` stores ``log std`` (always positive when exponentiated); ``"scalar"`` stores
    ``std`` directly, floored at ``min_std`` when read so that log-probabilities stay finite.
    """

    def __init__(self, action_dim: int, init_std: float = 1.0, std_type: str = "log", min_std: float = 1e-6) -> None:
        """Create the parameter for ``action_dim`` actions, every std starting at ``init_std``."""
        super().__init__()
        if std_type not in STD_TYPES:
            raise ValueError(f"std_type: unknown {std_type!r}; expected one of {', '.join(STD_TYPES)}")
        if init_std <= 0:
            raise ValueError(f"init_std: expected a positive number, got {init_std}")
        self.std_type, self.min_std = std_type, min_std
        init = torch.full((action_dim,), float(init_std))
        if std_type == "log":
            self.log_std = nn.Parameter(init.log())
        else:
            self.std_param = nn.Parameter(init)

    def std(self, mean: torch.Tensor) -> torch.Tensor:
        """Standard deviations broadcast to ``mean``'s shape ``[..., A]``."""
        if self.std_type == "log":
            std = self.log_std.exp()
        else:
            std = self.std_param.clamp_min(self.min_std)
        return std.expand_as(mean)

    def sample(self, mean: torch.Tensor, std: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``mean + std * eps`` (``eps`` from ``generator``, or torch's global stream)."""
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + std * eps

    def log_prob(self, mean: torch.Tensor, std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of ``actions``, summed over action dims, ``[...]``."""
        return gaussian_log_prob(actions, mean, std)

    def entropy(self, std: torch.Tensor) -> torch.Tensor:
        """Entropy, summed over action dims, ``[...]``."""
        return gaussian_entropy(std)
