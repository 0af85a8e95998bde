"""What the ROS 1 and ROS 2 bridges share, with no ROS import: topics, checks, the parameter file.

Both bridges speak the same topics (names relative to a namespace, default ``/robolearn``):

===================  ===========================================  ==========================
topic                type                                         direction
===================  ===========================================  ==========================
``joint_states``     ``sensor_msgs/JointState``                   robot -> policy
``command``          ``std_msgs/Float64MultiArray`` or             policy -> robot
                     ``trajectory_msgs/JointTrajectory``
``cmd_vel``          ``geometry_msgs/Twist``                      operator -> policy (optional)
``estop``            ``std_msgs/Bool`` (``true`` latches)          anyone -> policy and robot
``policy_status``    ``std_msgs/String`` (JSON)                   policy -> anyone
``robot_status``     ``std_msgs/String`` (JSON)                   robot -> anyone
``reward``           ``std_msgs/Float64``                         simulated robot -> logs
``<camera>/...``     ``sensor_msgs/Image`` or ``CompressedImage``  camera -> policy
===================  ===========================================  ==========================

Cameras. Every camera a robot declares (``RobotFeatures.cameras``, by name) is read from one topic,
image_transport's names by default: ``<namespace>/<camera>/image_raw`` (``sensor_msgs/Image``) or,
when :attr:`Topics.image_transport` says ``compressed`` for it, ``<namespace>/<camera>/image_raw/compressed``
(``sensor_msgs/CompressedImage``, PNG or JPEG). :attr:`Topics.images` names another topic per
camera (relative to the namespace, or absolute). In a parameter file these are
``topics.images.<camera>`` and ``topics.image_transport.<camera>``; on a policy node's command line
``--image-topic CAMERA=TOPIC`` and ``--image-transport CAMERA=raw|compressed``.

A message is checked before it is used (:func:`joint_state_reading`, :func:`command_vector`): a
joint state whose names miss a joint the robot declared, whose arrays disagree in length with its
names, or that holds NaN or infinity is refused with an error naming the topic, the field and the
value; the bridge logs it and keeps its last good reading, so the safety layer's watchdog holds
the robot once that reading goes stale.

:func:`node_parameters` writes the parameter file of a policy node from its manifest and robot
(topics, joints, rate, limits), in the layout ROS 1 (``rosparam load``) and ROS 2
(``--params-file``, under ``<node>: ros__parameters:``) read.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import math
import os
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.sim2real.robots.base import Reading, RobotFeatures

COMMAND_TYPES = ("float64_multi_array", "joint_trajectory")
"""Message types a command topic may use."""
IMAGE_TRANSPORTS = ("raw", "compressed")
"""How a camera's frames travel: ``sensor_msgs/Image`` (``raw``) or ``sensor_msgs/CompressedImage``."""

FASTDDS_SOCKET_BUFFERS_XML = """<?xml version="1.0" encoding="UTF-8" ?>
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <participant profile_name="robolearn_camera_buffers" is_default_profile="true">
    <rtps>
      <sendSocketBufferSize>{size}</sendSocketBufferSize>
      <listenSocketBufferSize>{size}</listenSocketBufferSize>
    </rtps>
  </participant>
</profiles>
"""
"""A Fast DDS profile (``str.format(size=bytes)``; the file named by ``FASTDDS_DEFAULT_PROFILES_FILE``,
Fast DDS 3, or ``FASTRTPS_DEFAULT_PROFILES_FILE``, Fast DDS 2, in every ROS 2 process) giving UDP sockets buffers of ``size`` bytes. Large raw frames over UDP need
it: a best-effort 640x480 rgb8 frame (900 KiB in ~64 KiB fragments) arriving at a socket with
Linux's default 208 KiB buffer loses fragments, and so the frame, nearly every time (Fast DDS 3.2 on
loopback: 0-6 of 60 frames arrived; with 4 MiB buffers 59-60 of 60, ``benchmarks/ros_image_latency.py``).
The profile is ignored under ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (rmw_fastrtps then sets up
its own transport: 1 of 60 arrived); use the default range in a private network (``unshare -n``)
instead (``ROS_LOCALHOST_ONLY=1`` does nothing since Kilted and means that range on Jazzy). The
kernel caps the size at ``net.core.rmem_max``. Small frames (84x84 is 21 KiB) need none of this."""


