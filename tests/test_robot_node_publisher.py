"""The robot node's publishing thread: the control loop and its watchdog never wait on the transport.

A CI run of ``tests/test_ros2.py`` saw the robot node hold 1.0 s after the policy's SIGKILL instead
of 0.1 s: the watchdog lives in the stepping thread, which published every tick itself, so a publish
that blocked held the watchdog up with it. The transport here is a fake of the node's own
:class:`~robolearn.sim2real.ros.node_common.RobotTransport` interface whose ``publish_tick`` blocks
until the test opens its gate, as a DDS writer stuck on a dead reader would.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np
import pytest

from robolearn.sim2real.robots.base import Reading
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.sim2real.ros.common import Topics, apply_control_transport, control_node_transport
from robolearn.sim2real.ros.node_common import RobotNode, TickPublisher, add_robot_arguments

LOG = logging.getLogger("robolearn.tests.robot_node_publisher")


def _until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passed; return whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return predicate()


class GatedTransport:
    """A robot node transport whose ``publish_tick`` waits while :attr:`gate` is closed."""

    def __init__(self, fail_on: float | None = None) -> None:
        """Open gate; ``fail_on``: raise on the tick whose reading has this stamp."""
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()
        """Set once a ``publish_tick`` waits at the closed gate."""
        self.fail_on = fail_on
        self.ticks: list[tuple[float, float | None]] = []
        self.stamps: list[object] = []
        self.images: list[tuple[float, object]] = []
        self.statuses: list[dict[str, Any]] = []

    def tick_stamp(self) -> float:
        """The monotonic clock stands in for ROS time."""
        return time.monotonic()

    def publish_tick(self, reading: Reading, reward: float | None, stamp: object) -> None:
        """Record ``(reading.stamp, reward)``, after the gate opens; the tick's ``stamp`` in :attr:`stamps`."""
        if not self.gate.is_set():
            self.blocked.set()
            self.gate.wait()
        if reading.stamp == self.fail_on:
            raise OSError("connection reset")
        self.ticks.append((reading.stamp, reward))
        self.stamps.append(stamp)

    def publish_status(self, text: str) -> None:
        """Record the status (never blocks: the node's status goes on while ticks are stuck)."""
        self.statuses.append(json.loads(text))

    def publish_images(self, frames: Mapping[str, np.ndarray], stamp: object) -> None:
        """Record the frame's first pixel (the tests write the reading's stamp there) and ``stamp``."""
        self.images.append((float(frames["cam"][0, 0, 0]), stamp))

    def command_publishers(self) -> int:
        """One policy is there."""
        return 1

    def now(self) -> float:
        """The monotonic clock stands in for ROS time."""
        return time.monotonic()


class StampCameras:
    """Stands in for :class:`~robolearn.sim2real.ros.node_common.SimCameras`: one camera whose frame
    carries the reading's stamp."""

    every = 1

    def frames(self, reading: Reading) -> dict[str, np.ndarray]:
        """A 1x1 frame holding the stamp."""
        return {"cam": np.full((1, 1, 3), reading.stamp)}


def _reading(stamp: float) -> Reading:
    return Reading(stamp=stamp, joint_pos=np.zeros(2), joint_vel=np.zeros(2))


