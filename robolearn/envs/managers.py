"""The managers: each turns one section of a :class:`TaskCfg` into batched tensor computations.

They are deliberately thin: per step, each term is one function call on ``[N, ...]`` tensors and
the manager combines the results with as few torch operations as possible, since at small N the
per-operation overhead, not the arithmetic, is what competes with the physics.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np
import torch

from robolearn.envs.cfg import (
    ActionTerm,
    ActuatorState,
    CommandTerm,
    EventTerm,
    ObsDelayState,
    ObsGroup,
    ObsTerm,
    RewardTerm,
    TerminationTerm,
)
from robolearn.envs.spec import obs_group_spec
from robolearn.envs.sync import host_nonzero
from robolearn.envs.validate import check_interval
from robolearn.sim.names import names_of
from robolearn.spec import ObsGroupSpec
from robolearn.spec.processors import ActionProcessor, ObservationProcessor
from robolearn.types import DEPLOYABLE_GROUPS, OBS_GROUPS

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv


def _vector(value: Any, n: int, name: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """A scalar or length-``n`` sequence as a float64 ``[n]`` tensor on ``device``, or an error naming ``name``."""
    t = torch.as_tensor(value, dtype=torch.float64, device=device).flatten()
    if t.numel() == 1:
        return t.expand(n).clone()
    if t.numel() != n:
        raise ValueError(f"{name}: expected a scalar or {n} values, got {t.numel()}")
    return t


@dataclass
class _Actuated:
    """An action term whose joint efforts an actuator model computes in Python."""

    name: str
    term: ActionTerm
    """Its config."""
    ctrl_ids: torch.Tensor
    """Its actuators' columns of ``ctrl``."""
    qpos_ids: torch.Tensor | slice
    """Its joints' ``qpos`` addresses (a slice when contiguous: a view instead of a gather)."""
    dof_ids: torch.Tensor | slice
    """Its joints' ``qvel`` addresses (a slice when contiguous)."""
    gain: torch.Tensor
    """``gear * gain`` per motor: joint effort per unit of ``ctrl``."""
    state: ActuatorState | None = None


class _StepDraws:
    """The env's per-step streams as a processor's random source (every world, every step)."""

    def __init__(self, env: BatchedEnv) -> None:
        self.env = env

    def uniform(self, name: str, size: int) -> torch.Tensor:
        """The current step's uniforms of stream ``name``."""
        return self.env.draw_step_uniform(name, size)

    def normal(self, name: str, size: int) -> torch.Tensor:
        """The current step's normals of stream ``name``."""
        return self.env.draw_step_normal(name, size)


class _RowDraws:
    """The per-world counter streams of worlds ``ids`` as a random source (worlds just reset: their
    draws come from their own counters, so each world's stream is independent of the others).
    """

    def __init__(self, env: BatchedEnv, ids: torch.Tensor) -> None:
        self.env, self.ids = env, ids

    def uniform(self, name: str, size: int) -> torch.Tensor:
        """Uniforms of those worlds (the stream name is implied by the counters)."""
        return self.env.draw_uniform(self.ids, size)

    def normal(self, name: str, size: int) -> torch.Tensor:
        """Normals of those worlds."""
        return self.env.draw_normal(self.ids, size, 1.0)


def is_privileged(term: ObsTerm) -> bool:
    """Whether ``term`` carries simulator-only information (its flag, else its function's)."""
    if term.privileged is not None:
        return bool(term.privileged)
    return bool(getattr(term.func, "privileged", False))


def check_privileged(groups: dict[str, ObsGroup]) -> None:
    """Refuse a privileged term in a deployable group whose config does not allow it."""
    for gname in DEPLOYABLE_GROUPS:
        group = groups.get(gname)
        if group is None or group.allow_privileged:
            continue
        leaked = [t for t, term in group.terms.items() if is_privileged(term)]
        if leaked:
            raise ValueError(
                f"observations.{gname}: privileged term(s) {', '.join(leaked)} in a deployable group; move them "
                f"to 'privileged' (the critic sees them by default) or set observations.{gname}.allow_privileged=True"
            )


