"""The safety layer: every command passes it before it reaches a robot.

Given the robot's declared limits (:class:`~robolearn.sim2real.robots.base.RobotFeatures`) and
a :class:`SafetyConfig`, :meth:`SafetyLayer.filter` turns whatever the policy produced (anything:
NaN, infinity, huge values, nothing at all) into a command that is finite, inside the absolute
limits and, outside the e-stop transition, no further than the per-step change limit from the
previous emitted command. Each step's interventions come back as :class:`Intervention` bit flags
(recorded in telemetry and counted in :attr:`SafetyLayer.counts`).

Limits: the period is ``features.period``; position limits are ``features.position_limits``
shrunk by ``position_margin`` on each finite side, velocity limits ``features.velocity_limits``,
effort limits ``features.effort_limits``. The per-step change limit is ``max_delta`` per joint;
for position targets it is also at most ``velocity_limit * period`` (a target may not outrun the
joint's speed limit).

A reading is *usable* when it is there, not older than ``stale_timeout_s``
(``now - reading.age_reference``) and its positions and velocities of the command joints are
finite (a sensor reporting NaN is as good as no sensor). An image policy's cameras (the layer's
``cameras``) are *fresh* when the reading holds a frame of each, none older than
``camera_stale_timeout_s`` (``now - frame.age_reference``: a camera's staleness is its own) and
each a uint8 array of its camera's declared ``[H, W, C]`` (a malformed frame is as good as none).

Per step, in this order:

1. **non-finite** command (NaN or infinity anywhere): the *hold* command instead (``NONFINITE``);
   no command at all (``None``): the hold command (``HOLD``);
2. **watchdog**: no usable reading: the hold command (``STALE``); a camera that is not fresh: the
   hold command (``STALE_CAMERA``, counted apart); once readings (and frames) are fresh again the
   layer runs again, under the change limit (so it resumes smoothly). The layer does not start
   (stays ``idle``) before every camera has a fresh frame (a hold before the start would use up the
   staged start's time);
3. **staged start** for ``ramp_s`` after :meth:`SafetyLayer.start` (``RAMP``): position robots move
   their targets from the measured pose to ``features.default_pose`` along a straight line (the
   policy's targets are ignored until the ramp ends); torque and velocity robots get the policy's
   command scaled by a factor rising linearly from 0 to 1 (a soft start);
4. **guards** (``POSITION`` / ``VELOCITY``, torque and velocity robots): a joint at or past a
   position limit gets no effort or velocity command pushing it further out; a joint faster than
   its velocity limit gets no effort in the direction of its motion;
5. **smoothing** (``SMOOTHED``, not applied to hold commands, which must not lag):
   ``smoothing * previous + (1 - smoothing) * command``;
6. **absolute limits** (``POSITION`` for targets, ``VELOCITY`` for velocity commands, ``EFFORT`` for
   efforts): targets inside the position limits, velocity commands within the velocity limits,
   efforts within the effort limits;
7. **per-step change** (``RATE``): ``|command - previous| <= change limit`` per joint;
8. the absolute limits again (the previous command is inside them and they are intervals, so this
   clamp never breaks the change limit).

The hold command: torque robots damp (``-damping * velocity`` of the latest reading, even a stale
one; zero without a reading or for a joint whose velocity is not finite), velocity robots command
zero, position robots keep the position measured when the hold began (the previous target for a
joint with no finite measurement). With ``hold_mode="damp"`` position robots follow the measured
position instead. Every hold is approached under the change limit.

An **e-stop** (:meth:`SafetyLayer.estop`, safe to call from any thread) latches: every later step
emits the safe command at once (torque: damping within the effort limits, velocity: zero,
position: the measured position inside the limits), flagged ``ESTOP``, whatever the policy or the
readings do, until :meth:`SafetyLayer.clear_estop`. The e-stop transition is the one place the
change limit does not apply: stopping wins over smoothness. Clearing the e-stop makes the layer
``idle`` again: the next :meth:`SafetyLayer.start` (or the next step with a usable reading) begins
a new staged start from the previous emitted command, under the change limit.

**Exit** (:meth:`SafetyLayer.exit_command`) emits the damping command under the change limit
(``EXIT``: torque ``-damping * velocity``, velocity zero, position the measured position), for
the runtime to send for ``exit_s``.

Time: every method takes ``now`` (seconds); without it the layer reads its ``clock`` (by default
``time.monotonic``), never the time by any other means. Per-step cost is a handful of NumPy
operations on arrays of the robot's width, with the limit arrays computed once.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from robolearn.sim2real.robots.base import Reading, RobotFeatures


class Intervention(enum.IntFlag):
    """What the safety layer did to a step's command (bit flags, recorded per step)."""

    NONE = 0
    POSITION = 1
    """A position limit clamped a target, or a guard removed a push past a position limit."""
    VELOCITY = 2
    """A velocity limit clamped a command, or a guard removed effort along an overspeed."""
    EFFORT = 4
    """An effort limit clamped a command."""
    RATE = 8
    """The per-step change limit clamped a command."""
    NONFINITE = 16
    """The policy's command held NaN or infinity: the hold command was sent."""
    STALE = 32
    """The reading was missing, stale or not finite: the hold command was sent."""
    ESTOP = 64
    """The e-stop is latched: the safe command was sent."""
    RAMP = 128
    """The staged start shaped the command."""
    EXIT = 256
    """The exit damping command."""
    HOLD = 512
    """No command from the policy: the hold command was sent."""
    SMOOTHED = 1024
    """Smoothing changed the command."""
    STALE_CAMERA = 2048
    """A camera the policy reads had no frame, none newer than ``camera_stale_timeout_s`` or a malformed
    one: the hold command was sent."""


