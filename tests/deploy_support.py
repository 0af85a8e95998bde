"""Shared pieces of the deployment tests: a cart-pole controller exported like any trained policy.

The controller is a discrete-time LQR on MuJoCo's own linearisation of ``Cartpole-Balance``
(``mujoco.mjd_transitionFD`` at the upright state, Euler integrator; Q = diag(1, 10, 0.1, 0.1),
R = 1), written into one ``nn.Linear`` over the task's 5-D observation ``[x, cos, sin, x_dot,
theta_dot]`` (``sin`` standing in for the angle near upright) and exported with
:func:`robolearn.export.export_policy`: the deploy side meets real ONNX and TorchScript files and
a real manifest, and the policy balances the pole (return ~1000 of 1000) without minutes of
training in a test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

import robolearn
from robolearn.export import export_policy
from robolearn.sim2real.robots import Reading, Robot, RobotFeatures

LQR_GAINS = (-0.92652558, -7.44385219, -1.13037537, -1.77949797)
"""``K`` of ``u = -K [x, theta, x_dot, theta_dot]`` (computed as the module doc says)."""


def lqr_network() -> nn.Module:
    """The controller as a network over the 5-D observation."""
    k0, k1, k2, k3 = LQR_GAINS
    net = nn.Linear(5, 1)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[-k0, 0.0, -k1, -k2, -k3]]))
        net.bias.zero_()
    return net


def export_cartpole_lqr(out: Path, task: str = "Cartpole-Balance", formats: tuple[str, ...] = ("onnx",)) -> Path:
    """Export the controller with ``task``'s policy spec into ``out``; return ``out``."""
    spec = robolearn.make(task, 1, seed=0).policy_spec()
    export_policy(lqr_network(), spec, out, formats, parity_samples=16)
    return out


class DescribedRobot(Robot):
    """A robot that only describes itself: the runtime under test must refuse it before it reads or sends."""

    def __init__(self, features: RobotFeatures) -> None:
        """``features``: what the robot declares."""
        self.features = features

    def connect(self) -> None:
        """Nothing to open."""

    def disconnect(self) -> None:
        """Nothing to close."""

    @property
    def is_connected(self) -> bool:
        """Always connected."""
        return True

    def read(self) -> Reading | None:
        """No readings."""
        return None

    def send(self, command: np.ndarray) -> np.ndarray:
        """A refused runtime must never get here."""
        raise AssertionError("a refused runtime must never send")