FASTDDS_LOOPBACK_UDP_XML = """<?xml version="1.0" encoding="UTF-8" ?>
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <transport_descriptors>
    <transport_descriptor>
      <transport_id>robolearn_udp</transport_id>
      <type>UDPv4</type>
      <maxInitialPeersRange>32</maxInitialPeersRange>
    </transport_descriptor>
  </transport_descriptors>
  <participant profile_name="robolearn_udp_localhost" is_default_profile="true">
    <rtps>
      <builtin>
        <metatrafficUnicastLocatorList><locator><udpv4/></locator></metatrafficUnicastLocatorList>
        <initialPeersList>{peers}</initialPeersList>
      </builtin>
      <userTransports><transport_id>robolearn_udp</transport_id></userTransports>
      <useBuiltinTransports>false</useBuiltinTransports>
    </rtps>
  </participant>
</profiles>
"""
"""A Fast DDS profile (``str.format(peers=<locator> elements)``) with what
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` asks of rmw_fastrtps (no multicast listening, 127.0.0.1
and ``ROS_STATIC_PEERS`` as the initial peers, 32 participants per host) over UDP alone:
rmw_fastrtps adds its own shared-memory transport in that range and ignores
``FASTDDS_BUILTIN_TRANSPORTS`` (:func:`control_node_transport` says why that matters)."""

SHM_FREE_BUILTIN_TRANSPORTS = frozenset({"UDPv4", "UDPv6", "NONE"})
"""``FASTDDS_BUILTIN_TRANSPORTS`` values (options after ``?`` dropped) without Fast DDS's
shared-memory transport; every other value has it (``DEFAULT``, ``SHM``, ``LARGE_DATA``, ``P2P``, and a
misspelt one, which Fast DDS reads as ``DEFAULT``: it matches case-sensitively)."""
NOT_LOCALHOST_RANGES = frozenset({"", "OFF", "SUBNET", "SYSTEM_DEFAULT"})
"""``ROS_AUTOMATIC_DISCOVERY_RANGE`` values rcl does not read as ``LOCALHOST`` (unset or empty is
``SUBNET``; any other value, ``localhost`` included, is ``LOCALHOST``)."""


@dataclass(frozen=True)
class NodeTransport:
    """How a ROS 2 robot or policy node's Fast DDS participant is set up (:func:`control_node_transport`)."""

    environ: dict[str, str]
    """Variables to set before rclpy starts."""
    profile: str | None
    """A default profile XML for the participant (:func:`apply_control_transport` writes it and
    names it in ``FASTDDS_DEFAULT_PROFILES_FILE``), or ``None``."""
    summary: str
    """One line for the node's log."""
    shared_memory: bool
    """Whether the participant may still use Fast DDS's shared-memory transport."""


