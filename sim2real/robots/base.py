"""The ``Robot`` interface: what a deploy runtime needs from any robot, simulated or real.

A robot declares its features once (:class:`RobotFeatures`: joint names and order, what its
commands mean, its control rate, its limits and default pose, the extra readings it offers), then
hands out timestamped :class:`Reading` objects and accepts commands in physical units (``send``
returns what was actually sent, after the robot's own clamping). Everything is NumPy ``float64``
on the host: a robot is one machine, and a runtime step must cost microseconds, not a device sync.

Implementations: :class:`~robolearn.sim2real.robots.sim.SimulatedRobot` (one MuJoCo world of a
task), :class:`~robolearn.sim2real.robots.ros1.Ros1Robot` and
:class:`~robolearn.sim2real.robots.ros2.Ros2Robot` (a robot behind ROS topics). The layout follows
LeRobot's ``Robot`` (declared observation and action features, ``connect``/``disconnect``,
``send_action`` returning what was sent), with joint limits that a safety layer can enforce.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import numpy as np

CommandKind = Literal["torque", "joint_pos", "joint_vel"]
"""What a command's numbers are: motor efforts, joint position targets or joint velocity targets
(the action kinds of :class:`robolearn.spec.ActionTermSpec`)."""
COMMAND_KINDS: tuple[str, ...] = ("torque", "joint_pos", "joint_vel")
"""The command kinds a robot may declare."""


class RobotError(RuntimeError):
    """A robot that is not connected, lost its connection, or refused a command."""


class RobotSpecError(ValueError):
    """A robot description with a missing, malformed or inconsistent field (named, with its value)."""


CAMERA_ENCODINGS: dict[str, int] = {"rgb8": 3, "mono8": 1}
"""Pixel encodings a camera may declare, with their channels (names as in ``sensor_msgs/Image``).
A frame handed to the runtime is always ``uint8`` in this encoding: RGB order for colour."""


@dataclass(frozen=True)
class CameraFeature:
    """One camera a robot carries, as it delivers frames to the runtime (before any preprocessing:
    the policy's manifest says how a frame is resized, converted and cropped).
    """

    height: int
    """Rows of a delivered frame."""
    width: int
    """Columns of a delivered frame."""
    encoding: str = "rgb8"
    """Pixel encoding of a delivered frame (a key of :data:`CAMERA_ENCODINGS`)."""
    rate_hz: float | None = None
    """Frames per second the camera is expected to deliver (informative; ``None``: unknown)."""

    def __post_init__(self) -> None:
        """Validate the size and encoding, naming the field."""
        for name in ("height", "width"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise RobotSpecError(f"camera.{name}: expected an integer >= 1, got {v!r}")
        if self.encoding not in CAMERA_ENCODINGS:
            raise RobotSpecError(f"camera.encoding: expected one of {list(CAMERA_ENCODINGS)}, got {self.encoding!r}")
        if self.rate_hz is not None and not (math.isfinite(self.rate_hz) and self.rate_hz > 0):
            raise RobotSpecError(f"camera.rate_hz: expected a positive number or None, got {self.rate_hz!r}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(H, W, C)`` of a delivered frame."""
        return (self.height, self.width, CAMERA_ENCODINGS[self.encoding])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping, read back by :meth:`from_dict`."""
        return {"height": self.height, "width": self.width, "encoding": self.encoding, "rate_hz": self.rate_hz}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "camera") -> CameraFeature:
        """Read :meth:`to_dict`'s mapping, naming a missing or unknown field."""
        if not isinstance(data, Mapping):
            raise RobotSpecError(f"{where}: expected a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - {"height", "width", "encoding", "rate_hz"})
        if unknown:
            raise RobotSpecError(f"{where}: unknown fields {unknown} (expected height, width, encoding, rate_hz)")
        for key in ("height", "width"):
            if key not in data:
                raise RobotSpecError(f"{where}.{key}: missing")
        try:
            return cls(height=data["height"], width=data["width"], encoding=data.get("encoding", "rgb8"),
                       rate_hz=None if data.get("rate_hz") is None else float(data["rate_hz"]))
        except RobotSpecError as e:
            raise RobotSpecError(str(e).replace("camera.", f"{where}.", 1)) from None


@dataclass
class CameraFrame:
    """One camera image as the runtime receives it."""

    image: np.ndarray
    """``[H, W, C]`` ``uint8`` pixels in the camera's declared encoding (RGB order for colour)."""
    stamp: float
    """When the image was taken (seconds; the message header's time for a ROS camera)."""
    received: float | None = None
    """When the runtime got it (``time.monotonic()``), for staleness; ``None``: at ``stamp``."""

    @property
    def age_reference(self) -> float:
        """The time staleness is measured from: receipt when known, else the stamp."""
        return self.stamp if self.received is None else self.received


def _floats(values: Sequence[Any], n: int, where: str) -> tuple[float, ...]:
    """``values`` as ``n`` floats (``"inf"`` strings allowed), or an error naming ``where``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise RobotSpecError(f"{where}: expected a list of {n} numbers, got {values!r}")
    if len(values) != n:
        raise RobotSpecError(f"{where}: expected {n} values (one per command joint), got {len(values)}")
    out = []
    for i, v in enumerate(values):
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise RobotSpecError(f"{where}[{i}]: expected a number, got {v!r}") from None
        if math.isnan(x):
            raise RobotSpecError(f"{where}[{i}]: expected a number, got NaN")
        out.append(x)
    return tuple(out)


@dataclass(frozen=True)
class RobotFeatures:
    """What a robot measures and accepts, declared once; the deploy runtime checks a policy's
    manifest against it before anything moves (:func:`robolearn.sim2real.deploy.check_robot`).
    """

    name: str
    """The robot's name (a task id for a simulated robot; anything for a real one)."""
    joints: tuple[str, ...]
    """Measured joints, in the order of :attr:`Reading.joint_pos` / ``joint_vel`` / ``joint_effort``."""
    command_joints: tuple[str, ...]
    """Commanded joints, in the order of a command vector."""
    command_kind: CommandKind
    """What a command's numbers mean (``torque``: actuator effort in the actuator's unit;
    ``joint_pos``: position targets; ``joint_vel``: velocity targets)."""
    rate_hz: float
    """Commands per second the robot expects."""
    position_limits: tuple[tuple[float, float], ...]
    """Per command joint, ``(low, high)`` joint position (``-inf``/``inf``: unlimited)."""
    velocity_limits: tuple[float, ...]
    """Per command joint, the largest joint speed (``inf``: unlimited)."""
    effort_limits: tuple[float, ...]
    """Per command joint, the largest effort command, in the command's unit (``inf``: unlimited)."""
    default_pose: tuple[float, ...]
    """Per command joint, the position a staged start ramps to and a hold keeps."""
    extras: Mapping[str, int] = field(default_factory=dict)
    """Extra readings beyond joint state, by name, with their width (an IMU, a velocity command)."""
    units: Mapping[str, str] = field(default_factory=dict)
    """Unit of each reading or per joint (``{"slider": "m", "hinge": "rad"}``); informative."""
    cameras: Mapping[str, CameraFeature] = field(default_factory=dict)
    """Cameras by name; each reading carries the newest frame of each in :attr:`Reading.images`."""

    def __post_init__(self) -> None:
        """Validate lengths, kinds and ranges, naming the field."""
        where = f"robot {self.name!r}"
        if self.command_kind not in COMMAND_KINDS:
            raise RobotSpecError(f"{where}.command_kind: expected one of {list(COMMAND_KINDS)}, got {self.command_kind!r}")
        if not (isinstance(self.rate_hz, (int, float)) and math.isfinite(self.rate_hz) and self.rate_hz > 0):
            raise RobotSpecError(f"{where}.rate_hz: expected a positive number, got {self.rate_hz!r}")
        for name in ("joints", "command_joints"):
            joints = getattr(self, name)
            if len(set(joints)) != len(joints):
                raise RobotSpecError(f"{where}.{name}: joint names repeat: {list(joints)}")
        missing = [j for j in self.command_joints if j not in self.joints]
        if missing:
            raise RobotSpecError(f"{where}.command_joints: {missing} are not measured joints {list(self.joints)}")
        n = len(self.command_joints)
        if len(self.position_limits) != n:
            raise RobotSpecError(f"{where}.position_limits: expected {n} (low, high) pairs, got {len(self.position_limits)}")
        for i, pair in enumerate(self.position_limits):
            lo, hi = _floats(pair, 2, f"{where}.position_limits[{i}]")
            if lo > hi:
                raise RobotSpecError(f"{where}.position_limits[{i}]: low {lo} is above high {hi}")
        for name in ("velocity_limits", "effort_limits"):
            for i, v in enumerate(_floats(getattr(self, name), n, f"{where}.{name}")):
                if v <= 0:
                    raise RobotSpecError(f"{where}.{name}[{i}]: expected a positive limit, got {v}")
        _floats(self.default_pose, n, f"{where}.default_pose")

    @property
    def period(self) -> float:
        """Seconds per command."""
        return 1.0 / self.rate_hz

    @property
    def command_index(self) -> np.ndarray:
        """Column of each command joint in the measured joints (``int64``)."""
        return np.array([self.joints.index(j) for j in self.command_joints], dtype=np.int64)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (infinities as ``"inf"``/``"-inf"``), read back by :meth:`from_dict`."""

        def plain(x: Any) -> Any:
            if isinstance(x, float) and math.isinf(x):
                return "inf" if x > 0 else "-inf"
            if isinstance(x, (list, tuple)):
                return [plain(v) for v in x]
            return x

        return {
            "name": self.name,
            "joints": list(self.joints),
            "command_joints": list(self.command_joints),
            "command_kind": self.command_kind,
            "rate_hz": self.rate_hz,
            "position_limits": plain(self.position_limits),
            "velocity_limits": plain(self.velocity_limits),
            "effort_limits": plain(self.effort_limits),
            "default_pose": list(self.default_pose),
            "extras": dict(self.extras),
            "units": dict(self.units),
            **({"cameras": {k: c.to_dict() for k, c in self.cameras.items()}} if self.cameras else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "robot") -> RobotFeatures:
        """Read :meth:`to_dict`'s mapping (a robot description file), naming a missing or bad field."""
        if not isinstance(data, Mapping):
            raise RobotSpecError(f"{where}: expected a mapping, got {type(data).__name__}")
        known = {"name", "joints", "command_joints", "command_kind", "rate_hz", "position_limits",
                 "velocity_limits", "effort_limits", "default_pose", "extras", "units", "cameras"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RobotSpecError(f"{where}: unknown fields {unknown} (expected {sorted(known)})")
        for key in ("name", "joints", "command_kind", "rate_hz"):
            if key not in data:
                raise RobotSpecError(f"{where}.{key}: missing")
        joints = tuple(str(j) for j in data["joints"])
        cmd = tuple(str(j) for j in data.get("command_joints", joints))
        n = len(cmd)
        inf = math.inf
        try:
            rate = float(data["rate_hz"])
        except (TypeError, ValueError):
            raise RobotSpecError(f"{where}.rate_hz: expected a positive number, got {data['rate_hz']!r}") from None
        limits = data.get("position_limits", [[-inf, inf]] * n)
        return cls(
            name=str(data["name"]),
            joints=joints,
            command_joints=cmd,
            command_kind=data["command_kind"],
            rate_hz=rate,
            position_limits=tuple(_floats(p, 2, f"{where}.position_limits[{i}]") for i, p in enumerate(limits)),
            velocity_limits=_floats(data.get("velocity_limits", [inf] * n), n, f"{where}.velocity_limits"),
            effort_limits=_floats(data.get("effort_limits", [inf] * n), n, f"{where}.effort_limits"),
            default_pose=_floats(data.get("default_pose", [0.0] * n), n, f"{where}.default_pose"),
            extras={str(k): int(v) for k, v in dict(data.get("extras", {})).items()},
            units={str(k): str(v) for k, v in dict(data.get("units", {})).items()},
            cameras={str(k): CameraFeature.from_dict(v, f"{where}.cameras.{k}")
                     for k, v in dict(data.get("cameras", {})).items()},
        )


@dataclass
class Reading:
    """One measurement of the robot, stamped when it was taken (seconds on the robot's monotonic
    clock for a local robot; the message header's time for a ROS robot).
    """

    stamp: float
    """When the state was measured (seconds)."""
    joint_pos: np.ndarray
    """``[J]`` positions of :attr:`RobotFeatures.joints`, in that order."""
    joint_vel: np.ndarray
    """``[J]`` velocities."""
    joint_effort: np.ndarray | None = None
    """``[J]`` measured efforts, when the robot reports them."""
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    """Extra readings by name (``RobotFeatures.extras``), ``[width]`` each."""
    received: float | None = None
    """When the runtime got it (``time.monotonic()``), for staleness; ``None``: at ``stamp``."""
    images: dict[str, CameraFrame] = field(default_factory=dict)
    """Newest frame of each camera (:attr:`RobotFeatures.cameras`) by name; a camera that has not
    delivered yet is absent. Each frame carries its own stamp: a camera's staleness is its own."""

    @property
    def age_reference(self) -> float:
        """The time staleness is measured from: receipt when known, else the stamp."""
        return self.stamp if self.received is None else self.received


class Robot(ABC):
    """A robot the deploy runtime drives: declared features, timestamped readings, commands.

    Use it as a context manager (``with robot: ...``) so it is disconnected, and left safe, on any
    exit. ``read`` and ``send`` on a robot that is not connected raise :class:`RobotError`.
    """

    features: RobotFeatures
    """What the robot measures and accepts (set by the implementation's constructor)."""

    @abstractmethod
    def connect(self) -> None:
        """Open the connection (start the simulation, subscribe to topics); idempotent."""

    @abstractmethod
    def disconnect(self) -> None:
        """Close the connection; idempotent, and safe to call after a failure."""

    @property
    @abstractmethod
    def is_connected(self) -> bool:
        """Whether :meth:`read` and :meth:`send` may be called."""

    @abstractmethod
    def read(self) -> Reading | None:
        """The newest reading (``None`` when none has arrived yet)."""

    @abstractmethod
    def send(self, command: np.ndarray) -> np.ndarray:
        """Send a ``[len(command_joints)]`` command in physical units; return what was actually sent
        (after the robot's own clamping).
        """

    def __enter__(self) -> Robot:
        """Connect and return the robot."""
        self.connect()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Disconnect, whatever happened inside the block."""
        self.disconnect()
