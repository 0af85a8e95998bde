"""IQL losses as pure functions returning named ``loss_*`` terms.

Isolation by construction, so the agent may sum the three losses and backpropagate once: the value
loss reads the target critics under ``no_grad`` (reaches only V); the critic loss reads ``V(s')``
under ``no_grad`` (reaches only Q); the actor loss takes the advantage detached (reaches only the
actor). All three see the parameters before this step's updates, as in CORL.
"""

from __future__ import annotations

import torch
from torch import nn

from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble
from robolearn.nn.hlgauss import HLGauss
from robolearn.nn.offline import q_from_output, regression_loss
from robolearn.types import Batch


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric squared loss ``mean(|expectile - 1[diff < 0]| * diff^2)``.

    With ``diff = Q - V``, ``expectile > 0.5`` weighs ``V`` below ``Q`` more, so V approaches an
    upper expectile of Q over the data's actions (a soft max without querying unseen actions).
    """
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


def value_loss(
    value: nn.Module,
    target_critic: CriticEnsemble,
    batch: Batch,
    expectile: float,
    critic_group: str,
    hl: HLGauss | None = None,
) -> dict[str, torch.Tensor]:
    """Expectile regression of ``V(s)`` towards ``min_e Q'_e(s, a)`` at dataset actions.

    Returns ``loss_value``, the detached ``advantage[B] = min Q' - V`` (the actor's weights) and ``v_mean``.
    """
    obs = batch.obs[critic_group]
    with torch.no_grad():
        q = q_from_output(target_critic(obs, batch.action), hl).min(dim=0).values
    v = value(obs).squeeze(-1)
    adv = q - v
    return {
        "loss_value": expectile_loss(adv, expectile),
        "advantage": adv.detach(),
        "v_mean": v.detach().mean(),
    }


def critic_loss(
    critic: CriticEnsemble,
    value: nn.Module,
    batch: Batch,
    gamma: float,
    critic_group: str,
    hl: HLGauss | None = None,
) -> dict[str, torch.Tensor]:
    """Mean over critics of the TD loss towards ``r + gamma * (1 - terminated) * V(s')``.

    Only ``terminated`` stops bootstrapping. CORL averages (not sums) its twin Q losses. Returns
    ``loss_critic`` and detached ``q_mean``/``target_mean``.
    """
    with torch.no_grad():
        next_v = value(batch.next_obs[critic_group]).squeeze(-1)
        target = batch.reward + gamma * (~batch.terminated.bool()).to(batch.reward.dtype) * next_v
    out = critic(batch.obs[critic_group], batch.action)
    loss = regression_loss(out, target, hl).mean()
    return {
        "loss_critic": loss,
        "q_mean": q_from_output(out.detach(), hl).mean(),
        "target_mean": target.mean(),
    }


def actor_loss(
    actor: nn.Module,
    batch: Batch,
    advantage: torch.Tensor,
    beta: float,
    exp_adv_max: float,
    actor_group: str,
) -> dict[str, torch.Tensor]:
    """Advantage-weighted regression ``mean(min(exp(beta * adv), exp_adv_max) * bc)``.

    ``bc`` is ``-log pi(a|s)`` for a :class:`~robolearn.nn.actors.TanhGaussianActor` and
    ``sum_j (pi(s)_j - a_j)^2`` for a deterministic actor (CORL). Returns ``loss_actor`` and the
    detached ``weight_mean``.
    """
    weight = torch.exp(beta * advantage.detach()).clamp(max=exp_adv_max)
    obs = batch.obs[actor_group]
    if isinstance(actor, TanhGaussianActor):
        bc = -actor.log_prob(obs, batch.action)
    else:
        bc = (actor(obs) - batch.action).square().sum(-1)
    return {"loss_actor": (weight * bc).mean(), "weight_mean": weight.mean()}


__all__: list[str] = ["actor_loss", "critic_loss", "expectile_loss", "value_loss"]
