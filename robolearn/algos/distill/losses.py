"""Distillation's schedules and losses as pure functions of numbers and tensors (no modules, no state)."""

from __future__ import annotations

import math

import torch

from robolearn.data.rollout import gae_recursion


def scheduled(kind: str, iteration: int, start: float, end: float, iterations: int, rate: float = 1.0) -> float:
    """The value of a schedule after ``iteration`` updates.

    ``linear``: ``start + (end - start) * min(iteration / iterations, 1)``; ``exponential``:
    ``start * rate**iteration``, never past ``end`` (from either side); ``constant``: ``start``.
    """
    if iteration < 0:
        raise ValueError(f"iteration: expected >= 0, got {iteration}")
    if kind == "constant":
        return float(start)
    if kind == "linear":
        return float(start + (end - start) * min(iteration / iterations, 1.0))
    if kind == "exponential":
        value = start * rate**iteration
        return float(max(value, end) if start >= end else min(value, end))
    raise ValueError(f"schedule: unknown {kind!r}; expected linear, exponential or constant")


def imitation_loss(
    mean: torch.Tensor, std: torch.Tensor, target: torch.Tensor, kind: str = "mse"
) -> torch.Tensor:
    """How far the student's Gaussian ``(mean, std)`` is from the teacher's ``target`` actions ``[B, A]``.

    ``mse``: ``mean((mean - target)**2)`` over batch and action dimensions (the std gets no
    gradient); ``nll``: the Gaussian negative log-likelihood of ``target``, summed over action
    dimensions and averaged over the batch (learns the std too).
    """
    if kind == "mse":
        return (mean - target).square().mean()
    if kind == "nll":
        var = std.square()
        nll = 0.5 * ((target - mean).square() / var + var.log() + math.log(2.0 * math.pi))
        return nll.sum(-1).mean()
    raise ValueError(f"imitation_loss: unknown {kind!r}; expected mse or nll")


def action_gap(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Root-mean-square difference between student and teacher actions ``[B, A]`` (a 0-d tensor)."""
    return (student - teacher).square().mean().sqrt()


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and returns over a rollout ``[T, N]``.

    ``next_values[t]`` is the critic at the observation after step ``t`` (the pre-reset one for
    worlds that ended), so a time-out bootstraps from its true final state; ``terminated`` stops the
    bootstrap, ``done`` (terminated or truncated) stops the recursion across the episode boundary.
    Returns ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    not_terminal = (~terminated).to(values.dtype)
    carry_on = (~done).to(values.dtype)
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = gae_recursion(deltas, carry_on, gamma, lam)
    return advantages, advantages + values


def q_actor_loss(q: torch.Tensor) -> torch.Tensor:
    """``-mean(Q) / mean(|Q|)`` with the scale detached (TD3+BC): the deterministic policy gradient of
    a frozen critic, independent of the critic's reward scale, so one weight fits every task.
    """
    return -q.mean() / q.abs().mean().detach().clamp_min(1e-6)


def value_loss(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """Squared error of a fine-tuned critic against the student's returns."""
    return (returns - values).square().mean()


__all__ = ["action_gap", "gae", "imitation_loss", "q_actor_loss", "scheduled", "value_loss"]
