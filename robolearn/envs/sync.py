"""The env core's host synchronisations, all in one place.

Above the ``SimBackend`` boundary nothing converts a tensor to NumPy or a Python value on the step
path (DESIGN.md, "Device"), with the exceptions here. Each is a decision the host has to take
because what happens next has a data-dependent *shape* or *control flow*:

* which worlds reset this step (``torch.nonzero`` of the done mask): the reset writes only those
  worlds' rows and draws only from their random streams, so a world's stream never depends on the
  others; a masked reset of every world would redraw everyone's initial state every step;
* which worlds an interval event or a command fires on (the same reason: draws per firing world);
* whether an action holds a non-finite value, which must raise before the physics sees it;
* how many worlds diverged, for the warning and ``info["num_diverged"]`` (only when any did);
* what a curriculum term hands to host-side code at episode ends (``to_host``, ``host_value``):
  the ALP-GMM teacher fits its mixture in NumPy, and a curriculum that moves a term parameter
  configured as a Python number writes a Python number back (the term may use it as one).
  Curricula run only where some world's episode ended, never on a plain step.

On the CPU these are free (the data is already on the host); on a GPU each costs one device
round trip per step, which is what ``tests/test_device_neutral.py`` bounds: it allows
``Tensor.__bool__``/``item``/``tolist`` calls from this module only (and
``tests/test_hot_path_syncs.py`` pins the budget of a plain step: the action check and the reset
decision, plus the diverged count on steps where some world ended).

Why they stay on the GPU path too (issue 15): a reset by index draws each ended world's initial
state from that world's own stream and writes only its rows, through the backend's
``reset(env_ids, ...)``; a sync-free masked reset would have to draw and write every world on
every step and change the backends' reset contract. The action check keeps a NaN out of the
physics (the error leaves the state untouched). On a GPU the two reads cost two small
device-to-host copies per step and end the CPU's run-ahead there (the next kernels launch after
the read); they also keep the env step out of one CUDA graph, while the learner's update, which
has no sync (``robolearn.utils.hostsync``), can be captured.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robolearn.types import NonFiniteValue

__all__ = ["NonFiniteValue", "check_finite", "host_any", "host_count", "host_nonzero", "host_value", "to_host"]


def host_any(mask: torch.Tensor) -> bool:
    """Whether any entry of the boolean ``mask`` is set (one host sync)."""
    return bool(mask.any())


def host_nonzero(mask: torch.Tensor) -> torch.Tensor | None:
    """The sorted indices ``[k]`` (long, on ``mask``'s device) where the 1-D ``mask`` is set, or
    ``None`` when none is (one host sync: the size of the result decides what runs next).
    """
    ids = torch.nonzero(mask).flatten()
    return ids if ids.numel() else None


def host_count(mask: torch.Tensor) -> int:
    """The number of set entries of the boolean ``mask`` (one host sync)."""
    return int(mask.sum())


def check_finite(values: torch.Tensor, where: str) -> None:
    """Raise :class:`NonFiniteValue` (a ``ValueError``) naming ``where``, the first bad value and its
    index if ``values`` (``[N, k]``) holds NaN or inf (one host sync; the message costs more only
    when it fails).
    """
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        world, col = (int(i) for i in torch.nonzero(bad)[0])
        raise NonFiniteValue(f"{where}: non-finite value {float(values[world, col])} at world {world}, index {col}")


def to_host(values: torch.Tensor) -> np.ndarray:
    """``values`` as a float64 NumPy array on the host (one host sync; a copy, never a view)."""
    return values.detach().to("cpu", torch.float64).numpy().copy()


def host_value(value: torch.Tensor) -> Any:
    """A 0-d tensor as a Python ``float``, any other as a nested list of floats (one host sync)."""
    value = value.detach().to("cpu", torch.float64)
    return float(value) if value.ndim == 0 else value.tolist()
