"""Pushes and external wrenches: kicks to the state and forces on bodies, at intervals.

Two event terms (see :mod:`.common` for how a term is built and called)::

    cfg.events = {
        # Kicks: every 2-4 s add U(-0.5, 0.5) m/s to the root's x velocity.
        "push": EventTerm(push_by_velocity, mode="interval", interval_range_s=(2.0, 4.0),
                          params={"velocity_range": {"rootx": (-0.5, 0.5)}}),
        # A tugging cable: a torso force of U(-20, 20) N per axis, redrawn every 1-2 s.
        "tug": EventTerm(apply_external_wrench, mode="interval", interval_range_s=(1.0, 2.0),
                         params={"body": "torso", "force_range": (-20.0, 20.0)}),
    }

Both only work as ``interval`` events: a world's reset runs its reset events before it restores
the initial state, which sets ``qvel`` and zeroes ``xfrc_applied``, so a push or wrench drawn at
reset (or start-up) would be undone at once; building one with another mode is refused. Their
``env.drawn`` rows hold the last draw until the next firing, across a world's reset too (which
does zero the applied wrench): events have no hook that runs after a reset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robolearn.sim.names import as_list, names_of
from robolearn.sim2real.randomization.common import (
    EventTermBase,
    Range,
    Selector,
    check_name,
    check_range,
    register_drawn,
)

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv


class push_by_velocity(EventTermBase):  # lower case: a task config reads it as a verb
    """Add a drawn velocity ``U(low, high)`` to selected dofs of the firing worlds: a kick.

    A free joint's linear velocity (``root/x``, ``root/y``, ``root/z``) is in the world frame and
    its angular one (``root/wx`` ...) in the body frame, as MuJoCo's ``qvel``.
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        velocity_range: Mapping[Selector, Range] | Range,
        dofs: Sequence[Selector] | Selector | None = None,
        name: str = "push",
        where: str = "push_by_velocity",
        mode: str | None = None,
    ) -> None:
        """Check the parameters against ``env``'s model and resolve the dofs.

        Args:
            env: the environment.
            velocity_range: ``{dof: (low, high)}`` with dofs as joint names (every dof of the
                joint), ``"<joint>/<axis>"`` or dof indices; or one ``(low, high)`` for every dof in
                ``dofs``.
            dofs: with a single range: the dofs it applies to (``None``: every dof).
            name: key of the drawn velocity changes in ``env.drawn`` (``[N, dofs]``, in the order given).
            where: prefix of error messages (the event manager passes ``events.<name>``).
            mode: when the term runs; only ``interval`` (or ``None``, called directly) is accepted.
        """
        super().__init__(where=where, mode=mode)
        check_name(f"{where}.name", name)
        names = names_of(env.model)
        if isinstance(velocity_range, Mapping):
            if dofs is not None:
                raise ValueError(
                    f"{where}.dofs: give the dofs as the keys of velocity_range or here, not both; got {dofs!r}"
                )
            ids: list[int] = []
            ranges: list[Range] = []
            for key, rng in velocity_range.items():
                found = names.dofs(key, f"{where}.velocity_range")
                pair = check_range(f"{where}.velocity_range[{key!r}]", rng, "uniform")
                ids += found
                ranges += [pair] * len(found)
        else:
            pair = check_range(f"{where}.velocity_range", velocity_range, "uniform")
            if dofs is None:
                ids = list(range(env.model.nv))
            else:
                ids = [d for s in as_list(dofs) for d in names.dofs(s, f"{where}.dofs")]
            ranges = [pair] * len(ids)
        if len(set(ids)) != len(ids):
            raise ValueError(f"{where}.velocity_range: a dof is selected twice ({[names.dof_label(d) for d in ids]})")
        if not ids:
            raise ValueError(f"{where}.velocity_range: no dof selected")
        self.require_interval("push_by_velocity")
        self.name = name
        self.dofs = tuple(ids)
        bounds = torch.as_tensor(np.asarray(ranges, dtype=np.float64), device=env.device)
        self.low, self.span = bounds[:, 0], bounds[:, 1] - bounds[:, 0]
        # Pushes add, so two pushes on one dof compose; only their recorded draws could collide.
        self.writes = frozenset({f"records its draws under {name!r}"})
        register_drawn(env, name, np.zeros(len(ids)))

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        """Add the drawn velocities to worlds ``env_ids`` and record them."""
        if env_ids.numel() == 0:
            return
        dv = self.low + self.span * env.draw_uniform(env_ids, len(self.dofs))
        env.sim.add_qvel(dv, env_ids, self.dofs)
        env.record_drawn(self.name, env_ids, dv)


