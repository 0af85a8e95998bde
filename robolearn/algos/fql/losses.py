"""Flow Q-learning losses as pure functions returning named ``loss_*`` terms.

Isolation by construction, so the agent may sum the three losses and backpropagate once (FQL takes
one gradient step of their sum too): the flow loss reaches only the BC flow; the critic loss reads
the one-step policy and the target critics under ``no_grad`` (reaches only Q); the actor loss reads
the flow's samples under ``no_grad`` and the critics with detached parameters (reaches only the
one-step policy). Observations are the learner's normalised ones; actions of the batch and of the
critics are in env units; the flow and the one-step policy share the model's ``[-1, 1]`` space.
"""

from __future__ import annotations

import torch

from robolearn.algos.fql.networks import OneStepPolicy
from robolearn.nn.ensemble import CriticEnsemble
from robolearn.nn.generative import ChunkModel, flow_matching_loss
from robolearn.types import Batch


def aggregate(q: torch.Tensor, how: str) -> torch.Tensor:
    """Combine per-critic values ``[E, B]`` into ``[B]``: their ``mean`` or their ``min``."""
    if how == "mean":
        return q.mean(0)
    if how == "min":
        return q.min(0).values
    raise ValueError(f"q_agg: expected mean or min, got {how!r}")


def flow_loss(
    flow: ChunkModel, obs: torch.Tensor, action: torch.Tensor, noise: torch.Tensor, t: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Behaviour cloning of the flow on dataset actions (rectified flow, a one-action chunk).

    ``obs`` ``[B, D]`` (normalised), ``action`` ``[B, A]`` (env units), ``noise`` ``[B, A]`` (``x0``)
    and ``t`` ``[B]`` drawn by the caller (so one generator decides every draw). Returns ``loss_flow``.
    """
    x1 = flow.from_env(action).unsqueeze(1)
    loss = flow_matching_loss(flow.net, x1, flow.cond(obs), noise=noise.unsqueeze(1), t=t)
    return {"loss_flow": loss}


def flow_actions(flow: ChunkModel, obs: torch.Tensor, noise: torch.Tensor, steps: int) -> torch.Tensor:
    """The flow's samples ``[B, A]`` in the model space (clipped to ``[-1, 1]``) for noise ``[B, A]``:
    the distillation target, computed without a graph.
    """
    with torch.no_grad():
        return flow.sample_normalized(obs, noise.unsqueeze(1), steps).squeeze(1)


def critic_loss(
    critic: CriticEnsemble,
    target_critic: CriticEnsemble,
    actor: OneStepPolicy,
    batch: Batch,
    next_noise: torch.Tensor,
    gamma: float,
    q_agg: str,
    actor_group: str,
    critic_group: str,
) -> dict[str, torch.Tensor]:
    """Mean over critics of ``(Q(s, a) - y)^2`` with ``y = r + gamma * (1 - terminated) * agg Q'(s', a')``.

    ``a' = mu_omega(s', z')`` is the one-step policy's action at the next observation under the
    caller's noise ``z'`` ``[B, A]``, and ``Q'`` the target critics; only ``terminated`` stops
    bootstrapping (a time-out still bootstraps). Returns ``loss_critic`` and detached
    ``q_mean``/``target_mean``.
    """
    with torch.no_grad():
        next_action = actor(batch.next_obs[actor_group], next_noise)
        next_q = aggregate(target_critic(batch.next_obs[critic_group], next_action), q_agg)
        alive = (~batch.terminated.bool()).to(batch.reward.dtype)
        target = batch.reward + gamma * alive * next_q
    q = critic(batch.obs[critic_group], batch.action)
    return {
        "loss_critic": (q - target).square().mean(),
        "q_mean": q.detach().mean(),
        "target_mean": target.mean(),
    }


def actor_loss(
    actor: OneStepPolicy,
    flow: ChunkModel,
    critic: CriticEnsemble,
    obs: torch.Tensor,
    critic_obs: torch.Tensor,
    noise: torch.Tensor,
    alpha: float,
    flow_steps: int,
    normalize_q_loss: bool = True,
) -> dict[str, torch.Tensor]:
    """The one-step policy's loss ``-Q(s, mu_omega(s, z)) [/ mean |Q|] + alpha * mean (mu_omega(s, z) - mu_flow(s, z))^2``.

    The flow's sample and the policy's output share the noise ``z`` ``[B, A]``: the policy learns
    the flow's noise-to-action map (which mode a given ``z`` goes to), not just its marginal. No
    gradient reaches the flow (its sample is a constant) nor the critics (their parameters are
    detached; the gradient flows through the action only). Q is the critics' mean (as FQL's actor).
    The distillation error is in the model's ``[-1, 1]`` space, averaged over action dimensions.
    Returns ``loss_actor``, ``loss_distill``, ``loss_q`` and the detached ``actor_q``.
    """
    target = flow_actions(flow, obs, noise, flow_steps)
    x = actor.model_action(obs, noise)
    distill = (x - target).square().mean()
    q = critic(critic_obs, actor.to_env(x), detach_params=True).mean(0)
    q_loss = -q.mean()
    if normalize_q_loss:
        # The scale is a constant: it sets the step size, never the direction.
        q_loss = q_loss / q.detach().abs().mean().clamp_min(1e-6)
    return {
        "loss_actor": q_loss + alpha * distill,
        "loss_distill": distill.detach(),
        "loss_q": q_loss.detach(),
        "actor_q": q.detach().mean(),
    }


__all__: list[str] = ["actor_loss", "aggregate", "critic_loss", "flow_actions", "flow_loss"]
