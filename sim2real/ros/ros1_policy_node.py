"""An exported policy as a ROS 1 node: the deploy runtime driving a robot behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros1_policy_node --policy <export dir>
        --robot <features .json/.yaml | from-params> [--params <file>] [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--rate HZ] [--safety JSON]
        [--lost-timeout 0.5] [--telemetry out.h5] [--summary out.json] [--duration S] [--wait 30]
        [--image-topic CAMERA=TOPIC ...] [--image-transport CAMERA=raw|compressed ...] [--camera INPUT=CAMERA ...]

The loop is :class:`~robolearn.sim2real.deploy.runtime.DeployRuntime` in the main thread
(absolute deadlines, spin before each), reading a :class:`~robolearn.sim2real.ros.ros1.Ros1Robot`
and sending through the safety layer. The robot's description comes from a file
(:meth:`RobotFeatures.from_dict <robolearn.sim2real.robots.base.RobotFeatures.from_dict>`'s
layout), from the parameter server (``from-params``: the JSON text a robot node sets as its
``~features``, ``<namespace>/robot/features`` unless ``--features-param`` says otherwise) or from
the ``robot`` entry of a parameter file written by :func:`robolearn.sim2real.ros.common.write_parameters`
(``--params``; its ``topics``, ``rate_hz``, ``safety`` and ``policy`` are defaults the flags override).

Topics (under the namespace): ``joint_states`` in, ``command`` out, ``estop`` in (``true`` latches
the runtime's e-stop: only the safe command from then on), ``policy_status`` out at about 10 Hz, a
JSON object: ``status`` (``idle``, ``ramp``, ``run``, ``hold``, ``stale``, ``stale_camera``,
``no_camera``, ``lost``, ``estop``, ``exit``, ``stopped``: :attr:`DeployRuntime.status
<robolearn.sim2real.deploy.runtime.DeployRuntime.status>`), ``steps``, ``sent``, ``missed``,
``interventions`` (counts by kind), ``flags`` (the last step's interventions), ``stale`` (joint
states stale or robot lost), ``stale_camera`` (held or not started for a camera frame that is not
fresh or never came), ``malformed`` (joint states rejected) and ``malformed_last`` (the newest
error), ``estop``; for a robot with cameras also ``images`` (good frames by camera),
``malformed_images`` and ``malformed_images_last``.

Cameras: each camera of the robot's features is read from ``<namespace>/<camera>/image_raw``
(``sensor_msgs/Image``), or ``.../image_raw/compressed`` (``CompressedImage``) with
``--image-transport CAMERA=compressed``; ``--image-topic CAMERA=TOPIC`` names another topic (in a
parameter file: ``topics.images.<camera>`` and ``topics.image_transport.<camera>``). Frames reach the
runtime in ``Reading.images`` (:mod:`robolearn.sim2real.ros.ros1`). An image policy's input reads the
camera its image term was rendered from unless ``--camera INPUT=CAMERA`` (parameter file:
``cameras.<input>``) names another.

SIGINT or SIGTERM stops the loop; the runtime damps for the safety layer's ``exit_s``, then the
telemetry is saved (``--telemetry``, a robolearn dataset) and the loop's summary written
(``--summary``). Exit status 2: the policy does not fit the robot (every mismatch logged).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime
from robolearn.sim2real.robots.base import RobotFeatures
from robolearn.sim2real.ros.node_common import (
    LOG_FORMAT,
    add_policy_arguments,
    drive_policy,
    load_features,
    policy_settings,
    tune_process,
)

log = logging.getLogger("robolearn.sim2real.ros.ros1_policy_node")

NODE = "policy"
"""The node's name under its namespace."""

__all__ = ["build_parser", "features_from_params", "load_features", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command line (module doc)."""
    p = add_policy_arguments(argparse.ArgumentParser(
        prog="python -m robolearn.sim2real.ros.ros1_policy_node",
        description="Run an exported policy on a robot behind ROS 1 topics."))
    p.add_argument("--features-param", default=None, help="parameter holding the features JSON (from-params)")
    return p


def features_from_params(rospy: Any, name: str, wait_s: float) -> RobotFeatures:
    """The features JSON text in parameter ``name``, waiting up to ``wait_s`` for a robot to set it."""
    deadline = time.monotonic() + wait_s
    while True:
        if rospy.has_param(name):
            text = rospy.get_param(name)
            try:
                data = json.loads(text) if isinstance(text, str) else text
            except json.JSONDecodeError as exc:
                raise SystemExit(f"--robot from-params: parameter {name} is not JSON: {exc}") from None
            return RobotFeatures.from_dict(data, f"parameter {name}")
        if time.monotonic() > deadline:
            raise SystemExit(f"--robot from-params: parameter {name} was not set within {wait_s:g} s "
                             "(is the robot node running under this namespace?)")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """Run the node (module doc); return the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    tune_process(args, log)
    settings = policy_settings(args, NODE)
    topics = settings.topics

    # rospy fixes a node's namespace when first imported: set it before the bridge imports rospy.
    os.environ["ROS_NAMESPACE"] = topics.namespace
    import rospy
    from std_msgs.msg import Bool, String

    from robolearn.sim2real.ros import ros1

    ros1.init_node(NODE)
    ros1.log_to_stderr()
    if args.robot == "from-params":
        name = args.features_param or f"{topics.namespace.rstrip('/')}/robot/features"
        features = features_from_params(rospy, name, args.wait)
    elif args.robot:
        features = load_features(args.robot)
    elif settings.params.get("robot"):
        features = RobotFeatures.from_dict(settings.params["robot"], f"{args.params}: robot")
    else:
        raise SystemExit("--robot: missing (a features file, 'from-params', or 'robot' in --params)")
    for key, value in settings.params.items():
        rospy.set_param(f"~{key}", value)

    policy = load_exported(settings.policy_dir, args.format)
    robot = ros1.Ros1Robot(features, topics)
    try:
        runtime = DeployRuntime(policy, robot, settings.safety, rate_hz=settings.rate, lost_timeout_s=args.lost_timeout,
                                    seed=args.sampler_seed, noise=args.sampler_noise,
                                    cameras=settings.cameras or None)
    except DeployMismatch as exc:
        log.error("%s", exc)
        rospy.signal_shutdown("policy does not fit the robot")
        return 2
    status_pub = rospy.Publisher(topics.name(topics.policy_status), String, queue_size=10)

    class Transport:
        def publish_status(self, text: str) -> None:
            status_pub.publish(String(text))

        def subscribe_estop(self, callback: Callable[[bool], None]) -> Callable[[], None]:
            sub = rospy.Subscriber(topics.name(topics.estop), Bool, lambda m: callback(bool(m.data)), queue_size=10)
            return sub.unregister

    drive_policy(runtime, robot, Transport(), args, topics, settings.policy_dir, log, NODE)
    rospy.signal_shutdown("policy node finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
