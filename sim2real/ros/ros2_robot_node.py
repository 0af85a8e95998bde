"""A simulated robot as a ROS 2 node: a task's MuJoCo world behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros2_robot_node --task Cartpole-Balance [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--command-timeout 0.1] [--seed 0]
        [--features-out robot.json] [--override timestep=0.005 ...] [--command-log commands.npz]
        [--wait-for-policy S] [--duration S]

The ROS 2 twin of ``ros1_robot_node`` (same flags, topics and status fields): the world steps in
real time; after every step the joint state goes out on ``joint_states`` and the reward on
``reward``; good commands are applied, malformed ones rejected (logged, naming the field) and the
robot-side watchdog holds after ``--command-timeout`` without a good one; ``estop`` latches a hold;
``robot_status`` (JSON, 10 Hz). The robot's features are published on ``robot_features``
(``std_msgs/String``, JSON, transient local) for a policy node started with ``--robot from-topic``.
Run it inside ``unshare -n`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from typing import Any

import numpy as np

from robolearn.sim2real.ros.common import MalformedMessage, Topics
from robolearn.sim2real.ros.node_common import (
    LOG_FORMAT,
    ThrottledLog,
    TickingRobot,
    add_robot_arguments,
    log_to_stderr,
    parse_overrides,
    robot_status,
    save_commands,
    write_text_atomic,
)

log = logging.getLogger("robolearn.sim2real.ros.ros2_robot_node")

NODE = "robot"
"""The node's name under its namespace."""


def main(argv: list[str] | None = None) -> int:
    """Run the node (module doc); return the exit status."""
    parser = add_robot_arguments(argparse.ArgumentParser(
        prog="python -m robolearn.sim2real.ros.ros2_robot_node",
        description="A simulated robot (one MuJoCo world of a task) as a ROS 2 node."))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    from std_msgs.msg import Bool, Float64, String

    from robolearn.sim2real.ros import ros2

    topics = Topics(namespace=args.namespace, command_type=args.command_type)
    robot = TickingRobot(args.task, seed=args.seed, realtime=True, command_timeout_s=args.command_timeout,
                         hold_kd=args.hold_kd, overrides=parse_overrides(args.override))
    features = robot.features
    spinner = ros2.Spinner(NODE, args.namespace)
    node = spinner.node
    log_to_stderr()
    if args.features_out:
        write_text_atomic(args.features_out, json.dumps(features.to_dict(), indent=2))
    features_pub = node.create_publisher(String, topics.name("robot_features"), ros2.LATCHED_QOS)
    features_pub.publish(String(data=json.dumps(features.to_dict())))
    state_pub = node.create_publisher(ros2.JointState, topics.name(topics.joint_states), ros2.CONTROL_QOS)
    reward_pub = node.create_publisher(Float64, topics.name(topics.reward), ros2.CONTROL_QOS)
    status_pub = node.create_publisher(String, topics.name(topics.robot_status), 10)
    rejected = ThrottledLog(log, f"robot {args.task}: malformed {topics.command}")
    estop = threading.Event()
    received: list[tuple[float, float, np.ndarray]] = []
    good = [0]
    log.info("%s: %s (%g Hz, %s commands on %s as %s)", NODE, args.task, features.rate_hz, features.command_kind,
             topics.name(topics.command), topics.command_type)

    def on_tick() -> None:
        """Publish the state just measured and the step's reward."""
        state_pub.publish(ros2.joint_state_message(features, robot.read(), node.get_clock().now().nanoseconds))
        reward_pub.publish(Float64(data=robot.last_reward))

    def on_command(msg: Any) -> None:
        """Apply a good command (unless e-stopped); reject a malformed one, naming the field."""
        wall, mono = spinner.now(), time.monotonic()
        try:
            cmd = ros2.parse_command(features, msg, topics.command)
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
    cmd_sub = node.create_subscription(ros2.command_class(topics.command_type), topics.name(topics.command), on_command,
                                       ros2.CONTROL_QOS)
    node.create_subscription(Bool, topics.name(topics.estop), on_estop, 10)
    if args.wait_for_policy > 0:
        # Like a driver enabling its motors once a controller is there (a cart-pole left alone falls).
        deadline = time.monotonic() + args.wait_for_policy
        while node.count_publishers(topics.name(topics.command)) == 0 and time.monotonic() < deadline and not stop.is_set():
            stop.wait(0.01)
        if node.count_publishers(topics.name(topics.command)) == 0:
            log.warning("%s: no command publisher after %g s; starting the world anyway", args.task, args.wait_for_policy)
    robot.connect()
    t0 = time.monotonic()
    try:
        while not stop.is_set():
            if args.duration > 0 and time.monotonic() - t0 >= args.duration:
                break
            status_pub.publish(String(data=robot_status(robot, rejected, good[0], estop.is_set())))
            stop.wait(0.1)
    finally:
        robot.on_tick = None
        robot.disconnect()
        node.destroy_subscription(cmd_sub)
        if args.command_log:
            save_commands(args.command_log, received, len(features.command_joints))
        log.info("robot %s: stopped after %d steps (%d holds, %d commands rejected)", args.task, robot.steps,
                 len(robot.hold_events), rejected.count)
        spinner.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
