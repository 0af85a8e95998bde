"""``WarpBackend``: N worlds stepped by MuJoCo Warp (``mujoco_warp``) on a GPU or on Warp's CPU device.

MuJoCo Warp keeps every world's state in device arrays ``[nworld, ...]`` and steps them all in one
set of kernel launches. The torch tensors this backend hands out are ``wp.to_torch`` views of those
arrays (DLPack-style sharing, no copies, on the CPU too), in float32: MuJoCo Warp computes in
single precision. Inputs of any float dtype (the env writes float64) are converted on write.

Per-world model fields: the fields of :data:`~robolearn.sim.backend.RANDOMIZABLE_FIELDS` (and the
constants MuJoCo derives from them) are allocated per world when the backend is built, through
``put_model(batch_sizes=...)``; MuJoCo Warp's kernels index a batched model array with
``worldid % shape[0]``, so a ``[N, ...]`` array gives each world its own value. Other batched
MuJoCo Warp model fields are made per world on first write.

Differences from the MuJoCo CPU backend (all stated in the conformance tests):

- float32 physics: trajectories agree with the float64 reference within tolerances, not exactly.
- ``reset(env_ids)`` restores those worlds with ``reset_data(reset=mask)`` and then runs
  ``forward`` on *all* worlds (MuJoCo Warp has no per-world forward): the other worlds' state
  (``qpos``, ``qvel``, ``act``, warm start, time) is untouched, only their derived quantities
  (``xpos``, ``sensordata`` ...) become those of their current state until the next step.
- divergence: MuJoCo Warp raises no instability warnings, so after every substep a kernel flags the
  worlds whose ``qpos``, ``qvel`` or ``qacc`` is non-finite or beyond MuJoCo's ``mjMAXVAL``
  (``1e10``, the C engine's test) and ``reset_data`` puts exactly those worlds back to the model
  defaults, as the C engine resets a world that raised such a warning.
- contacts: MuJoCo Warp picks another tangent frame per contact than the C engine. Under the
  default pyramidal friction cone the friction polytope turns with it, so contact-rich trajectories
  (Ant) part from the C engine's at the first contact, as two valid approximations; under the
  elliptic cone (frame-invariant) they agree to float32 rounding. Height fields are collided by
  MuJoCo Warp's own routine, with other contact points than the C engine's.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence

import mujoco
import numpy as np
import torch

from robolearn.sim.backend import RANDOMIZABLE_FIELDS, TensorStateViews, resolve_field
from robolearn.sim.model import contact_force_mode

UNSUPPORTED_TASKS: dict[str, str] = {
    "Humanoid": "MuJoCo Warp does not implement the PGS solver (Gymnasium's humanoid.xml sets solver='PGS'): "
    "put_model raises 'mjSOL_PGS is unsupported'",
}
"""Registered task ids this backend cannot run, with the reason (established by building every
registered task with ``backend="warp"``; see ``tests/test_warp_backend.py``)."""

MAXVAL = 1e10
"""MuJoCo's ``mjMAXVAL``: a state component beyond it counts as diverged (as ``mj_checkPos``)."""

# Model constants mj_setConst derives from the set-const inputs among RANDOMIZABLE_FIELDS; they are
# per world too, because MuJoCo Warp's set_const writes them for every world.
_DERIVED = ("body_subtreemass", "body_invweight0", "dof_invweight0", "actuator_acc0", "tendon_invweight0")
_SETCONST_FIELDS = frozenset({"body_mass", "body_inertia", "body_ipos", "dof_armature"})

# The integration state saved by state_dict, with MjData's names (mjSTATE_INTEGRATION's parts).
# Empty arrays (no actuator activations, mocap bodies, equality constraints ...) are skipped.
_STATE_FIELDS = (
    "time", "qpos", "qvel", "act", "history", "qacc_warmstart", "ctrl", "qfrc_applied", "xfrc_applied",
    "eq_active", "mocap_pos", "mocap_quat", "userdata",
)


