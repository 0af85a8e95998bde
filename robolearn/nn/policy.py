"""Deployable policy modules: ``obs[B, D] -> action[B, A]`` networks that export traces.

Each learner's ``policy_module()`` assembles one of these from its own parts, so export, the deploy
runtime and :func:`robolearn.load_policy` never need to know which algorithm trained the policy.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch
from torch import nn


class SquashedMean(nn.Module):
    """``obs -> actor.act_deterministic(obs)``: the deterministic action of a tanh-squashed or
    deterministic actor (SAC and the offline learners).
    """

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean action."""
        return self.actor.act_deterministic(obs)


class Normalized(nn.Module):
    """``obs -> policy((obs - mean) / std)``: fixed observation statistics folded into the policy."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, policy: nn.Module) -> None:
        super().__init__()
        self.register_buffer("mean", mean.detach().clone())
        self.register_buffer("std", std.detach().clone())
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's action for raw observations."""
        return self.policy((obs - self.mean) / self.std)


def deployable(
    module: nn.Module, stats: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None, group: str = "policy"
) -> nn.Module:
    """A CPU copy of ``module`` in eval mode, with ``stats[group]`` (mean, std) folded in if present.

    The copy is independent of the learner: exporting or deploying it never touches training state.
    """
    if stats and group in stats:
        mean, std = stats[group]
        module = Normalized(mean, std, module)
    return copy.deepcopy(module).cpu().eval()


__all__ = ["Normalized", "SquashedMean", "deployable"]
