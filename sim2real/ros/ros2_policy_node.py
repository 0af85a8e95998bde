"""An exported policy as a ROS 2 node: the deploy runtime driving a robot behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros2_policy_node --policy <export dir>
        --robot <features .json/.yaml | from-topic> [--params <file>] [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--rate HZ] [--safety JSON]
        [--lost-timeout 0.5] [--telemetry out.h5] [--summary out.json] [--duration S] [--wait 30]

The ROS 2 twin of ``ros1_policy_node`` (same flags, topics, status and exit behaviour): the loop is
:class:`~robolearn.sim2real.deploy.runtime.DeployRuntime` in the main thread reading a
:class:`~robolearn.sim2real.ros.ros2.Ros2Robot`, callbacks spun in a background thread.
``--robot from-topic`` takes the robot's description from the latched ``robot_features`` topic a
robot node publishes. ``estop`` (``true``) latches the runtime's e-stop; ``policy_status`` (JSON,
about 10 Hz). SIGINT/SIGTERM: stop, damp for ``exit_s``, save telemetry and summary. Exit status 2:
the policy does not fit the robot. Run it inside ``unshare -n`` on a shared machine.
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

from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime
from robolearn.sim2real.robots.base import RobotFeatures
from robolearn.sim2real.ros.node_common import (
    LOG_FORMAT,
    add_policy_arguments,
    finish_policy,
    load_features,
    log_to_stderr,
    policy_settings,
    policy_status,
)

log = logging.getLogger("robolearn.sim2real.ros.ros2_policy_node")

NODE = "policy"
"""The node's name under its namespace."""
STATUS_PERIOD_S = 0.1
"""Seconds between ``policy_status`` messages."""


def features_from_topic(node: Any, topic: str, wait_s: float) -> RobotFeatures:
    """The robot description on the latched ``topic``, waiting up to ``wait_s`` for it."""
    from std_msgs.msg import String

    from robolearn.sim2real.ros.ros2 import LATCHED_QOS

    got: list[str] = []
    sub = node.create_subscription(String, topic, lambda m: got.append(m.data), LATCHED_QOS)
    deadline = time.monotonic() + wait_s
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    node.destroy_subscription(sub)
    if not got:
        raise SystemExit(f"--robot from-topic: nothing on {topic} within {wait_s:g} s (is the robot node running "
                         "under this namespace?)")
    return RobotFeatures.from_dict(json.loads(got[-1]), f"topic {topic}")


def main(argv: list[str] | None = None) -> int:
    """Run the node (module doc); return the exit status."""
    args = add_policy_arguments(argparse.ArgumentParser(
        prog="python -m robolearn.sim2real.ros.ros2_policy_node",
        description="Run an exported policy on a robot behind ROS 2 topics.")).parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    settings = policy_settings(args, NODE)
    topics = settings.topics
    from std_msgs.msg import Bool, String

    from robolearn.sim2real.ros import ros2

    spinner = ros2.Spinner(NODE, topics.namespace)
    node = spinner.node
    log_to_stderr()
    try:
        if args.robot == "from-topic":
            features = features_from_topic(node, topics.name("robot_features"), args.wait)
        elif args.robot:
            features = load_features(args.robot)
        elif settings.params.get("robot"):
            features = RobotFeatures.from_dict(settings.params["robot"], f"{args.params}: robot")
        else:
            raise SystemExit("--robot: missing (a features file, 'from-topic', or 'robot' in --params)")
        policy = load_exported(settings.policy_dir, args.format)
        robot = ros2.Ros2Robot(features, node, topics)
        try:
            runtime = DeployRuntime(policy, robot, settings.safety, rate_hz=settings.rate, lost_timeout_s=args.lost_timeout)
        except DeployMismatch as exc:
            log.error("%s", exc)
            return 2
        status_pub = node.create_publisher(String, topics.name(topics.policy_status), 10)
        last = {"flags": 0, "published": -1.0}
        stopping = threading.Event()

        def publish_status(rt: DeployRuntime) -> None:
            status_pub.publish(String(data=policy_status(rt, last["flags"], robot.rejected, robot.received)))

        def on_step(rt: DeployRuntime, flags: int | None) -> None:
            """Publish the status every :data:`STATUS_PERIOD_S` from the loop."""
            last["flags"] = int(flags or 0)
            if stopping.is_set():
                rt.stop()
            now = time.monotonic()
            if now - last["published"] >= STATUS_PERIOD_S:
                last["published"] = now
                publish_status(rt)

        def on_estop(msg: Any) -> None:
            if msg.data:
                runtime.estop(f"{topics.name(topics.estop)} = true")

        def on_signal(signum: int, frame: Any) -> None:
            log.info("%s: %s; stopping", NODE, signal.Signals(signum).name)
            stopping.set()
            runtime.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        robot.connect()
        estop_sub = node.create_subscription(Bool, topics.name(topics.estop), on_estop, 10)  # noqa: F841 - kept alive
        log.info("%s: %s on robot %r at %g Hz (joint states %s, commands %s as %s)", NODE, settings.policy_dir,
                 features.name, runtime.rate_hz, topics.name(topics.joint_states), topics.name(topics.command),
                 topics.command_type)
        if not robot.wait_ready(args.wait, stopping) and not stopping.is_set():
            log.warning("%s: no reading or no command subscriber after %g s; starting anyway", NODE, args.wait)
        try:
            if stopping.is_set():
                runtime.status = "stopped"
            else:
                runtime.run(duration_s=args.duration if args.duration > 0 else None, on_step=on_step)
        finally:
            publish_status(runtime)
        finish_policy(runtime, policy.manifest.spec.task_id, args, robot.rejected, robot.received, log, NODE)
        robot.disconnect()
        return 0
    finally:
        spinner.shutdown()


if __name__ == "__main__":
    sys.exit(main())
