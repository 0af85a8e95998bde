"""The simulated robot's real-time clock: a world that waits for its controller's first command."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from robolearn.sim2real.robots.sim_robot import SimulatedRobot


def _until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passed; return whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def test_start_on_command_stands_still_and_reports_until_the_first_command() -> None:
    robot = SimulatedRobot("Cartpole-Balance", seed=0, realtime=True, start_on_command=True)
    initial = SimulatedRobot("Cartpole-Balance", seed=0)
    initial.connect()
    first = initial.read()
    ticks: list[float] = []
    robot.on_tick = lambda: ticks.append(robot.read().stamp)
    robot.connect()
    try:
        assert _until(lambda: len(ticks) >= 5)  # readings go out every period while waiting
        reading = robot.read()
        assert robot.steps == 0 and not robot.holding  # no step, no watchdog hold
        np.testing.assert_array_equal(reading.joint_pos, first.joint_pos)  # the world stood still
        assert ticks[-1] > ticks[0]  # restamped: a runtime does not see a stale reading
        assert robot.last_command_time is None
        robot.send(np.zeros(1))
        assert _until(lambda: robot.steps >= 3)
        assert robot.last_command_time is not None
        assert not np.array_equal(robot.read().joint_pos, first.joint_pos)  # the pole moves
    finally:
        robot.disconnect()


def test_without_start_on_command_the_world_runs_and_the_watchdog_holds() -> None:
    robot = SimulatedRobot("Cartpole-Balance", seed=0, realtime=True, command_timeout_s=0.05)
    robot.connect()
    try:
        assert _until(lambda: robot.steps >= 3)  # stepping with no command at all
        assert _until(lambda: robot.holding)  # and holding once the timeout passed
        assert len(robot.hold_events) == 1
    finally:
        robot.disconnect()


def test_an_estop_before_the_first_command_starts_the_world_in_the_hold() -> None:
    robot = SimulatedRobot("Cartpole-Balance", seed=0, realtime=True, start_on_command=True)
    robot.connect()
    try:
        robot.latch_hold()
        assert _until(lambda: robot.holding and robot.steps >= 2)
        assert robot.last_command_time is None
    finally:
        robot.disconnect()