def control_node_transport(environ: Mapping[str, str]) -> NodeTransport:
    """Keep a ROS 2 robot or policy node off Fast DDS's shared-memory transport wherever the user
    left the choice to us.

    Why: a shared-memory write towards a reader whose process just died can wait about a second
    (the port health check) inside ``rcl_publish``, and rclpy keeps the GIL there, so the node's
    whole process stalls with it: a robot node held 1.0 s instead of 0.1 s after its policy's
    SIGKILL (twice in CI), and a policy node would stop commanding for a second when a recorder
    reading its commands dies. A real robot's watchdog lives in its driver; this one lives in the
    node's process and must not depend on a peer. Over UDP a write to a dead reader never waits.

    - Localhost discovery (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, or ``ROS_LOCALHOST_ONLY=1``,
      which ROS 2 Jazzy's rcl reads as that range): rmw_fastrtps then builds its own transports
      (shared memory and UDP) and ignores ``FASTDDS_BUILTIN_TRANSPORTS``, so the range becomes
      ``SYSTEM_DEFAULT`` (and ``ROS_LOCALHOST_ONLY`` 0) with :data:`FASTDDS_LOOPBACK_UDP_XML` as the
      default profile, which discovers the same peers (127.0.0.1 and ``ROS_STATIC_PEERS``) over UDP.
      Where the user chose transports that way (``FASTDDS_BUILTIN_TRANSPORTS`` other than ``UDPv4``)
      or gave a profile file (``FASTDDS_DEFAULT_PROFILES_FILE`` / ``FASTRTPS_DEFAULT_PROFILES_FILE``,
      which cannot be merged with it), nothing changes and the summary says the shared-memory
      transport stays.
    - Otherwise: ``FASTDDS_BUILTIN_TRANSPORTS=UDPv4`` unless the user set it.

    Raises ``ValueError`` naming ``ROS_STATIC_PEERS`` when one of its hosts does not resolve.
    """
    user = environ.get("FASTDDS_BUILTIN_TRANSPORTS")
    user_kind = None if user is None else user.split("?", 1)[0].strip()
    localhost_only = environ.get("ROS_LOCALHOST_ONLY") == "1"
    localhost = localhost_only or environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").strip() not in NOT_LOCALHOST_RANGES
    if not localhost:
        if user is not None:
            return NodeTransport({}, None, f"Fast DDS transports from FASTDDS_BUILTIN_TRANSPORTS={user}",
                                 shared_memory=user_kind not in SHM_FREE_BUILTIN_TRANSPORTS)
        return NodeTransport({"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}, None,
                             "Fast DDS over UDP (FASTDDS_BUILTIN_TRANSPORTS=UDPv4)", shared_memory=False)
    stays = "rmw_fastrtps's shared-memory transport stays (a dead reader can stall a publish ~1 s, the watchdog with it)"
    if user is not None and user_kind != "UDPv4":
        return NodeTransport({}, None, f"localhost discovery, where rmw_fastrtps ignores FASTDDS_BUILTIN_TRANSPORTS="
                             f"{user}: {stays}", shared_memory=True)
    profile_file = environ.get("FASTDDS_DEFAULT_PROFILES_FILE") or environ.get("FASTRTPS_DEFAULT_PROFILES_FILE")
    if profile_file:
        return NodeTransport({}, None, f"localhost discovery with the profile {profile_file}: {stays}",
                             shared_memory=True)
    peers = ["127.0.0.1"]
    for host in filter(None, (h.strip() for h in environ.get("ROS_STATIC_PEERS", "").split(";"))):
        try:
            address = socket.gethostbyname(host)
        except OSError as exc:
            raise ValueError(f"ROS_STATIC_PEERS: cannot resolve {host!r} ({exc}); expected host names or "
                             "IPv4 addresses separated by ';'") from None
        if address not in peers:
            peers.append(address)
    locators = "".join(f"<locator><udpv4><address>{a}</address></udpv4></locator>" for a in peers)
    updates = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT"}
    if localhost_only:
        updates["ROS_LOCALHOST_ONLY"] = "0"
    return NodeTransport(updates, FASTDDS_LOOPBACK_UDP_XML.format(peers=locators),
                         f"Fast DDS over UDP with localhost discovery (peers {', '.join(peers)}; what "
                         "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST discovers, without its shared-memory transport)",
                         shared_memory=False)


def _fastdds_major() -> int | None:
    """Fast DDS's major version where its wheel says it (``ros-fastdds``), else ``None``."""
    try:
        return int(importlib.metadata.version("ros-fastdds").split(".", 1)[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def apply_control_transport(logger: logging.Logger, node: str) -> NodeTransport:
    """Apply :func:`control_node_transport` to this process's environment; call it before rclpy
    starts. Its profile goes to a file named by its content in the temporary directory (written
    atomically and reused, so a node killed by SIGKILL leaves nothing new behind), named in
    ``FASTDDS_DEFAULT_PROFILES_FILE`` and, unless the wheel says Fast DDS 3 (which warns about the
    old name), ``FASTRTPS_DEFAULT_PROFILES_FILE`` for Fast DDS 2. The choice is logged: a warning
    where shared memory stays. ``SystemExit`` naming ``ROS_STATIC_PEERS`` when a peer does not resolve.
    """
    try:
        transport = control_node_transport(os.environ)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    os.environ.update(transport.environ)
    if transport.profile is not None:
        digest = hashlib.sha256(transport.profile.encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"robolearn-fastdds-{digest}.xml"
        if not (path.is_file() and path.read_text() == transport.profile):
            fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "w") as fh:
                os.fchmod(fh.fileno(), 0o644)  # readable by every user's nodes: mkstemp makes it 0600
                fh.write(transport.profile)
            os.replace(tmp, path)
        os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(path)
        if _fastdds_major() != 3:
            os.environ["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(path)
    (logger.warning if transport.shared_memory else logger.info)("%s: %s", node, transport.summary)
    return transport


class MalformedMessage(ValueError):
    """A message that cannot be used (field, value and expectation named)."""


@dataclass(frozen=True)
class Topics:
    """Topic names of one robot, relative to ``namespace``."""

    namespace: str = "/robolearn"
    """Prefix of every topic."""
    joint_states: str = "joint_states"
    """``sensor_msgs/JointState`` from the robot."""
    command: str = "command"
    """Commands to the robot."""
    command_type: str = "float64_multi_array"
    """``float64_multi_array`` or ``joint_trajectory``."""
    cmd_vel: str = ""
    """``geometry_msgs/Twist`` velocity commands (empty: none), fed to the policy as the extra
    reading ``command/<cmd_vel_name>`` as ``[linear.x, linear.y, angular.z]``."""
    cmd_vel_name: str = "base_velocity"
    """The command term the Twist feeds."""
    estop: str = "estop"
    """``std_msgs/Bool`` e-stop."""
    policy_status: str = "policy_status"
    """``std_msgs/String`` status of the policy node."""
    robot_status: str = "robot_status"
    """``std_msgs/String`` status of the robot node."""
    reward: str = "reward"
    """``std_msgs/Float64`` reward of the simulated robot (for checking labelled logs)."""
    images: Mapping[str, str] = field(default_factory=dict)
    """Image topic by camera name; a camera not listed uses ``<camera>/image_raw`` (raw) or
    ``<camera>/image_raw/compressed`` (compressed), image_transport's names."""
    image_transport: Mapping[str, str] = field(default_factory=dict)
    """``raw`` (``sensor_msgs/Image``, the default) or ``compressed`` (``sensor_msgs/CompressedImage``)
    by camera name."""

    def __post_init__(self) -> None:
        """Refuse an unknown command type or image transport."""
        if self.command_type not in COMMAND_TYPES:
            raise ValueError(f"command_type: expected one of {list(COMMAND_TYPES)}, got {self.command_type!r}")
        for what in ("images", "image_transport"):
            if not isinstance(getattr(self, what), Mapping):
                raise ValueError(f"{what}: expected a mapping of camera name to text, got {getattr(self, what)!r}")
        for camera, transport in self.image_transport.items():
            if transport not in IMAGE_TRANSPORTS:
                raise ValueError(f"image_transport.{camera}: expected one of {list(IMAGE_TRANSPORTS)}, got {transport!r}")

    def transport(self, camera: str) -> str:
        """How ``camera``'s frames travel: ``raw`` or ``compressed``."""
        return self.image_transport.get(camera, "raw")

    def image_topic(self, camera: str) -> str:
        """The full name of ``camera``'s image topic (class doc)."""
        topic = self.images.get(camera)
        if not topic:
            topic = f"{camera}/image_raw" + ("/compressed" if self.transport(camera) == "compressed" else "")
        return self.name(topic)

    def name(self, topic: str) -> str:
        """The full name of ``topic`` (an attribute's value) under the namespace."""
        if topic.startswith("/"):
            return topic
        return f"{self.namespace.rstrip('/')}/{topic}"


def joint_state_reading(
    features: RobotFeatures,
    names: Sequence[str],
    position: Sequence[float],
    velocity: Sequence[float],
    effort: Sequence[float],
    stamp: float,
    received: float,
    topic: str = "joint_states",
) -> Reading:
    """A :class:`Reading` of ``features.joints`` from a JointState's fields (any joint order; extra
    joints ignored), or :class:`MalformedMessage` naming what is wrong.
    """
    names = list(names)
    n = len(names)
    for field_name, values in (("position", position), ("velocity", velocity)):
        if len(values) != n:
            raise MalformedMessage(f"{topic}: {field_name} has {len(values)} values for {n} names {names}")
    if len(effort) not in (0, n):
        raise MalformedMessage(f"{topic}: effort has {len(effort)} values for {n} names (expected 0 or {n})")
    index = {name: i for i, name in enumerate(names)}
    missing = [j for j in features.joints if j not in index]
    if missing:
        raise MalformedMessage(f"{topic}: name lacks joints {missing} of robot {features.name!r} (got {names})")
    cols = [index[j] for j in features.joints]
    pos = np.asarray(position, dtype=np.float64)[cols]
    vel = np.asarray(velocity, dtype=np.float64)[cols]
    for field_name, values in (("position", pos), ("velocity", vel)):
        bad = ~np.isfinite(values)
        if bad.any():
            which = [features.joints[i] for i in np.flatnonzero(bad)]
            raise MalformedMessage(f"{topic}: {field_name} of {which} is not finite ({values[bad].tolist()})")
    eff = np.asarray(effort, dtype=np.float64)[cols] if len(effort) else None
    return Reading(stamp=float(stamp), joint_pos=pos, joint_vel=vel, joint_effort=eff, received=float(received))


def command_vector(features: RobotFeatures, values: Sequence[float], names: Sequence[str] | None = None,
                   topic: str = "command") -> np.ndarray:
    """A command ``[len(command_joints)]`` from a message's numbers (with joint ``names`` for a
    trajectory, reordered to the robot's order), or :class:`MalformedMessage`.
    """
    want = features.command_joints
    vals = np.asarray(list(values), dtype=np.float64)
    if names is not None and len(names):
        names = list(names)
        if sorted(names) != sorted(want):
            raise MalformedMessage(f"{topic}: joint_names {names} are not the robot's command joints {list(want)}")
        if len(vals) != len(names):
            raise MalformedMessage(f"{topic}: {len(vals)} values for {len(names)} joint_names")
        vals = vals[[names.index(j) for j in want]]
    if vals.shape != (len(want),):
        raise MalformedMessage(f"{topic}: expected {len(want)} values (one per joint {list(want)}), got {vals.size}")
    if not np.all(np.isfinite(vals)):
        raise MalformedMessage(f"{topic}: non-finite command {vals.tolist()}")
    return vals


TRAJECTORY_FIELD = {"torque": "effort", "joint_pos": "positions", "joint_vel": "velocities"}
"""The ``JointTrajectoryPoint`` field that carries each command kind."""


def parse_command(features: RobotFeatures, msg: Any, topic: str = "command") -> np.ndarray:
    """The command vector in a ``Float64MultiArray`` or ``JointTrajectory`` message (ROS 1 or ROS 2:
    read by field names) in the robot's joint order, or :class:`MalformedMessage` naming the field
    (``command.data``, ``command.points[0].effort``, ``command.joint_names``).
    """
    if hasattr(msg, "points"):
        if len(msg.points) != 1:
            raise MalformedMessage(f"{topic}.points: expected 1 point (the next command), got {len(msg.points)}")
        field = TRAJECTORY_FIELD[features.command_kind]
        names = list(msg.joint_names)
        if sorted(names) != sorted(features.command_joints):
            raise MalformedMessage(f"{topic}.joint_names: {names} are not the robot's command joints "
                                   f"{list(features.command_joints)}")
        return command_vector(features, list(getattr(msg.points[0], field)), names, topic=f"{topic}.points[0].{field}")
    return command_vector(features, list(msg.data), topic=f"{topic}.data")


def status_json(**fields: Any) -> str:
    """A status message's text: one JSON object (numbers rounded for reading)."""
    return json.dumps({k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in fields.items()})


def node_parameters(
    features: RobotFeatures,
    topics: Topics,
    *,
    policy: str = "",
    rate_hz: float | None = None,
    safety: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The parameters of a policy node: topics, the robot's joints and limits, the rate, safety."""
    robot = features.to_dict()
    return {
        "policy": str(policy),
        "rate_hz": float(rate_hz if rate_hz is not None else features.rate_hz),
        "topics": asdict(topics),
        "robot": robot,
        "safety": dict(safety or {}),
    }


def write_parameters(path: str | os.PathLike[str], node: str, params: Mapping[str, Any], ros: int) -> Path:
    """Write ``params`` as a YAML parameter file for ROS ``ros`` (1: a mapping under ``node``; 2:
    ``node: ros__parameters:`` with nested mappings flattened to ``a.b`` keys); atomic.
    """
    import yaml

    if ros not in (1, 2):
        raise ValueError(f"ros: expected 1 or 2, got {ros!r}")
    if ros == 1:
        doc: dict[str, Any] = {node: dict(params)}
    else:
        doc = {node: {"ros__parameters": _flatten(params)}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(doc, fh, sort_keys=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``a.b`` keys (ROS 2 parameters are flat); lists of lists as JSON text."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if value:
                out.update(_flatten(value, f"{name}."))
        elif isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple, Mapping)) for v in value):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def read_parameters(path: str | os.PathLike[str], node: str) -> dict[str, Any]:
    """Read back a parameter file written by :func:`write_parameters` (either layout)."""
    import yaml

    with open(path) as fh:
        doc = yaml.safe_load(fh) or {}
    body = doc.get(node, doc)
    if "ros__parameters" in body:
        flat = body["ros__parameters"]
        nested: dict[str, Any] = {}
        for key, value in flat.items():
            parts = key.split(".")
            node_map = nested
            for p in parts[:-1]:
                node_map = node_map.setdefault(p, {})
            if isinstance(value, str) and value[:1] == "[":
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    pass
            node_map[parts[-1]] = value
        return nested
    return dict(body)