def default_critic(groups: dict[str, ObsGroup]) -> dict[str, ObsGroup]:
    """Groups with ``critic`` filled in as ``policy`` plus ``privileged`` when a task declares
    privileged terms but no critic group (DESIGN.md: the critic's default view). Noise is off:
    the critic trains in simulation and should see the clean state.
    """
    if "critic" in groups or "privileged" not in groups or "policy" not in groups:
        return groups
    terms = {f"policy/{k}": t for k, t in groups["policy"].terms.items()}
    terms.update({f"privileged/{k}": t for k, t in groups["privileged"].terms.items()})
    return {**groups, "critic": ObsGroup(terms=terms, enable_noise=False)}


class ImageStack:
    """The last ``length`` frames ``[B, H, W, C]`` of each row stacked along the channel axis:
    ``[B, H, W, length * C]``, oldest first (frame ``t`` at channels ``t*C .. (t+1)*C - 1``), the
    layout of DrQ-v2's agent-side stack and of the manifest's ``ImageInputSpec.frames``.

    The frames keep their dtype (uint8 colour stays uint8: no float copy) and every operation is a
    torch one on the frames' device, with no host sync. A row that restarts (an episode start) is
    filled with ``length`` copies of its first frame.
    """

    def __init__(self, length: int) -> None:
        """An empty stack of ``length`` frames; the first frame fills it."""
        if isinstance(length, bool) or not isinstance(length, int) or length < 2:
            raise ValueError(f"history_length: expected an integer >= 2 to stack images, got {length!r}")
        self.length = length
        self.window: torch.Tensor | None = None
        """The stacked frames ``[B, H, W, length * C]`` (``None`` before the first frame). Replaced
        at every push, never written in place, so an observation returned earlier keeps its values."""

    def fresh(self, frame: torch.Tensor) -> torch.Tensor:
        """``length`` copies of ``frame`` ``[B, ..., C]`` along the last axis (a new tensor)."""
        return frame.repeat(*([1] * (frame.ndim - 1)), self.length)

    def __call__(
        self, frame: torch.Tensor, rows: torch.Tensor | None = None, restart: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Push ``frame`` and return the stack.

        Args:
            frame: ``[B, H, W, C]``, every row's new frame (or only those of ``rows``).
            rows: the rows ``frame`` holds, which restart (a partial reset by index): their stacks
                are refilled with their frame and only their rows are returned.
            restart: ``[B]`` bool, with ``rows=None``: rows whose frame starts an episode (refilled
                instead of shifted).
        """
        if self.window is None:
            if rows is not None:
                raise ValueError("image history: the first frame must cover every row (rows=None)")
            self.window = self.fresh(frame)
            return self.window
        if rows is not None:
            fresh = self.fresh(frame)
            window = self.window.clone()
            window[rows] = fresh
            self.window = window
            return fresh
        channels = frame.shape[-1]
        # One new tensor per step: the window shifted by one frame, the new frame appended.
        stacked = torch.cat([self.window[..., channels:], frame], dim=-1)
        if restart is not None:
            stacked = torch.where(restart.view(-1, *([1] * (frame.ndim - 1))), self.fresh(frame), stacked)
        self.window = stacked
        return stacked


class ObservationManager:
    """Computes every observation group: one ``[N, D]`` tensor per group (terms concatenated).

    A group of a single term that returns more than one dimension per world (an ``image`` term's
    ``[N, H, W, C]``) keeps that shape instead of being flattened. Such a group with
    ``history_length=k > 1`` stacks its last ``k`` frames along the last (channel) axis,
    ``[N, H, W, k*C]``, oldest first (:class:`ImageStack`); its policy spec keeps the shape of one
    frame and records ``history_length=k``, as the manifest's ``ImageInputSpec`` (``frames=k``,
    one frame ``[H, W, C]`` of the group) describes a stacked image input.
    """

    def __init__(
        self, env: BatchedEnv, groups: dict[str, ObsGroup], delays: dict[str, ObsDelayState] | None = None
    ) -> None:
        """Probe each term once to learn its width and resolve the noise/clip/scale hooks.

        ``delays`` holds the state of each delayed group (built from ``ObsGroup.delay`` by the
        env before its first reset, so the lags are drawn and recorded before any term probes
        ``env.drawn``).
        """
        for name in groups:
            if name not in OBS_GROUPS:
                raise ValueError(f"observations: unknown group {name!r}; expected one of {', '.join(OBS_GROUPS)}")
        check_privileged(groups)
        groups = default_critic(groups)
        self.env = env
        self.groups = groups
        self.delays = dict(delays or {})
        for gname, group in groups.items():
            if group.delay is not None and gname not in self.delays:
                # Built here only when the manager is used on its own; the env builds them earlier.
                if not callable(getattr(group.delay, "build", None)):
                    raise ValueError(
                        f"observations.{gname}.delay: expected a delay model with build(env, group), got {group.delay!r}"
                    )
                self.delays[gname] = group.delay.build(env, gname)
                self.delays[gname].reset(env.all_ids)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.specs: dict[str, ObsGroupSpec] = {}
        """Each group's spec (terms, widths, noise, clip, scale, history, delay), as the policy spec has it."""
        self.processors: dict[str, ObservationProcessor] = {}
        """Each group's processing (``robolearn.spec.processors``), built from its spec."""
        self.image_stacks: dict[str, ImageStack] = {}
        """The frame stack of each shaped (image) group with ``history_length > 1``, applied after
        its processor (whose own history stacks flat frames only)."""
        for gname, group in groups.items():
            if not group.terms:
                raise ValueError(f"observations.{gname}: a group needs at least one term")
            dims, privileged = [], []
            shape: tuple[int, ...] = ()
            for tname, term in group.terms.items():
                where = f"observations.{gname}.{tname}"
                value = term.func(env, **term.params)
                if not isinstance(value, torch.Tensor) or value.ndim == 0 or value.shape[0] != env.num_envs:
                    got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    raise ValueError(f"{where}: expected a tensor [num_envs={env.num_envs}, ...], got {got}")
                if term.noise is not None and term.noise.kind not in ("uniform", "gaussian"):
                    raise ValueError(f"{where}.noise.kind: expected 'uniform' or 'gaussian', got {term.noise.kind!r}")
                dims.append(int(value[0].numel()))
                privileged.append(is_privileged(term))
                shape = tuple(value.shape[1:])
            flat = len(dims) > 1 or len(shape) <= 1
            stack = not flat and group.history_length > 1
            if flat:
                self.shapes[gname] = (sum(dims) * max(1, group.history_length),)
            else:  # frames stacked along the last (channel) axis
                self.shapes[gname] = (*shape[:-1], shape[-1] * max(1, group.history_length))
            # A shaped group's spec holds one frame's shape (its stack is history_length frames).
            self.specs[gname] = obs_group_spec(gname, group, dims, self.shapes[gname] if flat else shape, privileged)
            spec = self.specs[gname]
            if stack:
                # The processor's History flattens frames: the image stack replaces it.
                spec = dataclasses.replace(spec, history_length=0)
                self.image_stacks[gname] = ImageStack(int(group.history_length))
            self.processors[gname] = ObservationProcessor(
                gname, spec, dtype=env.dtype, device=env.device, delay=self.delays.get(gname)
            )
        self.dims = {g: int(torch.Size(s).numel()) for g, s in self.shapes.items()}
        self._step_draws = _StepDraws(env)
        # Per group: whether its processing records draws that later groups' terms may read (a
        # delay with per-step jitter or holds records them; one without records nothing per step).
        self._plan = [
            (g, group, p, p.delay is not None and bool(getattr(p.delay, "records_draws", True)), self.image_stacks.get(g))
            for g, group in groups.items()
            for p in (self.processors[g],)
        ]

    def term_dims(self, group: str) -> dict[str, int]:
        """Width of each term of ``group``, in concatenation order."""
        return {t.name: t.dim for t in self.specs[group].terms}

    def compute(self, env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """All groups at the current state, in the env's observation dtype.

        Each group's raw term values go through its :class:`~robolearn.spec.processors.
        ObservationProcessor` (noise, clip, scale, delay, history). With ``env_ids`` (worlds just
        reset) only those rows are returned: noise is drawn for those worlds only, from their own
        counters, so each world's random stream is independent of the others, and their history
        windows and delay buffers restart filled with the new frame.
        """
        env = self.env
        rows = _RowDraws(env, env_ids) if env_ids is not None else self._step_draws
        out: dict[str, torch.Tensor] = {}
        # A term object listed in several groups (the default critic lists the policy's and the
        # privileged group's) is read once. A delay stage may record draws that a later group's
        # terms read (mdp.drawn), so what was read before such a group is read again after it:
        # every group sees the values it would see if each read its own terms.
        seen: dict[int, torch.Tensor] = {}
        restart: torch.Tensor | None = None
        for gname, group, proc, records, stack in self._plan:
            values = []
            for term in group.terms.values():
                value = seen.get(id(term))
                if value is None:
                    value = term.func(env, **term.params)
                    if env_ids is not None:
                        value = value[env_ids]
                    seen[id(term)] = value
                values.append(value)
            out[gname] = proc(values, rows if group.enable_noise else None, env_ids)
            if stack is not None:
                if env_ids is None and restart is None:
                    # A world at episode step 0 has just been reset (every world after env.reset()):
                    # its stack restarts. Partial resets within a step come with env_ids instead.
                    restart = env.episode_length == 0
                out[gname] = stack(out[gname], env_ids, restart if env_ids is None else None)
            if records:
                seen.clear()
        return out

    def restart_histories(self) -> None:
        """Forget every flat group's history window, so the next frame fills it (every world starts
        an episode: :meth:`BatchedEnv.reset`). Image stacks restart on their own at episode step 0.
        """
        for p in self.processors.values():
            if p.history is not None:
                p.history.reset()

    def history_state(self) -> dict[str, torch.Tensor]:
        """The history window of each stacked group, flat or image (copies), for checkpoints."""
        state = {
            g: p.history.window.clone()
            for g, p in self.processors.items()
            if p.history is not None and p.history.window is not None
        }
        state.update({g: s.window.clone() for g, s in self.image_stacks.items() if s.window is not None})
        return state

    def load_history_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`history_state` (onto the env's device)."""
        for g, p in self.processors.items():
            if p.history is not None:
                window = state.get(g)
                p.history.window = None if window is None else window.to(self.env.device, copy=True)
        for g, s in self.image_stacks.items():
            window = state.get(g)
            s.window = None if window is None else window.to(self.env.device, copy=True)

class ActionManager:
    """Maps the ``[N, A]`` action to MuJoCo controls ``[N, nu]`` (scale, offset, clip)."""

    def __init__(self, model: mujoco.MjModel, terms: dict[str, ActionTerm], device: torch.device | str = "cpu") -> None:
        """Resolve actuator names; the control vector is filled at the resolved actuator indices.

        The resolution reads the host-side model once; every tensor it leaves is on ``device``.
        """
        self.terms = terms
        self.device = torch.device(device)
        self.nu = model.nu
        index: list[int] = []
        scales, offsets, lows, highs = [], [], [], []
        self.term_slices: dict[str, slice] = {}
        for name, term in terms.items():
            ids = _actuator_ids(model, term, name)
            n = len(ids)
            start = len(index)
            index.extend(ids)
            self.term_slices[name] = slice(start, start + n)
            scales.append(_vector(term.scale, n, f"actions.{name}.scale"))
            if term.offset == "default":
                if term.kind != "joint_pos":
                    raise ValueError(f"actions.{name}.offset: 'default' needs kind 'joint_pos', got {term.kind!r}")
                jnt = model.actuator_trnid[ids, 0]
                offsets.append(torch.as_tensor(model.qpos0[model.jnt_qposadr[jnt]], dtype=torch.float64))
            else:
                offsets.append(_vector(term.offset, n, f"actions.{name}.offset"))
            lo, hi = term.clip if term.clip is not None else (-np.inf, np.inf)
            if lo > hi:
                raise ValueError(f"actions.{name}.clip: low {lo} > high {hi}")
            lows.append(torch.full((n,), float(lo), dtype=torch.float64))
            highs.append(torch.full((n,), float(hi), dtype=torch.float64))
        if len(set(index)) != len(index):
            raise ValueError("actions: an actuator is driven by more than one action term")
        self.dim = len(index)
        self.index = torch.as_tensor(index, dtype=torch.long, device=self.device)
        self.identity = index == list(range(self.nu))
        self.scale = torch.cat(scales).to(self.device)
        self.offset = torch.cat(offsets).to(self.device)
        self.low, self.high = torch.cat(lows).to(self.device), torch.cat(highs).to(self.device)
        # Clip, scale and offset: the processor a deploy runtime builds from the same spec.
        self.processor = ActionProcessor(self.scale, self.offset, self.low, self.high)
        self._ctrl: torch.Tensor | None = None
        self.actuated = [
            _actuated(model, name, term, self.device) for name, term in terms.items() if term.actuator is not None
        ]
        """Terms with an actuator model; their states are built by :meth:`build_actuators`."""
        # One modelled term on every actuator in model order: its efforts are the whole ctrl.
        self._actuates_all = len(self.actuated) == 1 and _actuator_ids(
            model, self.actuated[0].term, self.actuated[0].name
        ) == list(range(self.nu))

    def build_actuators(self, env: BatchedEnv) -> None:
        """Build each actuator model's per-env state (before the env's first reset draws gains)."""
        for act in self.actuated:
            model = self.terms[act.name].actuator
            act.state = model.build(env, act.name, int(act.ctrl_ids.numel()))  # type: ignore[union-attr]

    def reset_actuators(self, env_ids: torch.Tensor) -> None:
        """Worlds ``env_ids`` start an episode: the actuator models redraw their parameters."""
        for act in self.actuated:
            act.state.reset(env_ids)  # type: ignore[union-attr]

    def actuate(self, ctrl: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """``ctrl`` for one physics substep: columns of modelled terms hold targets in ``ctrl`` and
        the model's efforts (as motor commands) in the result; the other columns pass through.
        """
        if self._actuates_all:
            act = self.actuated[0]
            return act.state(ctrl, qpos[:, act.qpos_ids], qvel[:, act.dof_ids]) / act.gain  # type: ignore[misc]
        out = ctrl.clone()  # ctrl may be the caller's targets (or the action itself): never overwrite
        for act in self.actuated:
            effort = act.state(ctrl[:, act.ctrl_ids], qpos[:, act.qpos_ids], qvel[:, act.dof_ids])  # type: ignore[misc]
            out[:, act.ctrl_ids] = effort / act.gain
        return out

    def process(self, action: torch.Tensor) -> torch.Tensor:
        """Controls ``[N, nu]`` float64 from actions ``[N, A]``."""
        a = self.processor(action)
        if self.identity:
            return a
        if self._ctrl is None or self._ctrl.shape[0] != a.shape[0]:
            self._ctrl = torch.zeros(a.shape[0], self.nu, dtype=torch.float64, device=a.device)
        self._ctrl[:, self.index] = a
        return self._ctrl

    @staticmethod
    def edit_spec(spec: mujoco.MjSpec, terms: dict[str, ActionTerm]) -> None:
        """Turn the actuators of ``joint_pos``/``joint_vel`` terms into PD servos, before compiling."""
        for name, term in terms.items():
            if term.kind == "torque" or (term.kp is None and term.kd is None):
                continue
            if term.actuators is None:
                acts = list(spec.actuators)
            else:
                # In the term's order, which is the order its kp/kd vectors are given in; an unknown
                # name is reported (with the model's names) when the action manager resolves them.
                by_name = {a.name: a for a in spec.actuators}
                acts = [by_name[a] for a in term.actuators if a in by_name]
            kp = _vector(term.kp if term.kp is not None else 0.0, len(acts), f"actions.{name}.kp")
            kd = _vector(term.kd if term.kd is not None else 0.0, len(acts), f"actions.{name}.kd")
            for k, act in enumerate(acts):
                gain = float(kp[k]) if term.kind == "joint_pos" else float(kd[k])
                act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
                act.biastype = mujoco.mjtBias.mjBIAS_AFFINE
                act.gainprm[:3] = [gain, 0.0, 0.0]
                bias_q = -float(kp[k]) if term.kind == "joint_pos" else 0.0
                act.biasprm[:3] = [0.0, bias_q, -float(kd[k])]
                act.gear[0] = 1.0


def _index(ids: np.ndarray, device: torch.device) -> torch.Tensor | slice:
    """Column indices as a slice when they are consecutive and ascending, else as a tensor."""
    if ids.size and (np.diff(ids) == 1).all():
        return slice(int(ids[0]), int(ids[-1]) + 1)
    return torch.as_tensor(ids, dtype=torch.long, device=device)


def _actuated(model: mujoco.MjModel, name: str, term: ActionTerm, device: torch.device) -> _Actuated:
    """Check that term ``name`` can carry an actuator model and resolve its joints."""
    where = f"actions.{name}.actuator"
    if not callable(getattr(term.actuator, "build", None)):
        raise ValueError(f"{where}: expected an actuator model with build(env, term, num_joints), got {term.actuator!r}")
    if term.kind != "torque":
        raise ValueError(f"{where}: an actuator model needs kind='torque' (it computes the efforts), got {term.kind!r}")
    if term.kp is not None or term.kd is not None:
        raise ValueError(f"{where}: the gains belong to the actuator model; leave actions.{name}.kp/kd as None")
    ids = _actuator_ids(model, term, name)
    joint_types = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
    names = names_of(model)
    for i in ids:
        label = names.label("actuator", i)
        is_motor = (
            int(model.actuator_gaintype[i]) == int(mujoco.mjtGain.mjGAIN_FIXED)
            and int(model.actuator_biastype[i]) == int(mujoco.mjtBias.mjBIAS_NONE)
            and int(model.actuator_dyntype[i]) == int(mujoco.mjtDyn.mjDYN_NONE)
        )
        on_joint = int(model.actuator_trntype[i]) == int(mujoco.mjtTrn.mjTRN_JOINT)
        if not (is_motor and on_joint and int(model.jnt_type[model.actuator_trnid[i, 0]]) in joint_types):
            raise ValueError(
                f"{where}: actuator {label!r} must be a motor (fixed gain, no bias, no dynamics) on a hinge or "
                "slide joint; the model computes the effort that the motor then applies"
            )
        if model.actuator_gear[i, 0] * model.actuator_gainprm[i, 0] == 0:
            raise ValueError(f"{where}: actuator {label!r} has zero gear or gain")
    jnt = model.actuator_trnid[ids, 0]
    return _Actuated(
        name=name,
        term=term,
        ctrl_ids=torch.as_tensor(ids, dtype=torch.long, device=device),
        qpos_ids=_index(model.jnt_qposadr[jnt], device),
        dof_ids=_index(model.jnt_dofadr[jnt], device),
        gain=torch.as_tensor(
            model.actuator_gear[ids, 0] * model.actuator_gainprm[ids, 0], dtype=torch.float64, device=device
        ),
    )


def _actuator_ids(model: mujoco.MjModel, term: ActionTerm, name: str) -> list[int]:
    if term.kind not in ("torque", "joint_pos", "joint_vel"):
        raise ValueError(f"actions.{name}.kind: expected 'torque', 'joint_pos' or 'joint_vel', got {term.kind!r}")
    return names_of(model).ids("actuator", term.actuators, f"actions.{name}.actuators")


class RewardManager:
    """Weighted sum of named terms; keeps per-term episode sums for logging."""

    def __init__(self, env: BatchedEnv, terms: dict[str, RewardTerm], keep: Collection[str] = ()) -> None:
        """Drop zero-weight terms (they cost time and add nothing), except those named in ``keep``
        (a curriculum moves their weight). ``weights`` is read at every step, so a curriculum
        changes a weight by writing its entry.
        """
        self.env = env
        self.terms = {k: t for k, t in terms.items() if t.weight != 0.0 or k in keep}
        self.names = list(self.terms)
        self.weights = torch.tensor([t.weight for t in self.terms.values()], dtype=torch.float64, device=env.device)
        self.episode_sums = torch.zeros(env.num_envs, len(self.names), dtype=torch.float64, device=env.device)

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Reward ``[N]`` and the weighted per-term values ``[N, T]``."""
        env = self.env
        if not self.names:
            zeros = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
            return zeros, zeros.unsqueeze(1)[:, :0]
        raw = torch.stack([t.func(env, **t.params) for t in self.terms.values()], dim=1)
        weighted = raw * self.weights
        self.episode_sums += weighted
        return weighted.sum(dim=1), weighted


class TerminationManager:
    """Evaluates termination and time-out terms; the episode-length time-out is built in."""

    def __init__(self, env: BatchedEnv, terms: dict[str, TerminationTerm]) -> None:
        """Split terms into terminations and time-outs."""
        self.env = env
        self.terms = terms
        self.fired: dict[str, torch.Tensor] = {}

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``terminated[N]`` and ``truncated[N]`` bool tensors."""
        env = self.env
        truncated = env.episode_length >= env.max_episode_length
        if not self.terms:
            return torch.zeros_like(truncated), truncated
        terminated = torch.zeros_like(truncated)
        for name, term in self.terms.items():
            fired = term.func(env, **term.params)
            self.fired[name] = fired
            if term.time_out:
                truncated = truncated | fired
            else:
                terminated = terminated | fired
        # An MDP end takes precedence: a world that both terminates and times out is terminal.
        return terminated, truncated & ~terminated


class EventManager:
    """Runs start-up, reset and interval events.

    A term's ``func`` is either a function ``(env, env_ids, **params) -> None``, called with its
    params at every firing, or a class: a term built once, here, as ``func(env, where="events.<name>",
    mode=<mode>, **params)``, whose constructor checks the parameters against the env's model and
    resolves everything a firing needs; the instance is then called as ``(env, env_ids)`` (the
    randomisation terms of ``robolearn.sim2real.randomization`` are such classes). A built term
    may list what it writes in a ``writes`` set of short descriptions (``writes body_mass[cart, 0]``,
    ``records its draws under 'push'``): two terms that list the same entry are refused, since each
    writes from the template model and the later would silently undo the earlier.
    """

    def __init__(self, env: BatchedEnv, terms: dict[str, EventTerm]) -> None:
        """Check modes and intervals, build every term and prepare per-world interval timers,
        before any event runs.
        """
        self.env = env
        self.terms = terms
        self.rebuild()

    def rebuild(self) -> None:
        """Build (again) every term against the env's current template model: class terms take
        their base values from it when built, so a change of the template (the sim2sim gate scales
        it) needs a rebuild to reach them. Interval timers restart at zero; a reset rearms them.
        """
        env = self.env
        calls: dict[str, Callable[[BatchedEnv, torch.Tensor], None]] = {}
        for name, term in self.terms.items():
            where = f"events.{name}"
            if term.mode not in ("startup", "reset", "interval"):
                raise ValueError(f"{where}.mode: expected startup, reset or interval, got {term.mode!r}")
            if term.mode == "interval":
                check_interval(f"{where}.interval_range_s", term.interval_range_s)
            calls[name] = _event_call(env, where, term)
        _check_writes(calls)
        self.calls = calls
        """Each term's firing ``(env, env_ids)``: the built class term, or the function with its params."""
        self.by_mode = {m: {k: t for k, t in self.terms.items() if t.mode == m} for m in ("startup", "reset", "interval")}
        self.timers = {k: torch.zeros(env.num_envs, dtype=torch.float64, device=env.device) for k in self.by_mode["interval"]}

    def rebuild_term(self, name: str) -> None:
        """Build term ``name`` again from its config (a curriculum changed its params): a class
        term binds its params when built; a function term reads them at each firing anyway.
        """
        self.calls[name] = _event_call(self.env, f"events.{name}", self.terms[name])
        _check_writes(self.calls)

    def apply(self, mode: str, env_ids: torch.Tensor) -> None:
        """Run every event of ``mode`` on ``env_ids``."""
        for name in self.by_mode[mode]:
            self.calls[name](self.env, env_ids)
        if mode == "reset":
            for name in self.timers:
                self._rearm(name, env_ids)

    def _rearm(self, name: str, env_ids: torch.Tensor) -> None:
        lo, hi = self.by_mode["interval"][name].interval_range_s
        self.timers[name][env_ids] = self.env.draw_uniform(env_ids, 1, lo, hi)[:, 0]

    def step(self, dt: float) -> None:
        """Advance interval timers; fire the events whose timers ran out and rearm those timers.

        The next intervals come from a per-step stream drawn for every world every step (a slice
        of a precomputed block) and are kept only where a timer ran out: cheaper than a per-call
        draw for the due worlds, and a world's intervals still depend on its own stream only.
        """
        env = self.env
        for name, term in self.by_mode["interval"].items():
            timer = self.timers[name]
            timer -= dt
            lo, hi = term.interval_range_s
            fresh = torch.add(lo, env.draw_step_uniform(f"interval/{name}", 1)[:, 0], alpha=hi - lo)
            due_mask = timer <= 0
            due = host_nonzero(due_mask)  # a host sync: the event draws for the due worlds only
            if due is not None:
                self.calls[name](env, due)
                torch.where(due_mask, fresh, timer, out=timer)


def _event_call(env: BatchedEnv, where: str, term: EventTerm) -> Callable[[BatchedEnv, torch.Tensor], None]:
    """A term's firing ``(env, env_ids)``: a class term built (and so validated) now, or the
    function bound to its params.
    """
    func = term.func
    if isinstance(func, type):
        try:  # the parameters a class does not take, or a required one missing, named as params
            inspect.signature(func).bind(env, where=where, mode=term.mode, **term.params)
        except TypeError as exc:
            raise ValueError(f"{where}.params: {exc}") from None
        return func(env, where=where, mode=term.mode, **term.params)
    if not callable(func):
        raise ValueError(f"{where}.func: expected an event class or a function (env, env_ids, **params), got {func!r}")

    def call(env: BatchedEnv, env_ids: torch.Tensor) -> None:
        func(env, env_ids, **term.params)  # read at each firing, as the config holds them now

    return call


def _check_writes(calls: dict[str, Any]) -> None:
    """Refuse two built terms that list the same entry in ``writes`` (the later would undo the earlier)."""
    declared = [(name, frozenset(getattr(call, "writes", ()) or ())) for name, call in calls.items()]
    for i, (first, mine) in enumerate(declared):
        for second, theirs in declared[i + 1 :]:
            common = mine & theirs
            if common:
                raise ValueError(
                    f"events.{first}: {min(common)}, and so does events.{second}; one would undo the other "
                    "(merge them into one event, or give each a distinct name)"
                )


class CommandManager:
    """Holds each command ``[N, dim]`` and resamples it per world at reset and on its timer."""

    def __init__(self, env: BatchedEnv, terms: dict[str, CommandTerm]) -> None:
        """Allocate command buffers and timers."""
        self.env = env
        self.terms = terms
        self.values = {k: torch.zeros(env.num_envs, t.dim, dtype=torch.float64, device=env.device) for k, t in terms.items()}
        self.timers = {k: torch.zeros(env.num_envs, dtype=torch.float64, device=env.device) for k in terms}

    def resample(self, name: str, env_ids: torch.Tensor) -> None:
        """Draw fresh commands and timers for ``env_ids``."""
        term = self.terms[name]
        if env_ids.numel() == 0:
            return
        value = term.func(self.env, env_ids, **term.params)
        if value.shape != (env_ids.numel(), term.dim):
            raise ValueError(f"commands.{name}: expected shape {(env_ids.numel(), term.dim)}, got {tuple(value.shape)}")
        self.values[name][env_ids] = value.to(torch.float64)
        lo, hi = term.resampling_time_s
        self.timers[name][env_ids] = self.env.draw_uniform(env_ids, 1, lo, hi)[:, 0]

    def reset(self, env_ids: torch.Tensor) -> None:
        """Resample every command for reset worlds."""
        for name in self.terms:
            self.resample(name, env_ids)

    def step(self, dt: float) -> None:
        """Advance timers and resample where they ran out."""
        for name in self.terms:
            timer = self.timers[name]
            timer -= dt
            due = host_nonzero(timer <= 0)  # a host sync, as in EventManager.step
            if due is not None:
                self.resample(name, due)
