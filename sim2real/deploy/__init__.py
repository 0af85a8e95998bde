"""The deploy runtime: an exported policy on a robot, at a fixed rate, behind a safety layer.

* :mod:`~robolearn.sim2real.deploy.policy`: :func:`load_exported` (ONNX Runtime / TorchScript,
  manifest hashes verified);
* :mod:`~robolearn.sim2real.deploy.observations`: :class:`ObservationAdapter`, a robot's readings to
  the policy's observation through the training processors (``robolearn.spec``);
* :mod:`~robolearn.sim2real.deploy.images`: :class:`ImageAdapter`, a robot's camera frames to an
  image policy's stacked inputs through the env's preprocessing (``robolearn.spec.image_ops``);
* :mod:`~robolearn.sim2real.deploy.safety`: :class:`SafetyLayer` and :class:`SafetyConfig`;
* :mod:`~robolearn.sim2real.deploy.runtime`: :class:`DeployRuntime`, :func:`check_robot`;
* :mod:`~robolearn.sim2real.deploy.telemetry`: :class:`Telemetry`, the log as a robolearn dataset.

Nothing here imports MuJoCo or the task registry: the runtime runs on a robot's computer.
"""

from robolearn.sim2real.deploy.images import ImageAdapter
from robolearn.sim2real.deploy.observations import ObservationAdapter
from robolearn.sim2real.deploy.policy import ExportedPolicy, PolicyLoadError, load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime, LoopStats, check_robot
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig, SafetyLayer
from robolearn.sim2real.deploy.telemetry import Telemetry

__all__ = [
    "DeployMismatch",
    "DeployRuntime",
    "ExportedPolicy",
    "ImageAdapter",
    "Intervention",
    "LoopStats",
    "ObservationAdapter",
    "PolicyLoadError",
    "SafetyConfig",
    "SafetyLayer",
    "Telemetry",
    "check_robot",
    "load_exported",
]