FLAG_NAMES = {int(f): f.name.lower() for f in Intervention if f.value}
"""Flag value to name, for counts and status reports."""

# Plain ints for the per-step path: IntFlag arithmetic costs microseconds a call.
_POSITION, _VELOCITY, _EFFORT, _RATE, _NONFINITE, _STALE, _ESTOP, _RAMP, _EXIT, _HOLD, _SMOOTHED = (
    int(Intervention.POSITION), int(Intervention.VELOCITY), int(Intervention.EFFORT), int(Intervention.RATE),
    int(Intervention.NONFINITE), int(Intervention.STALE), int(Intervention.ESTOP), int(Intervention.RAMP),
    int(Intervention.EXIT), int(Intervention.HOLD), int(Intervention.SMOOTHED),
)
_STALE_CAMERA = int(Intervention.STALE_CAMERA)
_HOLDING = _HOLD | _NONFINITE | _STALE | _STALE_CAMERA


# The reductions as ufunc calls: ``ndarray.all()``/``.any()`` go through a Python wrapper that
# costs a few hundred nanoseconds more, per call, on arrays of a robot's width.
_isfinite = np.isfinite
_all = np.logical_and.reduce
_any = np.logical_or.reduce


def _all_finite(x: np.ndarray) -> bool:
    """Whether every entry is finite (no arithmetic reduction that could warn on ``inf - inf``)."""
    return bool(_all(_isfinite(x)))


class SafetyConfigError(ValueError):
    """A safety setting out of range (field, value and expectation named)."""


