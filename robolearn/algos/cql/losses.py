"""CQL(H) and Cal-QL losses as pure functions returning named ``loss_*`` terms.

Randomness is drawn once, by :func:`sample_actions`, so :func:`critic_loss` is a deterministic
function of networks, batch and samples (the tests replay it against an explicit loop).

Isolation by construction: the critic loss uses policy samples drawn under ``no_grad`` and a target
under ``no_grad`` (reaches only the critics); the actor loss evaluates the critics with detached
parameters (reaches only the actor); the temperature and Lagrange losses take their inputs detached
(reach only ``log_alpha`` / ``log_alpha_prime``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble
from robolearn.nn.hlgauss import HLGauss
from robolearn.nn.offline import q_from_output, regression_loss
from robolearn.types import Batch


@dataclass
class CQLSamples:
    """Actions the conservative term and the TD target evaluate (all detached), ``N = cql_n_actions``."""

    random: torch.Tensor
    """Uniform actions in the bounds, ``[B, N, A]``."""
    log_uniform_density: torch.Tensor
    """Log-density of the uniform sampler, ``-sum log(high - low)``, 0-d."""
    current: torch.Tensor
    """Policy actions at ``s``, ``[B, N, A]``."""
    current_log_prob: torch.Tensor
    """Their log-densities, ``[B, N]``."""
    next: torch.Tensor
    """Policy actions at ``s'`` (evaluated at ``s`` in the gap, as in CQL's reference code), ``[B, N, A]``."""
    next_log_prob: torch.Tensor
    """Their log-densities, ``[B, N]``."""
    backup: torch.Tensor
    """Policy actions at ``s'`` for the TD target, ``[B, K, A]``, ``K = N`` with max-backup else 1."""
    backup_log_prob: torch.Tensor
    """Their log-densities, ``[B, K]``."""


@torch.no_grad()
def sample_actions(
    actor: TanhGaussianActor,
    obs: torch.Tensor,
    next_obs: torch.Tensor,
    n_actions: int,
    max_target_backup: bool,
    generator: torch.Generator | None = None,
) -> CQLSamples:
    """Draw every action one CQL critic step needs from the actor's observations ``obs``/``next_obs`` ``[B, D]``."""
    batch_size = obs.shape[0]
    scale, offset = actor.action_scale, actor.action_offset
    u = torch.rand(
        (batch_size, n_actions, actor.action_dim), generator=generator, device=obs.device, dtype=obs.dtype
    )
    random = offset + scale * (2.0 * u - 1.0)
    log_uniform_density = -torch.log(2.0 * scale).sum()
    both = torch.cat([obs, next_obs], dim=0).unsqueeze(1).expand(-1, n_actions, -1)
    act, logp = actor(both, generator=generator)
    k = n_actions if max_target_backup else 1
    backup, backup_logp = actor(next_obs.unsqueeze(1).expand(-1, k, -1), generator=generator)
    return CQLSamples(
        random=random,
        log_uniform_density=log_uniform_density,
        current=act[:batch_size],
        current_log_prob=logp[:batch_size],
        next=act[batch_size:],
        next_log_prob=logp[batch_size:],
        backup=backup,
        backup_log_prob=backup_logp,
    )


def conservative_gap(
    q_data: torch.Tensor,
    q_random: torch.Tensor,
    q_current: torch.Tensor,
    q_next: torch.Tensor,
    samples: CQLSamples,
    temp: float = 1.0,
    importance_sample: bool = True,
    mc_return: torch.Tensor | None = None,
    clip_min: float = -float("inf"),
    clip_max: float = float("inf"),
) -> torch.Tensor:
    """CQL(H)'s per-critic gap ``mean_b clip(temp * logsumexp_j(Q_j / temp) - Q(s, a_data))``, ``[E]``.

    ``q_data`` is ``[E, B]``; ``q_random``/``q_current``/``q_next`` are ``[E, B, N]``. With
    importance sampling the logsumexp runs over ``Q - log density`` of the 3N samples (the
    estimate of ``log int exp Q(s, a) da``); without, over the raw Q of the samples and the data
    action. Cal-QL (``mc_return[B]`` given) first lifts the *policy* samples to
    ``max(Q, mc_return)``: the policy is pushed down only where its Q is above the behaviour
    policy's return, so Q stays a calibrated lower bound; uniform samples are left alone.
    """
    if mc_return is not None:
        bound = mc_return.unsqueeze(-1)
        q_current = torch.maximum(q_current, bound)
        q_next = torch.maximum(q_next, bound)
    if importance_sample:
        cat = torch.cat(
            [
                q_random - samples.log_uniform_density,
                q_next - samples.next_log_prob,
                q_current - samples.current_log_prob,
            ],
            dim=-1,
        )
    else:
        cat = torch.cat([q_random, q_data.unsqueeze(-1), q_next, q_current], dim=-1)
    ood = torch.logsumexp(cat / temp, dim=-1) * temp
    return (ood - q_data).clamp(clip_min, clip_max).mean(dim=-1)


