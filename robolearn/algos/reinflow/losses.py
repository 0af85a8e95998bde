"""ReinFlow's and DPPO's losses as pure functions of tensors (and, for the chain's transition means,
of the backbone they evaluate): the denoising chain's log-likelihood, its entropy, the value loss
and the BC regulariser. PPO's clipped surrogate is :func:`robolearn.algos.common.surrogate_loss`.

A **chain** is ``[B, K + 1, D]``: the initial noise ``x_0`` and the ``K`` denoised states, each a
flattened chunk (``D = H * A``) in the model's ``[-1, 1]`` units; ``x_K`` is the action chunk.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from robolearn.algos.common import masked_mean
from robolearn.nn.generative import SHORTCUT_LOG2_STEPS

LOG_2PI = math.log(2.0 * math.pi)
"""``log(2 pi)``."""


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Elementwise ``log N(x; mean, std^2)`` (broadcasting ``mean`` and ``std``)."""
    return -0.5 * ((x - mean) / std).square() - torch.log(std) - 0.5 * LOG_2PI


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
    lp = gaussian_log_prob(chain[:, first + 1 :], means, stds).flatten(1).sum(-1)
    if include_initial:
        lp = lp + gaussian_log_prob(chain[:, 0], torch.zeros((), device=chain.device), torch.ones((), device=chain.device)).sum(-1)
    return lp


def gaussian_entropy(stds: torch.Tensor) -> torch.Tensor:
    """The summed entropy ``[B]`` of independent Gaussians of ``stds`` ``[B, ...]``:
    ``sum(log std + 0.5 log(2 pi e))``; the chain's entropy given its means (a proxy of the action's
    entropy that the noise network can raise).
    """
    return (torch.log(stds) + 0.5 * (LOG_2PI + 1.0)).flatten(1).sum(-1)


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
    if getattr(net, "step_conditioned", False):  # a shortcut model is told its step size
        v = net(xk, t, cond_rows, torch.full_like(t, shortcut_step(k)))
    else:
        v = net(xk, t, cond_rows)
    means = (xk + v / k).reshape(b, k, d)
    return means, t


def shortcut_step(steps: int) -> float:
    """The step size a shortcut backbone is told for ``steps`` Euler steps: ``1 / steps``, or 0 (plain
    flow matching) below the finest size it was trained on, as :func:`robolearn.nn.generative.flow_sample`
    tells it, so the chain's means are the pre-trained sampler's steps at any ``K``.
    """
    return 1.0 / steps if 1.0 / steps >= 2.0 ** -(SHORTCUT_LOG2_STEPS - 1) else 0.0


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip_param: float | None = None) -> torch.Tensor:
    """Squared error to ``returns``; with ``clip_param``, PPO2's pessimistic max with the error of the
    value clipped to ``old_values +- clip_param``.
    """
    unclipped = (values - returns).square()
    if clip_param is None:
        return masked_mean(unclipped)
    clipped = old_values + (values - old_values).clamp(-clip_param, clip_param)
    return masked_mean(torch.maximum(unclipped, (clipped - returns).square()))


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
    "chain_log_prob",
    "flow_transition_means",
    "gaussian_entropy",
    "gaussian_log_prob",
    "shortcut_step",
    "value_loss",
]