def _is_number(value: Any) -> bool:
    """A real number that is not a bool (``True`` is no gain or duration)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SafetyConfig:
    """Settings of the safety layer (module doc for their order and meaning)."""

    max_delta: float | tuple[float, ...] = math.inf
    """Largest change of the command per control step, in command units (one value or per joint)."""
    smoothing: float = 0.0
    """Exponential smoothing weight on the previous command, in ``[0, 1)`` (0: none)."""
    stale_timeout_s: float = 0.1
    """A reading older than this (``now - reading.age_reference``) trips the watchdog."""
    camera_stale_timeout_s: float = 0.2
    """A camera frame older than this (``now - frame.age_reference``) holds an image policy
    (``STALE_CAMERA``); cameras are slower than joint encoders (30 Hz: a frame every 33 ms)."""
    hold_mode: Literal["hold", "damp"] = "hold"
    """Position robots: ``hold`` keeps the position where the hold began, ``damp`` follows the measured one."""
    damping: float | tuple[float, ...] = 1.0
    """Damping gain ``kd`` of torque holds, e-stops and exits (``-kd * velocity``; one value or per joint)."""
    ramp_s: float = 1.0
    """Staged start duration in seconds (0: none)."""
    exit_s: float = 0.5
    """Seconds of damping the runtime sends on exit."""
    position_margin: float = 0.0
    """Shrinks finite position limits by this much on both sides (command units)."""

    def __post_init__(self) -> None:
        """Refuse values out of range, naming the field; per-joint lists become tuples."""
        for name in ("max_delta", "damping"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        _positive_or_inf(self.max_delta, "safety.max_delta")
        if not (_is_number(self.smoothing) and 0.0 <= self.smoothing < 1.0):
            raise SafetyConfigError(f"safety.smoothing: expected a weight in [0, 1), got {self.smoothing!r}")
        for name in ("stale_timeout_s", "camera_stale_timeout_s"):
            value = getattr(self, name)
            if not (_is_number(value) and value > 0):
                raise SafetyConfigError(f"safety.{name}: expected seconds > 0, got {value!r}")
        if self.hold_mode not in ("hold", "damp"):
            raise SafetyConfigError(f"safety.hold_mode: expected 'hold' or 'damp', got {self.hold_mode!r}")
        for name in ("ramp_s", "exit_s", "position_margin"):
            value = getattr(self, name)
            if not (_is_number(value) and math.isfinite(value) and value >= 0):
                raise SafetyConfigError(f"safety.{name}: expected a finite number >= 0, got {value!r}")
        per_joint = isinstance(self.damping, tuple)
        damping = self.damping if per_joint else (self.damping,)
        if not damping:
            raise SafetyConfigError("safety.damping: expected a gain or one per command joint, got an empty list")
        for i, d in enumerate(damping):
            if not (_is_number(d) and math.isfinite(d) and d >= 0):
                suffix = f"[{i}]" if per_joint else ""
                raise SafetyConfigError(f"safety.damping{suffix}: expected a finite gain >= 0, got {d!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "safety") -> SafetyConfig:
        """Read a mapping (a config section, :meth:`to_dict`'s output), naming an unknown field or a
        bad value as ``<where>.<field>``.
        """
        if not isinstance(data, Mapping):
            raise SafetyConfigError(f"{where}: expected a mapping of safety settings, got {data!r}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(str(k) for k in set(data) - known)
        if unknown:
            raise SafetyConfigError(f"{where}: unknown settings {unknown} (valid: {sorted(known)})")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("max_delta", "damping") and isinstance(value, (list, tuple)):
                value = tuple(_number(v, f"{where}.{key}[{i}]") for i, v in enumerate(value))
            elif key != "hold_mode":
                value = _number(value, f"{where}.{key}")
            kwargs[key] = value
        try:
            return cls(**kwargs)
        except SafetyConfigError as err:
            # The checks name fields as "safety.<field>"; say where this mapping came from instead.
            message = str(err)
            if where != "safety" and message.startswith("safety"):
                message = where + message[len("safety"):]
            raise SafetyConfigError(message) from None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (infinities as ``"inf"``, per-joint values as lists), read back by
        :meth:`from_dict`.
        """

        def plain(x: Any) -> Any:
            if isinstance(x, float) and math.isinf(x):
                return "inf" if x > 0 else "-inf"
            if isinstance(x, tuple):
                return [plain(v) for v in x]
            return x

        return {key: plain(value) for key, value in asdict(self).items()}


def _number(value: Any, where: str) -> float:
    """A number (``"inf"`` allowed), or an error naming ``where``."""
    if isinstance(value, bool):
        raise SafetyConfigError(f"{where}: expected a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise SafetyConfigError(f"{where}: expected a number, got {value!r}") from None
    if math.isnan(x):
        raise SafetyConfigError(f"{where}: expected a number, got NaN")
    return x


def _positive_or_inf(value: float | tuple[float, ...], where: str) -> None:
    """Refuse a change limit that is not positive."""
    per_joint = isinstance(value, tuple)
    values = value if per_joint else (value,)
    if not values:
        raise SafetyConfigError(f"{where}: expected a number or one per command joint, got an empty list")
    for i, v in enumerate(values):
        if not (_is_number(v) and not math.isnan(v) and v > 0):
            suffix = f"[{i}]" if per_joint else ""
            raise SafetyConfigError(f"{where}{suffix}: expected a positive number (or inf), got {v!r}")


def _per_joint(value: float | Sequence[float], n: int, where: str) -> np.ndarray:
    """One value or ``n`` as a float64 array."""
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        return np.full(n, float(arr[0]))
    if arr.size != n:
        raise SafetyConfigError(f"{where}: expected one value or {n} (one per command joint), got {arr.size}")
    return arr


class SafetyLayer:
    """Filters commands against a robot's limits (module doc).

    Not thread-safe except :meth:`estop`, which any thread may call while another one steps.
    """

    def __init__(self, features: RobotFeatures, config: SafetyConfig, clock: Callable[[], float] = time.monotonic,
                 cameras: Sequence[str] = ()) -> None:
        """Precompute the limit arrays of ``features`` under ``config``; ``clock`` gives ``now``
        when a method is called without it. ``cameras``: the robot cameras the policy reads (an
        image policy's), whose frames must be fresh for a step to run (module doc).
        """
        unknown = [c for c in cameras if c not in features.cameras]
        if unknown:
            raise SafetyConfigError(f"safety.cameras: {unknown} are not cameras of robot {features.name!r} "
                                    f"(it has {sorted(features.cameras) or 'none'})")
        self.cameras = tuple(dict.fromkeys(cameras))
        """The cameras whose frames the layer watches (empty: none)."""
        self._camera_timeout = float(config.camera_stale_timeout_s)
        self._camera_shapes = {name: features.cameras[name].shape for name in self.cameras}
        self.features = features
        self.config = config
        self.clock = clock
        self.kind = features.command_kind
        n = len(features.command_joints)
        self.n = n
        self.cols = features.command_index
        # Command joints that are the first measured joints, in order, are read as a view (no copy).
        self._cols: slice | np.ndarray = slice(0, n) if np.array_equal(self.cols, np.arange(n)) else self.cols
        margin = config.position_margin
        lo = np.array([p[0] for p in features.position_limits], dtype=np.float64)
        hi = np.array([p[1] for p in features.position_limits], dtype=np.float64)
        lo = np.where(np.isfinite(lo), lo + margin, lo)
        hi = np.where(np.isfinite(hi), hi - margin, hi)
        bad = lo > hi
        if bad.any():
            raise SafetyConfigError(
                f"safety.position_margin: {margin} leaves no room between the position limits of "
                f"{[features.command_joints[i] for i in np.flatnonzero(bad)]}"
            )
        self.pos_lo, self.pos_hi = lo, hi
        self.vel_lim = np.asarray(features.velocity_limits, dtype=np.float64)
        self._neg_vel_lim = -self.vel_lim
        self.eff_lim = np.asarray(features.effort_limits, dtype=np.float64)
        self.max_delta = _per_joint(config.max_delta, n, "safety.max_delta")
        if self.kind == "joint_pos":
            # A target may not move faster than the joint may.
            self.max_delta = np.minimum(self.max_delta, self.vel_lim * features.period)
        self.damping = _per_joint(config.damping, n, "safety.damping")
        self._neg_damping = -self.damping
        self.default_pose = np.asarray(features.default_pose, dtype=np.float64)
        # Absolute bounds of the command itself, by kind.
        if self.kind == "joint_pos":
            self.cmd_lo, self.cmd_hi, self._abs_flag = self.pos_lo, self.pos_hi, _POSITION
        elif self.kind == "joint_vel":
            self.cmd_lo, self.cmd_hi, self._abs_flag = -self.vel_lim, self.vel_lim, _VELOCITY
        else:
            self.cmd_lo, self.cmd_hi, self._abs_flag = -self.eff_lim, self.eff_lim, _EFFORT
        # Guards that cannot fire are skipped (unlimited joints, infinite change limits).
        self._position_guard = self.kind != "joint_pos" and bool(
            np.isfinite(self.pos_lo).any() or np.isfinite(self.pos_hi).any())
        self._velocity_guard = self.kind == "torque" and bool(np.isfinite(self.vel_lim).any())
        self._rate_limited = bool(np.isfinite(self.max_delta).any())
        self._timeout = float(config.stale_timeout_s)
        self._smoothing = float(config.smoothing)
        self._prev = self._clamp_abs(np.zeros(n))
        self._emitted = False
        self._state = "idle"
        self._estopped = False
        self._ramp_start = 0.0
        self._ramp_from = np.zeros(n)
        self._hold_target: np.ndarray | None = None
        self._estop_reason = ""
        self._histogram: dict[int, int] = {}

    # -- state ---------------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        """Steps with each intervention since construction, by flag name (``"rate"``, ``"stale"``...)."""
        out = dict.fromkeys(FLAG_NAMES.values(), 0)
        for value, n in self._histogram.items():
            for bit, name in FLAG_NAMES.items():
                if value & bit:
                    out[name] += n
        return out

    @property
    def state(self) -> str:
        """``idle`` (not started), ``ramp``, ``run``, ``hold``, ``estop`` or ``exit``."""
        return "estop" if self._estopped else self._state

    @property
    def last_command(self) -> np.ndarray:
        """The previous emitted command (a copy)."""
        return self._prev.copy()

    @property
    def estop_reason(self) -> str:
        """Why the e-stop latched (empty when it is not latched)."""
        return self._estop_reason

    def camera_ages(self, reading: Reading | None, now: float | None = None) -> list[float]:
        """Seconds since each watched camera's newest frame (``inf``: none in ``reading``), in order."""
        now = self._now(now)
        images = reading.images if reading is not None else {}
        out = []
        for name in self.cameras:
            frame = images.get(name)
            out.append(math.inf if frame is None else now - frame.age_reference)
        return out

    def missing_cameras(self, reading: Reading | None) -> list[str]:
        """The watched cameras that have no frame in ``reading`` (never delivered)."""
        images = reading.images if reading is not None else {}
        return [name for name in self.cameras if name not in images]

    def malformed_cameras(self, reading: Reading | None) -> dict[str, str]:
        """The watched cameras whose frame in ``reading`` is not a uint8 array of the camera's
        declared ``[H, W, C]`` (a custom robot's bug), each with what it delivered and what was declared.
        """
        images = reading.images if reading is not None else {}
        out = {}
        for name in self.cameras:
            frame = images.get(name)
            if frame is not None and not self._frame_ok(name, frame.image):
                image = frame.image
                out[name] = (f"camera {name!r}: a frame of shape {getattr(image, 'shape', None)} and dtype "
                             f"{getattr(image, 'dtype', type(image).__name__)}; the robot declares "
                             f"{list(self._camera_shapes[name])} uint8")
        return out

    def _frame_ok(self, name: str, image: object) -> bool:
        """Whether ``image`` is a frame of camera ``name`` as declared (uint8, its ``[H, W, C]``)."""
        return isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.shape == self._camera_shapes[name]

    def cameras_fresh(self, reading: Reading | None, now: float | None = None) -> bool:
        """Whether every watched camera has a frame no older than ``camera_stale_timeout_s``
        (written so that a NaN stamp counts as stale) of its declared shape and dtype (a malformed
        frame is as good as none).
        """
        if not self.cameras:
            return True
        if not all(age <= self._camera_timeout for age in self.camera_ages(reading, now)):
            return False
        images = reading.images  # every camera has a frame here (its age is finite)
        return all(self._frame_ok(name, images[name].image) for name in self.cameras)

    def _now(self, now: float | None) -> float:
        """``now``, or the clock's time when it is not given."""
        return self.clock() if now is None else float(now)

    def start(self, reading: Reading, now: float | None = None) -> None:
        """Begin the staged start from ``reading``'s pose. Before any command was emitted, the
        previous command becomes the measured position (position robots, clamped to the limits) or
        zero; on a restart (after :meth:`clear_estop`) it stays the last emitted command, so the
        change limit holds across. A position robot cannot start from a pose it does not know: a
        non-finite measured position raises ``ValueError``.
        """
        now = self._now(now)
        pose = np.asarray(reading.joint_pos, dtype=np.float64)[self.cols]
        if self.kind == "joint_pos":
            if not _all_finite(pose):
                bad = {self.features.command_joints[i]: float(pose[i]) for i in np.flatnonzero(~np.isfinite(pose))}
                raise ValueError(f"safety.start: measured positions {bad} are not finite; a position robot "
                                 "cannot start from an unknown pose")
            self._ramp_from = self._clamp_abs(pose)
            if not self._emitted:
                self._prev = self._ramp_from.copy()
        elif not self._emitted:
            self._prev = self._clamp_abs(np.zeros(self.n))
        self._ramp_start = now
        self._hold_target = None
        self._state = "ramp" if self.config.ramp_s > 0 else "run"

    def estop(self, reason: str = "") -> None:
        """Latch the e-stop (module doc); safe to call from any thread."""
        self._estop_reason = reason or "e-stop"
        self._estopped = True  # one attribute write: the stepping thread sees it at its next step

    def clear_estop(self) -> None:
        """Release the e-stop: the layer is ``idle`` again and the next start (or step with a usable
        reading) begins a new staged start, under the change limit.
        """
        if self._estopped:
            self._state = "idle"
            self._hold_target = None
            self._estop_reason = ""
            self._estopped = False

    # -- commands ------------------------------------------------------------------------------
    def _clamp_abs(self, cmd: np.ndarray) -> np.ndarray:
        """``cmd`` inside the absolute limits (a new array)."""
        return np.minimum(np.maximum(cmd, self.cmd_lo), self.cmd_hi)

    def _damp(self, reading: Reading | None) -> np.ndarray:
        """The damping command of this kind for ``reading`` (any age), finite, a new array."""
        if self.kind == "joint_vel":
            return np.zeros(self.n)
        if self.kind == "torque":
            if reading is None:
                return np.zeros(self.n)
            vel = reading.joint_vel[self._cols]
            if _all_finite(vel):
                return self._neg_damping * vel
            # No velocity, no damping: zero effort for that joint, never the last command. (Holds
            # are off the running path: the error-state switch costs nothing that matters here.)
            with np.errstate(invalid="ignore", over="ignore"):
                out = self._neg_damping * vel
            return np.where(np.isfinite(out), out, 0.0)
        if reading is None:
            return self._prev.copy()
        out = np.array(reading.joint_pos[self._cols], dtype=np.float64)
        if not _all_finite(out):  # an unmeasured joint keeps its previous target
            out = np.where(np.isfinite(out), out, self._prev)
        return out

    def _hold(self, reading: Reading | None) -> np.ndarray:
        """The hold command (module doc)."""
        if self.kind != "joint_pos" or self.config.hold_mode == "damp":
            return self._damp(reading)
        if self._hold_target is None:
            self._hold_target = self._damp(reading)
        return self._hold_target

    def filter(self, command: np.ndarray | None, reading: Reading | None, now: float | None = None) -> tuple[np.ndarray, int]:
        """The command to send for the policy's ``command`` (``None``: none) given the latest
        ``reading`` (``None``: none yet), and the interventions as an int of :class:`Intervention` flags.
        """
        now = self._now(now)
        if self._estopped:
            return self._emit(self._damp(reading), _ESTOP)
        # Fresh: written so that a NaN stamp counts as stale.
        usable = (reading is not None and now - reading.age_reference <= self._timeout
                  and _all_finite(reading.joint_pos[self._cols]) and _all_finite(reading.joint_vel[self._cols]))
        seeing = not self.cameras or self.cameras_fresh(reading, now)
        if self._state == "idle" and usable and seeing:
            self.start(reading, now)
        flags = 0
        if command is None:
            cmd, flags = self._hold(reading), _HOLD
        else:
            cmd = command if isinstance(command, np.ndarray) and command.dtype == np.float64 else np.asarray(command, np.float64)
            if cmd.shape != (self.n,):
                cmd = cmd.reshape(-1)
                if cmd.shape != (self.n,):
                    raise ValueError(f"safety: expected a command of {self.n} values, got shape {list(np.shape(command))}")
            if not _all_finite(cmd):
                cmd, flags = self._hold(reading), _NONFINITE
        if not usable:
            if not flags:
                cmd = self._hold(reading)
            flags |= _STALE
        if not seeing:
            if not flags:
                cmd = self._hold(reading)
            flags |= _STALE_CAMERA
        holding = flags != 0
        state = self._state
        if not holding:
            self._hold_target = None
            if state == "ramp":
                frac = (now - self._ramp_start) / self.config.ramp_s
                if frac >= 1.0:
                    self._state = "run"
                else:
                    frac = max(frac, 0.0)
                    if self.kind == "joint_pos":
                        cmd = self._ramp_from + frac * (self.default_pose - self._ramp_from)
                    else:
                        cmd = cmd * frac
                    flags |= _RAMP
            elif state != "run":
                self._state = "run"
        elif state != "ramp" and state != "idle":
            self._state = "hold"
        if reading is not None and (self._position_guard or self._velocity_guard):
            cmd, guard = self._guard(cmd, reading)
            flags |= guard
        if self._smoothing > 0 and not holding:
            smoothed = self._smoothing * self._prev + (1.0 - self._smoothing) * cmd
            if _any(smoothed != cmd):
                flags |= _SMOOTHED
            cmd = smoothed
        return self._emit(cmd, flags)

    def _guard(self, cmd: np.ndarray, reading: Reading) -> tuple[np.ndarray, int]:
        """``cmd`` without efforts/velocities pushing past a position limit or efforts along an
        overspeed (a NaN measurement fires no guard: such a step already holds).
        """
        flags = 0
        # Each guard first asks whether any joint is out at all (the common answer is no, in few
        # operations), then which commands push further out. Comparisons only: a product with an
        # infinite velocity would warn.
        if self._position_guard:
            pos = reading.joint_pos[self._cols]
            high, low = pos >= self.pos_hi, pos <= self.pos_lo
            if _any(high | low):
                outward = (high & (cmd > 0)) | (low & (cmd < 0))
                if _any(outward):
                    cmd = np.where(outward, 0.0, cmd)
                    flags |= _POSITION
        if self._velocity_guard:
            vel = reading.joint_vel[self._cols]
            fast, fast_back = vel > self.vel_lim, vel < self._neg_vel_lim
            if _any(fast | fast_back):
                along = (fast & (cmd > 0)) | (fast_back & (cmd < 0))
                if _any(along):
                    cmd = np.where(along, 0.0, cmd)
                    flags |= _VELOCITY
        return cmd, flags

    def _emit(self, cmd: np.ndarray, flags: int) -> tuple[np.ndarray, int]:
        """Absolute limits, change limit (except at an e-stop), limits again; remember and count."""
        if not _all_finite(cmd):  # an overflow on the way: the safe value (zero, or the last target)
            cmd = np.where(np.isfinite(cmd), cmd, self._prev if self.kind == "joint_pos" else 0.0)
            flags |= _NONFINITE
        bounded = np.minimum(np.maximum(cmd, self.cmd_lo), self.cmd_hi)  # a new array: the input is never changed
        if _any(bounded != cmd):
            flags |= self._abs_flag
        if self._rate_limited and not flags & _ESTOP:
            # The band [prev - max_delta, prev + max_delta]: a joint inside keeps its value bit for
            # bit, one outside moves by exactly max_delta, and no difference of two huge values can
            # overflow.
            limited = np.minimum(np.maximum(bounded, self._prev - self.max_delta), self._prev + self.max_delta)
            if _any(limited != bounded):
                bounded = self._clamp_abs(limited)
                flags |= _RATE
        self._prev = bounded
        self._emitted = True
        if flags:
            self._histogram[flags] = self._histogram.get(flags, 0) + 1
        return bounded.copy(), flags

    def exit_command(self, reading: Reading | None, now: float | None = None) -> tuple[np.ndarray, int]:
        """The damping command on exit, under the change limit (``EXIT``); a latched e-stop stays
        an e-stop (``ESTOP``).
        """
        if self._estopped:
            return self._emit(self._damp(reading), _ESTOP)
        self._state = "exit"
        return self._emit(self._damp(reading), _EXIT)
