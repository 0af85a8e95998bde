"""PPO's losses as pure functions of tensors: no modules, no state, no host syncs."""

from __future__ import annotations

import torch

# The clipped surrogate is shared with the distillation student's AACD mode, the value loss with
# ReinFlow/DPPO.
from robolearn.algos.common import masked_mean, surrogate_loss, value_loss


def entropy_loss(entropy: torch.Tensor, coef: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``-coef * mean(entropy)``: minimising it rewards exploration."""
    return -coef * masked_mean(entropy, mask)


def gaussian_kl(
    mean_p: torch.Tensor, std_p: torch.Tensor, mean_q: torch.Tensor, std_q: torch.Tensor
) -> torch.Tensor:
    """``KL(N(mean_p, std_p^2) || N(mean_q, std_q^2))`` of diagonal Gaussians, summed over the last dim."""
    return (
        torch.log(std_q / std_p) + (std_p.square() + (mean_p - mean_q).square()) / (2.0 * std_q.square()) - 0.5
    ).sum(dim=-1)


def adaptive_learning_rate(
    lr: torch.Tensor,
    kl: torch.Tensor,
    desired_kl: float,
    factor: float = 1.5,
    min_lr: float = 1e-5,
    max_lr: float = 1e-2,
) -> torch.Tensor:
    """rsl_rl's rule, on tensors: divide ``lr`` by ``factor`` when ``kl > 2 * desired_kl``, multiply
    it when ``0 < kl < desired_kl / 2``, within ``[min_lr, max_lr]``; otherwise keep it.
    """
    down = (lr / factor).clamp_min(min_lr)
    up = (lr * factor).clamp_max(max_lr)
    raise_lr = (kl < desired_kl / 2.0) & (kl > 0.0)
    return torch.where(kl > 2.0 * desired_kl, down, torch.where(raise_lr, up, lr))


def ppo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_param: float,
    value_clip: bool,
    value_loss_coef: float,
    entropy_coef: float,
    mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The three weighted terms whose sum PPO minimises: ``loss_policy``, ``loss_value``, ``loss_entropy``.

    ``loss_policy`` depends on the actor only and ``loss_value`` on the critic only, so the two
    networks' gradients stay separate (shared parameters would be the caller's choice). ``mask``
    (recurrent PPO's chunk padding) keeps only the real steps in every mean.
    """
    return {
        "loss_policy": surrogate_loss(log_probs, old_log_probs, advantages, clip_param, mask),
        "loss_value": value_loss_coef
        * value_loss(values, old_values, returns, clip_param if value_clip else None, mask),
        "loss_entropy": entropy_loss(entropy, entropy_coef, mask),
    }
