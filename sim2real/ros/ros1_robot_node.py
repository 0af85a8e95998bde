"""A simulated robot as a ROS 1 node: a task's MuJoCo world behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros1_robot_node --task Cartpole-Balance [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--command-timeout 0.1] [--seed 0]
        [--features-out robot.json] [--override timestep=0.005 ...] [--command-log commands.npz]
        [--wait-for-policy S] [--duration S] [--images [--image-transport raw|compressed] [--image-every K]]

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
``commands`` (good ones), ``estop``, ``dropped_ticks`` (ticks not published because the publishers
fell behind: a publishing thread sends them, so the stepping thread and its watchdog never wait on
the transport; ``node_common.TickPublisher``).

The robot's :class:`~robolearn.sim2real.robots.base.RobotFeatures` are set as the private parameter
``~features`` (JSON text; ``<namespace>/robot/features``), which a policy node started with
``--robot from-params`` reads, and written to ``--features-out`` when given. ``--command-log``
saves every good command with its receipt times (ROS time and monotonic) on exit, for latency
measurements (``benchmarks/ros_loop.py``). ``--wait-for-policy S`` keeps the world still (nothing
published) until a command publisher connects, or ``S`` seconds passed, and then still (its readings
published every period) until the first command: a balancing task would otherwise fall while the
policy process is still starting.

``--images`` (a pixel task such as ``Cartpole-Swingup-Pixels``): after every ``--image-every``-th
step each camera the simulated robot declares (its task's camera terms, named by the MJCF camera:
``fixed`` for Cartpole-Swingup-Pixels) publishes its frame of that step, the env's own observation of
that state, on ``<namespace>/<camera>/image_raw`` as ``sensor_msgs/Image`` (``rgb8``, stamped with
the ROS time of its tick, as the joint state), or with ``--image-transport compressed`` on
``<namespace>/<camera>/image_raw/compressed`` as a PNG ``CompressedImage`` (lossless). The cameras
are declared in the features (``~features``, ``--features-out``) only with ``--images``; the
publishers keep one frame (``queue_size=1``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping

import numpy as np

from robolearn.sim2real.robots.base import Reading
from robolearn.sim2real.ros.common import Topics
from robolearn.sim2real.ros.node_common import (
    LOG_FORMAT,
    RobotNode,
    add_robot_arguments,
    start_robot,
    tune_process,
)

log = logging.getLogger("robolearn.sim2real.ros.ros1_robot_node")

NODE = "robot"
"""The node's name under its namespace."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (module doc)."""
    return add_robot_arguments(argparse.ArgumentParser(
        prog="python -m robolearn.sim2real.ros.ros1_robot_node",
        description="A simulated robot (one MuJoCo world of a task) as a ROS 1 node."))


def main(argv: list[str] | None = None) -> int:
    """Run the node (module doc); return the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    tune_process(args, log)
    # rospy fixes a node's namespace when first imported: set it before the bridge imports rospy.
    os.environ["ROS_NAMESPACE"] = args.namespace
    import rospy
    from std_msgs.msg import Bool, Float64, String

    from robolearn.sim2real.ros import ros1

    robot, features, cameras = start_robot(args)
    topics = Topics(namespace=args.namespace, command_type=args.command_type,
                    image_transport={c: args.image_transport for c in features.cameras} if cameras else {})
    compressed = args.image_transport == "compressed"
    ros1.init_node(NODE)
    ros1.log_to_stderr()
    rospy.set_param("~features", json.dumps(features.to_dict()))
    log.info("%s: %s (%g Hz, %s commands on %s as %s); features in %s", NODE, args.task, features.rate_hz,
             features.command_kind, topics.name(topics.command), topics.command_type, rospy.resolve_name("~features"))
    state_pub = rospy.Publisher(topics.name(topics.joint_states), ros1.JointState, queue_size=10, tcp_nodelay=True)
    reward_pub = rospy.Publisher(topics.name(topics.reward), Float64, queue_size=10)
    status_pub = rospy.Publisher(topics.name(topics.robot_status), String, queue_size=10)
    # queue_size=1: a subscriber that falls behind gets the newest frame, never a backlog.
    image_pubs = {c: rospy.Publisher(topics.image_topic(c), ros1.CompressedImage if compressed else ros1.Image,
                                     queue_size=1, tcp_nodelay=True) for c in (features.cameras if cameras else ())}
    for camera in image_pubs:
        log.info("%s: camera %r on %s", NODE, camera, topics.image_topic(camera))
    subs: list = []

    class Transport:
        def tick_stamp(self) -> rospy.Time:
            return rospy.Time.now()

        def publish_tick(self, reading: Reading, reward: float | None, stamp: rospy.Time) -> None:
            state_pub.publish(ros1.joint_state_message(features, reading, stamp))
            if reward is not None:
                reward_pub.publish(Float64(reward))

        def publish_status(self, text: str) -> None:
            status_pub.publish(String(text))

        def publish_images(self, frames: Mapping[str, np.ndarray], stamp: rospy.Time) -> None:
            for camera, image in frames.items():
                image_pubs[camera].publish(ros1.image_message(image, features.cameras[camera].encoding, compressed, stamp))

        def command_publishers(self) -> int:
            return subs[0].get_num_connections()

        def now(self) -> float:
            return rospy.get_time()

    body = RobotNode(robot, Transport(), args, topics, log, cameras)
    subs.append(rospy.Subscriber(topics.name(topics.command), ros1.command_class(topics.command_type),
                                 lambda m: body.on_command(lambda: ros1.parse_command(features, m, topics.command)),
                                 queue_size=10, tcp_nodelay=True))
    subs.append(rospy.Subscriber(topics.name(topics.estop), Bool, lambda m: body.on_estop(bool(m.data)), queue_size=10))
    try:
        body.run(alive=lambda: not rospy.is_shutdown())
    finally:
        for sub in subs:
            sub.unregister()
        try:
            # A description left behind would mislead the next policy node started from-params.
            rospy.delete_param("~features")
        except (KeyError, OSError):
            pass
        rospy.signal_shutdown("robot node finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
