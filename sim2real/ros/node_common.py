"""What the ROS 1 and ROS 2 nodes share beyond messages: no ROS import here either.

* Python's thread switch interval for a node's threads (:data:`SWITCH_INTERVAL_S`);
* bad input logged without flooding (:class:`ThrottledLog`);
* robot descriptions from files (:func:`load_features`), task overrides from the command line
  (:func:`parse_overrides`), the policy node's settings from flags and a parameter file
  (:func:`policy_settings`);
* the status messages' contents (:func:`policy_status`, :func:`robot_status`) and what a
  policy node writes when it stops (:func:`finish_policy`);
* atomic files (:func:`write_text_atomic`, :func:`save_commands`) and logging to stderr;
* the simulated robot node's body (:class:`RobotNode`), whose ticks go out from a publishing thread
  (:class:`TickPublisher`) so that the stepping thread and its watchdog never wait on the transport.

The ROS-specific halves are :mod:`robolearn.sim2real.ros.ros1` / ``ros1_*_node`` (rospy) and
:mod:`robolearn.sim2real.ros.ros2` / ``ros2_*_node`` (rclpy).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import yaml

from robolearn.sim2real.deploy.runtime import DeployRuntime
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig
from robolearn.sim2real.robots.base import (
    CameraFrame,
    Reading,
    Robot,
    RobotError,
    RobotFeatures,
)
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.sim2real.ros.common import (
    IMAGE_TRANSPORTS,
    MalformedMessage,
    Topics,
    joint_state_reading,
    read_parameters,
    status_json,
)
from robolearn.sim2real.ros.images import camera_image

LOG_FORMAT = "[%(name)s][%(levelname)s] %(asctime)s: %(message)s"
"""Log lines as the ROS loggers write them."""
SWITCH_INTERVAL_S = 0.0005
"""Python's thread switch interval in a node (``sys.setswitchinterval``). The control loop shares
the interpreter with the ROS client's receive and send threads (and a simulated robot's stepping
thread); at Python's default 5 ms a thread holding the GIL can keep the loop waiting past its
deadline (ROS 1 at 500 Hz on 2 loaded cores: p99 period jitter 0.6-1.2 ms at 5 ms, 0.002-0.003 ms
at 0.5 ms; benchmarks/ros_loop.py)."""


def log_to_stderr(fmt: str = LOG_FORMAT) -> None:
    """Send robolearn's log records to stderr (a ROS client may replace the root logger's handlers)."""
    logger = logging.getLogger("robolearn")
    if not any(getattr(h, "robolearn_stderr", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(fmt))
        handler.robolearn_stderr = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class ThrottledLog:
    """Errors of bad input, logged without flooding: a new kind of error at once, the same kind at
    most every ``every_s`` seconds (with how many came meanwhile); every one is counted.
    """

    def __init__(self, logger: logging.Logger, what: str, every_s: float = 1.0) -> None:
        """Log to ``logger``, describing each error as ``what`` (``"malformed joint_states"``)."""
        self.logger = logger
        self.what = what
        self.every_s = float(every_s)
        self.count = 0
        """Errors seen."""
        self.last_error = ""
        """The newest error's text."""
        self._last_logged: dict[str, float] = {}
        self._since: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, error: str) -> None:
        """Count ``error`` and log it unless its kind was logged within ``every_s``."""
        # The kind: the topic and field before the first colon and the word after it, not the
        # values, which differ from message to message.
        head, _, rest = error.partition(":")
        key = f"{head}:{rest.split(None, 1)[0] if rest.strip() else ''}"
        now = time.monotonic()
        with self._lock:
            self.count += 1
            self.last_error = error
            self._since[key] = self._since.get(key, 0) + 1
            if now - self._last_logged.get(key, -math.inf) < self.every_s:
                return
            n = self._since.pop(key)
            self._last_logged[key] = now
        more = f" ({n} like it since the last report)" if n > 1 else ""
        self.logger.error("%s rejected: %s%s; %d rejected in all", self.what, error, more, self.count)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``key=value`` task-config overrides (values read as YAML), naming a malformed one."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--override: expected key=value, got {item!r}")
        key, text = item.split("=", 1)
        out[key] = yaml.safe_load(text)
    return out


