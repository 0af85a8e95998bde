"""Checks every dataset reader runs before it returns anything (DESIGN.md, "Dataset").

A bad file or array set raises :class:`DatasetError` naming the field, the first bad index and what
was expected. The checks run on the arrays as read (CPU tensors), so a reader that fails has
allocated nothing on the caller's device and returns nothing half-loaded.

The data layer may not import ``robolearn.envs``, so it cannot ask a task what it observes.
Callers pass what they expect (``expect_obs_dim``, ``expect_action_dim``, ``task_id``) and
:func:`check_expectations` compares; when a mismatch matches a known change between task versions
(D4RL-era Ant observes 111 numbers, Gymnasium Ant-v5 105) the message says so plainly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from robolearn.types import OBS_GROUPS, POLICY


class DatasetError(ValueError):
    """A dataset (file or arrays) that breaks the Dataset contract: names the field, index and expectation."""


OBS_DIM_HISTORY: dict[str, dict[int, str]] = {
    # Gymnasium's ant_v5.py docs: v5 drops the world body's cfrc_ext (always zero): 27 + 13*6 = 105;
    # v2/v3 (the gym-mujoco envs D4RL was collected on) keep all 14 bodies: 27 + 14*6 = 111;
    # v4 drops contact forces by default (27) unless use_contact_forces=True (111).
    "ant": {
        111: "Gym Ant-v2/v3 (the D4RL-era Ant, cfrc_ext of all 14 bodies incl. the world body) or Ant-v4 with use_contact_forces",
        27: "Gymnasium Ant-v4 with its default use_contact_forces=False",
        105: "Gymnasium Ant-v5 (the world body's always-zero cfrc_ext removed)",
    },
    # Gymnasium's humanoid_v5.py docs: v5 removes world-body/root terms that were always zero.
    "humanoid": {
        376: "Gym Humanoid-v2/v3/v4 (the D4RL-era Humanoid)",
        348: "Gymnasium Humanoid-v5",
    },
}
"""Observation sizes that changed between versions of a task family: size -> which versions observe it."""


def task_family(task_id: str | None) -> str | None:
    """The lower-case family of a task or dataset id (``"Ant-v5"``, ``"ant-medium-v2"``,
    ``"mujoco/ant/expert-v0"`` -> ``"ant"``), or None when it names no family in :data:`OBS_DIM_HISTORY`.
    """
    if not task_id:
        return None
    words = re.split(r"[^a-z0-9]+", task_id.lower())
    for family in OBS_DIM_HISTORY:
        if family in words:
            return family
    return None


def version_hint(got: int, expected: int, task_id: str | None) -> str:
    """A sentence explaining an observation-size mismatch by a task-version change, or ``""``."""
    family = task_family(task_id)
    families = [family] if family else list(OBS_DIM_HISTORY)
    for fam in families:
        sizes = OBS_DIM_HISTORY[fam]
        if got in sizes and expected in sizes:
            return (
                f" This file looks like it comes from an older (or different) version of the {fam} task: "
                f"{got} numbers per step is what {sizes[got]} observes, while {expected} is {sizes[expected]}. "
                "Re-collect the data on the current task version, or read it with the matching older "
                "environment; robolearn does not pad or slice observations to fit."
            )
    return ""


_VERSIONED = re.compile(r"^(?P<name>.+)-v(?P<version>\d+)$")


def _task_version_hint(file_id: str, caller_id: str) -> str:
    # "Ant-v2" against "Ant-v5": the same task at another version, which is worth saying plainly.
    a, b = _VERSIONED.match(file_id), _VERSIONED.match(caller_id)
    if not (a and b) or a["name"].lower() != b["name"].lower():
        return ""
    age = "an older" if int(a["version"]) < int(b["version"]) else "a newer"
    return (
        f" The file comes from {age} version of the same task (v{a['version']} vs v{b['version']}); "
        "observations, rewards and dynamics may differ between versions."
    )


def _kind_ok(t: torch.Tensor, kind: str) -> bool:
    if kind == "float":
        return t.is_floating_point()
    if kind == "obs":  # observations: float features or uint8 images
        return t.is_floating_point() or t.dtype == torch.uint8
    if kind == "bool":
        return t.dtype == torch.bool
    if kind == "number":
        return not t.is_complex()
    raise AssertionError(kind)


_KIND_TEXT = {
    "float": "a floating-point dtype",
    "obs": "a floating-point dtype (features) or uint8 (images)",
    "bool": "bool",
    "number": "a real numeric or bool dtype",
}


def as_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` (numpy array, tensor or nested list) as a tensor without copying where possible;
    a dtype torch cannot hold (strings, objects) raises :class:`DatasetError` naming ``name``.
    """
    if isinstance(value, torch.Tensor):
        return value
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise DatasetError(f"{name}: expected a numeric or bool array, got numpy dtype {arr.dtype}")
    if not arr.flags.writeable:  # torch.from_numpy warns on read-only arrays; copy once instead
        arr = arr.copy()
    return torch.from_numpy(np.ascontiguousarray(arr))


