"""A simulated robot as a ROS 1 node: a task's MuJoCo world behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros1_robot_node --task Cartpole-Balance [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--command-timeout 0.1] [--seed 0]
        [--features-out robot.json] [--override timestep=0.005 ...] [--command-log commands.npz]
        [--wait-for-policy S] [--duration S]

The world steps in real time at the task's control rate
(:class:`~robolearn.sim2real.robots.sim_robot.SimulatedRobot`, ``realtime=True``); after every
step its joint state goes out as ``sensor_msgs/JointState`` (``header.stamp``: ROS time; ``name``,
``position``, ``velocity``) and the step's reward as ``std_msgs/Float64`` on ``reward``. Commands
are taken from ``command``; a malformed one (wrong length, NaN, wrong joint names) is rejected with
a logged error naming the field, and the robot-side watchdog holds the robot once no good command
came for ``--command-timeout`` seconds. ``estop`` (``std_msgs/Bool``, true) latches: from then on
commands are ignored and the robot applies its hold command until the node ends.

``robot_status`` (``std_msgs/String``, JSON, 10 Hz): ``holding``, ``steps``, ``resets``,
``hold_events`` (count) and ``last_hold`` (``time.monotonic()`` of the newest hold: the machine's
monotonic clock, comparable across processes on one machine), ``rejected`` and ``rejected_last``,
``commands`` (good ones), ``estop``.

The robot's :class:`~robolearn.sim2real.robots.base.RobotFeatures` are set as the private parameter
``~features`` (JSON text; ``<namespace>/robot/features``), which a policy node started with
``--robot from-params`` reads, and written to ``--features-out`` when given. ``--command-log``
saves every good command with its receipt times (ROS time and monotonic) on exit, for latency
measurements (``benchmarks/ros_loop.py``). ``--wait-for-policy S`` keeps the world still (nothing
published) until a command publisher connects, or ``S`` seconds passed: a balancing task would
otherwise fall while the policy process is still starting.
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
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.sim2real.ros.common import Topics

LOG_FORMAT = "[%(name)s][%(levelname)s] %(asctime)s: %(message)s"
"""Log lines as rospy writes them."""

log = logging.getLogger("robolearn.sim2real.ros.ros1_robot_node")

NODE = "robot"
"""The node's name under its namespace."""
SWITCH_INTERVAL_S = 0.0005
"""Python's thread switch interval in the node: the stepping thread shares the interpreter with
rospy's threads, and at the default 5 ms one of them can hold the GIL past a tick's deadline."""


