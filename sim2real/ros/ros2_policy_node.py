"""An exported policy as a ROS 2 node: the deploy runtime driving a robot behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros2_policy_node --policy <export dir>
        --robot <features .json/.yaml | from-topic> [--params <file>] [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--rate HZ] [--safety JSON]
        [--lost-timeout 0.5] [--telemetry out.h5] [--summary out.json] [--duration S] [--wait 30]
        [--image-topic CAMERA=TOPIC ...] [--image-transport CAMERA=raw|compressed ...] [--camera INPUT=CAMERA ...]

The ROS 2 twin of ``ros1_policy_node`` (same flags, topics, status and exit behaviour): the loop is
:class:`~robolearn.sim2real.deploy.runtime.DeployRuntime` in the main thread reading a
:class:`~robolearn.sim2real.ros.ros2.Ros2Robot`, callbacks spun in a background thread.
``--robot from-topic`` takes the robot's description from the latched ``robot_features`` topic a
robot node publishes. ``estop`` (``true``) latches the runtime's e-stop; ``policy_status`` (JSON,
about 10 Hz). SIGINT/SIGTERM: stop, damp for ``exit_s``, save telemetry and summary. Exit status 2:
the policy does not fit the robot. Cameras: the topics, flags and status fields of
``ros1_policy_node``, read best effort with depth 1 (:data:`~robolearn.sim2real.ros.ros2.IMAGE_QOS`).
Fast DDS runs over UDP, off its shared-memory transport, as in the robot node
(:func:`~robolearn.sim2real.ros.common.control_node_transport`).
Run it inside ``unshare -n`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime
from robolearn.sim2real.robots.base import RobotFeatures
from robolearn.sim2real.ros.common import apply_control_transport
from robolearn.sim2real.ros.node_common import (
    LOG_FORMAT,
    add_policy_arguments,
    drive_policy,
    load_features,
    log_to_stderr,
    policy_settings,
    tune_process,
)

log = logging.getLogger("robolearn.sim2real.ros.ros2_policy_node")

NODE = "policy"
"""The node's name under its namespace."""


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
    tune_process(args, log)
    settings = policy_settings(args, NODE)
    # Off Fast DDS's shared-memory transport before rclpy starts: a reader that dies (the robot, a
    # recorder) must not stall this process's publish, and its control loop, for a second
    # (common.control_node_transport).
    apply_control_transport(log, NODE)
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
            runtime = DeployRuntime(policy, robot, settings.safety, rate_hz=settings.rate, lost_timeout_s=args.lost_timeout,
                                    seed=args.sampler_seed, noise=args.sampler_noise,
                                    cameras=settings.cameras or None)
        except DeployMismatch as exc:
            log.error("%s", exc)
            return 2
        status_pub = node.create_publisher(String, topics.name(topics.policy_status), 10)

        class Transport:
            def publish_status(self, text: str) -> None:
                status_pub.publish(String(data=text))

            def subscribe_estop(self, callback: Callable[[bool], None]) -> Callable[[], None]:
                sub = node.create_subscription(Bool, topics.name(topics.estop), lambda m: callback(bool(m.data)), 10)
                return lambda: node.destroy_subscription(sub)

        drive_policy(runtime, robot, Transport(), args, topics, settings.policy_dir, log, NODE)
        return 0
    finally:
        spinner.shutdown()


if __name__ == "__main__":
    sys.exit(main())