@pytest.fixture
def keep_signal_handlers() -> Iterator[None]:
    """``RobotNode.run`` installs SIGINT/SIGTERM handlers: pytest's come back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("keep_signal_handlers")
def test_the_watchdog_holds_while_a_tick_publish_is_blocked() -> None:
    """Commands stop while a tick's publish is blocked: the stepping thread goes on stepping and the
    robot-side watchdog holds before the publish returns; the ticks meanwhile are dropped (oldest
    first, counted in ``robot_status``) and every tick is published or counted as dropped."""
    args = add_robot_arguments(argparse.ArgumentParser()).parse_args(
        ["--task", "Cartpole-Balance", "--command-timeout", "0.1", "--duration", "20"])
    robot = SimulatedRobot("Cartpole-Balance", seed=0, realtime=True, command_timeout_s=0.1)
    transport = GatedTransport()
    body = RobotNode(robot, transport, args, Topics(), LOG)
    seen: dict[str, Any] = {}

    def drive() -> None:
        """The policy's side: command until the robot runs free, then stop with the transport stuck."""
        try:
            seen["started"] = _until(lambda: robot.is_connected and robot.steps > 0, 10.0)
            # Commands every 5 ms until the robot no longer holds (it held before the first one).
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                body.on_command(lambda: np.zeros(1))
                if not robot.holding and robot.steps > 5:
                    break
                time.sleep(0.005)
            seen["commanded"] = not robot.holding
            holds = len(robot.hold_events)
            transport.gate.clear()  # the next tick's publish blocks: no more commands come either
            seen["blocked"] = transport.blocked.wait(10.0)
            steps = robot.steps
            seen["held"] = _until(lambda: len(robot.hold_events) > holds, 3.0)
            seen["held_before_release"] = not transport.gate.is_set()
            seen["steps_while_blocked"] = robot.steps - steps
            # the status goes on meanwhile, counting the ticks dropped behind the stuck one
            seen["status_dropped"] = _until(lambda: any(s.get("dropped_ticks", 0) > 0 for s in transport.statuses), 3.0)
        finally:
            seen["release_at"] = time.monotonic()
            transport.gate.set()
            body.stop.set()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    body.run()  # here: it installs signal handlers, which only the main thread may
    driver.join(10.0)
    assert seen["started"] and seen["commanded"] and seen["blocked"], seen
    assert seen["held"] and seen["held_before_release"], seen  # the old loop stood still inside publish_tick
    assert seen["steps_while_blocked"] > 0, seen
    assert seen["status_dropped"], transport.statuses[-3:]
    publisher = body.publisher
    assert publisher is not None and publisher.dropped > 0
    # every tick was handed over once: published, or dropped while the transport was stuck
    assert publisher.published + publisher.dropped == body.ticks
    assert len(transport.ticks) == publisher.published
    stamps = [s for s, _ in transport.ticks]
    assert stamps == sorted(stamps)  # in order, the newest last
    # each state stamped at its tick (the stepping thread), not when the stuck publish let it go:
    # the transport's stamp of a tick comes after its reading was taken and before the release
    # (the old stamp-at-publish would put every tick held behind the stuck one after the release)
    # (a tick read just before the driver took release_at may take its stamp just after: the
    # stamp then follows its reading within a millisecond, which a stamp at publish could not)
    release = seen["release_at"]
    held_back = [(r, st) for r, st in zip(stamps, transport.stamps, strict=True) if r < release]
    assert len(held_back) >= 2 and all(r <= st and (st < release or st - r < 1e-3) for r, st in held_back), \
        held_back
    assert robot.holding and not robot.is_connected


def test_tick_publisher_drops_the_oldest_waiting_ticks_and_publishes_the_rest_in_order() -> None:
    """Capacity 2, the transport stuck on tick 0: ticks 1 and 2 wait, 3 and 4 push them out; on
    release 0, 3, 4 go out in order (with frames for the ticks that asked for them)."""
    transport = GatedTransport()
    transport.gate.clear()
    publisher = TickPublisher(transport, LOG, "robot", StampCameras(), capacity=2)  # type: ignore[arg-type]
    publisher.offer(_reading(0.0), None, "t0", True)
    assert transport.blocked.wait(5.0)  # tick 0 taken by the thread, its publish stuck
    for k in range(1, 5):
        publisher.offer(_reading(float(k)), 0.5 * k, f"t{k}", k % 2 == 0)
    assert publisher.dropped == 2 and publisher.published == 0
    transport.gate.set()
    publisher.close(5.0)
    assert transport.ticks == [(0.0, None), (3.0, 1.5), (4.0, 2.0)]
    assert transport.stamps == ["t0", "t3", "t4"]  # each with its tick's stamp, not the publish time
    assert transport.images == [(0.0, "t0"), (4.0, "t4")]  # tick 3 asked for no frame
    assert publisher.published == 3 and publisher.dropped == 2


def test_tick_publisher_logs_a_failed_publish_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """A publish that raises is logged (throttled) and not counted; the next tick goes out."""
    transport = GatedTransport(fail_on=1.0)
    publisher = TickPublisher(transport, LOG, "robot", capacity=8)
    with caplog.at_level(logging.ERROR, logger=LOG.name):
        for k in range(3):
            publisher.offer(_reading(float(k)), None, k, False)
        publisher.close(5.0)
    assert [s for s, _ in transport.ticks] == [0.0, 2.0]
    assert publisher.published == 2 and publisher.dropped == 0
    assert "robot: publishing a tick failed (1 in all): OSError: connection reset" in caplog.text
    assert publisher.failed == 1