def tune_process(args: argparse.Namespace, logger: logging.Logger) -> None:
    """Apply ``--switch-interval`` and ``--fifo-priority`` before any thread starts (threads inherit
    the scheduling). Real-time scheduling keeps other processes from taking the CPU from the loop:
    under load it is what holds the period jitter under a millisecond (benchmarks/ros2_loop.py).
    """
    sys.setswitchinterval(args.switch_interval)
    priority = int(getattr(args, "fifo_priority", 0) or 0)
    if priority:
        if not 1 <= priority <= 99:
            raise SystemExit(f"--fifo-priority: expected 1-99 (or 0: the default scheduler), got {priority}")
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (PermissionError, OSError) as exc:
            logger.warning("--fifo-priority %d: not allowed here (%s); staying on the default scheduler", priority, exc)
        else:
            logger.info("running under SCHED_FIFO priority %d", priority)


def load_features(source: str, where: str = "--robot") -> RobotFeatures:
    """Robot features from a JSON or YAML file, naming the file when it is unreadable or malformed."""
    path = Path(source)
    if not path.is_file():
        raise SystemExit(f"{where}: {path} is not a file (give a robot features .json/.yaml)")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SystemExit(f"{where}: {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
    return RobotFeatures.from_dict(data, f"{where}={path}")


def _add_process_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags that tune a node's process (:func:`tune_process`)."""
    p.add_argument("--switch-interval", type=float, default=SWITCH_INTERVAL_S,
                   help="Python's thread switch interval in seconds (sys.setswitchinterval)")
    p.add_argument("--fifo-priority", type=int, default=0,
                   help="run under SCHED_FIFO at this priority (1-99; needs CAP_SYS_NICE), as a robot's control "
                        "computer would; 0: the default scheduler")
    return p


def add_policy_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The policy node's flags, the same for both ROS versions."""
    p.add_argument("--policy", default=None, help="exported policy folder (manifest.json + network)")
    p.add_argument("--robot", default=None, help="robot features file (.json/.yaml), or 'from-params'/'from-topic'")
    p.add_argument("--params", default=None, help="parameter file (common.write_parameters, node 'policy')")
    p.add_argument("--namespace", default=None, help="topic namespace (default /robolearn)")
    p.add_argument("--command-type", default=None, choices=["float64_multi_array", "joint_trajectory"])
    p.add_argument("--rate", type=float, default=None, help="control rate in Hz (default: the manifest's)")
    p.add_argument("--safety", default=None, help="SafetyConfig fields as a JSON object")
    p.add_argument("--lost-timeout", type=float, default=0.5,
                   help="reading age (s) after which the robot counts as lost and nothing is sent")
    p.add_argument("--format", default="onnx", choices=["onnx", "torchscript"])
    p.add_argument("--telemetry", default=None, help="save the telemetry dataset here on exit (.h5)")
    p.add_argument("--summary", default=None, help="write the loop's summary (JSON) here on exit")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until SIGINT/SIGTERM)")
    p.add_argument("--wait", type=float, default=30.0,
                   help="seconds to wait for the robot's features and its first reading")
    p.add_argument("--sampler-seed", type=int, default=0, help="chunked generative policies: seed of the sampler noise")
    p.add_argument("--sampler-noise", default="normal", choices=["normal", "zero"],
                   help="chunked generative policies: standard normal sampler noise, or zeros (deterministic)")
    p.add_argument("--image-topic", action="append", default=[], metavar="CAMERA=TOPIC",
                   help="a camera's image topic (default <namespace>/<camera>/image_raw[/compressed])")
    p.add_argument("--image-transport", action="append", default=[], metavar="CAMERA=raw|compressed",
                   help="a camera's frames as sensor_msgs/Image (raw, the default) or CompressedImage")
    p.add_argument("--camera", action="append", default=[], metavar="INPUT=CAMERA",
                   help="image policies: the robot camera an image input reads (default: the camera its image "
                        "term was rendered from)")
    return _add_process_arguments(p)


def add_robot_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The simulated robot node's flags, the same for both ROS versions."""
    p.add_argument("--task", required=True, help="registered task id, e.g. Cartpole-Balance")
    p.add_argument("--namespace", default="/robolearn", help="topic namespace (default /robolearn)")
    p.add_argument("--command-type", default="float64_multi_array", choices=["float64_multi_array", "joint_trajectory"])
    p.add_argument("--command-timeout", type=float, default=0.1, help="seconds without a good command before holding")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hold-kd", type=float, default=1.0, help="damping gain of the torque hold")
    p.add_argument("--features-out", default=None, help="write the robot's features (JSON) here")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="task-config override (robolearn.make keyword), e.g. timestep=0.005")
    p.add_argument("--command-log", default=None, help="save received commands and their times (.npz) on exit")
    p.add_argument("--wait-for-policy", type=float, default=0.0,
                   help="seconds to wait for a command publisher; then the world stands still (its readings "
                        "published) until the first command (0: start at once)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until SIGINT/SIGTERM)")
    p.add_argument("--images", action="store_true",
                   help="publish the frames of a pixel task's cameras (its image observation group) on "
                        "<namespace>/<camera>/image_raw (declared in the robot's features)")
    p.add_argument("--image-transport", default="raw", choices=["raw", "compressed"],
                   help="frames as sensor_msgs/Image (raw) or PNG sensor_msgs/CompressedImage on "
                        "<namespace>/<camera>/image_raw/compressed")
    p.add_argument("--image-every", type=int, default=1, help="publish frames every this many control steps")
    return _add_process_arguments(p)


