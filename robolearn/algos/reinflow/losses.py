"""ReinFlow's and DPPO's losses as pure functions of tensors (and, for the chain's transition means,
of the backbone they evaluate): the denoising chain's log-likelihood, its entropy, the value loss
and the BC regulariser. PPO's clipped surrogate and value loss are :mod:`robolearn.algos.common`'s.

A **chain** is ``[B, K + 1, D]``: the initial noise ``x_0`` and the ``K`` denoised states, each a
flattened chunk (``D = H * A``) in the model's ``[-1, 1]`` units; ``x_K`` is the action chunk.
"""

from __future__ import annotations

import torch
from torch import nn

from robolearn.nn.distributions import gaussian_entropy, gaussian_log_prob
from robolearn.nn.generative import flow_velocity


def chain_log_prob(chain: torch.Tensor, means: torch.Tensor, stds: torch.Tensor, first: int = 0,
                   include_initial: bool = True) -> torch.Tensor:
    """Log-likelihood ``[B]`` of a Markov chain of Gaussian transitions.

    ``means`` and ``stds`` ``[B, K', D]`` (``stds`` may broadcast) parameterise the transitions
    ``x_{k+1} ~ N(means[:, k - first], stds[:, k - first]^2)`` for ``k = first .. K - 1``, where ``K' =
    K - first``. With ``include_initial`` the ``N(0, I)`` density of ``x_0`` is added (a constant
    of the policy's parameters: it cancels in PPO's ratio, but makes the likelihood the chain's exact
    one). Transitions before ``first`` (DPPO's frozen steps) are left out.
    """
    num = chain.shape[1] - 1 - first
    if means.shape[1] != num:
        raise ValueError(f"chain_log_prob: {means.shape[1]} transition means for {num} transitions (K={chain.shape[1] - 1}, first={first})")
    lp = gaussian_log_prob(chain[:, first + 1 :], means, stds).sum(-1)
    if include_initial:
        lp = lp + gaussian_log_prob(chain[:, 0], torch.zeros((), device=chain.device), torch.ones((), device=chain.device))
    return lp


def chain_entropy(stds: torch.Tensor) -> torch.Tensor:
    """The summed entropy ``[B]`` of the chain's transitions given their means, ``stds`` ``[B, K, D]``:
    a proxy of the action's entropy that the noise network can raise.
    """
    return gaussian_entropy(stds).sum(-1)


def flow_transition_means(net: nn.Module, chain: torch.Tensor, cond: torch.Tensor, horizon: int,
                          action_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every Euler transition's mean ``x_k + v(x_k, t_k, cond) / K`` at once, ``[B, K, D]``, and the
    flat inputs ``(x_k [B*K, H, A], t_k [B*K])`` (for a noise network on the same states).

    One backbone call on ``B * K`` rows rather than ``K`` calls: the update evaluates every step of
    every sampled chain in parallel. Rows are world-major (row ``b * K + k``).
    """
    b, k1, d = chain.shape
    k = k1 - 1
    xk = chain[:, :-1].reshape(b * k, horizon, action_dim)
    t = (torch.arange(k, device=chain.device, dtype=chain.dtype) / k).repeat(b)
    cond_rows = cond.repeat_interleave(k, dim=0)
    means = (xk + flow_velocity(net, xk, t, cond_rows, k) / k).reshape(b, k, d)
    return means, t


def bc_regularizer(samples: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``mean_b |samples_b - reference_b|^2`` (summed over the chunk): the fine-tuned policy's noise-free
    samples against the pre-trained policy's from the same initial noise; it bounds the squared W2
    distance of their action distributions from above. ``reference`` enters detached.
    """
    return (samples - reference.detach()).square().flatten(1).sum(-1).mean()


def approx_kl(log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
    """``mean((r - 1) - log r)`` with ``r = exp(lp - lp_old)``: Schulman's non-negative, low-variance
    estimate of ``KL(old || new)`` from samples of the old policy (no closed form for a chain's KL).
    """
    log_ratio = log_probs - old_log_probs
    return (torch.expm1(log_ratio) - log_ratio).mean()


__all__ = [
    "approx_kl",
    "bc_regularizer",
    "chain_entropy",
    "chain_log_prob",
    "flow_transition_means",
]
