"""TD3+BC losses as pure functions returning named ``loss_*`` terms.

Isolation by construction: the critic loss builds its target under ``no_grad`` (target actor and
critics never receive gradients); the actor loss evaluates the critic with detached parameters and
normalises by ``mean|Q|`` detached, so it reaches only the actor.
"""

from __future__ import annotations

import torch

from robolearn.nn.ensemble import CriticEnsemble
from robolearn.nn.hlgauss import HLGauss
from robolearn.nn.offline import DeterministicActor, q_from_output, regression_loss
from robolearn.types import Batch


def smoothed_target_action(
    target_actor: DeterministicActor,
    next_obs: torch.Tensor,
    noise: torch.Tensor,
    policy_noise: float,
    noise_clip: float,
) -> torch.Tensor:
    """TD3's target policy smoothing: ``clip(pi'(s') + clip(noise * policy_noise, +-noise_clip) * scale, bounds)``.

    ``noise`` is standard normal ``[B, A]``; noise and clip are in units of the action half-range
    ``scale`` (CORL scales both by ``max_action``), and the sum is clamped into the action bounds.
    """
    scale, offset = target_actor.action_scale, target_actor.action_offset
    eps = (noise * policy_noise).clamp(-noise_clip, noise_clip) * scale
    return torch.clamp(target_actor(next_obs) + eps, offset - scale, offset + scale)


def critic_loss(
    critic: CriticEnsemble,
    target_critic: CriticEnsemble,
    target_actor: DeterministicActor,
    batch: Batch,
    noise: torch.Tensor,
    gamma: float,
    policy_noise: float,
    noise_clip: float,
    actor_group: str,
    critic_group: str,
    hl: HLGauss | None = None,
) -> dict[str, torch.Tensor]:
    """Sum over critics of the mean TD loss towards ``r + gamma * (1 - terminated) * min_e Q'_e(s', a~)``.

    Only ``terminated`` stops bootstrapping (time-outs bootstrap). Returns ``loss_critic`` and
    detached ``q_mean``/``target_mean``.
    """
    with torch.no_grad():
        next_action = smoothed_target_action(
            target_actor, batch.next_obs[actor_group], noise, policy_noise, noise_clip
        )
        next_q = q_from_output(target_critic(batch.next_obs[critic_group], next_action), hl).min(dim=0).values
        target = batch.reward + gamma * (~batch.terminated.bool()).to(batch.reward.dtype) * next_q
    out = critic(batch.obs[critic_group], batch.action)
    loss = regression_loss(out, target, hl).mean(dim=1).sum()
    q = q_from_output(out.detach(), hl)
    return {"loss_critic": loss, "q_mean": q.mean(), "target_mean": target.mean()}


def actor_loss(
    actor: DeterministicActor,
    critic: CriticEnsemble,
    batch: Batch,
    alpha: float,
    actor_group: str,
    critic_group: str,
    hl: HLGauss | None = None,
) -> dict[str, torch.Tensor]:
    """``-lambda * mean Q_1(s, pi(s)) + mean (pi(s) - a)^2`` with ``lambda = alpha / mean|Q_1|`` (detached).

    Only the first critic scores the policy (TD3/CORL use ``critic_1``); the normalisation makes
    ``alpha`` independent of the reward scale. Returns ``loss_actor`` and detached ``lmbda``,
    ``bc_mse`` and ``q_pi``.
    """
    pi = actor(batch.obs[actor_group])
    first = torch.zeros(1, dtype=torch.long, device=pi.device)
    out = critic.forward_subset(first, batch.obs[critic_group], pi, detach_params=True)
    q = q_from_output(out, hl)[0]
    lmbda = alpha / q.abs().mean().detach()
    bc_mse = (pi - batch.action).square().mean()
    loss = -lmbda * q.mean() + bc_mse
    return {"loss_actor": loss, "lmbda": lmbda, "bc_mse": bc_mse.detach(), "q_pi": q.detach().mean()}


__all__: list[str] = ["actor_loss", "critic_loss", "smoothed_target_action"]
