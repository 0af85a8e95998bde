"""Robot logs in: ROS 1 ``.bag`` and ROS 2 ``.db3``/``.mcap`` recordings as aligned arrays.

Reading goes through the ``rosbags`` library (pure Python; no ROS installation needed), which
opens all three formats with one reader. Two streams matter for a control log:

* **joint states** (``sensor_msgs/JointState``): positions and velocities by joint name, picked in
  the order the caller asks for (any order and extra joints in the message are fine);
* **commands** (``std_msgs/Float64MultiArray``, or ``trajectory_msgs/JointTrajectory`` whose first
  point's ``positions``/``velocities``/``effort`` are the command, by ``joint_names``).

Times are the message header's stamp where the message has one (JointState, JointTrajectory),
else the time the recorder received it. :func:`align` resamples both onto control ticks at a given
rate, ``1 / rate`` apart. Where the joint states come at that rate (their median interval within
10% of the period) the ticks take the **stamps' own phase** (the median of their offsets on the
period's circle): a robot stamps a state a little after its control tick, and a recording that
starts on one late state would otherwise put every tick between two states, mixing two steps in
each. Other logs (irregular, or at another rate) are ticked from their first joint state. On the
ticks, the joint state **interpolated linearly** between the two messages around each tick (a
state is a continuous signal; taking the latest sample instead would lag it by up to one sample
period), and for the step from one tick to the next the command **held** at its end: the latest
command received by then (a command is a step signal the robot applies until the next one arrives;
the one computed from a state reaches the robot after that state was measured, so it drives the
step that follows it). Ticks before the first command are dropped. A gap in the joint states longer
than ``episode_gap_s`` ends an episode; no tick is made inside it.

Camera images (``sensor_msgs/Image``, ``sensor_msgs/CompressedImage``) are read by
:func:`read_images` with a decoder the caller supplies (the ROS image converters live with the ROS
bridge, which this layer may not import; ``robolearn data import-bag`` passes them) and given to
each control tick by :func:`hold_images`: the **latest image stamped at or before the tick** (an
image is a sample taken at its stamp; interpolating pixels would invent a frame, and a later image
would show the policy the future). ``align(..., not_before=...)`` drops the ticks before the first
image, as it drops those before the first command.

Malformed messages are refused with the topic, the message's index and time, the field and what
was expected (wrong joint names, arrays that disagree with the names, NaN/inf, a command of the
wrong width), before anything is written.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

JOINT_STATE = "sensor_msgs/msg/JointState"
FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
COMMAND_TYPES = (FLOAT_ARRAY, TRAJECTORY)
"""Message types a command topic may have."""
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
IMAGE_TYPES = (IMAGE, COMPRESSED_IMAGE)
"""Message types an image topic may have."""
_STAMP_TOL = 1e-9
"""Stamps this close count as equal (float seconds of nanosecond stamps)."""


class BagError(ValueError):
    """A recording that cannot be read or used (topic, message and field named)."""


@dataclass
class JointStates:
    """Joint states of one topic: ``stamps [M]``, ``position [M, J]``, ``velocity [M, J]``."""

    stamps: np.ndarray
    position: np.ndarray
    velocity: np.ndarray


@dataclass
class Commands:
    """Commands of one topic: ``stamps [K]``, ``values [K, A]``."""

    stamps: np.ndarray
    values: np.ndarray


def _stamp(msg: object, fallback_ns: int) -> float:
    """The header stamp in seconds, or the receive time when the message has none (or it is zero)."""
    header = getattr(msg, "header", None)
    if header is not None:
        st = header.stamp
        t = float(st.sec) + 1e-9 * float(st.nanosec)
        if t > 0:
            return t
    return fallback_ns * 1e-9


def read_bag(
    path: str | os.PathLike[str],
    joint_topic: str,
    joints: Sequence[str],
    command_topic: str,
    command_joints: Sequence[str],
    trajectory_field: str = "positions",
    expect: dict[str, str | None] | None = None,
) -> tuple[JointStates, Commands]:
    """Read the joint states of ``joints`` and the commands of ``command_joints`` from a bag
    (``expect``: message types by topic that the bag's must equal; ``None`` entries: any usable).
    """
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    path = Path(path)
    if not path.exists():
        raise BagError(f"bag: {path} does not exist")
    joints = list(joints)
    command_joints = list(command_joints)
    stamps, positions, velocities = [], [], []
    c_stamps, c_values = [], []
    try:
        # Both ROS versions: a ROS 2 bag carries its message definitions; ROS 1 ones do too.
        with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
            topics = {c.topic: c for c in reader.connections}
            for topic, kind in ((joint_topic, (JOINT_STATE,)), (command_topic, COMMAND_TYPES)):
                conn = topics.get(topic)
                if conn is None:
                    raise BagError(f"bag {path.name}: no topic {topic!r} (it has {sorted(topics)})")
                if conn.msgtype not in kind:
                    raise BagError(f"bag {path.name}: topic {topic!r} has type {conn.msgtype}, expected {' or '.join(kind)}")
                want = (expect or {}).get(topic)
                if want is not None and conn.msgtype != want.replace("/msg/", "/").replace("/", "/msg/", 1):
                    raise BagError(f"bag {path.name}: topic {topic!r} has type {conn.msgtype}, the mapping says {want}")
            wanted = [topics[joint_topic], topics[command_topic]]
            j_index = c_index = 0
            for conn, t_ns, raw in reader.messages(connections=wanted):
                msg = reader.deserialize(raw, conn.msgtype)
                if conn.topic == joint_topic:
                    stamp = _stamp(msg, t_ns)
                    pos, vel = _joint_state(msg, joints, f"{joint_topic}[{j_index}] (t={stamp:.6f})")
                    stamps.append(stamp)
                    positions.append(pos)
                    velocities.append(vel)
                    j_index += 1
                else:
                    stamp = _stamp(msg, t_ns)
                    where = f"{command_topic}[{c_index}] (t={stamp:.6f})"
                    c_values.append(_command(msg, conn.msgtype, command_joints, trajectory_field, where))
                    c_stamps.append(stamp)
                    c_index += 1
    except BagError:
        raise
    except Exception as exc:  # a truncated or foreign file: rosbags' own errors, named with the file
        raise BagError(f"bag {path}: cannot be read ({type(exc).__name__}: {exc})") from None
    if len(stamps) < 2:
        raise BagError(f"bag {path.name}: {joint_topic!r} has {len(stamps)} message(s); at least 2 are needed")
    if not c_stamps:
        raise BagError(f"bag {path.name}: {command_topic!r} has no messages")
    js = _sorted(JointStates(np.array(stamps), np.array(positions), np.array(velocities)))
    cmd_order = np.argsort(np.array(c_stamps), kind="stable")
    return js, Commands(np.array(c_stamps)[cmd_order], np.array(c_values).reshape(len(c_stamps), -1)[cmd_order])


def _sorted(js: JointStates) -> JointStates:
    """Joint states in time order (recorders may interleave), duplicates of a stamp dropped."""
    order = np.argsort(js.stamps, kind="stable")
    stamps = js.stamps[order]
    keep = np.concatenate([[True], np.diff(stamps) > 0])
    return JointStates(stamps[keep], js.position[order][keep], js.velocity[order][keep])


def _joint_state(msg: object, joints: list[str], where: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities of ``joints`` from one JointState, checked."""
    names = list(msg.name)  # type: ignore[attr-defined]
    pos = np.asarray(msg.position, dtype=np.float64)  # type: ignore[attr-defined]
    vel = np.asarray(msg.velocity, dtype=np.float64)  # type: ignore[attr-defined]
    if len(pos) != len(names):
        raise BagError(f"{where}: position has {len(pos)} values for {len(names)} names {names}")
    if len(vel) != len(names):
        raise BagError(f"{where}: velocity has {len(vel)} values for {len(names)} names {names} (velocities are needed)")
    missing = [j for j in joints if j not in names]
    if missing:
        raise BagError(f"{where}: name lacks joints {missing} (the mapping's joints; the message has {names})")
    cols = [names.index(j) for j in joints]
    p, v = pos[cols], vel[cols]
    for field, values in (("position", p), ("velocity", v)):
        if not np.isfinite(values).all():
            bad = [joints[i] for i in np.flatnonzero(~np.isfinite(values))]
            raise BagError(f"{where}: {field} of {bad} is not finite ({values.tolist()})")
    return p, v


def _command(msg: object, msgtype: str, joints: list[str], trajectory_field: str, where: str) -> np.ndarray:
    """One command vector in ``joints`` order, checked."""
    if msgtype == FLOAT_ARRAY:
        values = np.asarray(msg.data, dtype=np.float64)  # type: ignore[attr-defined]
    else:
        names = list(msg.joint_names)  # type: ignore[attr-defined]
        points = list(msg.points)  # type: ignore[attr-defined]
        if not points:
            raise BagError(f"{where}: points is empty (a command needs one point)")
        data = np.asarray(getattr(points[0], trajectory_field), dtype=np.float64)
        missing = [j for j in joints if j not in names]
        if missing:
            raise BagError(f"{where}: joint_names lacks {missing} (the mapping's command joints; it has {names})")
        if len(data) != len(names):
            raise BagError(f"{where}: points[0].{trajectory_field} has {len(data)} values for {len(names)} joint_names")
        values = data[[names.index(j) for j in joints]]
    if values.shape != (len(joints),):
        raise BagError(f"{where}: data has {values.size} values, expected {len(joints)} (one per command joint {joints})")
    if not np.isfinite(values).all():
        raise BagError(f"{where}: data is not finite ({values.tolist()})")
    return values


@dataclass
class AlignedLog:
    """A log on control ticks: ``T`` transitions in episodes.

    ``position``/``velocity`` ``[T + E, J]`` hold each episode's ``n + 1`` states (the state after an
    episode's last command included); ``commands [T, A]``; ``episode_lengths [E]``; ``ticks [T + E]``.
    """

    position: np.ndarray
    velocity: np.ndarray
    commands: np.ndarray
    episode_lengths: np.ndarray
    ticks: np.ndarray


_PHASE_RATE_TOL = 0.1
"""Joint states whose median interval is within this share of the period count as coming at the
control rate (their stamps then phase the ticks: :func:`_grid_offset`)."""


def _grid_offset(stamps: np.ndarray, period: float) -> float:
    """Where an episode's first tick lies after its first joint state, in ``[0, period)``.

    For states at the control rate, the median phase of the stamps on the period's circle (taken
    around their circular mean, so a phase near 0 that wraps to near ``period`` still counts as
    near 0): one late state, the first included, does not move the grid. ``0`` (the first state)
    for fewer than 3 states or states at another rate.
    """
    if len(stamps) < 3:
        return 0.0
    if abs(float(np.median(np.diff(stamps))) - period) > _PHASE_RATE_TOL * period:
        return 0.0
    angles = 2.0 * math.pi * np.mod(stamps - stamps[0], period) / period
    centre = math.atan2(float(np.sin(angles).sum()), float(np.cos(angles).sum()))
    deviation = np.angle(np.exp(1j * (angles - centre)))  # wrapped into (-pi, pi]
    phase = (centre + float(np.median(deviation))) % (2.0 * math.pi)
    offset = phase / (2.0 * math.pi) * period
    # Within a stamp's rounding of 0 or of the period, the first state is on the grid.
    return 0.0 if offset <= _STAMP_TOL or period - offset <= _STAMP_TOL else offset


def align(js: JointStates, cmds: Commands, rate_hz: float, episode_gap_s: float | None = None,
          max_steps: int | None = None, not_before: float | None = None) -> AlignedLog:
    """Resample onto ticks ``1 / rate_hz`` apart, phased on the joint states' stamps where they come
    at that rate and from the first joint state otherwise (module doc); ticks before ``not_before`` (the first image's stamp, when images are imported) are dropped.
    """
    if not rate_hz > 0:
        raise BagError(f"rate_hz: expected a positive rate, got {rate_hz!r}")
    period = 1.0 / rate_hz
    gap = episode_gap_s if episode_gap_s is not None else max(5 * period, 0.25)
    t = js.stamps
    breaks = np.flatnonzero(np.diff(t) > gap)
    segments = np.split(np.arange(len(t)), breaks + 1)
    pos_out, vel_out, cmd_out, lengths, tick_out = [], [], [], [], []
    total = 0
    for seg in segments:
        start, end = t[seg[0]] + _grid_offset(t[seg], period), t[seg[-1]]
        ticks = start + period * np.arange(int(math.floor((end - start) / period + 1e-9)) + 1)
        held_all = np.searchsorted(cmds.stamps, ticks[1:], side="right") - 1
        first = int(np.argmax(held_all >= 0)) if (held_all >= 0).any() else len(ticks)
        if not_before is not None:  # the tick's observation needs an image taken by then
            first = max(first, int(np.searchsorted(ticks, not_before - _STAMP_TOL, side="left")))
        ticks = ticks[first:]  # a step needs a command: drop the ticks before the first one
        n_ticks = len(ticks)
        if n_ticks < 2:
            continue
        if max_steps is not None:
            n_ticks = min(n_ticks, max_steps - total + 1)
            if n_ticks < 2:
                break
            ticks = ticks[:n_ticks]
        ts = t[seg]
        pos = np.stack([np.interp(ticks, ts, js.position[seg, j]) for j in range(js.position.shape[1])], axis=1)
        vel = np.stack([np.interp(ticks, ts, js.velocity[seg, j]) for j in range(js.velocity.shape[1])], axis=1)
        held = np.searchsorted(cmds.stamps, ticks[1:], side="right") - 1
        pos_out.append(pos)
        vel_out.append(vel)
        cmd_out.append(cmds.values[held])
        lengths.append(n_ticks - 1)
        tick_out.append(ticks)
        total += n_ticks - 1
        if max_steps is not None and total >= max_steps:
            break
    if not lengths:
        after = "the first command" + (f" and the first image (t={not_before:.6f})" if not_before is not None else "")
        raise BagError(f"the joint states give no episode of 2 or more ticks at {rate_hz:g} Hz (after {after})")
    return AlignedLog(np.concatenate(pos_out), np.concatenate(vel_out), np.concatenate(cmd_out),
                      np.array(lengths, dtype=np.int64), np.concatenate(tick_out))



@dataclass
class Images:
    """Images of one topic in time order: ``stamps [M]``, ``frames [M, H, W, C]`` uint8."""

    stamps: np.ndarray
    frames: np.ndarray


ImageDecoder = Callable[[object, str, str], np.ndarray]
"""``decode(msg, msgtype, where) -> [H, W, C] uint8``; raises ``ValueError`` naming what is wrong
(prefixed with ``where``: the topic, message index and stamp)."""


def read_images(path: str | os.PathLike[str], topic: str, decode: ImageDecoder, expect: str | None = None) -> Images:
    """Every image of ``topic`` decoded by ``decode``, in stamp order (header stamps; duplicates of a
    stamp dropped); all frames must have one shape and be uint8. ``expect``: the type the bag's must be.
    """
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    path = Path(path)
    if not path.exists():
        raise BagError(f"bag: {path} does not exist")
    stamps: list[float] = []
    frames: list[np.ndarray] = []
    try:
        with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
            topics = {c.topic: c for c in reader.connections}
            conn = topics.get(topic)
            if conn is None:
                raise BagError(f"bag {path.name}: no image topic {topic!r} (it has {sorted(topics)})")
            if conn.msgtype not in IMAGE_TYPES:
                raise BagError(f"bag {path.name}: topic {topic!r} has type {conn.msgtype}, expected {' or '.join(IMAGE_TYPES)}")
            if expect is not None and conn.msgtype != expect.replace("/msg/", "/").replace("/", "/msg/", 1):
                raise BagError(f"bag {path.name}: topic {topic!r} has type {conn.msgtype}, the mapping says {expect}")
            for index, (c, t_ns, raw) in enumerate(reader.messages(connections=[conn])):
                msg = reader.deserialize(raw, c.msgtype)
                stamp = _stamp(msg, t_ns)
                where = f"{topic}[{index}] (t={stamp:.6f})"
                try:
                    frame = np.asarray(decode(msg, c.msgtype, where))
                except ValueError as exc:
                    msg_text = str(exc)
                    raise BagError(msg_text if msg_text.startswith(where) else f"{where}: {msg_text}") from None
                if frame.dtype != np.uint8 or frame.ndim != 3:
                    raise BagError(f"{where}: decoded to {frame.dtype} {tuple(frame.shape)}, expected uint8 [H, W, C]")
                if frames and frame.shape != frames[0].shape:
                    raise BagError(f"{where}: image of shape {tuple(frame.shape)}, the topic's first was {tuple(frames[0].shape)}")
                stamps.append(stamp)
                frames.append(frame)
    except BagError:
        raise
    except Exception as exc:  # a truncated or foreign file: rosbags' own errors, named with the file
        raise BagError(f"bag {path}: cannot be read ({type(exc).__name__}: {exc})") from None
    if not frames:
        raise BagError(f"bag {path.name}: image topic {topic!r} has no messages")
    t = np.array(stamps)
    order = np.argsort(t, kind="stable")
    t = t[order]
    keep = np.concatenate([[True], np.diff(t) > 0])
    return Images(t[keep], np.stack(frames)[order][keep])


def hold_images(images: Images, ticks: np.ndarray, max_age_s: float | None = None,
                topic: str = "image") -> tuple[np.ndarray, float]:
    """For each tick, the index of the latest image stamped at or before it, and the oldest such
    image's age in seconds; :class:`BagError` for a tick before the first image or (``max_age_s``)
    one whose latest image is older than that (a stalled camera).
    """
    idx = np.searchsorted(images.stamps, np.asarray(ticks) + _STAMP_TOL, side="right") - 1
    if (idx < 0).any():
        first = float(np.asarray(ticks)[int(np.argmax(idx < 0))])
        raise BagError(f"{topic}: no image at or before the tick t={first:.6f} (the first image is at "
                       f"t={images.stamps[0]:.6f}); align with not_before=<first image stamp>")
    age = np.asarray(ticks) - images.stamps[idx]
    worst = int(np.argmax(age))
    if max_age_s is not None and age[worst] > max_age_s + _STAMP_TOL:
        raise BagError(f"{topic}: at the tick t={float(ticks[worst]):.6f} the latest image is {age[worst]:.4f} s old "
                       f"(max_age_s {max_age_s:g}; taken at t={images.stamps[idx[worst]]:.6f})")
    return idx, float(age[worst])
