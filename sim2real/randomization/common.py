"""What the randomisation event terms share: the term base class, ranges, distributions and draws.

An event term here is a class. :class:`~robolearn.envs.managers.EventManager` builds it once, when
the env is built, as ``term(env, where="events.<name>", mode=<mode>, **params)``: the constructor
checks every parameter against the env's model (a bad one raises a ``ValueError`` naming
``events.<name>.<param>``, the value and what was expected), resolves names to indices and puts
the template values a call needs on the env's device. Each firing then calls ``term(env,
env_ids)``, which only draws and writes. The terms are named like the functions they replace
(``randomize_field``, ``push_by_velocity`` ...), so a task config reads as before:
``EventTerm(randomize_field, mode="reset", params={...})``.

Conventions every term follows:

* Base values come from the template model ``env.model`` (the task's compiled MJCF) as it was
  when the term was built, never from a world's current values, so repeated resets never
  compound. Two terms that write the same entry would undo each other: each lists what it writes
  in :attr:`EventTermBase.writes`, and the manager refuses an overlap.
* A term that records draws creates its ``env.drawn`` record when built, filled with the draw that
  leaves the template unchanged, so the privileged observation has its full width from the start
  (an ``interval`` term may not have fired yet).
* ``range`` is ``(low, high)`` for ``uniform`` and ``log_uniform`` and ``(mean, std)`` for
  ``gaussian``; gaussian draws are clipped to ``mean +- GAUSSIAN_CLIP * std``, so that checking a
  range at its extremes means something (the clip moves 0.27 % of draws onto the bounds).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

Distribution = Literal["uniform", "log_uniform", "gaussian"]
"""How a value is drawn: ``range`` is ``(low, high)``, ``(low, high)`` with ``low > 0``, or ``(mean, std)``."""
Operation = Literal["scale", "add", "abs"]
"""How a draw combines with the template value: ``base * draw``, ``base + draw`` or ``draw``."""
Shared = bool | Literal["elements", "axes"]
"""Which selected entries share a draw (see :class:`~robolearn.sim2real.randomization.fields.randomize_field`)."""
Selector = str | int
"""An element given by name or by index."""
Range = tuple[float, float]
"""A ``(low, high)`` pair, or ``(mean, std)`` for the gaussian distribution."""

DISTRIBUTIONS: tuple[str, ...] = ("uniform", "log_uniform", "gaussian")
"""The distribution names the terms accept."""
OPERATIONS: tuple[str, ...] = ("scale", "add", "abs")
"""The operation names the terms accept."""
GAUSSIAN_CLIP = 3.0
"""Gaussian draws are clipped to ``mean +- GAUSSIAN_CLIP * std``."""


class EventTermBase:
    """Base of the event terms: validated and resolved when built, then called per firing."""

    def __init__(self, *, where: str, mode: str | None) -> None:
        """Keep where the term sits in the config (for messages) and when it runs.

        Args:
            where: the term's place in the config, ``events.<name>``, prefixed to every message.
            mode: ``startup``, ``reset`` or ``interval`` as configured; ``None`` for a term built
                outside an event manager (called directly).
        """
        self.where = where
        self.mode = mode
        self.writes: frozenset[str] = frozenset()
        """What the term writes, in words (``writes body_mass[cart, 0]``, ``records its draws under
        'push'``); the event manager refuses two terms that share an entry."""

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        """Draw for worlds ``env_ids`` and write the result."""
        raise NotImplementedError

    def require_interval(self, what: str) -> None:
        """Refuse a mode other than ``interval``: a world's reset runs its reset events before it
        restores the initial state (``qvel``, zero applied wrenches), which would undo the term at once.
        """
        if self.mode is not None and self.mode != "interval":
            raise ValueError(
                f"{self.where}.mode: {what} needs mode 'interval', got {self.mode!r}: a world's reset restores "
                "its initial state (qvel, zero applied wrenches) right after its reset events run"
            )


# -- checks -----------------------------------------------------------------------------------------
def check_choice(where: str, value: Any, choices: Sequence[str]) -> None:
    """Refuse ``value`` unless it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{where}: expected one of {', '.join(choices)}, got {value!r}")