def _camera_options(items: list[str], flag: str, check: Callable[[str], None] | None = None) -> dict[str, str]:
    """``CAMERA=VALUE`` flags as a mapping, naming a malformed one."""
    out: dict[str, str] = {}
    for item in items:
        camera, sep, value = item.partition("=")
        if not sep or not camera or not value:
            raise SystemExit(f"{flag}: expected CAMERA=VALUE, got {item!r}")
        if check is not None:
            check(value)
        out[camera] = value
    return out


@dataclass
class PolicySettings:
    """A policy node's settings after flags and the parameter file are merged."""

    topics: Topics
    policy_dir: str
    rate: float | None
    safety: SafetyConfig
    params: dict[str, Any]
    cameras: dict[str, str] = field(default_factory=dict)
    """``{image input: robot camera}`` (``--camera``, the parameter file's ``cameras``)."""


def policy_settings(args: argparse.Namespace, node: str) -> PolicySettings:
    """Merge the parameter file (defaults) with the flags (which win); every bad value named."""
    params: dict[str, Any] = {}
    if args.params:
        params = read_parameters(args.params, node)
        if not {"topics", "robot", "policy"} & set(params) and len(params) == 1:
            params = dict(next(iter(params.values())))  # a file written for another node name
    topic_fields = dict(params.get("topics") or {})
    if args.namespace is not None:
        topic_fields["namespace"] = args.namespace
    if args.command_type is not None:
        topic_fields["command_type"] = args.command_type

    def transport(value: str) -> None:
        if value not in IMAGE_TRANSPORTS:
            raise SystemExit(f"--image-transport: expected raw or compressed, got {value!r}")

    for key, attr, flag, check in (("images", "image_topic", "--image-topic", None),
                                   ("image_transport", "image_transport", "--image-transport", transport)):
        given = _camera_options(list(getattr(args, attr, None) or []), flag, check)
        if given:
            topic_fields[key] = {**dict(topic_fields.get(key) or {}), **given}
    try:
        topics = Topics(**topic_fields)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"--params: topics: {exc}") from None
    policy_dir = args.policy or params.get("policy")
    if not policy_dir:
        raise SystemExit("--policy: missing (give the exported policy folder, or 'policy' in --params)")
    rate = args.rate if args.rate is not None else params.get("rate_hz")
    safety_fields = dict(params.get("safety") or {})
    if args.safety:
        try:
            safety_fields.update(json.loads(args.safety))
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--safety: expected a JSON object, got {args.safety!r}: {exc}") from None
    cameras = {str(k): str(v) for k, v in dict(params.get("cameras") or {}).items()}
    cameras.update(_camera_options(list(getattr(args, "camera", None) or []), "--camera"))
    return PolicySettings(topics, str(policy_dir), float(rate) if rate else None,
                          SafetyConfig.from_dict(safety_fields, "safety"), params, cameras)


def flag_names(flags: int) -> list[str]:
    """Names of the intervention bits set in ``flags``."""
    return [f.name for f in Intervention if f.value and flags & f.value and f.name]


def policy_status(rt: DeployRuntime, flags: int, rejected: ThrottledLog, readings: int,
                  images: Mapping[str, int] | None = None, rejected_images: ThrottledLog | None = None) -> str:
    """The ``policy_status`` JSON text: status word, counters, interventions, malformed input; with
    cameras also ``images`` (good frames by camera), ``malformed_images`` and ``malformed_images_last``.
    ``stale`` is true while the joint states are stale or the robot is lost; ``stale_camera`` while the
    policy is held (or not started) because a camera's frame is not fresh or never came (status
    ``stale_camera`` or ``no_camera``).
    """
    cameras: dict[str, Any] = {}
    if images:
        cameras = {"images": dict(images), "malformed_images": rejected_images.count if rejected_images else 0,
                   "malformed_images_last": rejected_images.last_error if rejected_images else ""}
    return status_json(**cameras,
        status=rt.status, steps=len(rt.stats.ticks), sent=rt.stats.sent, missed=rt.stats.missed,
        interventions={str(k): int(v) for k, v in rt.safety.counts.items()},
        flags=flag_names(flags), stale=rt.status in ("stale", "lost"),
        stale_camera=rt.status in ("stale_camera", "no_camera"),
        malformed=rejected.count, malformed_last=rejected.last_error,
        readings=readings, estop=rt.safety.state == "estop", monotonic=time.monotonic(),
    )


