"""``MujocoBackend``: N worlds stepped in C on a thread pool with MuJoCo's batch API.

``mujoco.batch.Batch`` keeps each world's full integration state (including the solver's warm
start) in one row of a ``[N, nstate]`` float64 array and steps the rows on ``nthread`` threads;
results are bit-identical to a loop over one ``MjData`` per world at any thread count. State
fields are live strided views of those rows, so the torch tensors here are views too: no copies
on the step path and no Python loop over worlds.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import mujoco
import numpy as np
import torch
from mujoco.batch import DATA_FIELDS, Batch, SimulationError

from robolearn.sim.backend import DIVERGENCE_WARNINGS, TensorStateViews, as_index_array, resolve_field
from robolearn.sim.model import contact_force_mode


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A torch view of a NumPy array; read-only outputs of the batch are wrapped without copying."""
    with warnings.catch_warnings():
        # torch warns that the array is read-only; the tensor is documented as read-only too.
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


class MujocoBackend(TensorStateViews):
    """The embedded CPU backend: ``mujoco.batch`` stepping with threads = cores by default."""

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        *,
        decimation: int = 1,
        nthread: int | None = None,
        forward_after_step: bool = False,
        device: str | torch.device = "cpu",
        data_fields: tuple[str, ...] = (),
    ) -> None:
        """Create ``num_worlds`` copies of ``model``.

        Args:
            model: the compiled model; per-world fields start as its values.
            num_worlds: N.
            decimation: physics substeps per :meth:`step`.
            nthread: worker threads; ``None`` uses every core (``os.cpu_count()``).
            forward_after_step: recompute position/velocity-dependent quantities at the new state
                after each step (``mjSTAGE_VEL``), instead of ``mj_step``'s one-substep-behind values.
            device: must be CPU; this backend's tensors are views of host memory.
            data_fields: further ``MjData`` outputs to copy out of every step (:meth:`data_field`).
        """
        if torch.device(device).type != "cpu":
            raise ValueError(f"device: MujocoBackend runs on the CPU, got {device!r}; use an MJX or Warp backend")
        if num_worlds < 1:
            raise ValueError(f"num_worlds: expected >= 1, got {num_worlds}")
        if decimation < 1:
            raise ValueError(f"decimation: expected >= 1, got {decimation}")
        self.model = model
        self.num_worlds = int(num_worlds)
        self.decimation = int(decimation)
        self.device = torch.device("cpu")
        self.dtype = torch.float64
        threads = nthread if nthread is not None else (os.cpu_count() or 1)
        # Worlds share scratch MjData per thread unless RK4 contact forces need each world's own
        # data after the step (see robolearn.sim.model.compile_model). The conformance suite checks
        # both against one MjData per world.
        self._cf_mode = contact_force_mode(model)
        persistent = self._cf_mode == "post_step"
        self._batch = Batch(model, self.num_worlds, nthread=min(threads, self.num_worlds), persistent=persistent)
        self._stage = int(mujoco.mjtStage.mjSTAGE_VEL if forward_after_step else mujoco.mjtStage.mjSTAGE_NONE)
        b = self._batch
        self._qpos_np = b.bind("qpos")
        self._qvel_np = b.bind("qvel")
        self._ctrl_np = b.bind("ctrl")
        # Actuator activations are part of the state rows (writable), like qpos/qvel.
        self._act_np = b.bind("act") if model.na > 0 else None
        self._qpos = torch.from_numpy(self._qpos_np)
        self._qvel = torch.from_numpy(self._qvel_np)
        self._ctrl = torch.from_numpy(self._ctrl_np)
        self._time = torch.from_numpy(b.bind("time"))
        self._xfrc_np = b.bind("xfrc_applied")  # part of the state rows: writable, zeroed by reset
        self._xfrc = torch.from_numpy(self._xfrc_np)
        self._derived = {name: _tensor(b.bind(name)) for name in ("xpos", "xquat", "cvel", "sensordata")}
        # cfrc_ext lives in our own buffer: it is zero after a reset (as MjData's after
        # mj_resetData + mj_forward) and, under RK4, filled by the per-world loop after the step.
        self._cfrc_np = np.zeros((self.num_worlds, model.nbody, 6))
        self._cfrc = torch.from_numpy(self._cfrc_np)
        self._cfrc_in_step = b.bind("cfrc_ext") if self._cf_mode == "in_step" else None
        self._scratch = mujoco.MjData(model) if persistent else None
        self._stepped = False
        for name in data_fields:
            self.data_field(name)
        lo, hi = min(DIVERGENCE_WARNINGS), max(DIVERGENCE_WARNINGS) + 1
        if sorted(DIVERGENCE_WARNINGS) != list(range(lo, hi)):  # a slice is cheaper than a list index
            raise RuntimeError("divergence warning slots are not contiguous in this MuJoCo build")
        self._warn_counts = b.warning[:, lo:hi, 1]  # a live view of the counters (basic slicing)
        self._written: set[str] = set()  # model fields made per-world, for checkpoints
        self._fields: dict[str, tuple[str, bool]] = {}
        self._dof_cols: dict[tuple[int, ...], torch.Tensor] = {}
        b.reset()
        self._warn_sum = self._warning_sum()

    # -- state views (qpos ... xfrc_applied: TensorStateViews) -----------------------------
    @property
    def nthread(self) -> int:
        """Worker threads of the batch."""
        return self._batch.nthread

    def data_field(self, name: str) -> torch.Tensor:
        """A read-only live ``[N, ...]`` view of an ``MjData`` output field.

        The batch copies a field out of each call only once it is bound, so a field must be bound
        (named in ``data_fields``, or first asked for) before the first step: afterwards its values
        for the last step could not be recovered.
        """
        if name == "cfrc_ext":
            return self._cfrc
        view = self._derived.get(name)
        if view is None:
            if name not in DATA_FIELDS:
                raise ValueError(f"data_field: unknown MjData field {name!r}")
            if self._stepped:
                raise RuntimeError(
                    f"data_field: {name!r} was first asked for after stepping; declare it up front "
                    f"(TaskCfg.data_fields or the backend's data_fields) so every step copies it out"
                )
            view = self._derived[name] = _tensor(self._batch.bind(name))
            self._batch.forward()  # fill it at the current state (no step has happened yet)
        return view

    def set_xfrc_applied(self, values: torch.Tensor, env_ids: torch.Tensor | np.ndarray | None = None) -> None:
        """Write the applied wrenches of ``env_ids``."""
        ids = as_index_array(env_ids, self.num_worlds)
        self._xfrc_np[ids] = _numpy(values, (ids.size, self.model.nbody, 6), "xfrc_applied", broadcast=True)

    def add_qvel(self, dv: torch.Tensor, env_ids: torch.Tensor, dofs: Sequence[int]) -> None:
        """Add ``dv`` to the selected velocities (an in-place write into the state rows)."""
        ids = torch.as_tensor(env_ids, dtype=torch.long)
        key = tuple(dofs)
        cols = self._dof_cols.get(key)
        if cols is None:  # pushes name the same dofs at every firing
            cols = self._dof_cols[key] = torch.as_tensor(list(dofs), dtype=torch.long)[None, :]
        self._qvel[ids[:, None], cols] += dv.to(self._qvel.dtype)

    # -- stepping ----------------------------------------------------------------------------
    def step(self, ctrl: torch.Tensor, nstep: int | None = None) -> torch.Tensor:
        """Write ``ctrl`` and advance every world ``nstep`` substeps (default ``decimation``); return
        the diverged worlds.
        """
        self._ctrl.copy_(ctrl)
        self._stepped = True
        failed: np.ndarray | None = None
        try:
            self._batch.step(nstep=self.decimation if nstep is None else int(nstep), stage=self._stage)
        except SimulationError as err:  # those worlds kept their previous state; reset them too
            failed = err.ids
        after = self._warning_sum()
        bad = after != self._warn_sum
        self._warn_sum = after
        if failed is not None:
            bad[failed] = True
        if self._cf_mode == "in_step":
            self._cfrc_np[:] = self._cfrc_in_step
        elif self._cf_mode == "post_step":
            self._post_step_contact_forces()
        return torch.from_numpy(bad)

    def _post_step_contact_forces(self) -> None:
        """``mj_rnePostConstraint`` on each world's data as ``mj_step`` left it (RK4 models).

        The one Python loop over worlds in this backend: the batch has no hook for the call. It
        costs a few microseconds per world against the hundreds an RK4 contact step takes (measured
        in the throughput benchmark). The template model serves every world: ``cfrc_ext`` depends
        on the model's structure only, the per-world values enter through the data.
        """
        data, model, out = self._scratch, self.model, self._cfrc_np
        get_data, post = self._batch.get_data, mujoco.mj_rnePostConstraint
        for i in range(self.num_worlds):
            get_data(i, data)
            post(model, data)
            out[i] = data.cfrc_ext

    def _warning_sum(self) -> np.ndarray:
        """Per-world count of divergence warnings so far (MuJoCo resets a world when it raises one)."""
        return self._warn_counts.sum(axis=1)

    def reset(
        self,
        env_ids: torch.Tensor | np.ndarray | None,
        qpos: torch.Tensor | None = None,
        qvel: torch.Tensor | None = None,
        act: torch.Tensor | None = None,
    ) -> None:
        """Reset ``env_ids`` to the model defaults, set ``qpos``/``qvel``/``act`` rows if given, run forward."""
        ids = as_index_array(env_ids, self.num_worlds)
        if ids.size == 0:
            return
        self._batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        if qpos is not None:
            self._qpos_np[ids] = _numpy(qpos, (ids.size, self.model.nq), "qpos")
        if qvel is not None:
            self._qvel_np[ids] = _numpy(qvel, (ids.size, self.model.nv), "qvel")
        if act is not None:
            if self._act_np is None:
                raise ValueError("act: the model has no actuator activations (na = 0)")
            self._act_np[ids] = _numpy(act, (ids.size, self.model.na), "act")
        self._batch.forward(ids)
        self._cfrc_np[ids] = 0.0
        self._warn_sum = self._warning_sum()

    # -- per-world model fields --------------------------------------------------------------
    def set_model_field(
        self, name: str, values: torch.Tensor | np.ndarray, env_ids: torch.Tensor | np.ndarray | None = None
    ) -> None:
        """Write per-world values of a model field for ``env_ids``; derived constants follow."""
        field, needs_const = self._field_info(name)
        ids = as_index_array(env_ids, self.num_worlds)
        rows = self._batch.expand(field)  # the batch keeps the live view once expanded
        rows[ids] = _numpy(values, (ids.size, *rows.shape[1:]), name, broadcast=True)
        self._written.add(field)
        if needs_const:
            self._batch.set_const(ids)

    def _field_info(self, name: str) -> tuple[str, bool]:
        """The MuJoCo name of model field ``name`` and whether writing it needs ``mj_setConst``
        (resolved once per name: events write fields at every reset).
        """
        info = self._fields.get(name)
        if info is None:
            field = resolve_field(name)
            info = (field, field.split(".")[-1] in mujoco.MjModel._setconst_inputs or field.startswith("opt."))
            self._fields[name] = info
        return info

    def get_model_field(self, name: str) -> torch.Tensor:
        """Per-world values ``[N, ...]`` of a model field (a copy)."""
        field, _ = self._field_info(name)
        # A field this backend wrote is expanded: read the batch's live view (no re-wrapping).
        rows = self._batch.expand(field) if field in self._written else self._batch.expanded(field)
        if rows is None:
            template = np.asarray(getattr(self.model.opt, field[4:]) if field.startswith("opt.") else getattr(self.model, field))
            rows = np.broadcast_to(template, (self.num_worlds, *template.shape))
        return torch.from_numpy(np.array(rows))  # one copy, C-contiguous and writable

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, object]:
        """Every world's full integration state (incl. the solver warm start) and per-world fields."""
        return {
            "state": torch.from_numpy(self._batch.state.copy()),
            "fields": {f: self.get_model_field(f) for f in sorted(self._written)},
            "warnings": torch.from_numpy(self._warn_sum.copy()),
            "cfrc_ext": self._cfrc.clone(),  # an output of the last step, not a function of the state
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`; the next step continues bit for bit."""
        saved = state["state"]
        if tuple(saved.shape) != self._batch.state.shape:
            raise ValueError(f"state: expected shape {self._batch.state.shape}, got {tuple(saved.shape)}")
        for field, values in state["fields"].items():
            self.set_model_field(field, values)
        self._batch.state[:] = saved.numpy()
        self._batch.forward()  # derived fields follow the restored state
        if "cfrc_ext" in state:
            self._cfrc.copy_(state["cfrc_ext"])
        self._warn_sum = self._warning_sum()

    # -- one world, for rendering and inspection ---------------------------------------------
    def get_model(self, world: int) -> mujoco.MjModel:
        """World ``world``'s model with its per-world fields."""
        return self._batch.get_model(int(world))

    def get_data(self, world: int) -> mujoco.MjData:
        """World ``world``'s state in a new ``MjData``, derived quantities computed by ``mj_forward``."""
        model = self.get_model(world)
        data = self._batch.get_data(int(world), mujoco.MjData(model))
        mujoco.mj_forward(model, data)
        return data


def _numpy(values: torch.Tensor | np.ndarray, shape: tuple[int, ...], name: str, broadcast: bool = False) -> np.ndarray:
    """Values as float64 NumPy of ``shape``, or a ValueError naming the field and the shapes."""
    arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if broadcast and arr.shape != shape:
        try:
            arr = np.broadcast_to(arr, shape)
        except ValueError:
            raise ValueError(f"{name}: expected values broadcastable to {shape}, got shape {arr.shape}") from None
    elif arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    return arr
