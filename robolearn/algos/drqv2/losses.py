"""DrQ-v2 losses as pure functions of modules and tensors, each returning named ``loss_*`` terms.

The functions work on features, not pixels: the agent encodes the augmented images once per step
(:class:`~robolearn.nn.vision.CNNEncoder`) and hands the features here, so one encoder pass serves
the critic loss (with gradient) and the actor loss (detached in pixel mode). Actions are in the
actor's [-1, 1] scale. Gradient isolation is by construction: targets are built under ``no_grad``;
the actor loss evaluates the critic with detached parameters, so it reaches only the actor.
"""

from __future__ import annotations

from typing import Protocol

import torch


class _Head(Protocol):
    def head(self, features: torch.Tensor) -> torch.Tensor: ...


class _Critic(Protocol):
    def __call__(self, features: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor: ...


def noisy_action(mean: torch.Tensor, std: float, noise: torch.Tensor, clip: float | None) -> torch.Tensor:
    """``clamp(mean + clamp(std * noise, -clip, clip), -1, 1)`` (``clip`` ``None``: unclipped noise).

    ``mean`` is the actor's tanh output in [-1, 1], ``noise`` standard normal of its shape. DrQ-v2's
    ``TruncatedNormal``: clipped noise for the actor loss and the target (target policy smoothing),
    unclipped for exploration; the result always stays in the action box.
    """
    eps = std * noise
    if clip is not None:
        eps = eps.clamp(-clip, clip)
    return (mean + eps).clamp(-1.0, 1.0)


def nstep_target(reward: torch.Tensor, discount: torch.Tensor, next_q: torch.Tensor) -> torch.Tensor:
    """``reward + discount * min_e next_q[e]``, ``[B]``.

    ``reward`` is the n-step return ``sum_{i<m} gamma^i r_{t+i}`` of a window of ``m <= n`` steps and
    ``discount`` is ``gamma^m``, or 0 when the window ended in a termination (a time-out keeps
    ``gamma^m`` and bootstraps from the true final observation). ``next_q`` is ``[E, B]``.
    """
    return reward + discount * next_q.min(dim=0).values


def critic_loss(
    critic: _Critic,
    target_critic: _Critic,
    actor: _Head,
    obs_features: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_actor_features: torch.Tensor,
    next_critic_features: torch.Tensor,
    std: float,
    clip: float,
    noise: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Sum over the Q networks of the mean squared error against the n-step double-Q target.

    ``obs_features`` (what the critic reads at ``s_t``) carries the gradient to the encoder in pixel
    mode; the next features are taken as constants. The target action is the actor's mean at
    ``s_{t+n}`` plus clipped noise (``noise`` ``[B, A]`` standard normal).
    Returns ``loss_critic`` and the detached diagnostics ``q_mean`` and ``target_mean``.
    """
    with torch.no_grad():
        next_action = noisy_action(actor.head(next_actor_features), std, noise, clip)
        next_q = target_critic(next_critic_features, next_action)
        target = nstep_target(reward, discount, next_q)
    q = critic(obs_features, action)  # [E, B]
    loss = (q - target.unsqueeze(0)).square().mean(dim=1).sum()
    return {"loss_critic": loss, "q_mean": q.detach().mean(), "target_mean": target.mean()}


def actor_loss(
    actor: _Head,
    critic: _Critic,
    actor_features: torch.Tensor,
    critic_features: torch.Tensor,
    std: float,
    clip: float,
    noise: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """``-mean(min_e Q_e(s, a))`` with ``a`` the actor's mean plus clipped noise (reparameterised).

    The critic runs with detached parameters on detached ``critic_features``: only the actor (and,
    through ``actor_features``, whatever produced them with gradient) learns from this loss.
    """
    action = noisy_action(actor.head(actor_features), std, noise, clip)
    q = critic(critic_features.detach(), action, detach_params=True).min(dim=0).values
    return {"loss_actor": -q.mean(), "action_abs_mean": action.detach().abs().mean()}


__all__: list[str] = ["actor_loss", "critic_loss", "noisy_action", "nstep_target"]
