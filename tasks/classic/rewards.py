"""Smooth tolerance rewards in ``[0, 1]``, with the DeepMind Control Suite's conventions.

``tolerance(x, bounds, margin, sigmoid, value_at_margin)`` is 1 where ``bounds[0] <= x <= bounds[1]``
and falls off with the distance ``d`` to the nearest bound: ``sigmoid(d / margin)``, each sigmoid
scaled so that it equals ``value_at_margin`` at ``d == margin``. With ``margin == 0`` it is the
indicator of the bounds. Rewards built from these stay in ``[0, 1]`` per step, so over a
1000-step episode a return of 1000 is the maximum whatever the task.
"""

from __future__ import annotations

import math

import torch

DEFAULT_VALUE_AT_MARGIN = 0.1
"""DMC's default: a gaussian tolerance is 0.1 one margin away from the bounds."""

SIGMOIDS = (
    "gaussian",
    "hyperbolic",
    "long_tail",
    "reciprocal",
    "cosine",
    "linear",
    "quadratic",
    "tanh_squared",
)
"""Names accepted by :func:`tolerance`."""

# These reach exactly zero at a finite distance, so value_at_margin = 0 is meaningful for them;
# the others are positive everywhere and need 0 < value_at_margin < 1 to have a finite scale.
_FINITE_SUPPORT = ("cosine", "linear", "quadratic")


def falloff(x: torch.Tensor, value_at_1: float, kind: str) -> torch.Tensor:
    """Falloff ``f(x)`` with ``f(0) = 1`` and ``f(1) = value_at_1``, for ``x >= 0`` in margins.

    Raises:
        ValueError: for an unknown ``kind`` or a ``value_at_1`` outside the range ``kind`` allows.
    """
    if kind not in SIGMOIDS:
        raise ValueError(f"sigmoid: unknown sigmoid {kind!r}; expected one of {', '.join(SIGMOIDS)}")
    if kind in _FINITE_SUPPORT:
        if not 0.0 <= value_at_1 < 1.0:
            raise ValueError(f"value_at_margin: expected 0 <= value < 1 for {kind!r}, got {value_at_1}")
    elif not 0.0 < value_at_1 < 1.0:
        raise ValueError(f"value_at_margin: expected 0 < value < 1 for {kind!r}, got {value_at_1}")

    # Each branch picks the scale s with f(s * 1) = value_at_1, then evaluates f(s * x).
    if kind == "gaussian":
        s = math.sqrt(-2.0 * math.log(value_at_1))
        return torch.exp(-0.5 * (x * s) ** 2)
    if kind == "hyperbolic":
        s = math.acosh(1.0 / value_at_1)
        return 1.0 / torch.cosh(x * s)
    if kind == "long_tail":
        s = math.sqrt(1.0 / value_at_1 - 1.0)
        return 1.0 / ((x * s) ** 2 + 1.0)
    if kind == "reciprocal":
        s = 1.0 / value_at_1 - 1.0
        return 1.0 / (x.abs() * s + 1.0)
    if kind == "tanh_squared":
        s = math.atanh(math.sqrt(1.0 - value_at_1))
        return 1.0 - torch.tanh(x * s) ** 2
    zero = torch.zeros_like(x)
    if kind == "cosine":
        sx = x * (math.acos(2.0 * value_at_1 - 1.0) / math.pi)
        return torch.where(sx.abs() < 1.0, (1.0 + torch.cos(math.pi * sx)) / 2.0, zero)
    if kind == "linear":
        sx = x * (1.0 - value_at_1)
        return torch.where(sx.abs() < 1.0, 1.0 - sx, zero)
    # quadratic
    sx = x * math.sqrt(1.0 - value_at_1)
    return torch.where(sx.abs() < 1.0, 1.0 - sx * sx, zero)


def tolerance(
    x: torch.Tensor,
    bounds: tuple[float, float] = (0.0, 0.0),
    margin: float = 0.0,
    sigmoid: str = "gaussian",
    value_at_margin: float = DEFAULT_VALUE_AT_MARGIN,
) -> torch.Tensor:
    """1 where ``x`` lies in ``bounds`` (inclusive), else a sigmoid of the distance in margins.

    Args:
        x: values, any shape (a float tensor; the result has its shape and dtype).
        bounds: inclusive ``(lower, upper)``; may be infinite, or equal for an exact target.
        margin: distance outside the bounds at which the value is ``value_at_margin``; 0 makes
            the result the indicator of the bounds.
        sigmoid: falloff shape, one of :data:`SIGMOIDS`.
        value_at_margin: value at one margin from the bounds (ignored when ``margin == 0``).

    Raises:
        ValueError: if ``lower > upper``, ``margin < 0``, or the sigmoid arguments are invalid.
    """
    lower, upper = bounds
    if lower > upper:
        raise ValueError(f"bounds: lower {lower} > upper {upper}")
    if margin < 0:
        raise ValueError(f"margin: expected >= 0, got {margin}")
    inside = (x >= lower) & (x <= upper)
    one = torch.ones_like(x)
    if margin == 0:
        return torch.where(inside, one, torch.zeros_like(x))
    distance = torch.where(x < lower, lower - x, x - upper) / margin
    # Inside the bounds the distance is negative; clamp it so no sigmoid sees an odd argument there.
    outside_value = falloff(distance.clamp_min(0.0), value_at_margin, sigmoid)
    return torch.where(inside, one, outside_value)
