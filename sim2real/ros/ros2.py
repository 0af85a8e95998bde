"""The ROS 2 bridge: a robot behind ``rclpy`` topics, and the message pieces its nodes share.

The ROS 2 twin of :mod:`robolearn.sim2real.ros.ros1`, on the same topics
(:class:`~robolearn.sim2real.ros.common.Topics`): ``sensor_msgs/JointState`` in,
``std_msgs/Float64MultiArray`` or ``trajectory_msgs/JointTrajectory`` out, an optional
``geometry_msgs/Twist``. :class:`Ros2Robot` keeps the newest good reading, stamped with its
header time and ``time.monotonic()`` on arrival; a malformed message is counted, logged (throttled)
and dropped, so the last good reading goes stale and the safety layer holds the robot.

A node here is an ``rclpy`` node spun by a :class:`Spinner` (an executor in a background thread),
so callbacks arrive while the deploy loop runs in the main thread. The robot's description travels
on the ``robot_features`` topic (``std_msgs/String``, JSON, *transient local*: a late subscriber
still gets it), ROS 2's way of publishing a robot description.

Cameras: the topics, conversion, checks and counters of :mod:`robolearn.sim2real.ros.ros1`
(``<namespace>/<camera>/image_raw``, or ``.../image_raw/compressed`` with ``Topics.image_transport``
``compressed``; ``Topics.images`` names another topic), subscribed with :data:`IMAGE_QOS`: the
sensor-data profile, best effort, keep last, depth 1. Best effort because a lost frame is best
replaced by the next one, not resent (a reliable reader makes the writer resend the fragments of a
megabyte frame and queue the next behind them, so the policy would see old frames late), and because
camera drivers publish best effort (rclcpp's ``SensorDataQoS``), which a reliable reader would not
match at all; a best-effort reader matches reliable writers too. Depth 1: only the newest frame is
worth reading. A node publishing frames uses the same profile. Frames larger than a UDP socket's
buffer (640x480 rgb8 is 900 KiB; Linux's default buffer 208 KiB) are mostly lost over Fast DDS:
give the processes larger buffers with the profile
:data:`~robolearn.sim2real.ros.common.FASTDDS_SOCKET_BUFFERS_XML` (its doc says how and when it
applies), or send such frames as ``CompressedImage``.

rclpy comes from the ROS 2 venv (``.venv-ros2``, ``scripts/setup.sh``) and, on a shared machine,
runs only inside ``unshare -n`` (loopback only): the tests and benchmarks do exactly that.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import rclpy
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import Twist
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robolearn.sim2real.robots.base import Reading, RobotFeatures
from robolearn.sim2real.ros.common import TRAJECTORY_FIELD, Topics
from robolearn.sim2real.ros.images import fill_compressed, fill_image
from robolearn.sim2real.ros.node_common import TopicRobot

log = logging.getLogger(__name__)


CONTROL_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
"""Joint states and commands: reliable, a short queue (the newest matters)."""
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""The robot's description: kept for subscribers that join later."""
IMAGE_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT,
                       durability=DurabilityPolicy.VOLATILE)
"""Camera frames: the sensor-data profile with depth 1 (module doc)."""


class Spinner:
    """An rclpy node spun by a single-threaded executor in a daemon thread."""

    def __init__(self, name: str, namespace: str) -> None:
        """Start rclpy (once per process) and the node ``name`` under ``namespace``."""
        if not rclpy.ok():
            rclpy.init(args=[])
        self.node: Node = rclpy.create_node(name, namespace=namespace)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name=f"rclpy-{name}", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # shutdown races: the executor is closed while it waits
            if rclpy.ok():
                raise

    def now(self) -> float:
        """ROS time in seconds."""
        return self.node.get_clock().now().nanoseconds * 1e-9

    def shutdown(self) -> None:
        """Stop spinning, destroy the node, shut rclpy down."""
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        self._thread.join(timeout=2.0)


def command_class(command_type: str) -> type:
    """The message class of a command topic of ``command_type``."""
    if command_type == "float64_multi_array":
        return Float64MultiArray
    if command_type == "joint_trajectory":
        return JointTrajectory
    raise ValueError(f"command_type: expected float64_multi_array or joint_trajectory, got {command_type!r}")


