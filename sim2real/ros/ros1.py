"""The ROS 1 bridge: a robot behind ``rospy`` topics, and what its two nodes share.

:class:`Ros1Robot` is a :class:`~robolearn.sim2real.robots.base.Robot` whose readings arrive as
``sensor_msgs/JointState`` on ``<namespace>/joint_states`` and whose commands leave on
``<namespace>/command`` (``std_msgs/Float64MultiArray``, or ``trajectory_msgs/JointTrajectory``
with one point: efforts for a torque robot, positions for position targets, velocities for
velocity targets; :attr:`Topics.command_type <robolearn.sim2real.ros.common.Topics>` chooses).
A reading is stamped with its header's time and with ``time.monotonic()`` when it arrived, so the
deploy runtime measures staleness on its own clock. A malformed message (a joint missing from
``name``, arrays whose lengths disagree, NaN or infinity) is counted, logged with the field named
(the first of a kind at once, then at most once a second) and dropped: the last good reading stays,
goes stale, and the safety layer holds the robot. An optional ``geometry_msgs/Twist`` topic feeds
the extra reading ``command/<cmd_vel_name>`` as ``[linear.x, linear.y, angular.z]``.

Cameras. For every camera of ``features.cameras`` the robot subscribes to
``<namespace>/<camera>/image_raw`` (``sensor_msgs/Image``) or, with ``Topics.image_transport``
``{camera: "compressed"}``, ``<namespace>/<camera>/image_raw/compressed`` (``CompressedImage``,
PNG or JPEG); ``Topics.images`` names another topic (:class:`~robolearn.sim2real.ros.common.Topics`).
A frame is converted to the declared encoding (RGB order) and kept, the newest only, with its
header stamp and its receipt time, in every :attr:`Reading.images <robolearn.sim2real.robots.base.Reading.images>`;
a message of another size or kind of encoding is refused, counted (``rejected_images``) and logged
naming the field (:func:`robolearn.sim2real.ros.images.camera_image`), and the last good frame stays
and ages. An image subscriber keeps one message (``queue_size=1``: an old frame is worth nothing once
a newer one is there) and reads with a socket buffer of at least two frames (rospy's default 64 KiB
buffer makes a subscriber of large messages fall behind and deliver old ones).

The nodes (``python -m robolearn.sim2real.ros.ros1_policy_node`` and ``...ros1_robot_node``) are
built from these pieces: :func:`init_node`, :func:`command_message` / :func:`parse_command`,
:func:`joint_state_message`, and the ROS-free bodies of :mod:`robolearn.sim2real.ros.node_common`
they share with the ROS 2 nodes.

rospy is imported here and only under ``sim2real/ros`` (``tests/test_import_rules.py``); a process
holds one ROS node, so :class:`Ros1Robot` expects :func:`init_node` (or ``rospy.init_node``) first.
"""

from __future__ import annotations

import logging

import numpy as np
import rospy
from geometry_msgs.msg import Twist
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robolearn.sim2real.robots.base import Reading, RobotError, RobotFeatures
from robolearn.sim2real.ros.common import TRAJECTORY_FIELD, Topics, parse_command
from robolearn.sim2real.ros.images import fill_compressed, fill_image
from robolearn.sim2real.ros.node_common import ThrottledLog, TopicRobot, log_to_stderr, write_text_atomic

log = logging.getLogger(__name__)

__all__ = [
    "Ros1Robot", "ThrottledLog", "command_class", "command_message", "image_message", "init_node", "joint_state_message",
    "log_to_stderr", "parse_command", "write_text_atomic",
]




def init_node(name: str, *, anonymous: bool = False) -> None:
    """Start this process's ROS node ``name`` with rospy's signal handlers off (the caller stops
    its own loop on SIGINT/SIGTERM, then damps and saves before shutting rospy down).

    The node's namespace is ``ROS_NAMESPACE`` as it was when rospy was first imported.
    """
    if rospy.core.is_initialized():
        return
    # argv=[]: the node's own command line is argparse's, not remapping arguments.
    rospy.init_node(name, anonymous=anonymous, disable_signals=True, argv=[])


def command_class(command_type: str) -> type:
    """The message class of a command topic of ``command_type`` (``Topics.command_type``)."""
    if command_type == "float64_multi_array":
        return Float64MultiArray
    if command_type == "joint_trajectory":
        return JointTrajectory
    raise ValueError(f"command_type: expected float64_multi_array or joint_trajectory, got {command_type!r}")


