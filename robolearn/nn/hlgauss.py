"""HL-Gauss: value regression as classification over a fixed histogram (Farebrother et al., 2024).

"Stop Regressing: Training Value Functions via Classification for Scalable Deep RL" replaces a
critic's mean-squared TD error with a cross-entropy between the critic's ``num_bins`` logits and a
*target histogram*: the scalar target ``y`` is smeared by a Gaussian ``N(y, sigma^2)`` truncated to
``[v_min, v_max]``, and bin ``i`` (edges ``b_i``, ``b_{i+1}``) receives the mass

    p_i = (Phi((b_{i+1} - y) / sigma) - Phi((b_i - y) / sigma)) / (Phi((v_max - y) / sigma) - Phi((v_min - y) / sigma)).

The paper's recommended width is ``sigma = 0.75 * bin_width`` (mass spread over ~6 bins). The
critic's scalar value is the expectation of its softmax over the bin centres. The loss was
introduced as the histogram loss by Imani & White (2018); this module is the transform and loss only,
the critic is any network with ``num_bins`` outputs (e.g. ``CriticEnsemble(num_outputs=num_bins)``).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def hl_gauss_probs(target: torch.Tensor, edges: torch.Tensor, sigma: float) -> torch.Tensor:
    """Target histogram ``[..., K]`` of scalar targets ``[...]`` over bins with ``edges[K + 1]``.

    Targets are clamped into ``[edges[0], edges[-1]]`` first: the truncated Gaussian's normaliser
    ``Phi((v_max - y)/sigma) - Phi((v_min - y)/sigma)`` underflows to 0 for a target many sigmas
    outside the support, and 0/0 would poison the loss; clamping projects such a target onto the
    nearest representable value instead. Each row sums to 1.
    """
    y = target.clamp(edges[0], edges[-1]).unsqueeze(-1)
    # Phi(z) = (1 + erf(z / sqrt 2)) / 2; the 1/2 offsets cancel in differences, the factor in the ratio.
    cdf = torch.special.erf((edges - y) / (math.sqrt(2.0) * sigma))
    mass = cdf[..., 1:] - cdf[..., :-1]
    return mass / (cdf[..., -1:] - cdf[..., :1])


class HLGauss(nn.Module):
    """The HL-Gauss transform between scalars and ``num_bins`` logits on ``[v_min, v_max]``.

    The bin edges and centres are non-persistent buffers: they follow ``.to(device)`` but are
    rebuilt from the config, never checkpointed.
    """

    def __init__(self, num_bins: int, v_min: float, v_max: float, sigma_ratio: float = 0.75) -> None:
        """``num_bins`` equal bins on ``[v_min, v_max]``; ``sigma = sigma_ratio * bin_width`` (paper: 0.75)."""
        super().__init__()
        if num_bins < 2:
            raise ValueError(f"num_bins: expected >= 2, got {num_bins}")
        if not v_max > v_min:
            raise ValueError(f"v_max ({v_max}) must exceed v_min ({v_min})")
        if sigma_ratio <= 0.0:
            raise ValueError(f"sigma_ratio: expected > 0, got {sigma_ratio}")
        self.num_bins, self.v_min, self.v_max = int(num_bins), float(v_min), float(v_max)
        self.bin_width = (self.v_max - self.v_min) / self.num_bins
        self.sigma = sigma_ratio * self.bin_width
        edges = torch.linspace(self.v_min, self.v_max, self.num_bins + 1)
        self.register_buffer("edges", edges, persistent=False)
        self.register_buffer("centers", (edges[:-1] + edges[1:]) / 2.0, persistent=False)

    def probs(self, target: torch.Tensor) -> torch.Tensor:
        """Target histogram ``[..., K]`` of scalar targets ``[...]``."""
        return hl_gauss_probs(target, self.edges, self.sigma)

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        """Expected value ``[...]`` of the categorical distribution with logits ``[..., K]``."""
        return (torch.softmax(logits, dim=-1) * self.centers).sum(-1)

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy ``-sum_i p_i(target) log softmax(logits)_i``, unreduced ``[...]``.

        ``target`` enters without gradient (a TD target or regression label).
        """
        p = self.probs(target.detach())
        return -(p * torch.log_softmax(logits, dim=-1)).sum(-1)


__all__: list[str] = ["HLGauss", "hl_gauss_probs"]