def command_message(features: RobotFeatures, command_type: str, command: np.ndarray) -> Float64MultiArray | JointTrajectory:
    """``command`` (physical units) as a message of ``command_type`` (one trajectory point reached
    one control period from now, in the field of the robot's command kind).
    """
    values = [float(v) for v in np.asarray(command, dtype=np.float64).reshape(-1)]
    if command_type == "float64_multi_array":
        msg = Float64MultiArray()
        msg.layout.dim = [MultiArrayDimension(label="joints", size=len(values), stride=len(values))]
        msg.data = values
        return msg
    msg = JointTrajectory()
    msg.joint_names = list(features.command_joints)
    point = JointTrajectoryPoint()
    setattr(point, TRAJECTORY_FIELD[features.command_kind], values)
    nanos = int(round(features.period * 1e9))
    point.time_from_start = Duration(sec=nanos // 1_000_000_000, nanosec=nanos % 1_000_000_000)
    msg.points = [point]
    return msg


def joint_state_message(features: RobotFeatures, reading: Reading, now_ns: int) -> JointState:
    """``reading`` as a JointState of ``features.joints`` stamped ``now_ns`` (ROS time)."""
    msg = JointState()
    msg.header.stamp.sec = now_ns // 1_000_000_000
    msg.header.stamp.nanosec = now_ns % 1_000_000_000
    msg.name = list(features.joints)
    msg.position = reading.joint_pos.tolist()
    msg.velocity = reading.joint_vel.tolist()
    if reading.joint_effort is not None:
        msg.effort = reading.joint_effort.tolist()
    return msg


def image_message(array: np.ndarray, encoding: str, compressed: bool, now_ns: int) -> Image | CompressedImage:
    """A camera frame (``[H, W, C]`` in ``encoding``) as an ``Image``, or a PNG ``CompressedImage``
    (lossless) when ``compressed``, stamped ``now_ns`` (ROS time).
    """
    msg = CompressedImage() if compressed else Image()
    msg.header.stamp.sec = now_ns // 1_000_000_000
    msg.header.stamp.nanosec = now_ns % 1_000_000_000
    return fill_compressed(msg, array, encoding, "png") if compressed else fill_image(msg, array, encoding)


class Ros2Robot(TopicRobot):
    """A robot behind ROS 2 topics (module doc), on the node of a :class:`Spinner` (the client-free
    part is :class:`~robolearn.sim2real.ros.node_common.TopicRobot`).
    """

    def __init__(self, features: RobotFeatures, node: Node, topics: Topics | None = None, *, log_every_s: float = 1.0) -> None:
        """Describe the robot and its topics; ``node`` is this process's spun node."""
        super().__init__(features, topics, log_every_s, log)
        self.node = node
        self._subs: list = []

    def connect(self) -> None:
        """Subscribe to the joint states (and Twist), create the command publisher; idempotent."""
        if self._pub is not None:
            return
        t = self.topics
        self._subs.append(self.node.create_subscription(JointState, t.name(t.joint_states), self._on_joint_state, CONTROL_QOS))
        if t.cmd_vel:
            self._subs.append(self.node.create_subscription(Twist, t.name(t.cmd_vel), self._on_twist, CONTROL_QOS))
        for camera, topic, compressed in self._camera_subscriptions():
            def on_image(msg: Image | CompressedImage, camera: str = camera, compressed: bool = compressed) -> None:
                self._accept_image(camera, msg, compressed, msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)

            self._subs.append(self.node.create_subscription(CompressedImage if compressed else Image, topic, on_image,
                                                            IMAGE_QOS))
            log.info("robot %r: camera %r from %s (%s)", self.features.name, camera, topic,
                     "CompressedImage" if compressed else "Image")
        self._pub = self.node.create_publisher(command_class(t.command_type), t.name(t.command), CONTROL_QOS)
        log.info("robot %r: reading %s, commanding %s (%s)", self.features.name, t.name(t.joint_states),
                 t.name(t.command), t.command_type)

    def disconnect(self) -> None:
        """Close the topics; idempotent."""
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self._subs = []
        if self._pub is not None:
            self.node.destroy_publisher(self._pub)
            self._pub = None

    def _publish(self, command: np.ndarray) -> None:
        self._pub.publish(command_message(self.features, self.topics.command_type, command))

    def _command_subscribers(self) -> int:
        return self._pub.get_subscription_count()

    def _on_joint_state(self, msg: JointState) -> None:
        self._accept_joint_state(msg.name, msg.position, msg.velocity, msg.effort,
                                 msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)

    def _on_twist(self, msg: Twist) -> None:
        self._accept_twist(msg.linear.x, msg.linear.y, msg.angular.z)