@pytest.mark.parametrize("capacity", [0, -3, 1.5, True])
def test_tick_publisher_refuses_a_bad_capacity(capacity: Any) -> None:
    with pytest.raises(ValueError, match=rf"capacity: expected an integer >= 1, got {capacity!r}"):
        TickPublisher(GatedTransport(), LOG, "robot", capacity=capacity)


# --- the ROS 2 nodes' Fast DDS transport (common.control_node_transport) ------------------------
# The publishing thread cannot help when rclpy's publish itself blocks with the GIL held: a
# shared-memory write towards a reader that just died can wait ~1 s (CI saw the 1.0 s hold again
# after the publishing thread landed, with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, where
# rmw_fastrtps adds its shared-memory transport and ignores FASTDDS_BUILTIN_TRANSPORTS). The robot
# and policy nodes both apply it; tests/test_ros2.py checks neither running node maps a segment.


def _peers(profile: str) -> list[str]:
    """The initial peers' addresses of a profile, parsed as Fast DDS would read the XML."""
    root = ElementTree.fromstring(profile)
    ns = {"f": "http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles"}
    participant = root.find("f:participant", ns)
    assert participant is not None and participant.get("is_default_profile") == "true"
    assert participant.findtext("f:rtps/f:useBuiltinTransports", namespaces=ns) == "false"
    transport_id = participant.findtext("f:rtps/f:userTransports/f:transport_id", namespaces=ns)
    descriptors = root.findall("f:transport_descriptors/f:transport_descriptor", ns)
    assert [(d.findtext("f:transport_id", namespaces=ns), d.findtext("f:type", namespaces=ns)) for d in descriptors] \
        == [(transport_id, "UDPv4")]  # UDP alone: no SHM descriptor
    # no multicast listening: a unicast metatraffic locator replaces the default multicast one
    assert participant.find("f:rtps/f:builtin/f:metatrafficUnicastLocatorList/f:locator/f:udpv4", ns) is not None
    return [a.text for a in participant.findall("f:rtps/f:builtin/f:initialPeersList/f:locator/f:udpv4/f:address", ns)]


