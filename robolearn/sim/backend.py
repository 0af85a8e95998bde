"""The ``SimBackend`` contract: N worlds of one model on one device, read and written as tensors.

Every backend (MuJoCo CPU batch, the reference loop, MJX, MuJoCo Warp, Isaac) implements this
protocol and passes the same conformance suite (``tests/test_sim_conformance.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import mujoco
import numpy as np
import torch

# Model fields that domain randomisation may change per world, by friendly name. Values are
# MuJoCo MjModel field names (``opt.<name>`` for MjOption fields).
RANDOMIZABLE_FIELDS: dict[str, str] = {
    "mass": "body_mass",
    "inertia": "body_inertia",
    "com": "body_ipos",
    "friction": "geom_friction",
    "damping": "dof_damping",
    "armature": "dof_armature",
    "frictionloss": "dof_frictionloss",
    "actuator_gain": "actuator_gainprm",
    "actuator_bias": "actuator_biasprm",
    "gravity": "opt.gravity",
}
"""Friendly names of the per-world model fields; raw MuJoCo names are accepted too."""

# Warning slots that mean the physics diverged (MuJoCo reset the world itself when it saw them).
DIVERGENCE_WARNINGS: tuple[int, ...] = (
    int(mujoco.mjtWarning.mjWARN_BADQACC),
    int(mujoco.mjtWarning.mjWARN_BADQPOS),
    int(mujoco.mjtWarning.mjWARN_BADQVEL),
)


def resolve_field(name: str) -> str:
    """Map a friendly or raw model-field name to the MuJoCo field name, or raise naming the choices."""
    if name in RANDOMIZABLE_FIELDS:
        return RANDOMIZABLE_FIELDS[name]
    if name in RANDOMIZABLE_FIELDS.values():
        return name
    from mujoco.batch import MODEL_FIELDS

    if name in MODEL_FIELDS:
        return name
    choices = ", ".join(sorted(RANDOMIZABLE_FIELDS))
    raise ValueError(
        f"model field {name!r} cannot be set per world; expected one of {choices} "
        "or an expandable MjModel field name (mujoco.batch.MODEL_FIELDS)"
    )


def as_index_array(env_ids: torch.Tensor | Sequence[int] | np.ndarray | None, num_worlds: int) -> np.ndarray:
    """World indices as a sorted, unique, in-range ``int32`` array (``None`` means all worlds)."""
    if env_ids is None:
        return np.arange(num_worlds, dtype=np.int32)
    if isinstance(env_ids, torch.Tensor):
        if env_ids.dtype == torch.long and env_ids.ndim == 1:
            ids = env_ids.numpy().astype(np.int32)
            # Fast path: the env hands over sorted unique in-range ids (from nonzero or arange).
            if ids.size == 0 or (ids[0] >= 0 and ids[-1] < num_worlds and (ids.size == 1 or (np.diff(ids) > 0).all())):
                return ids
        if env_ids.dtype == torch.bool:
            env_ids = torch.nonzero(env_ids).flatten()
        env_ids = env_ids.detach().cpu().numpy()
    ids = np.asarray(env_ids)
    if ids.dtype == bool:
        ids = np.flatnonzero(ids)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"env_ids: expected a 1-D integer index or boolean mask, got shape {ids.shape} {ids.dtype}")
    ids = np.unique(ids).astype(np.int32)
    if ids.size and (ids[0] < 0 or ids[-1] >= num_worlds):
        raise ValueError(f"env_ids: indices must lie in [0, {num_worlds}), got {ids[0]}..{ids[-1]}")
    return ids


class TensorStateViews:
    """The state properties of a backend that keeps its state as tensor views: ``_qpos``,
    ``_qvel``, ``_ctrl``, ``_time``, ``_cfrc``, ``_xfrc`` and the derived fields in ``_derived``
    (``xpos``, ``xquat``, ``cvel``, ``sensordata``). Views of the backend's own memory (the CPU
    batch's state rows, MuJoCo Warp's device arrays): read them, write through the backend's methods.
    """

    _qpos: torch.Tensor
    _qvel: torch.Tensor
    _ctrl: torch.Tensor
    _time: torch.Tensor
    _cfrc: torch.Tensor
    _xfrc: torch.Tensor
    _derived: dict[str, torch.Tensor]

    @property
    def qpos(self) -> torch.Tensor:
        """Generalised positions ``[N, nq]``."""
        return self._qpos

    @property
    def qvel(self) -> torch.Tensor:
        """Generalised velocities ``[N, nv]``."""
        return self._qvel

    @property
    def ctrl(self) -> torch.Tensor:
        """Controls applied at the last step ``[N, nu]``."""
        return self._ctrl

    @property
    def time(self) -> torch.Tensor:
        """Simulation time per world ``[N]``."""
        return self._time

    @property
    def xpos(self) -> torch.Tensor:
        """Body positions ``[N, nbody, 3]``."""
        return self._derived["xpos"]

    @property
    def xquat(self) -> torch.Tensor:
        """Body orientations ``[N, nbody, 4]`` (w, x, y, z)."""
        return self._derived["xquat"]

    @property
    def cvel(self) -> torch.Tensor:
        """Body com-based velocities ``[N, nbody, 6]``."""
        return self._derived["cvel"]

    @property
    def sensordata(self) -> torch.Tensor:
        """Sensor outputs ``[N, nsensordata]``."""
        return self._derived["sensordata"]

    @property
    def cfrc_ext(self) -> torch.Tensor:
        """External (contact) forces per body ``[N, nbody, 6]`` (see :class:`SimBackend`)."""
        return self._cfrc

    @property
    def xfrc_applied(self) -> torch.Tensor:
        """Applied body wrenches ``[N, nbody, 6]`` (write with the backend's ``set_xfrc_applied``)."""
        return self._xfrc


@runtime_checkable
class SimBackend(Protocol):
    """N worlds of one model. State tensors are ``[N, ...]`` of :attr:`dtype` on :attr:`device`.

    Everything the env calls on the step path (``step``, ``reset``, the state properties, the
    wrench/velocity writes and the model-field accessors) takes and returns torch tensors on
    :attr:`device`: no ``MjData``, no NumPy. Only :meth:`get_model` and :meth:`get_data`, for the
    renderer and inspection, hand out MuJoCo objects.

    ``qpos``/``qvel``/``ctrl`` are the live state; ``xpos``, ``xquat``, ``cvel``, ``sensordata`` and
    ``cfrc_ext`` are derived quantities which, as after ``mj_step``, describe the state before the
    last physics substep unless the backend was built with ``forward_after_step=True``.
    """

    model: mujoco.MjModel
    """The compiled template model, read on the host when the env is built (name resolution,
    defaults); per-world fields live in the backend, not here."""
    num_worlds: int
    """N."""
    decimation: int
    """Physics substeps per :meth:`step`."""
    device: torch.device
    """Where the state tensors live."""
    dtype: torch.dtype
    """Floating dtype of the state and model-field tensors (float64 on the MuJoCo CPU backends)."""

    @property
    def qpos(self) -> torch.Tensor:
        """Generalised positions ``[N, nq]``."""
        ...

    @property
    def qvel(self) -> torch.Tensor:
        """Generalised velocities ``[N, nv]``."""
        ...

    @property
    def ctrl(self) -> torch.Tensor:
        """Controls applied at the last step ``[N, nu]``."""
        ...

    @property
    def xpos(self) -> torch.Tensor:
        """Body positions ``[N, nbody, 3]``."""
        ...

    @property
    def xquat(self) -> torch.Tensor:
        """Body orientations ``[N, nbody, 4]`` (w, x, y, z)."""
        ...

    @property
    def cvel(self) -> torch.Tensor:
        """Body com-based velocities ``[N, nbody, 6]``."""
        ...

    @property
    def sensordata(self) -> torch.Tensor:
        """Sensor outputs ``[N, nsensordata]``."""
        ...

    @property
    def cfrc_ext(self) -> torch.Tensor:
        """External (contact) forces per body ``[N, nbody, 6]``, com-based, for a model compiled with
        ``contact_forces=True`` (zero otherwise): ``mj_rnePostConstraint`` of the data after the
        last step, as Gymnasium computes them; zero after a reset until the next step.
        """
        ...

    def data_field(self, name: str) -> torch.Tensor:
        """Any other ``MjData`` output field ``[N, ...]`` (``cinert``, ``xipos``, ``qfrc_actuator``,
        ...), read-only, with the same staleness as :attr:`xpos`.
        """
        ...

    @property
    def time(self) -> torch.Tensor:
        """Simulation time per world ``[N]``."""
        ...

    @property
    def xfrc_applied(self) -> torch.Tensor:
        """External wrenches applied to bodies ``[N, nbody, 6]`` (force, torque; world frame, at the
        body's centre of mass); persistent across steps, zeroed by a reset. Read-only here: write
        with :meth:`set_xfrc_applied`.
        """
        ...

    def set_xfrc_applied(self, values: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set the applied wrenches ``[len(env_ids), nbody, 6]`` of worlds ``env_ids`` (default: all)."""
        ...

    def add_qvel(self, dv: torch.Tensor, env_ids: torch.Tensor, dofs: Sequence[int]) -> None:
        """``qvel[env_ids, dofs] += dv`` (``dv`` is ``[len(env_ids), len(dofs)]``) in the live state:
        a push, between steps.
        """
        ...

    def step(self, ctrl: torch.Tensor, nstep: int | None = None) -> torch.Tensor:
        """Apply ``ctrl[N, nu]`` and advance ``nstep`` substeps (default ``decimation``); return a
        ``[N]`` bool mask of worlds whose physics diverged (MuJoCo instability warning, NaN state or
        engine error).
        """
        ...

    def reset(
        self,
        env_ids: torch.Tensor | None,
        qpos: torch.Tensor | None = None,
        qvel: torch.Tensor | None = None,
        act: torch.Tensor | None = None,
    ) -> None:
        """Reset only ``env_ids`` (sorted unique long indices; ``None``: all) to the model defaults,
        then set their ``qpos``/``qvel`` and actuator activations ``act`` (``[n, na]``: the states of
        filter and integrator actuators, such as a motor's first-order lag) if given.
        """
        ...

    def set_model_field(self, name: str, values: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Write per-world values of a model field (friendly or MuJoCo name) for ``env_ids``."""
        ...

    def get_model_field(self, name: str) -> torch.Tensor:
        """Per-world values of a model field, ``[N, ...]``."""
        ...

    def get_model(self, world: int) -> mujoco.MjModel:
        """World ``world``'s model, with its per-world fields (for rendering or inspection)."""
        ...

    def state_dict(self) -> dict[str, object]:
        """Every world's full integration state and per-world fields, as tensors (for checkpoints)."""
        ...

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`; stepping then continues exactly as it would have."""
        ...

    def get_data(self, world: int) -> mujoco.MjData:
        """World ``world``'s state in a fresh ``MjData`` with derived quantities computed: for the
        renderer and inspection only, never on the step path.
        """
        ...
