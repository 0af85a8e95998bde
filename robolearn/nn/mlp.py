"""Multi-layer perceptrons, the building block of every actor and critic."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}
"""Activation names a config may use."""


class MLP(nn.Sequential):
    """``Linear -> [LayerNorm] -> act`` blocks, then a linear output layer.

    ``output_gain`` scales the last layer's orthogonal init (PPO's small policy head, 0.01).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "elu",
        layer_norm: bool = False,
        output_gain: float | None = None,
    ) -> None:
        """Build the network; an unknown activation names the valid ones."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: unknown {activation!r}; expected one of {', '.join(ACTIVATIONS)}")
        if in_dim < 1 or out_dim < 1:
            raise ValueError(f"MLP dims must be >= 1, got in_dim={in_dim}, out_dim={out_dim}")
        layers: list[nn.Module] = []
        last = in_dim
        for width in hidden:
            layers.append(nn.Linear(last, width))
            if layer_norm:
                layers.append(nn.LayerNorm(width))
            layers.append(ACTIVATIONS[activation]())
            last = width
        head = nn.Linear(last, out_dim)
        if output_gain is not None:
            nn.init.orthogonal_(head.weight, gain=output_gain)
            nn.init.zeros_(head.bias)
        layers.append(head)
        super().__init__(*layers)
        self.in_dim, self.out_dim = in_dim, out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layers to ``x[..., in_dim]``."""
        return super().forward(x)