def check_range(where: str, value: Any, distribution: str) -> Range:
    """A finite pair, ordered (or with ``std >= 0`` for gaussian), positive for log-uniform."""
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a pair of numbers, got {value!r}") from None
    if any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in (lo, hi)):
        raise ValueError(f"{where}: expected a pair of numbers, got {value!r}")
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{where}: expected finite numbers, got {value!r}")
    if distribution == "gaussian":
        if hi < 0:
            raise ValueError(f"{where}: a gaussian range is (mean, std) with std >= 0, got {value!r}")
    elif lo > hi:
        raise ValueError(f"{where}: inverted range {value!r}: low {lo} > high {hi}")
    if distribution == "log_uniform" and lo <= 0:
        raise ValueError(f"{where}: log_uniform needs positive bounds, got {value!r}")
    return lo, hi


def check_shared(where: str, shared: Any) -> None:
    """Refuse a sharing rule other than ``False``, ``True``, ``"elements"`` or ``"axes"``."""
    if not (isinstance(shared, bool) or (isinstance(shared, str) and shared in ("elements", "axes"))):
        raise ValueError(f"{where}: expected False, True, 'elements' or 'axes', got {shared!r}")


def check_bool(where: str, value: Any) -> bool:
    """Refuse anything but ``True`` or ``False`` (``1`` or ``"yes"`` are not coerced)."""
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected True or False, got {value!r}")
    return value


def check_name(where: str, name: Any) -> None:
    """Refuse a record name that is not a non-empty string (``None`` is allowed: a default applies)."""
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{where}: expected a non-empty string, got {name!r}")


# -- draws ------------------------------------------------------------------------------------------
def draw(env: BatchedEnv, env_ids: torch.Tensor, distribution: str, range: Range, size: int) -> torch.Tensor:
    """``[len(env_ids), size]`` float64 draws of ``distribution`` from those worlds' streams."""
    lo, hi = range
    if distribution == "uniform":
        return env.draw_uniform(env_ids, size, lo, hi)
    if distribution == "log_uniform":
        return torch.exp(env.draw_uniform(env_ids, size, math.log(lo), math.log(hi)))
    bound = GAUSSIAN_CLIP * hi
    return lo + env.draw_normal(env_ids, size, hi).clamp(-bound, bound)


def draw_bounds(distribution: str, range: Range) -> tuple[float, float]:
    """The smallest and largest value a draw can take."""
    lo, hi = float(range[0]), float(range[1])
    if distribution == "gaussian":
        return lo - GAUSSIAN_CLIP * hi, lo + GAUSSIAN_CLIP * hi
    return lo, hi


def combine(operation: str, base: Any, value: Any) -> Any:
    """``base * value``, ``base + value`` or ``value`` (broadcast to the shape the others would
    give), for tensors or arrays: how a draw or a factor meets a template value.
    """
    if operation == "scale":
        return base * value
    if operation == "add":
        return base + value
    if isinstance(base, torch.Tensor) or isinstance(value, torch.Tensor):
        v = torch.as_tensor(value, dtype=torch.float64)
        b = torch.as_tensor(base, dtype=torch.float64, device=v.device)
        return torch.broadcast_tensors(v, b)[0]
    return np.broadcast_to(np.asarray(value, dtype=np.float64), np.broadcast_shapes(np.shape(value), np.shape(base)))


def neutral(operation: str, base: np.ndarray) -> np.ndarray:
    """The draws under which ``operation`` returns ``base``: 1 (scale), 0 (add) or ``base`` (abs)."""
    if operation == "scale":
        return np.ones_like(base)
    return np.zeros_like(base) if operation == "add" else base


def register_drawn(env: BatchedEnv, name: str, value: np.ndarray) -> None:
    """Create ``env.drawn[name]`` filled with ``value`` in every world (the draw that leaves the
    template as it is), unless it exists: the record's width, and the privileged observation's, is
    fixed when the env is built.
    """
    if name not in env.drawn:
        row = torch.as_tensor(np.asarray(value, dtype=np.float64).reshape(1, -1), device=env.device)
        env.record_drawn(name, env.all_ids, row.expand(env.num_envs, -1))


__all__ = [
    "DISTRIBUTIONS",
    "GAUSSIAN_CLIP",
    "OPERATIONS",
    "Distribution",
    "EventTermBase",
    "Operation",
    "Range",
    "Selector",
    "Shared",
    "check_bool",
    "check_choice",
    "check_name",
    "check_range",
    "check_shared",
    "combine",
    "draw",
    "draw_bounds",
    "neutral",
    "register_drawn",
]
