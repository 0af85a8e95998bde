"""SAC losses as pure functions of modules and tensors, each returning named ``loss_*`` terms.

Gradient isolation is by construction, and the tests check it: the critic loss reaches only the
critic (targets are built under ``no_grad``, alpha enters detached); the actor loss reaches only
the actor (the critics are evaluated with detached parameters, alpha detached); the alpha loss
reaches only ``log_alpha`` (log-probabilities enter detached).
"""

from __future__ import annotations

import torch

from robolearn.algos.common import alpha_loss
from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble
from robolearn.types import Batch


def td_target(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
) -> torch.Tensor:
    """Soft TD target ``r + gamma * (1 - terminated) * (min_e next_q[e] - alpha * next_log_prob)``, ``[B]``.

    ``next_q`` is ``[M, B]`` from the (subset of) target critics at ``(s', a' ~ pi(s'))``. Only
    ``terminated`` stops bootstrapping; a time-out keeps ``gamma * V(s')`` with ``s'`` the true
    final observation.
    """
    next_v = next_q.min(dim=0).values - alpha * next_log_prob
    return reward + gamma * (~terminated.bool()).to(reward.dtype) * next_v


def critic_loss(
    critic: CriticEnsemble,
    target_critic: CriticEnsemble,
    actor: TanhGaussianActor,
    batch: Batch,
    alpha: torch.Tensor,
    gamma: float,
    actor_group: str,
    critic_group: str,
    subset: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Sum over critics of the mean squared TD error against the soft target.

    ``subset`` (long ``[M]``) picks the target critics the min runs over (REDQ); ``None`` uses all.
    ``noise`` (``[B, A]`` standard normal) replaces the draw of the next action from ``generator``.
    Returns ``loss_critic`` plus detached diagnostics ``q_mean`` and ``target_mean``.
    """
    with torch.no_grad():
        next_action, next_log_prob = actor(batch.next_obs[actor_group], generator=generator, noise=noise)
        next_obs = batch.next_obs[critic_group]
        if subset is None:
            next_q = target_critic(next_obs, next_action)
        else:
            next_q = target_critic.forward_subset(subset, next_obs, next_action)
        target = td_target(batch.reward, batch.terminated, next_q, next_log_prob, alpha.detach(), gamma)
    q = critic(batch.obs[critic_group], batch.action)  # [E, B]
    loss = (q - target.unsqueeze(0)).square().mean(dim=1).sum()
    return {"loss_critic": loss, "q_mean": q.detach().mean(), "target_mean": target.mean()}


def actor_loss(
    actor: TanhGaussianActor,
    critic: CriticEnsemble,
    batch: Batch,
    alpha: torch.Tensor,
    actor_group: str,
    critic_group: str,
    q_reduction: str = "min",
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """``mean(alpha * log_pi(a|s) - Q(s, a))`` with ``a ~ pi(s)`` reparameterised.

    Q reduces the ensemble by ``min`` (SAC) or ``mean`` (REDQ). The critics run with detached
    parameters, so only the actor receives gradients. ``noise`` (``[B, A]`` standard normal)
    replaces the draw from ``generator``. Returns ``loss_actor`` and the detached ``log_prob[B]``
    (the alpha loss reuses it) and ``entropy`` (``-mean log_prob``).
    """
    action, log_prob = actor(batch.obs[actor_group], generator=generator, noise=noise)
    q_all = critic(batch.obs[critic_group], action, detach_params=True)
    q = q_all.min(dim=0).values if q_reduction == "min" else q_all.mean(dim=0)
    loss = (alpha.detach() * log_prob - q).mean()
    log_prob = log_prob.detach()
    return {"loss_actor": loss, "log_prob": log_prob, "entropy": -log_prob.mean()}


__all__: list[str] = ["actor_loss", "alpha_loss", "critic_loss", "td_target"]