class TickingRobot(SimulatedRobot):
    """A real-time simulated robot that calls :attr:`on_tick` after every control step (from its
    stepping thread), so the node publishes each state as soon as it exists.
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


def build_parser() -> argparse.ArgumentParser:
    """The command line (module doc)."""
    p = argparse.ArgumentParser(prog="python -m robolearn.sim2real.ros.ros1_robot_node",
                                description="A simulated robot (one MuJoCo world of a task) as a ROS 1 node.")
    p.add_argument("--task", required=True, help="registered task id, e.g. Cartpole-Balance")
    p.add_argument("--namespace", default="/robolearn", help="topic namespace (default /robolearn)")
    p.add_argument("--command-type", default="float64_multi_array",
                   choices=["float64_multi_array", "joint_trajectory"])
    p.add_argument("--command-timeout", type=float, default=0.1,
                   help="seconds without a good command before holding")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hold-kd", type=float, default=1.0, help="damping gain of the torque hold")
    p.add_argument("--features-out", default=None, help="write the robot's features (JSON) here")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="task-config override (robolearn.make keyword), e.g. timestep=0.005")
    p.add_argument("--command-log", default=None, help="save received commands and their times (.npz) on exit")
    p.add_argument("--wait-for-policy", type=float, default=0.0,
                   help="seconds to wait for a command publisher before the world starts (0: start at once)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until SIGINT/SIGTERM)")
    p.add_argument("--switch-interval", type=float, default=SWITCH_INTERVAL_S,
                   help="Python's thread switch interval in seconds (sys.setswitchinterval)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the node (module doc); return the exit status."""
    args = build_parser().parse_args(argv)
    sys.setswitchinterval(args.switch_interval)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    # rospy fixes a node's namespace when first imported: set it before the bridge imports rospy.
    os.environ["ROS_NAMESPACE"] = args.namespace
    import rospy
    from std_msgs.msg import Bool, Float64, String

    from robolearn.sim2real.ros import ros1
    from robolearn.sim2real.ros.common import MalformedMessage, status_json

    topics = Topics(namespace=args.namespace, command_type=args.command_type)
    robot = TickingRobot(args.task, seed=args.seed, realtime=True, command_timeout_s=args.command_timeout,
                         hold_kd=args.hold_kd, overrides=parse_overrides(args.override))
    features = robot.features
    ros1.init_node(NODE)
    ros1.log_to_stderr()
    features_json = json.dumps(features.to_dict())
    rospy.set_param("~features", features_json)
    if args.features_out:
        ros1.write_text_atomic(args.features_out, json.dumps(features.to_dict(), indent=2))
    log.info("%s: %s (%g Hz, %s commands on %s as %s); features in %s", NODE, args.task, features.rate_hz,
             features.command_kind, topics.name(topics.command), topics.command_type,
             rospy.resolve_name("~features"))

    state_pub = rospy.Publisher(topics.name(topics.joint_states), ros1.JointState, queue_size=10, tcp_nodelay=True)
    reward_pub = rospy.Publisher(topics.name(topics.reward), Float64, queue_size=10)
    status_pub = rospy.Publisher(topics.name(topics.robot_status), String, queue_size=10)
    rejected = ros1.ThrottledLog(log, f"robot {args.task}: malformed {topics.command}")
    estop = threading.Event()
    received: list[tuple[float, float, np.ndarray]] = []
    good = [0]  # a counter the callback thread updates

    def on_tick() -> None:
        """Publish the state just measured and the step's reward."""
        state_pub.publish(ros1.joint_state_message(features, robot.read()))
        reward_pub.publish(Float64(robot.last_reward))

    def on_command(msg: Any) -> None:
        """Apply a good command (unless e-stopped); reject a malformed one, naming the field."""
        wall, mono = rospy.get_time(), time.monotonic()
        try:
            cmd = ros1.parse_command(features, msg, topics.command)
        except MalformedMessage as exc:
            rejected(str(exc))
            return
        if estop.is_set():
            return
        robot.send(cmd)
        good[0] += 1
        if args.command_log:
            received.append((wall, mono, cmd))

    def on_estop(msg: Any) -> None:
        """Latch the e-stop on ``true``."""
        if msg.data and not estop.is_set():
            estop.set()
            robot.latch_hold()
            log.warning("robot %s: e-stop latched; holding until the node ends", args.task)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    robot.on_tick = on_tick
    subs = [rospy.Subscriber(topics.name(topics.command), ros1.command_class(topics.command_type), on_command,
                             queue_size=10, tcp_nodelay=True),
            rospy.Subscriber(topics.name(topics.estop), Bool, on_estop, queue_size=10)]
    if args.wait_for_policy > 0:
        # Like a driver enabling its motors once a controller is there: a cart-pole left alone
        # falls in a second, long before a policy process has loaded its network.
        deadline = time.monotonic() + args.wait_for_policy
        while subs[0].get_num_connections() == 0 and time.monotonic() < deadline and not stop.is_set():
            stop.wait(0.01)
        if subs[0].get_num_connections() == 0:
            log.warning("%s: no command publisher after %g s; starting the world anyway", args.task,
                        args.wait_for_policy)
    robot.connect()
    t0 = time.monotonic()
    try:
        while not stop.is_set() and not rospy.is_shutdown():
            if args.duration > 0 and time.monotonic() - t0 >= args.duration:
                break
            events = list(robot.hold_events)
            status_pub.publish(String(status_json(
                holding=bool(robot.holding), steps=robot.steps, resets=robot.resets, hold_events=len(events),
                last_hold=events[-1] if events else None, rejected=rejected.count,
                rejected_last=rejected.last_error, commands=good[0],
                estop=estop.is_set(), sim_time=robot.sim_time, monotonic=time.monotonic(),
            )))
            stop.wait(0.1)
    finally:
        robot.on_tick = None
        robot.disconnect()
        for sub in subs:
            sub.unregister()
        try:
            # A description left behind would mislead the next policy node started from-params.
            rospy.delete_param("~features")
        except (KeyError, OSError):
            pass
        if args.command_log:
            _save_commands(args.command_log, received, len(features.command_joints))
        log.info("robot %s: stopped after %d steps (%d holds, %d commands rejected)", args.task, robot.steps,
                 len(robot.hold_events), rejected.count)
        rospy.signal_shutdown("robot node finished")
    return 0


def _save_commands(path: str, received: list[tuple[float, float, np.ndarray]], width: int) -> None:
    """Save the received commands (``wall``, ``monotonic``, ``command``) as ``.npz``, atomically."""
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


if __name__ == "__main__":
    sys.exit(main())