def robot_status(robot: SimulatedRobot, rejected: ThrottledLog, commands: int, estop: bool,
                 dropped_ticks: int = 0) -> str:
    """The ``robot_status`` JSON text of a simulated robot node (``dropped_ticks``: ticks its
    publishing thread dropped because the transport fell behind, :class:`TickPublisher`).
    """
    events = list(robot.hold_events)
    return status_json(
        holding=bool(robot.holding), steps=robot.steps, resets=robot.resets, hold_events=len(events),
        last_hold=events[-1] if events else None, last_command=robot.last_command_time, rejected=rejected.count, rejected_last=rejected.last_error,
        commands=commands, estop=estop, sim_time=robot.sim_time, monotonic=time.monotonic(),
        dropped_ticks=int(dropped_ticks),
    )


def finish_policy(runtime: DeployRuntime, task_id: str, args: argparse.Namespace, rejected: ThrottledLog,
                  readings: int, logger: logging.Logger, node: str) -> dict[str, Any]:
    """The loop's summary; the telemetry and summary files written when asked for."""
    summary = {**runtime.stats.summary(runtime.period), "rate_hz_target": runtime.rate_hz,
               "final_status": runtime.status,
               "interventions": {str(k): int(v) for k, v in runtime.safety.counts.items()},
               "malformed": rejected.count, "readings": readings}
    logger.info("%s: stopped: %s", node, json.dumps(summary))
    if args.telemetry and runtime.telemetry is not None:
        if len(runtime.telemetry) >= 2:
            runtime.telemetry.save(args.telemetry, task_id, {"deploy": summary})
            logger.info("%s: telemetry (%d steps) in %s", node, len(runtime.telemetry), args.telemetry)
        else:
            logger.warning("%s: %d step(s) recorded; no telemetry written", node, len(runtime.telemetry))
    if args.summary:
        write_text_atomic(args.summary, json.dumps(summary, indent=2))
    return summary


def save_commands(path: str, received: list[tuple[float, float, np.ndarray]], width: int) -> None:
    """Save received commands (``wall``, ``monotonic``, ``command``) as ``.npz``, atomically."""
    wall = np.array([r[0] for r in received], dtype=np.float64)
    mono = np.array([r[1] for r in received], dtype=np.float64)
    cmds = np.stack([r[2] for r in received]) if received else np.zeros((0, width))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".npz")
    os.close(fd)
    try:
        np.savez(tmp, wall=wall, monotonic=mono, command=cmds)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- the nodes' shared bodies -------------------------------------------------------------------
class PolicyTransport(Protocol):
    """What a policy node needs of its ROS client beyond the robot driver."""

    def publish_status(self, text: str) -> None:
        """Publish ``policy_status``."""

    def subscribe_estop(self, callback: Callable[[bool], None]) -> Callable[[], None]:
        """Call ``callback(pressed)`` on every e-stop message; return the unsubscribe function."""


def drive_policy(runtime: DeployRuntime, robot: Any, transport: PolicyTransport, args: argparse.Namespace,
                 topics: Topics, policy_dir: str, logger: logging.Logger, node: str = "policy",
                 status_period_s: float = 0.1) -> dict[str, Any]:
    """The policy node's body, the same over ROS 1 and ROS 2: connect, wait for the robot, run the
    loop (status every ``status_period_s``, e-stop latching, SIGINT/SIGTERM stopping it, then the
    exit damping), save telemetry and summary; return the summary.
    """
    last = {"flags": 0, "published": -1.0}
    stopping = threading.Event()

    def publish(rt: DeployRuntime) -> None:
        transport.publish_status(policy_status(rt, last["flags"], robot.rejected, robot.received,
                                               getattr(robot, "images_received", None),
                                               getattr(robot, "rejected_images", None)))

    def on_step(rt: DeployRuntime, flags: int | None) -> None:
        """Publish the status from the loop (no thread competes with it for the GIL)."""
        last["flags"] = int(flags or 0)
        if stopping.is_set():  # a signal between the check before run() and run() clearing its flag
            rt.stop()
        now = time.monotonic()
        if now - last["published"] >= status_period_s:
            last["published"] = now
            publish(rt)

    def on_estop(pressed: bool) -> None:
        if pressed:
            runtime.estop(f"{topics.name(topics.estop)} = true")

    def on_signal(signum: int, frame: Any) -> None:
        """Stop the loop (it damps, then the telemetry is saved), or the wait before it."""
        logger.info("%s: %s; stopping", node, signal.Signals(signum).name)
        stopping.set()
        runtime.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    robot.connect()
    unsubscribe = transport.subscribe_estop(on_estop)
    logger.info("%s: %s on robot %r at %g Hz (joint states %s, commands %s as %s%s)", node, policy_dir,
                robot.features.name, runtime.rate_hz, topics.name(topics.joint_states), topics.name(topics.command),
                topics.command_type, "".join(f", camera {c} {topics.image_topic(c)} ({topics.transport(c)})"
                                             for c in robot.features.cameras))
    if not robot.wait_ready(args.wait, stopping) and not stopping.is_set():
        logger.warning("%s: no reading or no command subscriber after %g s; starting anyway (idle until readings "
                       "come)", node, args.wait)
    try:
        if stopping.is_set():
            runtime.status = "stopped"
        else:
            runtime.run(duration_s=args.duration if args.duration > 0 else None, on_step=on_step)
    finally:
        publish(runtime)
        unsubscribe()
    summary = finish_policy(runtime, runtime.spec.task_id, args, robot.rejected, robot.received, logger, node)
    robot.disconnect()
    return summary