def as_flags(name: str, value: Any) -> torch.Tensor:
    """Episode-end flags as a bool tensor ``[N]``. Bool passes; integer or float arrays are accepted
    only when every value is 0 or 1 (older D4RL files store floats), anything else names the index.
    """
    t = as_tensor(name, value)
    if t.dtype == torch.bool:
        return t
    if t.is_complex():
        raise DatasetError(f"{name}: expected bool (or 0/1) flags, got dtype {t.dtype}")
    bad = ~((t == 0) | (t == 1))
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0, 0])
        raise DatasetError(
            f"{name}: expected bool (or 0/1) flags, got {t.reshape(-1)[i].item()!r} at index {i}"
        )
    return t != 0


def check_array(
    name: str,
    t: torch.Tensor,
    *,
    rows: int | None,
    kind: str,
    ndim: int | None = None,
    min_ndim: int = 1,
    finite: bool = True,
) -> None:
    """Check one array: dtype ``kind`` (``float``/``obs``/``bool``/``number``), number of dims, leading
    length ``rows`` (when given) and, for floating dtypes, that every value is finite.
    """
    if not _kind_ok(t, kind):
        raise DatasetError(f"{name}: expected {_KIND_TEXT[kind]}, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        want = {1: "[N]", 2: "[N, D]"}.get(ndim, f"{ndim} dims")
        raise DatasetError(f"{name}: expected shape {want}, got {tuple(t.shape)}")
    if t.dim() < min_ndim:
        raise DatasetError(
            f"{name}: expected at least {min_ndim} dims ([N, ...]), got shape {tuple(t.shape)}"
        )
    if rows is not None and t.shape[0] != rows:
        raise DatasetError(
            f"{name}: expected {rows} rows (one per transition, as many as 'rewards'), got {t.shape[0]}"
        )
    if finite and t.is_floating_point():
        check_finite(name, t)


_FINITE_BLOCK = 1 << 20
"""Elements checked at a time: ``torch.isfinite`` builds float temporaries as large as its input,
so a whole 1M x 17 array would briefly cost ~6x its own size."""


def check_finite(name: str, t: torch.Tensor) -> None:
    """Raise naming the first row (and element) holding NaN or +-inf, and how many there are."""
    flat = t.reshape(-1)
    first, count = -1, 0
    for lo in range(0, flat.numel(), _FINITE_BLOCK):
        bad = ~torch.isfinite(flat[lo : lo + _FINITE_BLOCK])
        if bool(bad.any()):
            first = lo + int(bad.nonzero()[0, 0]) if first < 0 else first
            count += int(bad.sum())
    if first < 0:
        return
    element = np.unravel_index(first, tuple(t.shape))
    where = f"index {int(element[0])}" + (f" (element {list(map(int, element))})" if t.dim() > 1 else "")
    raise DatasetError(
        f"{name}: non-finite value {flat[first].item()} at {where}, the first of {count}; "
        "every value must be finite"
    )


def check_groups(name: str, groups: Mapping[str, torch.Tensor]) -> None:
    """Observation groups: at least ``policy``, and only the names of :data:`robolearn.types.OBS_GROUPS`."""
    if POLICY not in groups:
        raise DatasetError(f"{name}: the '{POLICY}' group is required, got groups {sorted(groups)}")
    unknown = sorted(set(groups) - set(OBS_GROUPS))
    if unknown:
        raise DatasetError(
            f"{name}: unknown observation group(s) {unknown}; valid names are {list(OBS_GROUPS)}"
        )


def feature_dim(t: torch.Tensor) -> int:
    """Numbers per row of ``[N, ...]`` (the product of the trailing dims)."""
    return int(np.prod(t.shape[1:], dtype=np.int64))


def check_expectations(
    observations: Mapping[str, torch.Tensor],
    actions: torch.Tensor,
    file_task_id: str,
    *,
    expect_obs_dim: int | Mapping[str, int] | None = None,
    expect_action_dim: int | None = None,
    task_id: str | None = None,
) -> None:
    """Compare a dataset with what the caller's task expects.

    ``expect_obs_dim``: an int is the ``policy`` group's numbers per step, a mapping gives them per
    group. ``task_id``: when the file names a task too, the two must be equal; either one is used to
    explain an observation-size mismatch by a known version change.
    """
    hint_id = task_id or file_task_id
    if task_id and file_task_id and task_id != file_task_id:
        raise DatasetError(
            f"metadata.task_id: the file was collected on task {file_task_id!r}, the caller expects {task_id!r}."
            + _task_version_hint(file_task_id, task_id)
        )
    single = isinstance(expect_obs_dim, (int, np.integer))
    expected = {POLICY: expect_obs_dim} if single else dict(expect_obs_dim or {})  # type: ignore[arg-type]
    for group, want in expected.items():
        if group not in observations:
            raise DatasetError(
                f"observations/{group}: missing; expected {want} numbers per step (the file has groups {sorted(observations)})"
            )
        got = feature_dim(observations[group])
        if got != int(want):
            task = f" (task {hint_id!r})" if hint_id else ""
            raise DatasetError(
                f"observations/{group}: expected {int(want)} numbers per step{task}, got {got} "
                f"(shape {tuple(observations[group].shape)})." + version_hint(got, int(want), hint_id)
            )
    if expect_action_dim is not None and actions.shape[1] != int(expect_action_dim):
        task = f" (task {hint_id!r})" if hint_id else ""
        raise DatasetError(
            f"actions: expected {int(expect_action_dim)} numbers per step{task}, got {actions.shape[1]}"
        )
