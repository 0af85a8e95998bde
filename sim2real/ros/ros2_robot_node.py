"""A simulated robot as a ROS 2 node: a task's MuJoCo world behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros2_robot_node --task Cartpole-Balance [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--command-timeout 0.1] [--seed 0]
        [--features-out robot.json] [--override timestep=0.005 ...] [--command-log commands.npz]
        [--wait-for-policy S [--wait-for-subscribers N]] [--duration S]
        [--images [--image-transport raw|compressed] [--image-every K]]

The ROS 2 twin of ``ros1_robot_node`` (same flags, topics and status fields): the world steps in
real time; after every step the joint state goes out on ``joint_states`` and the reward on
``reward``; good commands are applied, malformed ones rejected (logged, naming the field) and the
robot-side watchdog holds after ``--command-timeout`` without a good one; ``estop`` latches a hold;
``robot_status`` (JSON, 10 Hz). The ticks go out from a publishing thread
(``node_common.TickPublisher``; ``dropped_ticks`` in the status counts those it dropped when the
transport fell behind), so the stepping thread and its watchdog never wait on a publish that
releases the GIL; rclpy's ``publish`` keeps the GIL while ``rcl_publish`` blocks, so a DDS write stuck
that way still stalls the whole process, and the node keeps off Fast DDS's shared-memory transport,
where a write towards a dead reader can block for a second (``common.control_node_transport``: UDP,
with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``'s discovery kept). The robot's features are
published on ``robot_features``
(``std_msgs/String``, JSON, transient local) for a policy node started with ``--robot from-topic``.
``--wait-for-subscribers N`` (ROS 2 only): the world also waits, within ``--wait-for-policy``, for N
subscriptions matched to ``joint_states`` (the policy and, say, a recorder or a safety monitor that
must see the robot from its first reading: over DDS each reader is matched on its own, so a monitor
started first can still be matched a second after the policy). ``--images``: the cameras of a pixel
task publish as in ``ros1_robot_node`` (same topics, flags and features), with
:data:`~robolearn.sim2real.ros.ros2.IMAGE_QOS` (best effort, depth 1).
Run it inside ``unshare -n`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping

import numpy as np

from robolearn.sim2real.robots.base import Reading
from robolearn.sim2real.ros.common import Topics, apply_control_transport, parse_command
from robolearn.sim2real.ros.node_common import (
    LOG_FORMAT,
    RobotNode,
    add_robot_arguments,
    log_to_stderr,
    start_robot,
    tune_process,
)

log = logging.getLogger("robolearn.sim2real.ros.ros2_robot_node")

NODE = "robot"
"""The node's name under its namespace."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (module doc): the robot node's flags and ``--wait-for-subscribers``."""
    p = add_robot_arguments(argparse.ArgumentParser(
        prog="python -m robolearn.sim2real.ros.ros2_robot_node",
        description="A simulated robot (one MuJoCo world of a task) as a ROS 2 node."))
    p.add_argument("--wait-for-subscribers", type=int, default=0, metavar="N",
                   help="with --wait-for-policy: also wait for N subscriptions matched to joint_states (the "
                        "policy and, e.g., a recorder or monitor) before the world starts (0: do not wait)")
    return p


def check_wait_for_subscribers(args: argparse.Namespace) -> None:
    """``SystemExit`` naming the flag when ``--wait-for-subscribers`` is negative or lacks
    ``--wait-for-policy`` (its timeout, and the world standing still until the first command).
    """
    if args.wait_for_subscribers < 0:
        raise SystemExit(f"--wait-for-subscribers: expected a count >= 0, got {args.wait_for_subscribers}")
    if args.wait_for_subscribers > 0 and args.wait_for_policy <= 0:
        raise SystemExit(f"--wait-for-subscribers {args.wait_for_subscribers}: needs --wait-for-policy S (its "
                         "timeout; without it the world starts at once)")


def wait_for_subscribers(count: Callable[[], int], wanted: int, timeout_s: float, logger: logging.Logger) -> bool:
    """Wait up to ``timeout_s`` until ``count()`` (subscriptions matched to the joint states) reaches
    ``wanted``; return whether it did (a warning when not: the world then starts anyway, as after
    ``--wait-for-policy``).
    """
    t0 = time.monotonic()
    while (got := count()) < wanted:
        if time.monotonic() - t0 >= timeout_s:
            logger.warning("%s: %d of %d joint_states subscribers after %g s; starting anyway", NODE, got, wanted,
                           timeout_s)
            return False
        time.sleep(0.01)
    logger.info("%s: %d joint_states subscribers after %.3f s", NODE, got, time.monotonic() - t0)
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the node (module doc); return the exit status."""
    args = build_parser().parse_args(argv)
    check_wait_for_subscribers(args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    tune_process(args, log)
    # Off Fast DDS's shared-memory transport before rclpy starts (common.control_node_transport says
    # why: a dead reader can stall a publish ~1 s with the GIL held, and the watchdog with it).
    apply_control_transport(log, NODE)
    from std_msgs.msg import Bool, Float64, String

    from robolearn.sim2real.ros import ros2

    robot, features, cameras = start_robot(args)
    topics = Topics(namespace=args.namespace, command_type=args.command_type,
                    image_transport={c: args.image_transport for c in features.cameras} if cameras else {})
    compressed = args.image_transport == "compressed"
    spinner = ros2.Spinner(NODE, args.namespace)
    node = spinner.node
    log_to_stderr()
    node.create_publisher(String, topics.name("robot_features"), ros2.LATCHED_QOS).publish(
        String(data=json.dumps(features.to_dict())))
    state_pub = node.create_publisher(ros2.JointState, topics.name(topics.joint_states), ros2.CONTROL_QOS)
    reward_pub = node.create_publisher(Float64, topics.name(topics.reward), ros2.CONTROL_QOS)
    status_pub = node.create_publisher(String, topics.name(topics.robot_status), 10)
    command_topic = topics.name(topics.command)
    image_pubs = {c: node.create_publisher(ros2.CompressedImage if compressed else ros2.Image, topics.image_topic(c),
                                           ros2.IMAGE_QOS) for c in (features.cameras if cameras else ())}
    for camera in image_pubs:
        log.info("%s: camera %r on %s", NODE, camera, topics.image_topic(camera))

    class Transport:
        def tick_stamp(self) -> int:
            return node.get_clock().now().nanoseconds

        def publish_tick(self, reading: Reading, reward: float | None, stamp: int) -> None:
            state_pub.publish(ros2.joint_state_message(features, reading, stamp))
            if reward is not None:
                reward_pub.publish(Float64(data=reward))

        def publish_status(self, text: str) -> None:
            status_pub.publish(String(data=text))

        def publish_images(self, frames: Mapping[str, np.ndarray], stamp: int) -> None:
            for camera, image in frames.items():
                image_pubs[camera].publish(ros2.image_message(image, features.cameras[camera].encoding, compressed,
                                                              stamp))

        def command_publishers(self) -> int:
            return node.count_publishers(command_topic)

        def now(self) -> float:
            return spinner.now()

    body = RobotNode(robot, Transport(), args, topics, log, cameras)
    node.create_subscription(ros2.command_class(topics.command_type), command_topic,
                             lambda m: body.on_command(lambda: parse_command(features, m, topics.command)),
                             ros2.CONTROL_QOS)
    node.create_subscription(Bool, topics.name(topics.estop), lambda m: body.on_estop(bool(m.data)), 10)
    log.info("%s: %s (%g Hz, %s commands on %s as %s)", NODE, args.task, features.rate_hz, features.command_kind,
             command_topic, topics.command_type)
    try:
        if args.wait_for_subscribers > 0:
            # Before the policy's publisher lets the world start (RobotNode.run): the world publishes
            # from then on, and a reader matched later never gets the states sent before (volatile).
            wait_for_subscribers(state_pub.get_subscription_count, args.wait_for_subscribers, args.wait_for_policy, log)
        body.run()
    finally:
        spinner.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