def test_localhost_range_becomes_a_udp_profile_with_the_same_peers() -> None:
    t = control_node_transport({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_DOMAIN_ID": "7"})
    assert t.environ == {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT"}
    assert t.profile is not None and _peers(t.profile) == ["127.0.0.1"]
    assert not t.shared_memory and "localhost discovery" in t.summary
    # ROS_STATIC_PEERS are peers in that range too: resolved, deduplicated, in order
    t = control_node_transport({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
                              "ROS_STATIC_PEERS": "10.1.2.3; 127.0.0.1;;10.1.2.3;192.168.0.9"})
    assert t.profile is not None and _peers(t.profile) == ["127.0.0.1", "10.1.2.3", "192.168.0.9"]


def test_an_unresolvable_static_peer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def unresolvable(host: str) -> str:  # no DNS on a test machine: its failure, as socket raises it
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "gethostbyname", unresolvable)
    with pytest.raises(ValueError, match=r"ROS_STATIC_PEERS: cannot resolve 'robot-pc'"):
        control_node_transport({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_STATIC_PEERS": "robot-pc"})


@pytest.mark.parametrize("environ", [
    {"ROS_AUTOMATIC_DISCOVERY_RANGE": "localhost"},  # rcl reads any unknown value as LOCALHOST
    {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"},  # the user's intent
])
def test_other_spellings_of_localhost_discovery_are_translated(environ: dict[str, str]) -> None:
    t = control_node_transport(environ)
    assert t.environ == {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT"} and not t.shared_memory
    assert t.profile is not None and _peers(t.profile) == ["127.0.0.1"]


def test_ros_localhost_only_is_localhost_discovery_and_is_turned_off() -> None:
    """Jazzy's rcl forces LOCALHOST under ``ROS_LOCALHOST_ONLY=1`` whatever the range says: it must
    go too, or rmw_fastrtps would add its shared memory after all."""
    t = control_node_transport({"ROS_LOCALHOST_ONLY": "1", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"})
    assert t.environ == {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT", "ROS_LOCALHOST_ONLY": "0"}
    assert t.profile is not None and _peers(t.profile) == ["127.0.0.1"]


@pytest.mark.parametrize(("environ", "expected", "shared_memory"), [
    ({}, {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}, False),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}, {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}, False),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": ""}, {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}, False),  # empty: SUBNET
    ({"ROS_LOCALHOST_ONLY": "0"}, {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}, False),
    # a profile that sets no transports (the camera buffers) keeps the built-in UDP choice
    ({"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/buffers.xml"}, {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}, False),
    # the user's choice stands, and the flag says whether it includes shared memory
    ({"FASTDDS_BUILTIN_TRANSPORTS": "SHM"}, {}, True),
    ({"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA?max_msg_size=1MB"}, {}, True),
    ({"FASTDDS_BUILTIN_TRANSPORTS": "P2P"}, {}, True),
    ({"FASTDDS_BUILTIN_TRANSPORTS": "udpv4"}, {}, True),  # Fast DDS matches case-sensitively: DEFAULT
    ({"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}, {}, False),
    ({"FASTDDS_BUILTIN_TRANSPORTS": "UDPv6"}, {}, False),
    # localhost discovery with other transports or a profile of the user's: rmw_fastrtps's own
    # SHM + UDP, said so
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"}, {}, True),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"}, {}, True),
])
def test_transport_choice_outside_the_localhost_translation(environ: dict[str, str], expected: dict[str, str],
                                                             shared_memory: bool) -> None:
    t = control_node_transport(environ)
    assert (t.environ, t.profile, t.shared_memory) == (expected, None, shared_memory)
    if shared_memory and environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST":
        assert "shared-memory transport stays" in t.summary


TRANSPORT_VARIABLES = ("FASTDDS_BUILTIN_TRANSPORTS", "FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE",
                       "ROS_STATIC_PEERS", "ROS_LOCALHOST_ONLY", "ROS_AUTOMATIC_DISCOVERY_RANGE")
"""What :func:`apply_control_transport` reads or writes in the process's environment."""


def test_apply_control_transport_sets_the_environment_and_one_profile_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The process's variables change before rclpy starts; the profile lies in one file named by its
    content, reused by the next node (a SIGKILLed node leaves nothing new) and readable by all."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    base = {k: v for k, v in os.environ.items() if k not in TRANSPORT_VARIABLES}
    # a copy as the process's environment, given back afterwards: the function writes os.environ
    # itself, and a variable leaked from here would decide the ROS 2 scenario's transport
    monkeypatch.setattr(os, "environ", base | {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"})
    with caplog.at_level(logging.INFO):
        t = apply_control_transport(LOG, "robot")
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SYSTEM_DEFAULT"
    profile = Path(os.environ["FASTDDS_DEFAULT_PROFILES_FILE"])
    assert profile.parent == tmp_path and profile.read_text() == t.profile
    assert profile.stat().st_mode & 0o777 == 0o644
    assert "robot: Fast DDS over UDP with localhost discovery" in caplog.text
    # a second node: the same file, nothing else written
    monkeypatch.setattr(os, "environ", base | {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"})
    apply_control_transport(LOG, "policy")
    assert os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] == str(profile) and list(tmp_path.iterdir()) == [profile]
    # an unresolvable peer stops the node before anything starts, naming the variable
    monkeypatch.setattr(socket, "gethostbyname", lambda host: (_ for _ in ()).throw(socket.gaierror(-2, "unknown")))
    monkeypatch.setattr(os, "environ", base | {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
                                               "ROS_STATIC_PEERS": "robot-pc"})
    with pytest.raises(SystemExit, match="ROS_STATIC_PEERS: cannot resolve 'robot-pc'"):
        apply_control_transport(LOG, "robot")


def test_apply_control_transport_leaves_nothing_in_the_real_environment() -> None:
    """Runs after the test above (file order): its copies of the environment were given back."""
    leaked = {k: os.environ[k] for k in TRANSPORT_VARIABLES if k in os.environ and "robolearn-fastdds" in os.environ[k]}
    assert not leaked, leaked