def critic_loss(
    critic: CriticEnsemble,
    target_critic: CriticEnsemble,
    batch: Batch,
    samples: CQLSamples,
    alpha: torch.Tensor,
    cql_weight: torch.Tensor | float,
    gamma: float,
    critic_group: str,
    backup_entropy: bool = False,
    temp: float = 1.0,
    importance_sample: bool = True,
    target_action_gap: float = 0.0,
    clip_min: float = -float("inf"),
    clip_max: float = float("inf"),
    mc_return: torch.Tensor | None = None,
    hl: HLGauss | None = None,
) -> dict[str, torch.Tensor]:
    """``sum_e [TD_e + cql_weight * (gap_e - target_action_gap)]``.

    ``TD_e`` is the mean squared (or HL-Gauss cross-entropy) error towards
    ``r + gamma * (1 - terminated) * max_k min_e Q'_e(s', a'_k)`` (minus ``alpha * log pi`` with
    ``backup_entropy``). ``cql_weight`` is ``cql_alpha`` (or ``alpha' * cql_alpha``, detached, with
    Lagrange; then pass the target gap too). Returns ``loss_critic``, the detached per-critic
    ``cql_gap[E]`` (the Lagrange loss reads it) and diagnostics.
    """
    obs, next_obs = batch.obs[critic_group], batch.next_obs[critic_group]
    with torch.no_grad():
        k = samples.backup.shape[1]
        next_q = q_from_output(target_critic(next_obs.unsqueeze(1).expand(-1, k, -1), samples.backup), hl)
        next_v, best = next_q.min(dim=0).values.max(dim=-1)
        if backup_entropy:
            next_v = next_v - alpha * samples.backup_log_prob.gather(-1, best.unsqueeze(-1)).squeeze(-1)
        target = batch.reward + gamma * (~batch.terminated.bool()).to(batch.reward.dtype) * next_v
    n = samples.random.shape[1]
    # One critic call for the data action and the 3N sampled actions at s.
    actions = torch.cat([batch.action.unsqueeze(1), samples.random, samples.current, samples.next], dim=1)
    batch_size, m = obs.shape[0], 1 + 3 * n
    # Flattened rows run faster through the vmapped matmuls than a [B, M, D] block.
    flat_obs = obs.unsqueeze(1).expand(-1, m, -1).reshape(batch_size * m, -1)
    out = critic(flat_obs, actions.reshape(batch_size * m, -1))
    out = out.reshape(out.shape[0], batch_size, m, *out.shape[2:])
    q = q_from_output(out, hl)
    q_data, q_random, q_current, q_next = (
        q[:, :, 0],
        q[:, :, 1 : 1 + n],
        q[:, :, 1 + n : 1 + 2 * n],
        q[:, :, 1 + 2 * n :],
    )
    td = regression_loss(out[:, :, 0], target, hl).mean(dim=1)
    gap = conservative_gap(
        q_data, q_random, q_current, q_next, samples, temp, importance_sample, mc_return, clip_min, clip_max
    )
    loss = (td + cql_weight * (gap - target_action_gap)).sum()
    diagnostics = {
        "td_loss": td.detach().mean(),
        "cql_gap": gap.detach(),
        "q_mean": q_data.detach().mean(),
        "q_random": q_random.detach().mean(),
        "q_current": q_current.detach().mean(),
        "target_mean": target.mean(),
    }
    if mc_return is not None:
        # Fraction of policy-action Q-values Cal-QL lifted to the Monte-Carlo return.
        diagnostics["bound_rate"] = (q_current.detach() < mc_return.unsqueeze(-1)).float().mean()
    return {"loss_critic": loss, **diagnostics}


def actor_loss(
    actor: TanhGaussianActor,
    critic: CriticEnsemble,
    batch: Batch,
    alpha: torch.Tensor,
    actor_group: str,
    critic_group: str,
    bc: bool = False,
    generator: torch.Generator | None = None,
    hl: HLGauss | None = None,
) -> dict[str, torch.Tensor]:
    """SAC's ``mean(alpha * log pi(a~|s) - min_e Q_e(s, a~))`` with ``a~ ~ pi(s)`` reparameterised, or,
    during the BC warm-up (``bc``), ``mean(alpha * log pi(a~|s) - log pi(a|s))`` on dataset actions.

    The critics run with detached parameters. Returns ``loss_actor``, the detached ``log_prob[B]``
    (for the temperature loss) and ``entropy``.
    """
    obs = batch.obs[actor_group]
    action, log_prob = actor(obs, generator=generator)
    if bc:
        score = actor.log_prob(obs, batch.action)
    else:
        score = (
            q_from_output(critic(batch.obs[critic_group], action, detach_params=True), hl).min(dim=0).values
        )
    loss = (alpha.detach() * log_prob - score).mean()
    log_prob = log_prob.detach()
    return {"loss_actor": loss, "log_prob": log_prob, "entropy": -log_prob.mean()}


def alpha_prime_loss(
    log_alpha_prime: torch.Tensor, cql_gap: torch.Tensor, cql_alpha: float, target_action_gap: float
) -> dict[str, torch.Tensor]:
    """Lagrange dual loss ``-mean_e alpha' * cql_alpha * (gap_e - target_gap)`` with ``alpha' = clip(exp(log_alpha'), 0, 1e6)``.

    Gradient descent raises ``alpha'`` while the gap exceeds its target. ``cql_gap`` enters
    detached. Returns ``loss_alpha_prime`` and the detached ``alpha_prime``.
    """
    alpha_prime = log_alpha_prime.exp().clamp(0.0, 1e6)
    loss = -(alpha_prime * cql_alpha * (cql_gap.detach() - target_action_gap)).mean()
    return {"loss_alpha_prime": loss, "alpha_prime": alpha_prime.detach()}


__all__: list[str] = [
    "CQLSamples",
    "actor_loss",
    "alpha_prime_loss",
    "conservative_gap",
    "critic_loss",
    "sample_actions",
]
