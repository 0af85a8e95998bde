"""What the ROS 1 and ROS 2 nodes share beyond messages: no ROS import here either.

* the simulated robot that publishes after every tick (:class:`TickingRobot`);
* bad input logged without flooding (:class:`ThrottledLog`);
* robot descriptions from files (:func:`load_features`), task overrides from the command line
  (:func:`parse_overrides`), the policy node's settings from flags and a parameter file
  (:func:`policy_settings`);
* the status messages' contents (:func:`policy_status`, :func:`robot_status`) and what a
  policy node writes when it stops (:func:`finish_policy`);
* atomic files (:func:`write_text_atomic`, :func:`save_commands`) and logging to stderr.

The ROS-specific halves are :mod:`robolearn.sim2real.ros.ros1` / ``ros1_*_node`` (rospy) and
:mod:`robolearn.sim2real.ros.ros2` / ``ros2_*_node`` (rclpy).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robolearn.sim2real.deploy.runtime import DeployRuntime
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig
from robolearn.sim2real.robots.base import RobotFeatures
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.sim2real.ros.common import Topics, read_parameters, status_json

LOG_FORMAT = "[%(name)s][%(levelname)s] %(asctime)s: %(message)s"
"""Log lines as the ROS loggers write them."""


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


class TickingRobot(SimulatedRobot):
    """A real-time simulated robot that calls :attr:`on_tick` after every control step (from its
    stepping thread), so a node publishes each state as soon as it exists.
    """

    on_tick: Any = None
    """``callable()`` run after each step, or ``None``."""

    def _step(self, command: np.ndarray) -> None:
        """One control step, then the tick callback."""
        super()._step(command)
        if self.on_tick is not None:
            self.on_tick()

    def latch_hold(self) -> None:
        """Make the watchdog hold from the next tick on (the last command counts as long gone)."""
        with self._lock:
            self._command_time = -math.inf


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``key=value`` task-config overrides (values read as YAML), naming a malformed one."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--override: expected key=value, got {item!r}")
        key, text = item.split("=", 1)
        out[key] = yaml.safe_load(text)
    return out


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
    return p


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
                   help="seconds to wait for a command publisher before the world starts (0: start at once)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until SIGINT/SIGTERM)")
    return p


@dataclass
class PolicySettings:
    """A policy node's settings after flags and the parameter file are merged."""

    topics: Topics
    policy_dir: str
    rate: float | None
    safety: SafetyConfig
    params: dict[str, Any]


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
    try:
        topics = Topics(**topic_fields)
    except TypeError as exc:
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
    return PolicySettings(topics, str(policy_dir), float(rate) if rate else None,
                          SafetyConfig.from_dict(safety_fields, "safety"), params)


def flag_names(flags: int) -> list[str]:
    """Names of the intervention bits set in ``flags``."""
    return [f.name for f in Intervention if f.value and flags & f.value and f.name]


def policy_status(rt: DeployRuntime, flags: int, rejected: ThrottledLog, readings: int) -> str:
    """The ``policy_status`` JSON text: status word, counters, interventions, malformed input."""
    return status_json(
        status=rt.status, steps=len(rt.stats.ticks), sent=rt.stats.sent, missed=rt.stats.missed,
        interventions={str(k): int(v) for k, v in rt.safety.counts.items()},
        flags=flag_names(flags), stale=rt.status in ("stale", "lost"),
        malformed=rejected.count, malformed_last=rejected.last_error,
        readings=readings, estop=rt.safety.state == "estop", monotonic=time.monotonic(),
    )


def robot_status(robot: TickingRobot, rejected: ThrottledLog, commands: int, estop: bool) -> str:
    """The ``robot_status`` JSON text of a simulated robot node."""
    events = list(robot.hold_events)
    return status_json(
        holding=bool(robot.holding), steps=robot.steps, resets=robot.resets, hold_events=len(events),
        last_hold=events[-1] if events else None, rejected=rejected.count, rejected_last=rejected.last_error,
        commands=commands, estop=estop, sim_time=robot.sim_time, monotonic=time.monotonic(),
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