class RobotTransport(Protocol):
    """What a simulated robot node needs of its ROS client."""

    def tick_stamp(self) -> object:
        """The ROS time now, in the form :meth:`publish_tick` takes it (called by the stepping thread
        at each tick: a state is stamped with its tick's time, not with when it was published).
        """

    def publish_tick(self, reading: Reading, reward: float | None, stamp: object) -> None:
        """Publish the state just measured, stamped ``stamp`` (:meth:`tick_stamp` at its tick), and
        the step's reward (``None``: no step was taken, the world stands still before the first
        command, so there is no reward to publish).
        """

    def publish_status(self, text: str) -> None:
        """Publish ``robot_status``."""

    def publish_images(self, frames: Mapping[str, np.ndarray], stamp: object) -> None:
        """Publish each camera's frame (``uint8 [H, W, C]`` in its declared encoding), stamped
        ``stamp`` (the tick's, as its joint state).
        """

    def command_publishers(self) -> int:
        """Publishers connected to the command topic."""

    def now(self) -> float:
        """ROS time in seconds."""


class TickPublisher:
    """The robot node's publishing thread: the control loop hands each tick over through a bounded
    mailbox and goes on; this thread publishes it.

    A robot driver's watchdog must never wait on its comms: publishing inside the stepping thread
    tied the watchdog's hold to how long the transport took (a publish blocked for 1 s would hold
    the robot 1 s late). When the transport falls behind, the oldest waiting tick is dropped (the newest
    state is what a controller needs) and counted in :attr:`dropped` (``robot_status``'s
    ``dropped_ticks``). The loop runs on while a publish waits in a call that releases the GIL (a
    socket, a lock, rospy's queues); rclpy's ``publish`` holds the GIL for as long as ``rcl_publish``
    blocks (measured: a 100 ms blocked write stalled every Python thread for 100 ms), so in a ROS 2
    node this keeps the publishing work, not a stuck DDS write, out of the loop.
    """

    def __init__(self, transport: RobotTransport, logger: logging.Logger, name: str,
                 cameras: SimCameras | None = None, capacity: int = 4) -> None:
        """Publish through ``transport`` (``cameras``: their frames with the ticks that carry them);
        keep at most ``capacity`` ticks waiting.
        """
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"TickPublisher capacity: expected an integer >= 1, got {capacity!r}")
        self.transport = transport
        self.cameras = cameras
        self.capacity = capacity
        self.dropped = 0
        """Ticks dropped unpublished because the transport fell behind."""
        self.published = 0
        """Ticks published."""
        self._queue: deque[tuple[Reading, float | None, object, bool]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.failed = 0
        """Ticks whose publish raised (logged, at most once a second)."""
        self._logger = logger
        self._name = name
        self._last_error_log = -math.inf
        self._thread = threading.Thread(target=self._run, name=f"{name}-publisher", daemon=True)
        self._thread.start()

    def offer(self, reading: Reading, reward: float | None, stamp: object, frames: bool) -> None:
        """Queue a tick stamped ``stamp`` (``frames``: publish its camera frames too) without waiting;
        drop the oldest waiting one when full.
        """
        with self._cond:
            if len(self._queue) >= self.capacity:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append((reading, reward, stamp, frames))
            self._cond.notify()

    def close(self, timeout_s: float = 1.0) -> None:
        """Publish what waits, then end the thread (a transport still blocked after ``timeout_s`` is
        left behind: the thread is a daemon).
        """
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        """Publish ticks as they come, oldest first, until closed and empty."""
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                reading, reward, stamp, frames = self._queue.popleft()
            try:
                self.transport.publish_tick(reading, reward, stamp)
                if frames and self.cameras is not None:
                    self.transport.publish_images(self.cameras.frames(reading), stamp)
            except Exception as exc:  # noqa: BLE001 - one failed publish must not end the robot's telemetry
                self.failed += 1
                now = time.monotonic()
                if now - self._last_error_log >= 1.0:  # a broken transport fails every tick: no flood
                    self._last_error_log = now
                    self._logger.error("%s: publishing a tick failed (%d in all): %s: %s", self._name, self.failed,
                                       type(exc).__name__, exc)
                continue
            with self._cond:
                self.published += 1


class RobotNode:
    """The simulated robot node's body, the same over ROS 1 and ROS 2: the transport hands it
    parsed commands (or the parse error) and e-stops; it applies them, publishes every tick and
    reports its status until stopped.
    """

    def __init__(self, robot: SimulatedRobot, transport: RobotTransport, args: argparse.Namespace,
                 topics: Topics, logger: logging.Logger, cameras: SimCameras | None = None) -> None:
        """Wire ``robot`` to ``transport`` (nothing runs until :meth:`run`); ``cameras``: publish
        their frames every ``cameras.every`` ticks.
        """
        self.robot = robot
        self.cameras = cameras
        self.ticks = 0
        self.transport = transport
        self.args = args
        self.topics = topics
        self.logger = logger
        self.rejected = ThrottledLog(logger, f"robot {robot.task_id}: malformed {topics.command}")
        self.estop = threading.Event()
        self.stop = threading.Event()
        self.received: list[tuple[float, float, np.ndarray]] = []
        self.good = 0
        self.publisher: TickPublisher | None = None
        """The thread that publishes the ticks while :meth:`run` runs (kept afterwards for its counts)."""

    def on_command(self, parse: Callable[[], np.ndarray]) -> None:
        """Apply the command ``parse()`` returns unless e-stopped; reject a malformed one (its
        :class:`~robolearn.sim2real.ros.common.MalformedMessage` names the field).
        """
        wall, mono = self.transport.now(), time.monotonic()
        try:
            cmd = parse()
        except MalformedMessage as exc:
            self.rejected(str(exc))
            return
        if self.estop.is_set():
            return
        self.robot.send(cmd)
        self.good += 1
        if self.args.command_log:
            self.received.append((wall, mono, cmd))

    def _on_tick(self) -> None:
        """After every step (the stepping thread): hand the state, the reward, the tick's ROS time and
        whether the frames are due to the publishing thread; never wait on the transport
        (:class:`TickPublisher`). The stamp is taken here: a state published late still carries its
        tick's time (a bag's import resamples on the stamps).
        """
        publisher = self.publisher
        if publisher is None:
            return
        frames = self.cameras is not None and self.ticks % self.cameras.every == 0
        publisher.offer(self.robot.read(), self.robot.last_reward if self.robot.steps else None,
                        self.transport.tick_stamp(), frames)
        self.ticks += 1

    def on_estop(self, pressed: bool) -> None:
        """Latch the e-stop on ``true``: the robot holds until the node ends."""
        if pressed and not self.estop.is_set():
            self.estop.set()
            self.robot.latch_hold()
            self.logger.warning("robot %s: e-stop latched; holding until the node ends", self.robot.task_id)

    def run(self, alive: Callable[[], bool] = lambda: True) -> None:
        """Wait for a policy (``--wait-for-policy``), start the world, report status at 10 Hz until a
        signal, ``--duration`` or ``alive()`` false; then stop and save the command log.
        """
        args, robot = self.args, self.robot
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stop.set())
        publisher = self.publisher = TickPublisher(self.transport, self.logger, f"robot {robot.task_id}", self.cameras)
        robot.on_tick = self._on_tick
        if args.wait_for_policy > 0:
            # Like a driver enabling its motors once a controller is there: a cart-pole left alone
            # falls in a second, long before a policy process has loaded its network. The world
            # then stands still until the policy's first command (``start_on_command``): how long
            # the policy takes to see the first reading depends on the machine, the start must not.
            deadline = time.monotonic() + args.wait_for_policy
            while self.transport.command_publishers() == 0 and time.monotonic() < deadline and not self.stop.is_set():
                self.stop.wait(0.01)
            if self.transport.command_publishers() == 0:
                self.logger.warning("%s: no command publisher after %g s; starting the world anyway", robot.task_id,
                                    args.wait_for_policy)
        robot.connect()
        t0 = time.monotonic()
        try:
            while not self.stop.is_set() and alive():
                if args.duration > 0 and time.monotonic() - t0 >= args.duration:
                    break
                self.transport.publish_status(robot_status(robot, self.rejected, self.good, self.estop.is_set(),
                                                           publisher.dropped))
                self.stop.wait(0.1)
        finally:
            robot.on_tick = None
            robot.disconnect()
            publisher.close()
            if args.command_log:
                save_commands(args.command_log, self.received, len(robot.features.command_joints))
            self.logger.info("robot %s: stopped after %d steps (%d holds, %d commands rejected, %d ticks dropped "
                             "unpublished)", robot.task_id, robot.steps, len(robot.hold_events), self.rejected.count,
                             publisher.dropped)