def _axis_ranges(value: Any, where: str) -> np.ndarray:
    """One ``(low, high)`` for all three axes, or three pairs, as ``[3, 2]``."""
    expected = f"{where}: expected (low, high) or three (low, high) pairs, got {value!r}"
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(expected) from None
    if arr.shape == (2,):
        arr = np.tile(arr, (3, 1))
    if arr.shape != (3, 2):
        raise ValueError(expected)
    for k in range(3):
        check_range(where, tuple(float(v) for v in arr[k]), "uniform")
    return arr


class apply_external_wrench(EventTermBase):  # lower case: a task config reads it as a verb
    """Draw a wrench ``U(low, high)`` per axis and apply it to a body in the firing worlds.

    The wrench is MuJoCo's ``xfrc_applied``: world frame, at the body's centre of mass. It persists
    until this term draws again for that world or the world resets (which zeroes it); the interval
    is how long each wrench lasts. For a brief kick, prefer :class:`push_by_velocity`.
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        body: Selector,
        force_range: Range | Sequence[Range] = (0.0, 0.0),
        torque_range: Range | Sequence[Range] = (0.0, 0.0),
        name: str | None = None,
        where: str = "apply_external_wrench",
        mode: str | None = None,
    ) -> None:
        """Check the parameters against ``env``'s model and resolve the body.

        Args:
            env: the environment.
            body: body name or index.
            force_range: ``(low, high)`` in N for x, y and z, or one pair per axis.
            torque_range: ``(low, high)`` in N m for x, y and z, or one pair per axis.
            name: key of the drawn wrenches ``[N, 6]`` (force, torque) in ``env.drawn``; default ``wrench/<body>``.
            where: prefix of error messages (the event manager passes ``events.<name>``).
            mode: when the term runs; only ``interval`` (or ``None``, called directly) is accepted.
        """
        super().__init__(where=where, mode=mode)
        check_name(f"{where}.name", name)
        names = names_of(env.model)
        self.body = names.id("body", body, f"{where}.body")
        if self.body == 0:
            raise ValueError(f"{where}.body: the world body is static; a wrench on it does nothing")
        ranges = np.concatenate([
            _axis_ranges(force_range, f"{where}.force_range"),
            _axis_ranges(torque_range, f"{where}.torque_range"),
        ])
        self.require_interval("apply_external_wrench")
        self.name = name or f"wrench/{body}"
        bounds = torch.as_tensor(ranges, device=env.device)
        self.low, self.span = bounds[:, 0], bounds[:, 1] - bounds[:, 0]
        label = names.label("body", self.body)
        self.writes = frozenset(
            {f"writes xfrc_applied[{label}, {c}]" for c in range(6)} | {f"records its draws under {self.name!r}"}
        )
        register_drawn(env, self.name, np.zeros(6))

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        """Draw and apply the wrenches of worlds ``env_ids``, and record them."""
        if env_ids.numel() == 0:
            return
        wrench = self.low + self.span * env.draw_uniform(env_ids, 6)
        xfrc = env.sim.xfrc_applied[env_ids].clone()
        xfrc[:, self.body] = wrench
        env.sim.set_xfrc_applied(xfrc, env_ids)
        env.record_drawn(self.name, env_ids, wrench)


__all__ = ["apply_external_wrench", "push_by_velocity"]
