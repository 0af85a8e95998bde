"""``ReferenceBackend``: one ``MjData`` per world in a Python loop. Slow and obviously correct.

It is the yardstick of the conformance suite: every fast backend must reproduce its trajectories,
resets and per-world field writes.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import mujoco
import numpy as np
import torch

from robolearn.sim.backend import DIVERGENCE_WARNINGS, as_index_array, resolve_field
from robolearn.sim.model import contact_force_mode


class ReferenceBackend:
    """N independent ``(MjModel, MjData)`` pairs stepped one after another with ``mj_step``."""

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        *,
        decimation: int = 1,
        forward_after_step: bool = False,
        device: str | torch.device = "cpu",
        data_fields: tuple[str, ...] = (),
        nthread: int | None = None,
    ) -> None:
        """Create ``num_worlds`` model copies and datas; arguments as :class:`MujocoBackend` (``nthread`` unused)."""
        if torch.device(device).type != "cpu":
            raise ValueError(f"device: ReferenceBackend runs on the CPU, got {device!r}")
        if num_worlds < 1:
            raise ValueError(f"num_worlds: expected >= 1, got {num_worlds}")
        self.model = model
        self.num_worlds = int(num_worlds)
        self.decimation = int(decimation)
        self.device = torch.device("cpu")
        self.dtype = torch.float64
        self.forward_after_step = forward_after_step
        self.models = [copy.copy(model) for _ in range(self.num_worlds)]
        self.datas = [mujoco.MjData(m) for m in self.models]
        self._written: set[str] = set()
        self._contact_forces = contact_force_mode(model) != "none"
        self._fields = ["qpos", "qvel", "ctrl", "xpos", "xquat", "cvel", "sensordata", "cfrc_ext", *data_fields]
        for m, d in zip(self.models, self.datas, strict=True):
            mujoco.mj_forward(m, d)
            d.cfrc_ext[:] = 0.0  # no step yet (the probe sensor computed them in mj_forward)
        self._read()

    def _read(self) -> None:
        """Copy every world's state and derived fields into stacked tensors."""
        def stack(name: str) -> torch.Tensor:
            return torch.from_numpy(np.stack([np.array(getattr(d, name)) for d in self.datas]))

        self._state = {name: stack(name) for name in self._fields}
        self._state["time"] = torch.tensor([d.time for d in self.datas], dtype=torch.float64)

    qpos = property(lambda self: self._state["qpos"], doc="Generalised positions ``[N, nq]`` (a copy).")
    qvel = property(lambda self: self._state["qvel"], doc="Generalised velocities ``[N, nv]`` (a copy).")
    ctrl = property(lambda self: self._state["ctrl"], doc="Controls ``[N, nu]`` (a copy).")
    time = property(lambda self: self._state["time"], doc="Simulation time ``[N]``.")
    xpos = property(lambda self: self._state["xpos"], doc="Body positions ``[N, nbody, 3]``.")
    xquat = property(lambda self: self._state["xquat"], doc="Body orientations ``[N, nbody, 4]``.")
    cvel = property(lambda self: self._state["cvel"], doc="Body velocities ``[N, nbody, 6]``.")
    sensordata = property(lambda self: self._state["sensordata"], doc="Sensor outputs ``[N, nsensordata]``.")
    cfrc_ext = property(lambda self: self._state["cfrc_ext"], doc="External forces ``[N, nbody, 6]``.")

    def data_field(self, name: str) -> torch.Tensor:
        """An ``MjData`` field ``[N, ...]`` stacked over worlds (read after every step from now on)."""
        if name not in self._state:
            if not hasattr(self.datas[0], name):
                raise ValueError(f"data_field: unknown MjData field {name!r}")
            self._fields.append(name)
            self._read()
        return self._state[name]

    @property
    def xfrc_applied(self) -> torch.Tensor:
        """Applied body wrenches ``[N, nbody, 6]`` (a copy)."""
        return torch.from_numpy(np.stack([np.array(d.xfrc_applied) for d in self.datas]))

    def set_xfrc_applied(self, values: torch.Tensor, env_ids: torch.Tensor | np.ndarray | None = None) -> None:
        """Write the applied wrenches of ``env_ids``."""
        ids = as_index_array(env_ids, self.num_worlds)
        arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
        arr = np.broadcast_to(arr, (ids.size, self.model.nbody, 6))
        for k, i in enumerate(ids):
            self.datas[i].xfrc_applied[:] = arr[k]

    def add_qvel(self, dv: torch.Tensor, env_ids: torch.Tensor, dofs: Sequence[int]) -> None:
        """Add ``dv`` to the selected velocities of each world's own data."""
        values = dv.detach().cpu().numpy()
        for k, i in enumerate(torch.as_tensor(env_ids).tolist()):
            self.datas[i].qvel[list(dofs)] += values[k]
        self._read()

    def step(self, ctrl: torch.Tensor, nstep: int | None = None) -> torch.Tensor:
        """Apply ``ctrl`` and call ``mj_step`` ``nstep`` times (default ``decimation``) per world;
        return diverged worlds.
        """
        ctrl_np = ctrl.detach().cpu().numpy()
        nstep = self.decimation if nstep is None else int(nstep)
        bad = np.zeros(self.num_worlds, dtype=bool)
        for i, (m, d) in enumerate(zip(self.models, self.datas, strict=True)):
            before = sum(d.warning[w].number for w in DIVERGENCE_WARNINGS)
            d.ctrl[:] = ctrl_np[i]
            mujoco.mj_step(m, d, nstep=nstep)
            if self._contact_forces:  # Gymnasium's call, on the data as mj_step left it
                mujoco.mj_rnePostConstraint(m, d)
            if self.forward_after_step:
                mujoco.mj_fwdPosition(m, d)
                mujoco.mj_fwdVelocity(m, d)
            bad[i] = sum(d.warning[w].number for w in DIVERGENCE_WARNINGS) != before
        self._read()
        return torch.from_numpy(bad)

    def reset(
        self,
        env_ids: torch.Tensor | np.ndarray | None,
        qpos: torch.Tensor | None = None,
        qvel: torch.Tensor | None = None,
        act: torch.Tensor | None = None,
    ) -> None:
        """Reset ``env_ids`` with ``mj_resetData``, set ``qpos``/``qvel``/``act`` if given, then ``mj_forward``."""
        ids = as_index_array(env_ids, self.num_worlds)
        for k, i in enumerate(ids):
            m, d = self.models[i], self.datas[i]
            mujoco.mj_resetData(m, d)
            if qpos is not None:
                d.qpos[:] = np.asarray(qpos[k])
            if qvel is not None:
                d.qvel[:] = np.asarray(qvel[k])
            if act is not None:
                if m.na == 0:
                    raise ValueError("act: the model has no actuator activations (na = 0)")
                d.act[:] = np.asarray(act[k])
            mujoco.mj_forward(m, d)
            d.cfrc_ext[:] = 0.0
        self._read()

    def set_model_field(
        self, name: str, values: torch.Tensor | np.ndarray, env_ids: torch.Tensor | np.ndarray | None = None
    ) -> None:
        """Write the field into each selected world's own model, then ``mj_setConst``."""
        field = resolve_field(name)
        ids = as_index_array(env_ids, self.num_worlds)
        arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
        template = self._field(self.model, field)
        arr = np.broadcast_to(arr, (ids.size, *np.shape(template)))
        for k, i in enumerate(ids):
            m = self.models[i]
            if field.startswith("opt."):
                setattr(m.opt, field[4:], arr[k])
            else:
                getattr(m, field)[...] = arr[k]
            mujoco.mj_setConst(m, self.datas[i])
        self._written.add(field)

    def get_model_field(self, name: str) -> torch.Tensor:
        """Per-world values ``[N, ...]`` of a model field."""
        field = resolve_field(name)
        return torch.tensor(np.stack([np.array(self._field(m, field)) for m in self.models]))

    _SPEC = mujoco.mjtState.mjSTATE_INTEGRATION

    def state_dict(self) -> dict[str, object]:
        """Every world's integration state (``mj_getState``) and per-world fields."""
        rows = []
        for m, d in zip(self.models, self.datas, strict=True):
            row = np.empty(mujoco.mj_stateSize(m, self._SPEC))
            mujoco.mj_getState(m, d, row, self._SPEC)
            rows.append(row)
        return {
            "state": torch.from_numpy(np.stack(rows)),
            "fields": {f: self.get_model_field(f) for f in sorted(self._written)},
            "cfrc_ext": self.cfrc_ext.clone(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`."""
        for field, values in state["fields"].items():
            self.set_model_field(field, values)
        for row, m, d in zip(state["state"].numpy(), self.models, self.datas, strict=True):
            mujoco.mj_setState(m, d, row, self._SPEC)
            mujoco.mj_forward(m, d)
        if "cfrc_ext" in state:
            for d, forces in zip(self.datas, state["cfrc_ext"].numpy(), strict=True):
                d.cfrc_ext[:] = forces
        self._read()

    @staticmethod
    def _field(model: mujoco.MjModel, field: str) -> np.ndarray:
        return getattr(model.opt, field[4:]) if field.startswith("opt.") else getattr(model, field)

    def get_model(self, world: int) -> mujoco.MjModel:
        """World ``world``'s own model."""
        return self.models[int(world)]

    def get_data(self, world: int) -> mujoco.MjData:
        """A copy of world ``world``'s data with derived quantities computed."""
        data = copy.copy(self.datas[int(world)])
        mujoco.mj_forward(self.models[int(world)], data)
        return data