class SimCameras:
    """The cameras a simulated robot node publishes: those its robot declares (a pixel task's camera
    terms, :class:`~robolearn.sim2real.robots.sim_robot.SimulatedRobot`: Cartpole-Swingup-Pixels'
    ``fixed``), whose frames every reading carries (rendered by the task's own term in the stepping
    thread), published every ``every`` ticks.
    """

    def __init__(self, robot: SimulatedRobot, every: int = 1) -> None:
        """The cameras of ``robot`` (``SystemExit`` naming the task when it has none)."""
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise SystemExit(f"--image-every: expected an integer >= 1, got {every!r}")
        if not robot.features.cameras:
            raise SystemExit(f"--images: task {robot.task_id!r} has no camera; use a pixel task such as "
                             "Cartpole-Swingup-Pixels")
        self.every = every
        """Publish every this many ticks."""
        cameras = {name: replace(c, rate_hz=None if c.rate_hz is None else c.rate_hz / every)
                   for name, c in robot.features.cameras.items()}
        self.features: RobotFeatures = replace(robot.features, cameras=cameras)
        """The robot's features, the cameras' rates those of the published frames."""

    def frames(self, reading: Reading) -> dict[str, np.ndarray]:
        """The frame of every camera in ``reading``."""
        return {name: frame.image for name, frame in reading.images.items()}


