"""The policy spec as a typed, versioned manifest: what every observation and action number means.

A :class:`PolicySpec` is written by the env at training time (``policy_spec.json``), read back
without the simulator (``load_policy``, the exporter, the deploy runtime) and carried into the
exported policy's ``manifest.json``. It is plain data: dataclasses with a docstring under each
field, converted to and from JSON by :meth:`PolicySpec.to_dict` / :meth:`PolicySpec.from_dict`.

Reading validates every field by type and range and names the field and the value it refuses
(``policy_spec.observations.policy.terms[1].dim: expected an integer >= 1, got 0``), so a damaged
or hand-edited file fails when it is loaded, not when a robot runs on it.

Versions (``spec_version``):

* **1**: the layout written before the manifest was typed.
* **2**: adds, per observation term, ``source`` (the function that measures it) and
  ``privileged``, and at the top ``dtype`` (the observations' floating dtype). Every version-1
  field keeps its name, place and meaning, so ``observations.<group>.shape``, ``action_dim``,
  ``actions[i].low/high/dim`` and ``task_id`` read the same in both.
* **3**: adds, per observation term, ``params`` (the term function's JSON-able parameters: which
  ``qpos`` columns, which hinge), so a deploy runtime can compute the term from a robot's joint
  readings without the task's code (``robolearn.sim2real.deploy.observations``).

Older files load with the newer fields at their defaults and are upgraded in memory
(``spec_version`` 3); writing one back writes the current layout.

A recurrent policy's hidden state is the network's, not the env's: :class:`StateSpec` describes one
state tensor the exported network reads and returns (names, shape, dtype, initial value, reset
rule); the export manifest lists them (``robolearn.export``, manifest version 3), and
:func:`load_states` reads such a list back, validated like the spec.

A chunked generative policy (``robolearn.nn.generative``) is run through
:class:`robolearn.spec.chunking.ChunkExecutor`: :class:`ChunkPolicySpec` records its chunk execution
(``ChunkSpec``: horizon, execute, observation history, ensembling) and its exported sampler
(:class:`SamplerSpec`: model kind, steps, one-step head, the noise input, its shape and
distribution); the export manifest writes them as its ``chunking`` and ``sampler`` sections
(manifest version 4, chunked policies only).

A policy with image inputs takes the camera's ``uint8`` bytes and normalises them inside its network:
:class:`ImageInputSpec` declares one such input (input name, observation group, shape, dtype, layout
``HWC``/``CHW``, colour order, frames stacked along the channels, the in-graph ``scale`` and
``offset``), checked against the group's one-frame shape ``[H, W, C]`` in the policy spec; the export
manifest lists them as its ``images`` section (manifest version 5, image policies only).

Numbers that may be infinite (action bounds, clip ranges) are written as the strings ``"inf"`` and
``"-inf"``, which JSON lacks as numbers; NaN is never valid.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from robolearn.spec.chunking import ENSEMBLES, ChunkSpec
from robolearn.types import DEPLOYABLE_GROUPS, OBS_GROUPS
from robolearn.utils.config import ConfigError

SPEC_VERSION = 3
"""The layout :meth:`PolicySpec.to_dict` writes; bumped when a field changes name, place or meaning."""
READABLE_VERSIONS = (1, 2, 3)
"""Layouts :meth:`PolicySpec.from_dict` reads."""

NoiseKind = Literal["uniform", "gaussian"]
ActionKind = Literal["torque", "joint_pos", "joint_vel"]
StateInit = Literal["zeros"]
StateReset = Literal["episode_start"]
STATE_DTYPES = ("float32",)
"""Dtypes a recurrent state may have: the exported networks compute in float32."""


class SpecError(ConfigError):
    """A policy spec field that is missing, of the wrong type or out of range (named, with its value)."""


class SpecMismatch(ValueError):
    """Two manifests that a policy cannot be run across (the first difference is named)."""


def _min(value: float, exclusive: bool = False) -> dict[str, Any]:
    """Field metadata: the smallest valid value (checked on load and written into the schema)."""
    return {"exclusiveMinimum" if exclusive else "minimum": value}


# -- the dataclasses ----------------------------------------------------------------------------
@dataclass(frozen=True)
class NoiseSpec:
    """Additive noise a term was trained with (simulation only: a robot's sensors bring their own)."""

    kind: NoiseKind
    """``uniform``: drawn from ``[-scale, scale]``; ``gaussian``: from ``N(0, scale^2)``."""
    scale: float = field(metadata=_min(0.0))
    """Half-width (uniform) or standard deviation (gaussian), in the term's unit."""


@dataclass(frozen=True)
class ObsTermSpec:
    """One named term of an observation group: ``dim`` numbers at ``start`` of the group's frame.

    Processing order: noise, then clip, then scale (``robolearn.spec.processors.TermProcessor``).
    """

    name: str
    """The term's name in the task config."""
    start: int = field(metadata=_min(0))
    """First column of the term in the group's frame (one frame: before history stacking)."""
    dim: int = field(metadata=_min(1))
    """Numbers the term contributes per frame."""
    unit: str = ""
    """Physical unit of the raw values (``rad``, ``m/s``, ...); empty when unitless or unknown."""
    scale: float | tuple[float, ...] | None = None
    """Multiplier after clipping: one value for all, ``dim`` values, or none."""
    clip: tuple[float, float] | None = None
    """``(low, high)`` applied after the noise; ``"inf"`` ends allowed."""
    noise: NoiseSpec | None = None
    """Noise added in simulation (``None``: none, or the group has noise off)."""
    source: str = ""
    """What measures it: the term function's qualified name (``robolearn.envs.mdp.qpos``), so a deploy
    runtime can map the term to a robot reading. Version 2; empty in version-1 files."""
    privileged: bool = False
    """Simulator-only information (true state, randomisation draws). Version 2."""
    params: dict[str, Any] = field(default_factory=dict)
    """The term function's parameters that are JSON values (``{"start": 0, "stop": 1}``); the deploy
    runtime reads them to compute the term from a robot's readings. Version 3; empty before."""


@dataclass(frozen=True)
class DelaySpec:
    """The observation delay a group was trained under (the robot's own latency replaces it)."""

    type: str = "ObservationDelay"
    """The delay model's class name."""
    lag_range: tuple[int, int] = (0, 0)
    """Lag in control steps, drawn per world and episode from ``[low, high]``."""
    jitter: bool = False
    """Whether the lag was redrawn every step (delivered frames never go back in time)."""
    hold_prob: float = 0.0
    """Probability per step that the delivered frame was not refreshed (a dropped packet)."""


@dataclass(frozen=True)
class ObsGroupSpec:
    """One observation group: its terms in order, history stacking and delay."""

    shape: tuple[int, ...]
    """Shape of one world's observation: ``[frame_dim * max(1, history_length)]`` for a flat group,
    the single term's own shape (``[H, W, C]``, one frame) otherwise; the env stacks a shaped
    group's ``history_length`` frames along the last axis (``[H, W, history_length * C]``)."""
    frame_dim: int = field(metadata=_min(1))
    """Numbers in one frame (the terms' ``dim`` summed)."""
    terms: tuple[ObsTermSpec, ...]
    """Terms in concatenation order."""
    history_length: int = field(default=0, metadata=_min(0))
    """Frames stacked, oldest first; 0 and 1 both mean one frame, unstacked."""
    delay: DelaySpec | None = None
    """The delay model applied before the history (``None``: none)."""

    @property
    def flat(self) -> bool:
        """Whether the group is a ``[N, D]`` vector (terms concatenated) rather than one shaped term."""
        return len(self.shape) == 1

    @property
    def size(self) -> int:
        """Numbers in one world's observation as the env delivers it: :attr:`shape`'s, times the
        stacked frames for a shaped group (whose :attr:`shape` is one frame).
        """
        return math.prod(self.shape) * (1 if self.flat else max(1, self.history_length))


@dataclass(frozen=True)
class ModelSpec:
    """A latency or actuator model, by class name and its fields (written as ``{"type": ..., **params}``)."""

    JSON_FLAT: typing.ClassVar[bool] = True
    """Written as one flat object (see :func:`robolearn.spec.schema.schema_of`)."""
    type: str
    """The model's class name (``ActionDelay``, ``ControlJitter``, ``DCMotor`` ...)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Its fields as JSON values."""


@dataclass(frozen=True)
class ActionTermSpec:
    """One action term: ``dim`` columns at ``start`` of the action vector, and what they drive.

    ``ctrl = offset + scale * clip(action)`` (``robolearn.spec.processors.ActionProcessor``).
    """

    name: str
    """The term's name in the task config."""
    kind: ActionKind
    """``torque`` (motor command), ``joint_pos`` or ``joint_vel`` (PD targets)."""
    start: int = field(metadata=_min(0))
    """First column in the action vector."""
    dim: int = field(metadata=_min(1))
    """Columns of the term."""
    actuators: tuple[str | None, ...]
    """Actuator per column, in action order."""
    joints: tuple[str | None, ...]
    """Joint each actuator drives (``None``: not a joint transmission)."""
    scale: tuple[float, ...]
    """Per column: multiplier from the clipped action to the control."""
    offset: tuple[float, ...]
    """Per column: added after scaling (a joint's default position for ``offset="default"``)."""
    clip: tuple[float, float] | None = None
    """Clip of the raw action before scaling."""
    low: tuple[float, ...] = ()
    """Per column: lowest meaningful action (the actuator's control range mapped back; ``"-inf"``)."""
    high: tuple[float, ...] = ()
    """Per column: highest meaningful action."""
    kp: float | tuple[float, ...] | None = None
    """Position gain of ``joint_pos`` servos (``None``: the MJCF actuator's own)."""
    kd: float | tuple[float, ...] | None = None
    """Damping gain of ``joint_pos``/``joint_vel`` servos."""
    actuator: ModelSpec | None = None
    """An actuator model evaluated per physics substep (``None``: MuJoCo's actuator)."""


@dataclass(frozen=True)
class PolicySpec:
    """The manifest of a policy: observation groups, actions, rates and joints.

    The deploy runtime compares it with its robot (:meth:`check_compatible`); the observation
    processors (:mod:`robolearn.spec.processors`) are built from its groups.
    """

    spec_version: int
    """Layout version (see the module doc)."""
    robolearn_version: str
    """The robolearn that wrote it."""
    task_id: str
    """The registered task the policy was trained on."""
    control_rate_hz: float = field(metadata=_min(0.0, exclusive=True))
    """Policy steps per second (``1 / dt``)."""
    dt: float = field(metadata=_min(0.0, exclusive=True))
    """Seconds per control step."""
    physics_dt: float = field(metadata=_min(0.0, exclusive=True))
    """Seconds per physics step."""
    decimation: int = field(metadata=_min(1))
    """Physics steps per control step."""
    episode_length: int = field(metadata=_min(1))
    """Control steps per episode before a time-out."""
    observations: dict[str, ObsGroupSpec]
    """Observation groups by name (``policy``, ``critic``, ``privileged``, ``history``, ``image``)."""
    action_dim: int = field(metadata=_min(1))
    """Columns of the action vector."""
    actions: tuple[ActionTermSpec, ...]
    """Action terms in order."""
    joint_order: tuple[str | None, ...]
    """Joint of each action column, in action order."""
    action_delay: ModelSpec | None = None
    """Action latency trained under (``None``: none)."""
    control_jitter: ModelSpec | None = None
    """Control-period jitter trained under (``None``: none)."""
    qpos_joints: tuple[str | None, ...] = ()
    """Every joint of the model, in ``qpos`` order."""
    dtype: str = "float32"
    """Floating dtype of the observations (``float32``, ``float64`` ...). Version 2."""

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready mapping (current layout; infinities as ``"inf"``/``"-inf"``)."""
        return _dump(self)

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any, where: str = "policy_spec") -> PolicySpec:
        """Read and validate a spec of any readable version; raise :class:`SpecError` naming the
        field and value at fault (``where`` prefixes the field path: a file name, say).
        """
        if not isinstance(data, Mapping):
            raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
        version = data.get("spec_version", None)
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise SpecError(
                f"{where}.spec_version: expected one of {', '.join(map(str, READABLE_VERSIONS))}, got {version!r}"
            )
        if version == 1:
            data = _upgrade_v1(data)
        # Version 1 lacks only fields with defaults: the same reader fills them in.
        spec = _load(cls, data, where)
        spec = dataclasses.replace(spec, spec_version=SPEC_VERSION)
        spec.validate(where)
        return spec

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "policy_spec") -> PolicySpec:
        """Parse JSON text and :meth:`from_dict` it."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SpecError(f"{where}: not valid JSON ({exc})") from None
        return cls.from_dict(data, where)

    @staticmethod
    def json_schema() -> dict[str, Any]:
        """The JSON schema (draft 2020-12) of the current layout, generated from these dataclasses."""
        from robolearn.spec.schema import schema_of

        return schema_of(PolicySpec, f"robolearn policy spec (spec_version {SPEC_VERSION})")

    # -- consistency --------------------------------------------------------------------------
    def validate(self, where: str = "policy_spec") -> None:
        """Check the relations between fields (offsets, widths, counts); :meth:`from_dict` calls it."""
        for gname, group in self.observations.items():
            _check_group(gname, group, f"{where}.observations.{gname}")
        start = 0
        for i, act in enumerate(self.actions):
            w = f"{where}.actions[{i}]"
            if act.start != start:
                raise SpecError(f"{w}.start: expected {start} (the previous terms' width), got {act.start}")
            for name in ("actuators", "joints", "scale", "offset", "low", "high"):
                n = len(getattr(act, name))
                if n != act.dim:
                    raise SpecError(f"{w}.{name}: expected {act.dim} values (dim), got {n}")
            _check_range(act.clip, f"{w}.clip")
            for k, (lo, hi) in enumerate(zip(act.low, act.high, strict=True)):
                if lo > hi:
                    raise SpecError(f"{w}.low[{k}]: {lo} is above high[{k}] {hi}")
            for name in ("kp", "kd"):
                value = getattr(act, name)
                if isinstance(value, tuple) and len(value) not in (1, act.dim):
                    raise SpecError(f"{w}.{name}: expected one value or {act.dim}, got {len(value)}")
            start += act.dim
        if start != self.action_dim:
            raise SpecError(f"{where}.action_dim: the action terms give {start} columns, got {self.action_dim}")
        joints = tuple(j for act in self.actions for j in act.joints)
        if self.joint_order != joints:
            raise SpecError(f"{where}.joint_order: expected the action terms' joints {list(joints)}, got {list(self.joint_order)}")
        if abs(self.control_rate_hz * self.dt - 1.0) > 1e-6:
            raise SpecError(f"{where}.control_rate_hz: expected 1 / dt = {1.0 / self.dt:g}, got {self.control_rate_hz:g}")

    # -- compatibility ------------------------------------------------------------------------
    def mismatches(self, other: PolicySpec, groups: Sequence[str] | None = None, rate_rtol: float = 1e-6) -> list[str]:
        """Every way ``other`` (what a robot or runtime provides) differs from this policy's spec in
        what running the policy depends on: the observation groups it reads (``groups``; default:
        the deployable groups this spec has) with their term names, order, widths, units, shape and
        history length; the action terms' names, kinds, widths and joints; the control rate.
        Processing settings (scale, clip, noise, delay) are the policy's and are not compared.
        """
        out: list[str] = []
        names = list(groups) if groups is not None else [g for g in DEPLOYABLE_GROUPS if g in self.observations]
        for gname in names:
            mine = self.observations.get(gname)
            theirs = other.observations.get(gname)
            if mine is None:
                out.append(f"observations.{gname}: this spec has no such group")
                continue
            if theirs is None:
                out.append(f"observations.{gname}: missing (it has {', '.join(other.observations) or 'none'})")
                continue
            ours_t = [t.name for t in mine.terms]
            their_t = [t.name for t in theirs.terms]
            if ours_t != their_t:
                out.append(f"observations.{gname}.terms: expected {ours_t} in this order, got {their_t}")
            else:
                for a, b in zip(mine.terms, theirs.terms, strict=True):
                    if a.dim != b.dim:
                        out.append(f"observations.{gname}.{a.name}.dim: expected {a.dim}, got {b.dim}")
                    if a.unit != b.unit:
                        out.append(f"observations.{gname}.{a.name}.unit: expected {a.unit!r}, got {b.unit!r}")
            for name in ("shape", "history_length"):
                if getattr(mine, name) != getattr(theirs, name):
                    out.append(f"observations.{gname}.{name}: expected {getattr(mine, name)}, got {getattr(theirs, name)}")
        if self.action_dim != other.action_dim:
            out.append(f"action_dim: expected {self.action_dim}, got {other.action_dim}")
        ours_a = [(a.name, a.kind, a.dim) for a in self.actions]
        their_a = [(a.name, a.kind, a.dim) for a in other.actions]
        if ours_a != their_a:
            out.append(f"actions: expected (name, kind, dim) {ours_a}, got {their_a}")
        if self.joint_order != other.joint_order:
            out.append(f"joint_order: expected {list(self.joint_order)}, got {list(other.joint_order)}")
        if not math.isclose(self.control_rate_hz, other.control_rate_hz, rel_tol=rate_rtol):
            out.append(f"control_rate_hz: expected {self.control_rate_hz:g}, got {other.control_rate_hz:g}")
        return out

    def check_compatible(self, other: PolicySpec, groups: Sequence[str] | None = None) -> None:
        """Raise :class:`SpecMismatch` naming the first of :meth:`mismatches` (and how many there are)."""
        found = self.mismatches(other, groups)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise SpecMismatch(f"policy {self.task_id!r} cannot run here: {found[0]}{more}")


@dataclass(frozen=True)
class StateSpec:
    """One recurrent state tensor of an exported policy: the network reads it as input ``input`` and
    returns its next value as output ``output``; the caller feeds each output back as the next
    step's input, starting from ``initial`` and starting over at every ``reset`` point.
    """

    name: str
    """The state's name in the policy module (``h``; ``h`` and ``c`` for an LSTM)."""
    input: str
    """The network input that takes it (``h_in``)."""
    output: str
    """The network output that returns its next value (``h_out``)."""
    shape: tuple[int, ...]
    """Shape of one world's state (``[num_layers, hidden]``); the network's is ``[batch, *shape]``."""
    dtype: str = "float32"
    """Element dtype (one of :data:`STATE_DTYPES`)."""
    initial: StateInit = "zeros"
    """Value before the first step and after every reset: ``zeros``."""
    reset: StateReset = "episode_start"
    """When the state starts over: ``episode_start`` (the first step of an episode; on a robot, any
    discontinuity: start, restart after an e-stop, a hold, a lost robot)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON mapping."""
        return _dump(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "state") -> StateSpec:
        """Read and validate one state (:class:`SpecError` names the field and the value)."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
        state = _load_dataclass(cls, data, where)
        state.validate(where)
        return state

    def validate(self, where: str = "state") -> None:
        """Check names, shape and dtype (``from_dict`` calls it)."""
        for name in ("name", "input", "output"):
            if not getattr(self, name).isidentifier():
                raise SpecError(f"{where}.{name}: expected an identifier, got {getattr(self, name)!r}")
        if not self.shape or any(d < 1 for d in self.shape):
            raise SpecError(f"{where}.shape: expected one or more sizes >= 1, got {list(self.shape)}")
        if self.dtype not in STATE_DTYPES:
            raise SpecError(f"{where}.dtype: expected one of {', '.join(STATE_DTYPES)}, got {self.dtype!r}")

    @staticmethod
    def json_schema() -> dict[str, Any]:
        """The JSON schema (draft 2020-12) of one state entry."""
        from robolearn.spec.schema import schema_of

        return schema_of(StateSpec, "robolearn recurrent state")


def load_states(data: Any, where: str = "states", reserved: Sequence[str] = ("obs", "action")) -> tuple[StateSpec, ...]:
    """A JSON list of states, each validated, their names and tensor names distinct and none of
    ``reserved`` (the network's other inputs and outputs); :class:`SpecError` names the field.
    """
    if not isinstance(data, list) or not data:
        raise SpecError(f"{where}: expected a non-empty list of states, got {data!r}")
    states = tuple(StateSpec.from_dict(item, f"{where}[{i}]") for i, item in enumerate(data))
    seen: dict[str, str] = {name: "reserved" for name in reserved}
    names: set[str] = set()
    for i, state in enumerate(states):
        if state.name in names:
            raise SpecError(f"{where}[{i}].name: {state.name!r} repeats")
        names.add(state.name)
        for key in ("input", "output"):
            value = getattr(state, key)
            if value in seen:
                raise SpecError(f"{where}[{i}].{key}: {value!r} is already used ({seen[value]})")
            seen[value] = f"{where}[{i}].{key}"
    return states



# -- chunked generative policies (export manifest version 4) ---------------------------------------
NOISE_DISTRIBUTIONS = ("standard_normal",)
"""Distributions a sampler's noise input may be drawn from: i.i.d. ``N(0, 1)`` per number."""
SAMPLER_MODELS = ("flow", "shortcut", "diffusion")
"""Generative model kinds a chunk sampler may be (``robolearn.nn.generative.MODELS``)."""


@dataclass(frozen=True)
class SamplerSpec:
    """The exported sampler of a chunked generative policy: which model, how many steps, and the
    noise input the caller draws (the network is a deterministic function of ``obs`` and the noise).
    """

    model: Literal["flow", "shortcut", "diffusion"]
    """Generative model kind: rectified flow (Euler steps), shortcut flow, or DDPM sampled by DDIM."""
    backbone: str
    """The denoiser's backbone (``mlp``, ``unet``)."""
    steps: int = field(metadata=_min(1))
    """Sampling steps baked into the network (Euler steps; DDIM steps for diffusion)."""
    one_step: bool = False
    """Whether the network is the distilled one-step head (a flow sampled in one step)."""
    noise_input: str = "noise"
    """Name of the network input that takes the noise."""
    noise_shape: tuple[int, ...] = ()
    """One world's noise: ``[horizon, action_dim]``; the network's is ``[batch, *noise_shape]``."""
    noise_distribution: Literal["standard_normal"] = "standard_normal"
    """How the caller draws the noise: i.i.d. standard normal (zeros: the distribution's mode, a
    deterministic deployment)."""
    output: str = "chunk"
    """Name of the network output: the action chunk ``[batch, horizon, action_dim]`` in env units."""
    parity_draws: int = field(default=1, metadata=_min(1))
    """Noise draws the export-time parity check compared (each over the parity observations)."""

    def validate(self, where: str = "sampler") -> None:
        """Check the relations between fields (``from_dict`` of :class:`ChunkPolicySpec` calls it)."""
        for name in ("noise_input", "output"):
            if not getattr(self, name).isidentifier() or getattr(self, name) == "obs":
                raise SpecError(f"{where}.{name}: expected an identifier other than 'obs', got {getattr(self, name)!r}")
        if self.noise_input == self.output:
            raise SpecError(f"{where}.output: {self.output!r} is also the noise input's name")
        if len(self.noise_shape) != 2 or any(d < 1 for d in self.noise_shape):
            raise SpecError(f"{where}.noise_shape: expected [horizon, action_dim], two sizes >= 1, got {list(self.noise_shape)}")
        if self.one_step and (self.steps != 1 or self.model != "flow"):
            raise SpecError(
                f"{where}.one_step: the one-step head is a flow sampled in 1 step, got model={self.model!r} steps={self.steps}"
            )


@dataclass(frozen=True)
class ChunkPolicySpec:
    """How a chunked generative policy is run: its chunk execution (``robolearn.spec.chunking``:
    horizon, execute, observation history, temporal ensembling) and its exported sampler. The export
    manifest (version 4) writes them as its ``chunking`` and ``sampler`` sections.
    """

    chunking: ChunkSpec
    """Horizon ``H``, actions executed per plan ``k``, observation history, ensembling."""
    sampler: SamplerSpec
    """The sampler baked into the network and its noise input."""

    def to_dict(self) -> dict[str, Any]:
        """``{"chunking": ChunkSpec.to_dict(), "sampler": ...}`` as JSON values."""
        return {"chunking": _plain(self.chunking.to_dict()), "sampler": _dump(self.sampler)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "manifest", action_dim: int | None = None) -> ChunkPolicySpec:
        """Read and validate both sections (:class:`SpecError` names the field and the value); the
        noise shape must be ``[chunking.horizon, action_dim]`` (``action_dim`` when given).
        """
        if not isinstance(data, Mapping):
            raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
        section = data.get("chunking")
        if not isinstance(section, Mapping):
            raise SpecError(f"{where}.chunking: expected an object with {', '.join(ChunkSpec.__dataclass_fields__)}, got {section!r}")
        missing = [k for k in ChunkSpec.__dataclass_fields__ if k not in section]
        if missing:
            raise SpecError(f"{where}.chunking.{missing[0]}: missing")
        try:
            chunking = _load_dataclass(ChunkSpec, section, f"{where}.chunking")
        except ValueError as exc:
            if isinstance(exc, SpecError):
                raise
            # ChunkSpec's own checks name the field first ("execute: expected 1..horizon ...").
            raise SpecError(f"{where}.chunking.{exc}") from None
        raw = data.get("sampler")
        if not isinstance(raw, Mapping):
            raise SpecError(f"{where}.sampler: expected an object with {', '.join(SamplerSpec.__dataclass_fields__)}, got {raw!r}")
        sampler = _load_dataclass(SamplerSpec, raw, f"{where}.sampler")
        sampler.validate(f"{where}.sampler")
        want = [chunking.horizon, action_dim if action_dim is not None else sampler.noise_shape[1]]
        if list(sampler.noise_shape) != want:
            raise SpecError(f"{where}.sampler.noise_shape: expected {want} ([chunking.horizon, action_dim]), got {list(sampler.noise_shape)}")
        return cls(chunking, sampler)

    @staticmethod
    def json_schema() -> dict[str, Any]:
        """The JSON schema (draft 2020-12) of the manifest's ``chunking`` and ``sampler`` sections."""
        from robolearn.spec.schema import schema_of

        schema = schema_of(ChunkPolicySpec, "robolearn chunked generative policy (manifest version 4)")
        # ChunkSpec belongs to spec.chunking and carries no field metadata: its ranges and choices
        # are its __post_init__ checks, repeated here so that tools outside robolearn see them.
        chunk = schema["$defs"]["ChunkSpec"]
        chunk["required"] = list(chunk["properties"])
        for name in ("horizon", "execute", "obs_history"):
            chunk["properties"][name] = {**chunk["properties"][name], "minimum": 1}
        chunk["properties"]["ensemble"] = {"enum": list(ENSEMBLES)}
        decay = chunk["properties"]["ensemble_decay"]
        chunk["properties"]["ensemble_decay"] = {"anyOf": [{**decay["anyOf"][0], "minimum": 0}]}  # finite: no "inf"
        return schema


# -- image inputs (export manifest version 5) ------------------------------------------------------
IMAGE_LAYOUTS = ("HWC", "CHW")
"""Axis orders of an image input: ``[B, H, W, C]`` (cameras, OpenCV, the env's ``image`` group) or
``[B, C, H, W]`` (torch's)."""
IMAGE_COLORS = {"rgb": 3, "bgr": 3, "gray": 1}
"""Channel orders of one frame and their channel counts."""
IMAGE_DTYPES = ("uint8",)
"""Pixel dtypes an exported image input may have: the camera's bytes, normalised inside the graph."""


@dataclass(frozen=True)
class ImageInputSpec:
    """One image input of an exported network: the caller feeds the camera's bytes, stacked over
    ``frames`` frames along the channel axis (oldest first), in ``layout``; the network itself
    converts them to float as ``float(x) * scale + offset`` (``normalization: in_graph``), so the
    caller does no arithmetic on the pixels.
    """

    name: str
    """The network input that takes it (``image``)."""
    shape: tuple[int, ...]
    """One world's input as fed: ``[H, W, frames * C]`` (``HWC``) or ``[frames * C, H, W]`` (``CHW``);
    the network's is ``[batch, *shape]``."""
    layout: Literal["HWC", "CHW"]
    """Axis order of :attr:`shape` (see :data:`IMAGE_LAYOUTS`)."""
    group: str = "image"
    """The observation group one frame comes from (its policy-spec shape is ``[H, W, C]``)."""
    dtype: Literal["uint8"] = "uint8"
    """Pixel dtype of the input (0..255)."""
    color: Literal["rgb", "bgr", "gray"] = "rgb"
    """Channel order within one frame (``rgb``: red first; ``bgr``: OpenCV's order; ``gray``: one channel)."""
    frames: int = field(default=1, metadata=_min(1))
    """Frames stacked along the channel axis, oldest first (frame ``t`` at channels ``t*C .. (t+1)*C - 1``)."""
    normalization: Literal["in_graph"] = "in_graph"
    """Where the pixels become floats: inside the network (the caller feeds raw bytes)."""
    scale: float = field(default=1.0 / 255.0, metadata=_min(0.0, exclusive=True))
    """Multiplier applied inside the network to ``float(x)``."""
    offset: float = -0.5
    """Added inside the network after :attr:`scale` (DrQ-v2's inputs lie in [-0.5, 0.5])."""

    @property
    def channels(self) -> int:
        """Channels of the input (``frames`` times the frame's)."""
        return self.shape[-1] if self.layout == "HWC" else self.shape[0]

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        """One frame as the observation group holds it: ``[H, W, C]``."""
        h, w = (self.shape[0], self.shape[1]) if self.layout == "HWC" else (self.shape[1], self.shape[2])
        return (h, w, IMAGE_COLORS[self.color])

    def to_dict(self) -> dict[str, Any]:
        """The JSON mapping."""
        return _dump(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "image") -> ImageInputSpec:
        """Read and validate one image input (:class:`SpecError` names the field and the value)."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
        image = _load_dataclass(cls, data, where)
        image.validate(where)
        return image

    def validate(self, where: str = "image", spec: PolicySpec | None = None) -> None:
        """Check the name, shape, channels and scale; with ``spec``, that :attr:`group` is a
        deployable group of it whose shape is one frame ``[H, W, C]`` of this input.
        """
        if not self.name.isidentifier() or self.name in ("obs", "action"):
            raise SpecError(f"{where}.name: expected an identifier other than 'obs' and 'action', got {self.name!r}")
        if len(self.shape) != 3 or any(d < 1 for d in self.shape):
            raise SpecError(f"{where}.shape: expected three sizes >= 1 ({', '.join(self.layout)}), got {list(self.shape)}")
        per_frame = IMAGE_COLORS[self.color]
        if self.channels != self.frames * per_frame:
            axis = "last" if self.layout == "HWC" else "first"
            raise SpecError(
                f"{where}.shape: the {axis} axis ({self.layout}) holds {self.channels} channels, expected "
                f"frames x {self.color} channels = {self.frames} x {per_frame} = {self.frames * per_frame}"
            )
        if not math.isfinite(self.scale) or not math.isfinite(self.offset):
            raise SpecError(f"{where}.scale/offset: expected finite numbers, got {self.scale!r}, {self.offset!r}")
        if spec is None:
            return
        if self.group not in DEPLOYABLE_GROUPS:
            raise SpecError(f"{where}.group: expected a deployable group ({', '.join(DEPLOYABLE_GROUPS)}), got {self.group!r}")
        group = spec.observations.get(self.group)
        if group is None:
            raise SpecError(f"{where}.group: the policy spec has no group {self.group!r}; groups: {', '.join(spec.observations)}")
        if tuple(group.shape) != self.frame_shape:
            raise SpecError(
                f"{where}.shape: one frame of it is {list(self.frame_shape)} [H, W, C], but "
                f"policy_spec.observations.{self.group}.shape is {list(group.shape)}"
            )
        if group.history_length > 1 and self.frames != group.history_length:
            # The env stacked the frames the policy learnt from: the input must be that stack.
            raise SpecError(
                f"{where}.frames: the env stacks policy_spec.observations.{self.group}.history_length = "
                f"{group.history_length} frames, got frames={self.frames}"
            )

    @staticmethod
    def json_schema() -> dict[str, Any]:
        """The JSON schema (draft 2020-12) of one image input (manifest version 5's ``images``)."""
        from robolearn.spec.schema import schema_of

        schema = schema_of(ImageInputSpec, "robolearn image input (manifest version 5)")
        props = schema["$defs"]["ImageInputSpec"]["properties"]
        props["shape"] = {**props["shape"], "minItems": 3, "maxItems": 3}
        props["shape"]["items"] = {**props["shape"]["items"], "minimum": 1}
        # The reader refuses infinite scale and offset: the schema's numbers are finite ones.
        props["scale"] = {"type": "number", "exclusiveMinimum": 0}
        props["offset"] = {"type": "number"}
        return schema


def load_images(data: Any, where: str = "images", spec: PolicySpec | None = None,
                reserved: Sequence[str] = ("obs", "action")) -> tuple[ImageInputSpec, ...]:
    """A JSON list of image inputs, each validated (against ``spec`` when given), their names
    distinct and none of ``reserved``; :class:`SpecError` names the field.
    """
    if not isinstance(data, list) or not data:
        raise SpecError(f"{where}: expected a non-empty list of image inputs, got {data!r}")
    images = tuple(ImageInputSpec.from_dict(item, f"{where}[{i}]") for i, item in enumerate(data))
    seen: set[str] = set(reserved)
    for i, image in enumerate(images):
        image.validate(f"{where}[{i}]", spec)
        if image.name in seen:
            raise SpecError(f"{where}[{i}].name: {image.name!r} is already used")
        seen.add(image.name)
    return images


def _check_range(value: tuple[float, float] | None, where: str) -> None:
    if value is not None and value[0] > value[1]:
        raise SpecError(f"{where}: low {value[0]} is above high {value[1]}")


def _check_group(gname: str, group: ObsGroupSpec, where: str) -> None:
    """A group's terms are contiguous, its frame and shape agree, its settings are in range."""
    if gname not in OBS_GROUPS:
        raise SpecError(f"{where}: unknown group {gname!r}; expected one of {', '.join(OBS_GROUPS)}")
    if not group.terms:
        raise SpecError(f"{where}.terms: a group needs at least one term")
    start = 0
    for i, term in enumerate(group.terms):
        w = f"{where}.terms[{i}]"
        if term.start != start:
            raise SpecError(f"{w}.start: expected {start} (the previous terms' width), got {term.start}")
        if isinstance(term.scale, tuple) and len(term.scale) not in (1, term.dim):
            raise SpecError(f"{w}.scale: expected one value or {term.dim} (dim), got {len(term.scale)}")
        _check_range(term.clip, f"{w}.clip")
        start += term.dim
    if start != group.frame_dim:
        raise SpecError(f"{where}.frame_dim: the terms give {start}, got {group.frame_dim}")
    if group.flat:
        expected = group.frame_dim * max(1, group.history_length)
        if group.shape[0] != expected:
            raise SpecError(f"{where}.shape: expected [{expected}] (frame_dim x history), got {list(group.shape)}")
    else:
        if len(group.terms) != 1:
            raise SpecError(f"{where}.shape: a shaped group {list(group.shape)} has one term")
        if math.prod(group.shape) != group.frame_dim:
            raise SpecError(f"{where}.shape: {list(group.shape)} holds {math.prod(group.shape)} numbers, frame_dim is {group.frame_dim}")
    if group.delay is not None:
        lo, hi = group.delay.lag_range
        if not 0 <= lo <= hi:
            raise SpecError(f"{where}.delay.lag_range: expected 0 <= low <= high, got {[lo, hi]}")
        if not 0.0 <= group.delay.hold_prob <= 1.0:
            raise SpecError(f"{where}.delay.hold_prob: expected a probability in [0, 1], got {group.delay.hold_prob}")


# -- reading and writing ------------------------------------------------------------------------
def _upgrade_v1(data: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 mapping in the version-2 form: version 1 wrote a delay's integer lags as floats
    (``[0.0, 1.0]``); integral ones become integers, anything else is left for the reader to refuse.
    """
    data = dict(data)
    groups = data.get("observations")
    if isinstance(groups, Mapping):
        upgraded = {}
        for name, group in groups.items():
            delay = group.get("delay") if isinstance(group, Mapping) else None
            lags = delay.get("lag_range") if isinstance(delay, Mapping) else None
            if isinstance(lags, list) and all(isinstance(v, float) and v.is_integer() for v in lags):
                group = {**group, "delay": {**delay, "lag_range": [int(v) for v in lags]}}
            upgraded[name] = group
        data["observations"] = upgraded
    return data


def _number(value: Any, where: str) -> float:
    """A JSON number or ``"inf"``/``"-inf"`` as a float; NaN, booleans and other strings refused."""
    if isinstance(value, str) and value in ("inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise SpecError(f"{where}: expected a number (or \"inf\"/\"-inf\"), got {value!r}")
    return float(value)


def _load(annotation: Any, value: Any, where: str) -> Any:
    """``value`` (parsed JSON) as ``annotation``, checked; the error names ``where`` and the value."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None:
            if type(None) in options:
                return None
            raise SpecError(f"{where}: expected {_describe(annotation)}, got null")
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _load(option, value, where)
            except SpecError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise SpecError(f"{where}: expected {_describe(annotation)}, got {value!r}")
    if origin is Literal:
        if value in typing.get_args(annotation) and isinstance(value, str):
            return value
        raise SpecError(f"{where}: expected one of {', '.join(map(repr, typing.get_args(annotation)))}, got {value!r}")
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        return _number(value, where)
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, list):
            args = typing.get_args(annotation)
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_load(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
            if len(args) == len(value):
                return tuple(_load(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
            raise SpecError(f"{where}: expected {len(args)} values, got {len(value)}: {value!r}")
    elif origin is dict:
        if isinstance(value, Mapping):
            _, item = typing.get_args(annotation)
            return {str(k): _load(item, v, f"{where}.{k}") for k, v in value.items()}
    elif annotation is ModelSpec:
        if isinstance(value, Mapping):
            kind = value.get("type")
            if not isinstance(kind, str) or not kind:
                raise SpecError(f"{where}.type: expected the model's class name, got {kind!r}")
            return ModelSpec(kind, {k: v for k, v in value.items() if k != "type"})
    elif dataclasses.is_dataclass(annotation):
        if isinstance(value, Mapping):
            return _load_dataclass(annotation, value, where)  # type: ignore[arg-type]
    raise SpecError(f"{where}: expected {_describe(annotation)}, got {value!r}")


def _load_dataclass(cls: type, value: Mapping[str, Any], where: str) -> Any:
    """A dataclass from a JSON object: unknown keys, missing fields and out-of-range values named."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}: not a field of {cls.__name__}; fields: {', '.join(fields)}")
    kwargs = {}
    for name, f in fields.items():
        w = f"{where}.{name}"
        if name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{w}: missing")
            continue
        got = _load(hints[name], value[name], w)
        bound = f.metadata
        if "minimum" in bound and got < bound["minimum"]:
            raise SpecError(f"{w}: expected a value >= {bound['minimum']}, got {value[name]!r}")
        if "exclusiveMinimum" in bound and not got > bound["exclusiveMinimum"]:
            raise SpecError(f"{w}: expected a value > {bound['exclusiveMinimum']}, got {value[name]!r}")
        if isinstance(got, float) and not math.isfinite(got) and hints[name] is float:
            raise SpecError(f"{w}: expected a finite number, got {value[name]!r}")
        kwargs[name] = got
    return cls(**kwargs)


def _describe(annotation: Any) -> str:
    """A short human name of a type annotation, for messages."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(annotation))
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_describe(args[0])}"
        return f"a list of {len(args)} values"
    if origin is dict:
        return "an object"
    if annotation is type(None):
        return "null"
    if annotation is int:
        return "an integer"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "a string"
    if annotation is bool:
        return "true or false"
    if dataclasses.is_dataclass(annotation):
        return f"an object ({annotation.__name__})"
    return str(annotation)


def _plain(value: Any) -> Any:
    """A JSON value: floats with infinities as strings, tuples as lists, models flattened."""
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, ModelSpec):
        return {"type": value.type, **{k: _plain(v) for k, v in value.params.items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dump(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _dump(obj: Any) -> dict[str, Any]:
    """A dataclass as a JSON object, fields in declaration order."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


__all__ = [
    "READABLE_VERSIONS",
    "SPEC_VERSION",
    "STATE_DTYPES",
    "NOISE_DISTRIBUTIONS",
    "SAMPLER_MODELS",
    "ActionTermSpec",
    "ChunkPolicySpec",
    "DelaySpec",
    "IMAGE_COLORS",
    "IMAGE_DTYPES",
    "IMAGE_LAYOUTS",
    "ImageInputSpec",
    "ModelSpec",
    "NoiseSpec",
    "ObsGroupSpec",
    "ObsTermSpec",
    "PolicySpec",
    "SamplerSpec",
    "SpecError",
    "SpecMismatch",
    "StateSpec",
    "load_images",
    "load_states",
]
