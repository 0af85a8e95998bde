"""Empirical observation normalisation with running statistics (Chan et al. parallel update)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class EmpiricalNormalizer(nn.Module):
    """``(x - mean) / sqrt(var + eps)``, clipped; statistics are buffers, so they checkpoint and
    export with the model. ``update`` is called by the algorithm on fresh data only.
    """

    def __init__(self, dim: int, eps: float = 1e-8, clip: float | None = 10.0, until: int | None = None) -> None:
        """``until``: stop updating after this many samples (freezes the statistics)."""
        super().__init__()
        self.eps, self.clip, self.until = eps, clip, until
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.reduce_mean: Callable[[torch.Tensor], torch.Tensor] | None = None
        """Data-parallel training sets this to the mean over ranks (robolearn.runners.distributed), so
        every rank folds the same global batch statistics in and the normalisers stay identical."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x[..., dim]``."""
        y = (x - self.mean) * torch.rsqrt(self.var + self.eps)
        return y.clamp(-self.clip, self.clip) if self.clip is not None else y

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``x[B, dim]`` into the running mean and variance (no host sync)."""
        x = x.reshape(-1, self.mean.shape[0]).to(self.mean.dtype)
        n = x.shape[0]
        if self.reduce_mean is not None:
            # One collective: the mean over ranks of (n, sum x, sum x^2) gives the combined batch's
            # moments. The count then advances by the mean batch per rank, which weights the
            # update exactly as one batch of all ranks' samples would (both scale by the rank count).
            dim = self.mean.shape[0]
            stats = self.reduce_mean(torch.cat([x.new_full((1,), float(n)), x.sum(dim=0), x.square().sum(dim=0)]))
            n_mean = stats[0].to(self.count.dtype)
            batch_mean = stats[1 : 1 + dim] / stats[0]
            batch_var = (stats[1 + dim :] / stats[0] - batch_mean.square()).clamp_min(0.0)
            total = self.count + n_mean
            w = (n_mean / total).to(self.mean.dtype)
        else:
            batch_mean = x.mean(dim=0)
            batch_var = x.var(dim=0, unbiased=False)
            total = self.count + n
            w = (n / total).to(self.mean.dtype)
        delta = batch_mean - self.mean
        mean = self.mean + delta * w
        var = self.var * (1 - w) + batch_var * w + delta.square() * w * (1 - w)
        if self.until is not None:
            # Frozen once ``until`` samples were seen: a select, not an early return on
            # ``float(self.count)``, which would read the count back to the host every call.
            frozen = self.count >= self.until
            mean = torch.where(frozen, self.mean, mean)
            var = torch.where(frozen, self.var, var)
            total = torch.where(frozen, self.count, total)
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(total)
