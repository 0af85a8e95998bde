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

    def moments(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, sum d, sum d^2)`` with ``d = x - mean`` (the running mean, equal on every rank) of a
        batch ``x[B, dim]``, as one vector ``[1 + 2 dim]``: what :meth:`fold` takes, and what
        data-parallel training averages over the ranks. Centring on the running mean keeps the
        variance ``E[d^2] - E[d]^2`` from cancelling catastrophically for far-from-zero inputs, and the
        sums are float64 (a first batch is centred on zero: positions near 1,000 in float32 sums of
        squares lose a percent of their variance).
        """
        d = x.reshape(-1, self.mean.shape[0]).to(torch.float64) - self.mean.to(torch.float64)
        return torch.cat([d.new_full((1,), float(d.shape[0])), d.sum(dim=0), d.square().sum(dim=0)])

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``x[B, dim]`` into the running mean and variance (no host sync). With
        :attr:`reduce_mean` set, the batch's moments are first averaged over the ranks (one collective).
        """
        if self.reduce_mean is not None:
            self.fold(self.reduce_mean(self.moments(x)))
            return
        x = x.reshape(-1, self.mean.shape[0]).to(self.mean.dtype)
        self._fold(x.mean(dim=0), x.var(dim=0, unbiased=False), x.shape[0])

    @torch.no_grad()
    def fold(self, moments: torch.Tensor) -> None:
        """Fold :meth:`moments` (or their mean over ranks) in. Averaged moments describe the combined
        batch of all ranks; the count then advances by the mean batch per rank, which weights the
        update exactly as one batch of all ranks' samples would (both scale by the rank count).
        """
        dim = self.mean.shape[0]
        n = moments[0]
        shift = moments[1 : 1 + dim] / n
        batch_var = (moments[1 + dim :] / n - shift.square()).clamp_min(0.0)
        dtype = self.mean.dtype
        self._fold(self.mean + shift.to(dtype), batch_var.to(dtype), n.to(self.count.dtype))

    def _fold(self, batch_mean: torch.Tensor, batch_var: torch.Tensor, n: torch.Tensor | int) -> None:
        """Chan et al.'s parallel update with a batch of ``n`` samples of these moments."""
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


@torch.no_grad()
def update_normalizers(
    pairs: list[tuple[EmpiricalNormalizer, torch.Tensor]], reduce_mean: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    """Update several normalisers with one collective: their batches' moments are concatenated,
    averaged over the ranks by ``reduce_mean`` once, and each folds its own part (data-parallel PPO
    updates its actor's and critic's normalisers every rollout step; one all-reduce instead of two
    halves the latency that step pays on gloo).
    """
    parts = [norm.moments(x) for norm, x in pairs]
    reduced = reduce_mean(torch.cat(parts))
    for (norm, _), chunk in zip(pairs, torch.split(reduced, [p.numel() for p in parts]), strict=True):
        norm.fold(chunk)