def start_robot(args: argparse.Namespace) -> tuple[SimulatedRobot, RobotFeatures, SimCameras | None]:
    """The node's simulated robot from its flags (real time), the features the node declares
    (written when asked: cameras only with ``--images``, as only then are frames published) and,
    with ``--images``, its cameras.
    """
    robot = SimulatedRobot(args.task, seed=args.seed, realtime=True, command_timeout_s=args.command_timeout,
                           hold_kd=args.hold_kd, overrides=parse_overrides(args.override),
                           start_on_command=args.wait_for_policy > 0)
    cameras = SimCameras(robot, args.image_every) if getattr(args, "images", False) else None
    features = cameras.features if cameras is not None else replace(robot.features, cameras={})
    if args.features_out:
        write_text_atomic(args.features_out, json.dumps(features.to_dict(), indent=2))
    return robot, features, cameras


# -- a robot behind topics, whatever the ROS client -------------------------------------------
class TopicRobot(Robot):
    """What a robot behind the bridge's topics is without its ROS client: the newest good reading
    (with the newest Twist as an extra, and the newest good frame of each declared camera in
    ``Reading.images``), malformed input counted and logged (throttled) and dropped, commands checked
    before they are published. ``Ros1Robot`` and ``Ros2Robot`` add the client:
    ``connect``/``disconnect``, :meth:`_publish` and :meth:`_command_subscribers`, and callbacks
    that hand a message's fields to :meth:`_accept_joint_state` / :meth:`_accept_twist` and a camera's
    messages (subscribed per :meth:`_camera_subscriptions`) to :meth:`_accept_image`. A frame is
    converted and checked in the client's receive thread, outside the lock; only the swap of the
    newest frame holds it, as for the joint states.
    """

    def __init__(self, features: RobotFeatures, topics: Topics | None, log_every_s: float, logger: logging.Logger) -> None:
        """Describe the robot (``features``, as its own description declares it) and its topics."""
        self.features = features
        self.topics = topics or Topics()
        self.rejected = ThrottledLog(logger, f"robot {features.name!r}: malformed {self.topics.joint_states}", log_every_s)
        """Malformed joint states (``count``, ``last_error``)."""
        self.received = 0
        """Good joint states received."""
        self.rejected_images = ThrottledLog(logger, f"robot {features.name!r}: malformed image", log_every_s)
        """Camera messages refused (size or encoding not the declared camera's, or undecodable)."""
        self.images_received: dict[str, int] = {name: 0 for name in features.cameras}
        """Good frames received, by camera."""
        self._frames: dict[str, CameraFrame] = {}
        self._reading: Reading | None = None
        self._twist: np.ndarray | None = None
        self._twist_key = f"command/{self.topics.cmd_vel_name}"
        self._lock = threading.Lock()
        self._pub: Any = None

    @property
    def is_connected(self) -> bool:
        """Whether the topics are open."""
        return self._pub is not None

    def _publish(self, command: np.ndarray) -> None:
        """Publish a checked command (the client's part)."""
        raise NotImplementedError

    def _command_subscribers(self) -> int:
        """Subscribers connected to the command topic (the client's part)."""
        raise NotImplementedError

    def wait_ready(self, timeout_s: float, cancel: threading.Event | None = None) -> bool:
        """Wait up to ``timeout_s`` (or until ``cancel`` is set) for a first reading and a subscriber
        on the command topic; return whether both came (a runtime may start without them: it idles
        until readings arrive).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._reading is not None and self._pub is not None and self._command_subscribers() > 0:
                return True
            if cancel is not None and cancel.wait(0.01):
                return False
            if cancel is None:
                time.sleep(0.01)
        return False

    def read(self) -> Reading | None:
        """The newest good reading (``None`` before the first), with the newest Twist as an extra."""
        if self._pub is None:
            raise RobotError(f"robot {self.features.name!r}: read() before connect()")
        with self._lock:
            reading, twist, frames = self._reading, self._twist, dict(self._frames)
        if reading is None:
            return None
        extras = reading.extras
        if self._twist_key in self.features.extras:
            extras = dict(reading.extras)
            extras[self._twist_key] = twist if twist is not None else np.zeros(self.features.extras[self._twist_key])
        if extras is reading.extras and not frames:
            return reading
        # Each frame keeps its own stamp and receipt time: a camera that stopped goes stale on its
        # own while the joint states stay fresh. The frames are never written again (a new message
        # makes a new one), so a Reading holds them without a copy.
        return Reading(reading.stamp, reading.joint_pos, reading.joint_vel, reading.joint_effort, extras,
                       reading.received, frames)

    def send(self, command: np.ndarray) -> np.ndarray:
        """Publish ``command`` on the command topic; return it (a ROS robot's own clamping is not
        reported back).
        """
        if self._pub is None:
            raise RobotError(f"robot {self.features.name!r}: send() before connect()")
        cmd = np.asarray(command, dtype=np.float64).reshape(-1)
        n = len(self.features.command_joints)
        if cmd.shape != (n,):
            raise RobotError(f"robot {self.features.name!r}: expected a command of {n} values, got shape {list(cmd.shape)}")
        self._publish(cmd)
        return cmd

    def _accept_joint_state(self, names: Any, position: Any, velocity: Any, effort: Any, stamp: float) -> None:
        """Keep a JointState's fields as the newest reading when well formed; count and log otherwise."""
        received = time.monotonic()
        try:
            reading = joint_state_reading(self.features, list(names), list(position), list(velocity), list(effort),
                                          stamp, received, topic=self.topics.joint_states)
        except MalformedMessage as exc:
            self.rejected(str(exc))
            return
        with self._lock:
            # The newest received wins (not the newest stamp: a robot whose clock steps back must
            # not be ignored until its clock catches up).
            self._reading = reading
            self.received += 1

    def _accept_image(self, camera: str, msg: Any, compressed: bool, stamp: float) -> None:
        """Keep a camera message (``sensor_msgs/Image``, or ``CompressedImage`` when ``compressed``)
        as ``camera``'s newest frame when it has the declared size and encoding; count and log it
        otherwise (the last good frame stays, and goes stale).
        """
        received = time.monotonic()
        topic = self.topics.image_topic(camera)
        try:
            image = camera_image(msg, self.features.cameras[camera], compressed, topic)
        except MalformedMessage as exc:
            self.rejected_images(str(exc))
            return
        frame = CameraFrame(image, float(stamp), received)
        with self._lock:
            self._frames[camera] = frame
            self.images_received[camera] += 1

    def _camera_subscriptions(self) -> list[tuple[str, str, bool]]:
        """``(camera, full topic, compressed)`` of every declared camera."""
        t = self.topics
        return [(c, t.image_topic(c), t.transport(c) == "compressed") for c in self.features.cameras]

    def _accept_twist(self, x: float, y: float, yaw: float) -> None:
        """Keep the newest velocity command (non-finite ones are refused like a bad joint state)."""
        value = np.array([x, y, yaw], dtype=np.float64)
        if not np.all(np.isfinite(value)):
            self.rejected(f"{self.topics.cmd_vel}: non-finite velocity command {value.tolist()}")
            return
        with self._lock:
            self._twist = value