def _import_warp():  # noqa: ANN202 - returns two modules
    """Import warp and mujoco_warp on demand: ``import robolearn.sim`` must stay free of them."""
    try:
        import warp as wp

        # Before mujoco_warp initialises Warp: no banner and no line per kernel module loaded (a
        # hundred per model) at Warp's default INFO level; a level the user lowered is kept.
        if wp.config.log_level == wp.LOG_INFO:
            wp.config.log_level = wp.LOG_WARNING
        import mujoco_warp as mjw
    except ImportError as exc:  # pragma: no cover - the dev/gpu extras install both
        raise ImportError(
            "backend='warp' needs the mujoco-warp package (pip install 'robolearn[gpu]'); " f"import failed: {exc}"
        ) from exc
    wp.init()
    return wp, mjw


def warp_device(device: str | torch.device) -> str:
    """Warp's name for torch device ``device`` (``cpu`` or ``cuda:k``), or a ValueError."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return "cpu"
    if dev.type == "cuda":
        return f"cuda:{dev.index if dev.index is not None else torch.cuda.current_device()}"
    raise ValueError(f"device: WarpBackend runs on 'cpu' or 'cuda[:k]', got {str(device)!r}")


def _model_name(model: mujoco.MjModel) -> str:
    """``model 'name'`` from the MJCF ``<mujoco model=...>`` attribute."""
    end = model.names.find(b"\0")
    return f"model {model.names[:end].decode() or '(unnamed)'!r}"


class WarpBackend(TensorStateViews):
    """N worlds of one model in MuJoCo Warp on ``device``; float32 torch views of the device state."""

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
        graph_capture: bool | None = None,
        nconmax: int | None = None,
        njmax: int | None = None,
    ) -> None:
        """Put ``model`` on ``device`` with ``num_worlds`` worlds.

        Args:
            model: the compiled model (float64 on the host); per-world fields start as its values.
            num_worlds: N.
            decimation: physics substeps per :meth:`step`.
            nthread: ignored (accepted for the common backend signature): Warp parallelises over
                worlds itself, on the GPU's threads or, on the CPU device, in one host thread.
            forward_after_step: recompute position/velocity-dependent quantities at the new state
                after each step, as :class:`~robolearn.sim.MujocoBackend`.
            device: ``cpu`` (Warp's CPU device: slow, for tests and CI) or ``cuda``/``cuda:k``.
            data_fields: further ``MjData`` outputs the env reads (:meth:`data_field`); checked here.
            graph_capture: record the Warp launches of a full step (the ``decimation`` substeps,
                divergence checks and resets, contact forces, forward pass), of a reset and of a
                forward pass as graphs on their first call and replay them afterwards (a CUDA graph
                on CUDA, Warp's recorded launch stream on the CPU device). ``None`` (default): on
                CUDA only. Uncaptured CUDA steps are slow: MuJoCo Warp's solver loop
                (``wp.capture_while``) then reads its convergence flag to the host after every
                iteration (a stream synchronisation), and ``reset_data`` re-declares its kernels in
                Python at every call (milliseconds). A step with ``nstep != decimation`` runs
                uncaptured.
            nconmax: contacts per world to allocate (MuJoCo Warp's heuristic by default).
            njmax: constraint rows per world to allocate (MuJoCo Warp's heuristic by default).

        Raises:
            ValueError: a bad argument, or a model using a feature MuJoCo Warp does not support
                (the message names the model and the feature).
        """
        del nthread  # Warp schedules the worlds itself
        if num_worlds < 1:
            raise ValueError(f"num_worlds: expected >= 1, got {num_worlds}")
        if decimation < 1:
            raise ValueError(f"decimation: expected >= 1, got {decimation}")
        self._wp_device = warp_device(device)
        wp, mjw = _import_warp()
        self._wp, self._mjw = wp, mjw
        self.model = model
        self.num_worlds = int(num_worlds)
        self.decimation = int(decimation)
        self.device = torch.device("cpu") if self._wp_device == "cpu" else torch.device(self._wp_device)
        self.dtype = torch.float32
        self.forward_after_step = bool(forward_after_step)
        self.graph_capture = self._wp_device != "cpu" if graph_capture is None else bool(graph_capture)
        self._cf_mode = contact_force_mode(model)
        n = self.num_worlds
        batched = {f: n for f in (*RANDOMIZABLE_FIELDS.values(), *_DERIVED) if not f.startswith("opt.")}
        with wp.ScopedDevice(self._wp_device):
            try:
                self._m = mjw.put_model(model, batch_sizes=batched)
            except (NotImplementedError, ValueError) as exc:
                raise ValueError(
                    f"backend='warp': {_model_name(model)} uses a feature MuJoCo Warp does not support: {exc}"
                ) from exc
            # opt.gravity lives in Option, which put_model does not batch: replace it by N rows.
            g = np.tile(np.asarray(model.opt.gravity, dtype=np.float32), (n, 1))
            self._m.opt.gravity = wp.array(g, dtype=wp.vec3)
            host = mujoco.MjData(model)
            mujoco.mj_forward(model, host)
            self._d = mjw.put_data(model, host, nworld=n, nconmax=nconmax, njmax=njmax)
            self._bad_wp = wp.zeros(n, dtype=bool)
            self._diverged_wp = wp.zeros(n, dtype=bool)
            self._reset_wp = wp.zeros(n, dtype=bool)
        d = self._d
        t = wp.to_torch
        self._qpos, self._qvel, self._ctrl, self._time = t(d.qpos), t(d.qvel), t(d.ctrl), t(d.time)
        self._act = t(d.act) if model.na > 0 else None
        self._xfrc = t(d.xfrc_applied)
        self._derived = {name: t(getattr(d, name)) for name in ("xpos", "xquat", "cvel", "sensordata")}
        self._bad = t(self._bad_wp)
        self._diverged = t(self._diverged_wp)
        self._reset_mask = t(self._reset_wp)
        # cfrc_ext lives in our own buffer: zero after a reset, filled by rne_postconstraint after a
        # step (Gymnasium's call on the data as the step left it), for models compiled with
        # contact forces (robolearn.sim.model.compile_model).
        with wp.ScopedDevice(self._wp_device):
            self._cfrc_wp = wp.zeros((n, model.nbody), dtype=wp.spatial_vector)
        self._cfrc = t(self._cfrc_wp)
        self._written: set[str] = set()
        self._dof_cols: dict[tuple[int, ...], torch.Tensor] = {}
        self._subtree: torch.Tensor | None = None
        # Recorded launch graphs by call ("step", "reset", "forward"); dropped when a model array
        # they point at is replaced (_field_array).
        self._graphs: dict[str, object] = {}
        self._capturing = False
        self._torch_streams: dict[int, object] = {}
        self._check_kernel = _check_kernel(wp)
        for name in data_fields:
            self.data_field(name)
        self._forward()

    @contextlib.contextmanager
    def _on_device(self) -> Iterator[None]:
        """Run Warp launches on this backend's device, ordered after and before torch's work.

        The tensors are views shared with torch, and on CUDA torch and Warp each launch on their
        own stream: Warp's stream first waits for torch's pending writes (controls, resets, field
        writes) and torch's stream then waits for Warp's step. Both waits are device-side events,
        never a host sync. On the CPU both run synchronously in this thread.
        """
        wp = self._wp
        with wp.ScopedDevice(self._wp_device):
            if self.device.type != "cuda":
                yield
                return
            torch_stream = self._warp_view_of_torch_stream()
            warp_stream = wp.get_stream(self._wp_device)
            warp_stream.wait_stream(torch_stream)
            try:
                yield
            finally:
                torch_stream.wait_stream(warp_stream)

    def _warp_view_of_torch_stream(self):  # noqa: ANN202 - a wp.Stream
        """Warp's handle of torch's current stream on this device, made once per torch stream.

        ``wp.stream_from_torch`` registers a new Warp stream and, at the first ``wait_stream`` on
        it, creates a new CUDA event: once per step that is avoidable host work.
        """
        current = torch.cuda.current_stream(self.device)
        stream = self._torch_streams.get(current.cuda_stream)
        if stream is None:  # keeps a reference to the torch stream (stream_from_torch does)
            stream = self._torch_streams[current.cuda_stream] = self._wp.stream_from_torch(current)
        return stream

    def _launch(self, key: str, launches: Callable[[], None]) -> None:
        """Run ``launches`` (Warp work only) directly or, with ``graph_capture``, as a recorded graph.

        The first call runs the launches uncaptured (this call's work; it also creates and loads
        every kernel, which MuJoCo Warp's ``reset_data`` declares at call time) and then records
        them: recording does not execute them. Later calls replay the record, with no Python per
        kernel. The graphs read and write the same arrays at every replay (controls, masks,
        per-world fields are written in place), so nothing has to be re-recorded between calls.
        """
        if not self.graph_capture:
            launches()
            return
        wp = self._wp
        graph = self._graphs.get(key)
        if graph is None:
            launches()
            self._capturing = True
            try:
                with wp.ScopedCapture(device=self._wp_device) as capture:
                    launches()
            finally:
                self._capturing = False
            self._graphs[key] = capture.graph
            return
        wp.capture_launch(graph)

    # -- state views (qpos ... xfrc_applied: TensorStateViews) -----------------------------
    @property
    def overflow(self) -> torch.Tensor:
        """Per-world bitmask ``[N]`` (int32) of MuJoCo Warp's allocation overflows since the world's
        last reset (``mujoco_warp.OverflowType``: contacts beyond ``nconmax``, constraint rows beyond
        ``njmax`` ...). Non-zero means contacts or constraints were dropped: rebuild with larger
        ``nconmax``/``njmax``. MuJoCo Warp also prints a warning from the kernel when it happens.
        """
        return self._wp.to_torch(self._d.overflow)

    def data_field(self, name: str) -> torch.Tensor:
        """A read-only ``[N, ...]`` view of an ``MjData`` output field in MuJoCo Warp's data.

        Every field MuJoCo Warp computes is computed at every step, so (unlike the CPU batch) a
        field may be first asked for at any time. Fields MuJoCo Warp stores in another layout than
        ``MjData`` (sparse matrices, contacts, constraint rows) are refused.
        """
        if name == "cfrc_ext":
            return self._cfrc
        view = self._derived.get(name)
        if view is not None:
            return view
        if name == "act" and self.model.na == 0:
            return torch.zeros(self.num_worlds, 0, dtype=self.dtype, device=self.device)
        host = getattr(mujoco.MjData(self.model), name, None) if not name.startswith("_") else None
        if not isinstance(host, np.ndarray):
            raise ValueError(f"data_field: unknown MjData field {name!r}")
        arr = getattr(self._d, name, None)
        view = self._wp.to_torch(arr) if isinstance(arr, self._wp.array) else None
        if view is None or view.shape[0] != self.num_worlds or view[0].numel() != host.size:
            raise ValueError(f"data_field: MjData field {name!r} has no per-world array of MjData's layout in MuJoCo Warp")
        view = view.reshape(self.num_worlds, *host.shape) if host.ndim > 1 or view.ndim != 2 else view
        self._derived[name] = view
        return view

    def set_xfrc_applied(self, values: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Write the applied wrenches of ``env_ids``."""
        ids = self._ids(env_ids)
        self._xfrc[ids] = self._values(values, (ids.numel(), self.model.nbody, 6), "xfrc_applied", broadcast=True)

    def add_qvel(self, dv: torch.Tensor, env_ids: torch.Tensor, dofs: Sequence[int]) -> None:
        """Add ``dv`` to the selected velocities in the device state."""
        ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device)
        key = tuple(dofs)
        cols = self._dof_cols.get(key)
        if cols is None:  # pushes name the same dofs at every firing
            cols = self._dof_cols[key] = torch.as_tensor(list(dofs), dtype=torch.long, device=self.device)[None, :]
        self._qvel[ids[:, None], cols] += torch.as_tensor(dv, device=self.device).to(self.dtype)

    # -- stepping ----------------------------------------------------------------------------
    def step(self, ctrl: torch.Tensor, nstep: int | None = None) -> torch.Tensor:
        """Write ``ctrl`` (any float dtype) and advance ``nstep`` substeps (default ``decimation``);
        return the ``[N]`` mask of worlds that diverged (and were put back to the model defaults).
        """
        self._ctrl.copy_(ctrl)
        nstep = self.decimation if nstep is None else int(nstep)
        with self._on_device():
            if nstep == self.decimation:  # graph_capture may be switched on after construction
                self._launch("step", self._step_launches)
            else:
                self._step_launches(nstep)
        return self._diverged.clone()

    def _step_launches(self, nstep: int | None = None) -> None:
        """A step's Warp work: ``nstep`` (default ``decimation``) substeps, then :meth:`_after_step`."""
        self._diverged_wp.zero_()  # on Warp's stream: after torch's read of the last mask
        self._substeps(self.decimation if nstep is None else nstep)
        self._after_step()

    def _substeps(self, nstep: int) -> None:
        """``nstep`` MuJoCo Warp steps, each followed by the divergence check and masked reset."""
        wp, mjw, m, d = self._wp, self._mjw, self._m, self._d
        on_cpu = self._wp_device == "cpu"
        for _ in range(nstep):
            mjw.step(m, d)
            wp.launch(
                self._check_kernel,
                dim=self.num_worlds,
                inputs=[d.qpos, d.qvel, d.qacc, MAXVAL],
                outputs=[self._bad_wp, self._diverged_wp],
            )
            # On the CPU a host test is free and skips the reset's launches; on CUDA, and in a
            # recorded graph, the masked reset runs unconditionally: no host sync, and a record
            # must hold the reset for the replays in which a world diverges.
            if self._capturing or not on_cpu or bool(self._bad.any()):
                mjw.reset_data(m, d, reset=self._bad_wp)

    def _after_step(self) -> None:
        """Contact forces after the last substep (Gymnasium's call) and the optional forward pass."""
        mjw, m, d = self._mjw, self._m, self._d
        if self._cf_mode != "none":
            mjw.rne_postconstraint(m, d)
            self._wp.copy(self._cfrc_wp, d.cfrc_ext)  # a Warp copy: ordered on Warp's stream
        if self.forward_after_step:
            mjw.fwd_position(m, d)
            mjw.fwd_velocity(m, d)

    def _forward(self) -> None:
        """``forward`` on every world (derived quantities at the current state)."""
        with self._on_device():
            self._launch("forward", lambda: self._mjw.forward(self._m, self._d))

    def reset(
        self,
        env_ids: torch.Tensor | None,
        qpos: torch.Tensor | None = None,
        qvel: torch.Tensor | None = None,
        act: torch.Tensor | None = None,
    ) -> None:
        """Reset ``env_ids`` to the model defaults, set their ``qpos``/``qvel``/``act`` if given, run forward."""
        ids = self._ids(env_ids)
        if ids.numel() == 0:
            return
        k = ids.numel()
        qpos = None if qpos is None else self._values(qpos, (k, self.model.nq), "qpos")
        qvel = None if qvel is None else self._values(qvel, (k, self.model.nv), "qvel")
        if act is not None:
            if self._act is None:
                raise ValueError("act: the model has no actuator activations (na = 0)")
            act = self._values(act, (k, self.model.na), "act")
        self._reset_mask.zero_()
        # index_fill_ (ids are long, on the device: _ids) passes the value as a kernel argument;
        # `x[ids] = True` would copy a host scalar first, a synchronising copy on CUDA per reset.
        self._reset_mask.index_fill_(0, ids, True)
        with self._on_device():
            self._launch("reset", lambda: self._mjw.reset_data(self._m, self._d, reset=self._reset_wp))
        if qpos is not None:
            self._qpos[ids] = qpos
        if qvel is not None:
            self._qvel[ids] = qvel
        if act is not None:
            self._act[ids] = act
        self._forward()
        self._cfrc.index_fill_(0, ids, 0.0)

    # -- per-world model fields --------------------------------------------------------------
    def _field_array(self, field: str, expand: bool):  # noqa: ANN202 - a wp.array
        """The MuJoCo Warp array of model field ``field`` (``[N, ...]`` once ``expand``-ed)."""
        wp = self._wp
        owner, attr = (self._m.opt, field[4:]) if field.startswith("opt.") else (self._m, field)
        arr = getattr(owner, attr, None)
        if not isinstance(arr, wp.array):
            raise ValueError(f"model field {field!r} is not a device array in MuJoCo Warp; it cannot be set per world")
        if arr.shape[0] != self.num_worlds and expand:
            if arr.shape[0] != 1 or arr.ndim < 1:
                raise ValueError(f"model field {field!r} is not batched per world in MuJoCo Warp")
            tiled = np.repeat(arr.numpy(), self.num_worlds, axis=0)
            with self._on_device():  # the upload on Warp's stream, before torch writes into it
                arr = wp.array(tiled, dtype=arr.dtype)
            setattr(owner, attr, arr)
            self._graphs.clear()  # the recorded graphs point at the old array
        return arr

    def set_model_field(self, name: str, values: torch.Tensor | np.ndarray, env_ids: torch.Tensor | None = None) -> None:
        """Write per-world values of a model field for ``env_ids``; derived constants follow."""
        field = resolve_field(name)
        ids = self._ids(env_ids)
        rows = self._wp.to_torch(self._field_array(field, expand=True))
        rows = rows.reshape(self.num_worlds, *self._template_shape(field))
        rows[ids] = self._values(values, (ids.numel(), *rows.shape[1:]), name, broadcast=True)
        self._written.add(field)
        if field in _SETCONST_FIELDS:
            self._set_const()

    def _set_const(self) -> None:
        """Recompute the constants MuJoCo derives from masses, inertias and armatures (mj_setConst)."""
        wp, mjw, m = self._wp, self._mjw, self._m
        if self._subtree is None:  # S[b, c] = 1 where body c lies in the subtree of body b
            s = np.zeros((self.model.nbody, self.model.nbody), dtype=np.float32)
            for c in range(self.model.nbody):
                b = c
                while True:
                    s[b, c] = 1.0
                    if b == 0:
                        break
                    b = int(self.model.body_parentid[b])
            self._subtree = torch.from_numpy(s).to(self.device)
        mass = wp.to_torch(m.body_mass)
        wp.to_torch(m.body_subtreemass).copy_(mass @ self._subtree.T)
        with self._on_device():
            mjw.set_const(m, self._d, groups=mjw._src.types.SetConstGroup.INERT0)

    def _template_shape(self, field: str) -> tuple[int, ...]:
        """Shape of one world's value of ``field`` (MjModel's)."""
        value = getattr(self.model.opt, field[4:]) if field.startswith("opt.") else getattr(self.model, field)
        return tuple(np.shape(value))

    def get_model_field(self, name: str) -> torch.Tensor:
        """Per-world values ``[N, ...]`` of a model field (a copy, float32)."""
        field = resolve_field(name)
        arr = self._wp.to_torch(self._field_array(field, expand=False))
        arr = arr.reshape(arr.shape[0], *self._template_shape(field))
        return arr.expand(self.num_worlds, *arr.shape[1:]).clone()

    # -- checkpoints ---------------------------------------------------------------------------
    def _integration_state(self) -> dict[str, torch.Tensor]:
        """Copies of the state arrays that determine the next step."""
        out = {}
        for name in _STATE_FIELDS:
            arr = getattr(self._d, name, None)
            if isinstance(arr, self._wp.array) and arr.size:
                out[name] = self._wp.to_torch(arr).clone()
        return out

    def _load_integration_state(self, state: dict[str, torch.Tensor]) -> None:
        """Write :meth:`_integration_state` back into the device arrays."""
        for name, values in state.items():
            self._wp.to_torch(getattr(self._d, name)).copy_(values)

    def state_dict(self) -> dict[str, object]:
        """Every world's integration state (incl. the solver warm start) and per-world fields."""
        return {
            "state": self._integration_state(),
            "fields": {f: self.get_model_field(f) for f in sorted(self._written)},
            "cfrc_ext": self._cfrc.clone(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`; the next step continues as it would have."""
        for field, values in state["fields"].items():
            self.set_model_field(field, values)
        saved = state["state"]
        if not isinstance(saved, dict) or tuple(saved["qpos"].shape) != tuple(self._qpos.shape):
            raise ValueError(f"state: expected a WarpBackend state with qpos of shape {tuple(self._qpos.shape)}")
        self._load_integration_state(saved)
        self._forward()
        if "cfrc_ext" in state:
            self._cfrc.copy_(state["cfrc_ext"])

    # -- for device-side consumers of the state (robolearn.sim.warp_render) ----------------------
    @property
    def warp_model(self):  # noqa: ANN201 - a mujoco_warp Model
        """The MuJoCo Warp ``Model`` on the device (per-world fields batched ``[N, ...]``). Its
        arrays may be replaced when a field is first written per world: read them at each use.
        """
        return self._m

    @property
    def warp_data(self):  # noqa: ANN201 - a mujoco_warp Data
        """The MuJoCo Warp ``Data`` of all worlds (what the torch views share). After a step its
        derived quantities (``geom_xpos``, ``cam_xpos`` ...) are those of the last substep's start
        unless ``forward_after_step``; a consumer that needs them at the current state computes
        them on its own ``Data``.
        """
        return self._d

    def warp_scope(self) -> contextlib.AbstractContextManager[None]:
        """A context in which Warp launches run on this backend's device, ordered after torch's
        pending work on the shared arrays and before torch's later work (see ``_on_device``).
        """
        return self._on_device()

    # -- one world, for rendering and inspection ---------------------------------------------
    def get_model(self, world: int) -> mujoco.MjModel:
        """A host copy of the template model carrying world ``world``'s per-world fields."""
        w = int(world)
        model = copy.copy(self.model)
        for field in self._written:
            value = self.get_model_field(field)[w].double().cpu().numpy()
            if field.startswith("opt."):
                setattr(model.opt, field[4:], value)
            else:
                getattr(model, field)[...] = value
        if self._written & _SETCONST_FIELDS:
            mujoco.mj_setConst(model, mujoco.MjData(model))
        return model

    def get_data(self, world: int) -> mujoco.MjData:
        """World ``world``'s state in a new host ``MjData``, derived quantities computed by ``mj_forward``."""
        w = int(world)
        model = self.get_model(w)
        data = mujoco.MjData(model)
        for name, values in self._integration_state().items():
            target = getattr(data, name)
            row = values[w].double().cpu().numpy()
            if np.ndim(target) == 0:
                setattr(data, name, float(row))
            else:
                target[...] = row.reshape(np.shape(target))
        mujoco.mj_forward(model, data)
        return data

    # -- input conversion ----------------------------------------------------------------------
    def _ids(self, env_ids: torch.Tensor | Sequence[int] | np.ndarray | None) -> torch.Tensor:
        """World indices as a long tensor on the device (``None``: all; a bool mask: its nonzeros)."""
        if env_ids is None:
            return torch.arange(self.num_worlds, device=self.device)
        ids = torch.as_tensor(env_ids, device=self.device)
        if ids.dtype == torch.bool:
            if ids.shape != (self.num_worlds,):
                raise ValueError(f"env_ids: a boolean mask must have shape ({self.num_worlds},), got {tuple(ids.shape)}")
            return torch.nonzero(ids).flatten()
        if ids.ndim != 1 or (ids.numel() and ids.is_floating_point()):
            raise ValueError(f"env_ids: expected a 1-D integer index or boolean mask, got shape {tuple(ids.shape)} {ids.dtype}")
        return ids.long()

    def _values(self, values: torch.Tensor | np.ndarray, shape: tuple[int, ...], name: str, broadcast: bool = False) -> torch.Tensor:
        """``values`` as float32 on the device with ``shape``, or a ValueError naming the field."""
        t = torch.as_tensor(values, device=self.device).to(self.dtype)
        if tuple(t.shape) != shape:
            if not broadcast:
                raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
            try:
                t = t.expand(shape)
            except RuntimeError:
                raise ValueError(f"{name}: expected values broadcastable to {shape}, got shape {tuple(t.shape)}") from None
        return t


_KERNELS: dict[str, object] = {}


def _check_kernel(wp):  # noqa: ANN001, ANN202 - warp module in, warp kernel out
    """The per-world divergence test (built once: defining a Warp kernel registers a module)."""
    kernel = _KERNELS.get("check")
    if kernel is None:

        @wp.kernel(enable_backward=False)
        def check_diverged(  # noqa: ANN202 - a Warp kernel returns nothing
            qpos: wp.array2d(dtype=float),
            qvel: wp.array2d(dtype=float),
            qacc: wp.array2d(dtype=float),
            maxval: float,
            bad: wp.array(dtype=bool),
            diverged: wp.array(dtype=bool),
        ):
            w = wp.tid()
            nbad = int(0)  # noqa: UP018 - int() makes a dynamic variable: Warp forbids mutating a constant in a loop
            for i in range(qpos.shape[1]):
                if not (wp.abs(qpos[w, i]) <= maxval):  # also true for NaN
                    nbad += 1
            for i in range(qvel.shape[1]):
                if not (wp.abs(qvel[w, i]) <= maxval) or not (wp.abs(qacc[w, i]) <= maxval):
                    nbad += 1
            bad[w] = nbad > 0
            if nbad > 0:
                diverged[w] = True

        kernel = _KERNELS["check"] = check_diverged
    return kernel
