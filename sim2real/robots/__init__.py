"""Robots the deploy runtime drives: the :class:`Robot` interface and its declared features.

The simulated robot (:mod:`robolearn.sim2real.robots.sim_robot`) is imported on demand, since it
brings the simulator; the ROS robots live with the bridges in :mod:`robolearn.sim2real.ros`.
"""

from robolearn.sim2real.robots.base import (
    CAMERA_ENCODINGS,
    COMMAND_KINDS,
    CameraFeature,
    CameraFrame,
    CommandKind,
    Reading,
    Robot,
    RobotError,
    RobotFeatures,
    RobotSpecError,
)

__all__ = ["CAMERA_ENCODINGS", "COMMAND_KINDS", "CameraFeature", "CameraFrame", "CommandKind", "Reading", "Robot", "RobotError", "RobotFeatures", "RobotSpecError"]