def command_message(features: RobotFeatures, command_type: str,
                    command: np.ndarray) -> Float64MultiArray | JointTrajectory:
    """``command`` (``[len(command_joints)]``, physical units) as a message of ``command_type``.

    A trajectory holds one point reached one control period from now (``header.stamp`` zero: start
    on receipt), in the field of the robot's command kind (:data:`TRAJECTORY_FIELD`).
    """
    values = [float(v) for v in np.asarray(command, dtype=np.float64).reshape(-1)]
    if command_type == "float64_multi_array":
        msg = Float64MultiArray()
        n = len(values)
        msg.layout.dim = [MultiArrayDimension(label="joints", size=n, stride=n)]
        msg.data = values
        return msg
    if command_type != "joint_trajectory":
        raise ValueError(f"command_type: expected float64_multi_array or joint_trajectory, got {command_type!r}")
    msg = JointTrajectory()
    msg.joint_names = list(features.command_joints)
    point = JointTrajectoryPoint()
    setattr(point, TRAJECTORY_FIELD[features.command_kind], values)
    point.time_from_start = rospy.Duration.from_sec(features.period)
    msg.points = [point]
    return msg


def joint_state_message(features: RobotFeatures, reading: Reading, stamp: rospy.Time | None = None) -> JointState:
    """``reading`` as a JointState of ``features.joints`` (``header.stamp``: ``stamp`` or now)."""
    msg = JointState()
    msg.header.stamp = stamp if stamp is not None else rospy.Time.now()
    msg.name = list(features.joints)
    msg.position = reading.joint_pos.tolist()
    msg.velocity = reading.joint_vel.tolist()
    if reading.joint_effort is not None:
        msg.effort = reading.joint_effort.tolist()
    return msg


def image_message(array: np.ndarray, encoding: str, compressed: bool = False,
                  stamp: rospy.Time | None = None) -> Image | CompressedImage:
    """A camera frame (``[H, W, C]`` in ``encoding``) as an ``Image``, or a PNG ``CompressedImage``
    (lossless) when ``compressed``; ``header.stamp``: ``stamp`` or now.
    """
    msg = CompressedImage() if compressed else Image()
    msg.header.stamp = stamp if stamp is not None else rospy.Time.now()
    return fill_compressed(msg, array, encoding, "png") if compressed else fill_image(msg, array, encoding)


class Ros1Robot(TopicRobot):
    """A robot behind ROS 1 topics (module doc; the client-free part is :class:`TopicRobot`)."""

    def __init__(self, features: RobotFeatures, topics: Topics | None = None, *, queue_size: int = 10,
                 log_every_s: float = 1.0) -> None:
        """Describe the robot and its topics; ``queue_size`` bounds the command publisher's outgoing
        queue (a slow subscriber drops the oldest commands, never delays the newest).
        """
        super().__init__(features, topics, log_every_s, log)
        self.queue_size = int(queue_size)
        self._subs: list[rospy.Subscriber] = []

    def connect(self) -> None:
        """Subscribe to the joint states (and Twist) and advertise the command topic; idempotent."""
        if self._pub is not None:
            return
        if not rospy.core.is_initialized():
            raise RobotError(f"robot {self.features.name!r}: no ROS node in this process; call "
                             "robolearn.sim2real.ros.ros1.init_node(name) (or rospy.init_node) before connect()")
        t = self.topics
        # tcp_nodelay: a JointState is a few hundred bytes; Nagle's algorithm would hold it back.
        self._subs.append(rospy.Subscriber(t.name(t.joint_states), JointState, self._on_joint_state,
                                           queue_size=1, tcp_nodelay=True))
        if t.cmd_vel:
            self._subs.append(rospy.Subscriber(t.name(t.cmd_vel), Twist, self._on_twist, queue_size=1))
        for camera, topic, compressed in self._camera_subscriptions():
            frame_bytes = int(np.prod(self.features.cameras[camera].shape))
            self._subs.append(rospy.Subscriber(topic, CompressedImage if compressed else Image, self._on_image,
                                               callback_args=(camera, compressed), queue_size=1,
                                               buff_size=max(1 << 20, 2 * frame_bytes + (1 << 16)), tcp_nodelay=True))
            log.info("robot %r: camera %r from %s (%s)", self.features.name, camera, topic,
                     "CompressedImage" if compressed else "Image")
        self._pub = rospy.Publisher(t.name(t.command), command_class(t.command_type), queue_size=self.queue_size,
                                    tcp_nodelay=True)
        log.info("robot %r: reading %s, commanding %s (%s)", self.features.name, t.name(t.joint_states),
                 t.name(t.command), t.command_type)

    def disconnect(self) -> None:
        """Close the topics; idempotent."""
        for sub in self._subs:
            sub.unregister()
        self._subs = []
        if self._pub is not None:
            self._pub.unregister()
            self._pub = None

    def _publish(self, command: np.ndarray) -> None:
        self._pub.publish(command_message(self.features, self.topics.command_type, command))

    def _command_subscribers(self) -> int:
        return self._pub.get_num_connections()

    def _on_joint_state(self, msg: JointState) -> None:
        self._accept_joint_state(msg.name, msg.position, msg.velocity, msg.effort, msg.header.stamp.to_sec())

    def _on_image(self, msg: Image | CompressedImage, args: tuple[str, bool]) -> None:
        self._accept_image(args[0], msg, args[1], msg.header.stamp.to_sec())

    def _on_twist(self, msg: Twist) -> None:
        self._accept_twist(msg.linear.x, msg.linear.y, msg.angular.z)
