"""Behaviour-cloning loss: a pure function of the actor and a batch."""

from __future__ import annotations

import torch
from torch import nn


def bc_loss(actor: nn.Module, obs: torch.Tensor, action: torch.Tensor) -> dict[str, torch.Tensor]:
    """``mean((pi(s) - a)^2)`` over batch and action dims (CORL's ``F.mse_loss(pi, action)``).

    ``actor`` maps observations to actions (a :class:`~robolearn.nn.offline.DeterministicActor`).
    Returns ``loss_actor`` and the detached diagnostic ``action_abs_error`` (mean ``|pi(s) - a|``).
    """
    pi = actor(obs)
    err = pi - action
    return {"loss_actor": err.square().mean(), "action_abs_error": err.detach().abs().mean()}


__all__: list[str] = ["bc_loss"]
