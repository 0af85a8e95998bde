"""The ROS 2 deployment scenario, run end to end and measured: ``tests/test_ros2.py`` runs it.

    unshare -n -p -f --kill-child sh -c 'ip link set lo up && exec .venv-ros2/bin/python
        -m robolearn.sim2real.ros.ros2_probe --policy <export dir> --workdir <dir>'

It starts simulated robot nodes and policy nodes as separate processes (all inside the caller's
network namespace), watches their topics from a node of its own, acts on them (kills, e-stop,
malformed messages) and prints one JSON object of measurements as its last line. The test process
cannot import rclpy (ROS 1's message packages share its interpreter), so it parses that line and
makes the assertions.

Phases:

A. ``/rl_a``: the policy node starts first (features from a file) and the probe waits until it sees
   the policy's command publisher, so it receives every command from the first; then the robot node
   (``--wait-for-policy``, ``--wait-for-subscribers 3``: the world starts, standing still until the
   first command, once the policy's and the probe's joint-state readers and a gate reader are matched;
   the probe creates the gate only after its own reader has matched the robot's writer, so it sees the
   states from before the first command on: a reader that matches a writer after the writer matched
   it, as DDS can do a second later, drops what was sent in between). Balance for ``--balance-s`` seconds (pole angle, reward, resets, command
   rate and period distribution, effort and per-step change of every command, the safety layer's
   rate interventions); SIGKILL the policy and time the robot's hold; a second policy node
   (``--robot from-topic``) takes over; SIGKILL the robot and watch the policy report ``stale`` then
   ``lost`` and stop sending.
B. ``/rl_b``: a policy node configured by a parameter file only, fed by this probe: good joint
   states, then malformed ones (wrong names, wrong lengths, NaN): rejected, counted, the policy
   holding (``stale``); then the e-stop: the status stays ``estop`` and the command the hold while
   good readings go on; SIGTERM: exit 0 and the telemetry saved.
C. ``/rl_c``: a robot node taking ``JointTrajectory`` commands fed malformed ones (wrong joint names,
   wrong length, NaN, two points): rejected naming the field, the robot holding; good ones applied;
   its e-stop latches and later good commands are ignored.
D. ``/rl_d``: the bridge's pieces in this process (:class:`~robolearn.sim2real.ros.ros2.Ros2Robot`:
   JointState and Twist in, JointTrajectory out, malformed input counted, the last good reading
   kept), and a policy node given a robot that does not fit its policy (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

SAFETY = {"max_delta": 0.005, "ramp_s": 0.0, "stale_timeout_s": 0.1, "exit_s": 0.2, "damping": 1.0}
"""The phase-A policy's safety layer (as ROS 1's test): a per-step change limit that shapes the
LQR's first commands but lets it balance, damping once readings are 0.1 s old."""
POLICY = "robolearn.sim2real.ros.ros2_policy_node"
ROBOT = "robolearn.sim2real.ros.ros2_robot_node"


def _proc_pid(child: int) -> int | None:
    """``/proc``'s pid of this process's child ``child`` (its pid as :class:`subprocess.Popen` saw
    it). The scenario runs in a PID namespace whose ``/proc`` is still the host's, where the child
    has another pid: the one whose parent is this process (``/proc/self``, the host's view) and whose
    innermost ``NSpid`` is ``child``. Without ``NSpid`` (kernels before 4.1) there is no PID
    namespace to see through: ``child`` itself.
    """
    me = os.readlink("/proc/self")
    nspid_seen = False
    for status in Path("/proc").glob("[0-9]*/status"):
        try:  # bytes: a process name need not be UTF-8
            text = status.read_bytes().decode("utf-8", "replace")
        except OSError:  # a process that ended meanwhile
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        nspid_seen = nspid_seen or "NSpid" in fields
        if fields.get("PPid", "").strip() == me and fields.get("NSpid", "").split()[-1:] == [str(child)]:
            return int(status.parent.name)
    return None if nspid_seen else child


def _shm_segments(child: int) -> list[str] | None:
    """The Fast DDS shared-memory files this process's child ``child`` has mapped (``None``: not found)."""
    pid = _proc_pid(child)
    if pid is None:
        return None
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:  # it ended
        return None
    # the path is the sixth field and may carry spaces (" (deleted)" once unlinked)
    return sorted({line.split(None, 5)[-1] for line in lines if "/dev/shm/fastdds" in line})


def _node(module: str, *args: str, log: Path) -> subprocess.Popen:
    """Start ``python -m module args`` in this interpreter, its output in ``log``."""
    fh = open(log, "w")  # noqa: SIM115 - the child owns it until it ends
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=fh, stderr=subprocess.STDOUT,
                            env=dict(os.environ))


def _end(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int | None:
    """Signal ``proc`` (unless it ended) and wait for it; SIGKILL when it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)
    return proc.returncode


def _wait(predicate: Any, timeout_s: float, step_s: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout_s``; return whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())


def _percentiles(values: Any, scale: float = 1.0) -> dict[str, float] | None:
    """p1/p50/p99/max of ``values`` times ``scale`` (``None`` when empty)."""
    v = np.asarray(values, dtype=np.float64) * scale
    if v.size == 0:
        return None
    return {"p1": float(np.percentile(v, 1)), "p50": float(np.percentile(v, 50)),
            "p99": float(np.percentile(v, 99)), "max": float(v.max())}


class Watch:
    """Subscriptions of one namespace, recorded with monotonic receipt times."""

    def __init__(self, node: Any, ns: str, commands: bool = True) -> None:
        """Subscribe to the namespace's topics (``commands``: its Float64MultiArray commands too)."""
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64, Float64MultiArray, String

        self.lock = threading.Lock()
        self.states: list[tuple[float, list[float]]] = []
        self.commands: list[tuple[float, list[float]]] = []
        self.rewards: list[tuple[float, float]] = []
        self.policy: list[tuple[float, dict]] = []
        self.robot: list[tuple[float, dict]] = []
        depth = 200  # deep queues: nothing dropped while the probe's executor is busy
        self.state_sub = node.create_subscription(JointState, f"{ns}/joint_states",
                                                  lambda m: self._add(self.states, list(m.position)), depth)
        self.command_sub = None
        if commands:
            self.command_sub = node.create_subscription(Float64MultiArray, f"{ns}/command",
                                                        lambda m: self._add(self.commands, list(m.data)), depth)
        node.create_subscription(Float64, f"{ns}/reward", lambda m: self._add(self.rewards, m.data), depth)
        node.create_subscription(String, f"{ns}/policy_status", lambda m: self._add(self.policy, json.loads(m.data)),
                                 depth)
        node.create_subscription(String, f"{ns}/robot_status", lambda m: self._add(self.robot, json.loads(m.data)),
                                 depth)

    def _add(self, where: list, value: Any) -> None:
        with self.lock:
            where.append((time.monotonic(), value))

    def last(self, where: list) -> Any:
        """The newest value of a record (``{}`` when empty)."""
        with self.lock:
            return where[-1][1] if where else {}

    def since(self, where: list, t0: float, t1: float = math.inf) -> list:
        """``(time, value)`` pairs received in ``[t0, t1]``."""
        with self.lock:
            return [(t, v) for t, v in where if t0 <= t <= t1]


def phase_a(node: Any, args: argparse.Namespace, work: Path, features: Path, out: dict) -> None:
    """Balance, kill the policy, a second policy, kill the robot (module doc)."""
    from sensor_msgs.msg import JointState

    ns = "/rl_a"
    w = Watch(node, ns)
    safety = json.dumps(SAFETY)
    policy = _node(POLICY, "--policy", args.policy, "--robot", str(features), "--namespace", ns, "--safety", safety,
                   "--wait", "90", log=work / "policy_a.log")
    robot = None
    try:
        # The policy's publisher seen here first: the probe is matched before any command is sent.
        if not _wait(lambda: w.command_sub.get_publisher_count() > 0, 90):
            out["error"] = "phase A: the policy node never created its command publisher"
            return
        time.sleep(0.5)
        # Three joint-state readers before the world starts: the policy's, this probe's and a gate.
        # The robot counts readers it has matched, but a reader drops what a writer sends before the
        # reader has matched that writer in turn, which DDS can do a second later (a fresh-clone CI run
        # saw the probe's first state 2 ticks after the first command). The gate is created only once
        # this probe's reader has matched the robot's writer, so the world cannot start before that.
        robot = _node(ROBOT, "--task", "Cartpole-Balance", "--namespace", ns, "--wait-for-policy", "60",
                      "--wait-for-subscribers", "3", log=work / "robot_a.log")
        if not _wait(lambda: w.state_sub.get_publisher_count() > 0, 90):
            out["error"] = "phase A: the probe never matched the robot's joint_states publisher"
            return
        # Fast DDS's shared-memory segments the nodes' processes have mapped (control_node_transport
        # keeps them on UDP: a dead reader's segment can stall a publish, and the watchdog, ~1 s)
        out["robot_shm_segments"] = _shm_segments(robot.pid)
        out["policy_shm_segments"] = _shm_segments(policy.pid)
        out["robot_transport"] = next((line.split(": ", 1)[-1] for line in (work / "robot_a.log").read_text().splitlines()
                                       if "Fast DDS" in line), None)
        gate = node.create_subscription(JointState, f"{ns}/joint_states", lambda m: None, 10)
        if not _wait(lambda: len(w.commands) > 0, 90):
            out["error"] = "phase A: no command within 90 s"
            return
        t_start = w.commands[0][0]
        node.destroy_subscription(gate)
        time.sleep(max(0.0, t_start + args.balance_s - time.monotonic()))
        t_end = t_start + args.balance_s
        time.sleep(0.3)  # the last status of the window and the commands sent before it arrive
        states = np.array([s for _, s in w.since(w.states, t_start, t_end)]).reshape(-1, 2)
        before = w.since(w.states, 0.0, t_start)
        first_state = w.since(w.states, 0.0)[:1]
        cmds = w.since(w.commands, 0.0, t_end)
        times = np.array([t for t, _ in cmds])
        values = np.array([c for _, c in cmds]).reshape(len(cmds), -1)
        status = [(t, s) for t, s in w.since(w.policy, t_start, t_end + 0.3) if s.get("status") == "run"]
        last_t, last = status[-1] if status else (t_end, {})
        out["balance"] = {
            "states": int(len(states)),
            "max_abs_angle": float(np.abs(states[:, 1]).max()) if len(states) else None,
            "max_abs_angle_last_s": float(np.abs(states[-100:, 1]).max()) if len(states) else None,
            "first_angle": float(states[0, 1]) if len(states) else None,
            # the robot standing still, seen before the first command (the first_angle check needs it)
            "states_before_first_command": len(before),
            "first_state_after_first_command_s": (first_state[0][0] - t_start) if first_state else None,
            # how long the robot waited for the readers (its log line)
            "robot_wait": next((line.split(": ", 1)[-1] for line in (work / "robot_a.log").read_text().splitlines()
                                if "joint_states subscribers after" in line), None),
            "mean_reward": float(np.mean([r for _, r in w.since(w.rewards, t_start, t_end)] or [math.nan])),
            "resets": w.last(w.robot).get("resets"),
        }
        gaps = np.diff(times)
        steps = np.abs(np.diff(values, axis=0))
        out["commands"] = {
            "count": int(len(times)),
            "rate_hz": float((len(times) - 1) / (times[-1] - times[0])) if len(times) > 1 else 0.0,
            "period_ms": _percentiles(gaps, 1e3),
            "max_abs": float(np.abs(values).max()) if len(values) else None,
            "first": float(values[0, 0]) if len(values) else None,
            "max_step": float(steps.max()) if len(steps) else None,
            "step": _percentiles(steps),
            # every command the policy had sent by its last status in the window reached the probe
            "policy_sent": last.get("sent"),
            "received_by_then": len(w.since(w.commands, 0.0, last_t + 0.02)),
            "interventions": last.get("interventions"),
        }

        # the policy dies: the robot holds by itself
        kill_at = time.monotonic()
        policy.send_signal(signal.SIGKILL)
        policy.wait(10)
        _wait(lambda: w.last(w.robot).get("holding") is True and (w.last(w.robot).get("last_hold") or 0) > kill_at, 5)
        status = w.last(w.robot)
        out["hold_latency_s"] = (status["last_hold"] - kill_at) if (status.get("last_hold") or 0) > kill_at else None
        # the robot's newest command against the kill: a late one means commands queued on the way
        out["last_command_after_kill_s"] = (status["last_command"] - kill_at) if status.get("last_command") else None
        # ticks the robot's publishing thread dropped: a stuck transport shows here, a stalled loop not
        out["robot_dropped_ticks"] = status.get("dropped_ticks")

        # a second policy, taking the robot's description from its latched topic, takes over
        policy = _node(POLICY, "--policy", args.policy, "--robot", "from-topic", "--namespace", ns, "--safety", safety,
                       log=work / "policy_a2.log")
        started = time.monotonic()
        # status messages of the new process only (the killed one's last words said "run" too)
        out["second_policy_ran"] = _wait(lambda: w.last(w.policy).get("monotonic", 0) > started
                                         and w.last(w.policy).get("status") == "run"
                                         and w.last(w.robot).get("holding") is False, 60)

        # the robot dies: the policy reports stale, then lost, and stops sending
        kill_at = time.monotonic()
        robot.send_signal(signal.SIGKILL)
        robot.wait(10)
        _wait(lambda: w.last(w.policy).get("status") == "lost", 5)
        seen = [(t, s.get("status")) for t, s in w.since(w.policy, kill_at)]
        out["after_robot_kill_statuses"] = [s for _, s in seen]
        lost_at = next((t for t, s in seen if s == "lost"), None)
        stale_at = next((t for t, s in seen if s == "stale"), None)
        out["stale_after_s"] = (stale_at - kill_at) if stale_at else None
        out["lost_after_s"] = (lost_at - kill_at) if lost_at else None
        time.sleep(0.5)
        out["commands_after_lost"] = len(w.since(w.commands, lost_at + 0.05)) if lost_at else None
    finally:
        for p in (policy, robot):
            if p is not None:
                _end(p)


def _estop(node: Any, ns: str, done: Any, between: Any, timeout_s: float = 20.0) -> float:
    """Press the e-stop of ``ns`` until ``done()`` (a button publishes while pressed; a new
    publisher's first messages can precede discovery), calling ``between`` between presses; return
    the seconds it took.
    """
    from std_msgs.msg import Bool

    pub = node.create_publisher(Bool, f"{ns}/estop", 10)
    pressed = time.monotonic()
    while not done() and time.monotonic() - pressed < timeout_s:
        pub.publish(Bool(data=True))
        between()
    return time.monotonic() - pressed


def phase_b(node: Any, args: argparse.Namespace, work: Path, features: Path, out: dict) -> None:
    """Malformed joint states at a policy node configured by a parameter file; SIGTERM (module doc)."""
    from sensor_msgs.msg import JointState

    from robolearn.sim2real.robots.base import RobotFeatures
    from robolearn.sim2real.ros.common import Topics, node_parameters, write_parameters

    ns = "/rl_b"
    w = Watch(node, ns)
    robot = RobotFeatures.from_dict(json.loads(features.read_text()))
    params = write_parameters(work / "policy_b.yaml", "policy", node_parameters(
        robot, Topics(namespace=ns), policy=args.policy, safety={"ramp_s": 0.0, "stale_timeout_s": 0.1}), ros=2)
    telemetry = work / "telemetry_b.h5"
    policy = _node(POLICY, "--params", str(params), "--telemetry", str(telemetry), log=work / "policy_b.log")
    pub = node.create_publisher(JointState, f"{ns}/joint_states", 10)

    def send(names: list[str], pos: list[float], vel: list[float]) -> None:
        msg = JointState()
        now = node.get_clock().now().nanoseconds
        msg.header.stamp.sec, msg.header.stamp.nanosec = now // 1_000_000_000, now % 1_000_000_000
        msg.name, msg.position, msg.velocity = names, pos, vel
        pub.publish(msg)

    def stream(seconds: float, names: list[str], pos: list[float], vel: list[float]) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            send(names, pos, vel)
            time.sleep(0.01)

    try:
        good = (["slider", "hinge"], [0.0, 0.01], [0.0, 0.0])
        if not _wait(lambda: (stream(0.1, *good) or w.last(w.policy).get("status") == "run"), 90, 0.0):
            out["error_b"] = "phase B: the policy never ran on good joint states"
            return
        results = {}
        for kind, msg in {"names": (["cart", "pole"], [0.0, 0.01], [0.0, 0.0]),
                          "lengths": (["slider", "hinge"], [0.0], [0.0, 0.0]),
                          "nan": (["slider", "hinge"], [0.0, math.nan], [0.0, 0.0])}.items():
            before = w.last(w.policy).get("malformed", 0)
            t0 = time.monotonic()
            stream(0.5, *msg)
            st = w.last(w.policy)
            # statuses once the last good reading is 0.2 s old: stale (hold) until 0.5 s, then lost
            results[kind] = {"malformed_added": st.get("malformed", 0) - before,
                             "statuses": sorted({s.get("status") for _, s in w.since(w.policy, t0 + 0.2)}),
                             "last_error": st.get("malformed_last", "")}
            stream(0.3, *good)  # fresh good readings: running again
            results[kind]["recovered"] = w.last(w.policy).get("status")
        out["malformed_joint_states"] = results
        out["estop_reported_after_s"] = _estop(node, ns, lambda: w.last(w.policy).get("status") == "estop",
                                               lambda: stream(0.02, *good))
        t0 = time.monotonic()
        stream(1.0, *good)  # fresh readings keep coming: the latch must hold
        out["estop_statuses"] = sorted({s.get("status") for _, s in w.since(w.policy, t0 + 0.1)})
        out["estop_commands"] = sorted({round(float(c[0]), 9) for _, c in w.since(w.commands, t0 + 0.1)})
    finally:
        stop_at = time.monotonic()
        out["policy_b_exit"] = _end(policy, signal.SIGTERM, 30)
        out["policy_b_final_status"] = w.last(w.policy).get("status") if w.since(w.policy, stop_at) else None
        out["telemetry_b"] = str(telemetry) if telemetry.exists() else None


def phase_c(node: Any, args: argparse.Namespace, work: Path, out: dict) -> None:
    """Malformed trajectory commands at a robot node; its e-stop (module doc)."""
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    ns = "/rl_c"
    w = Watch(node, ns, commands=False)
    robot = _node(ROBOT, "--task", "Cartpole-Balance", "--namespace", ns, "--command-type", "joint_trajectory",
                  log=work / "robot_c.log")
    pub = node.create_publisher(JointTrajectory, f"{ns}/command", 10)

    def traj(names: list[str], points: list[list[float]]) -> JointTrajectory:
        return JointTrajectory(joint_names=names, points=[JointTrajectoryPoint(effort=p) for p in points])

    def stream(msg: JointTrajectory, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pub.publish(msg)
            time.sleep(0.01)

    try:
        if not _wait(lambda: w.last(w.robot) and pub.get_subscription_count() > 0, 90):
            out["error_c"] = "phase C: the robot node never reported"
            return
        results = {}
        for kind, msg in {"names": traj(["cart"], [[0.1]]), "lengths": traj(["slider"], [[0.1, 0.2]]),
                          "nan": traj(["slider"], [[math.nan]]), "points": traj(["slider"], [[0.1], [0.2]])}.items():
            before = w.last(w.robot).get("rejected", 0)
            stream(msg, 0.3)
            time.sleep(0.15)  # a status after the last one
            st = w.last(w.robot)
            results[kind] = {"rejected_added": st.get("rejected", 0) - before, "holding": st.get("holding"),
                             "commands": st.get("commands"), "last_error": st.get("rejected_last")}
        out["malformed_commands"] = results
        stream(traj(["slider"], [[0.0]]), 0.5)  # good ones: applied, no longer holding
        time.sleep(0.05)
        st = w.last(w.robot)
        out["good_commands"] = {"commands": st.get("commands"), "holding": st.get("holding")}
        out["robot_estop_reported_after_s"] = _estop(node, ns, lambda: w.last(w.robot).get("estop") is True,
                                                     lambda: time.sleep(0.02))
        before = w.last(w.robot).get("commands") or 0
        stream(traj(["slider"], [[0.5]]), 0.5)  # good commands after the latch are ignored
        time.sleep(0.2)
        st = w.last(w.robot)
        out["robot_estop"] = {"estop": st.get("estop"), "holding": st.get("holding"),
                              "commands_applied_after": (st.get("commands") or 0) - before}
    finally:
        _end(robot)


def phase_d(node: Any, args: argparse.Namespace, work: Path, out: dict) -> None:
    """The bridge's pieces in this process; a policy node refusing a robot that does not fit (module doc)."""
    from geometry_msgs.msg import Twist
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    from robolearn.sim2real.robots.base import RobotError, RobotFeatures
    from robolearn.sim2real.ros.common import Topics, parse_command
    from robolearn.sim2real.ros.node_common import write_text_atomic
    from robolearn.sim2real.ros.ros2 import CONTROL_QOS, Ros2Robot

    arm = RobotFeatures(name="arm", joints=("shoulder", "elbow", "wrist"), command_joints=("shoulder", "elbow"),
                        command_kind="joint_pos", rate_hz=50.0, position_limits=((-1.0, 1.0), (-2.0, 2.0)),
                        velocity_limits=(1.0, 1.0), effort_limits=(5.0, 5.0), default_pose=(0.0, 0.5),
                        extras={"command/base_velocity": 3})
    arm_file = write_text_atomic(work / "arm.json", json.dumps(arm.to_dict()))
    misfit = _node(POLICY, "--policy", args.policy, "--robot", str(arm_file), "--namespace", "/rl_e",
                   log=work / "policy_misfit.log")
    topics = Topics(namespace="/rl_d", command_type="joint_trajectory", cmd_vel="cmd_vel")
    robot = Ros2Robot(arm, node, topics)
    got: list[JointTrajectory] = []
    node.create_subscription(JointTrajectory, "/rl_d/command", got.append, CONTROL_QOS)
    res: dict[str, Any] = {}
    try:
        robot.read()
    except RobotError as exc:
        res["read_before_connect"] = str(exc)
    robot.connect()
    try:
        states = node.create_publisher(JointState, "/rl_d/joint_states", CONTROL_QOS)
        twists = node.create_publisher(Twist, "/rl_d/cmd_vel", CONTROL_QOS)
        res["first_read"] = repr(robot.read())
        msg = JointState(name=["wrist", "shoulder", "elbow", "gripper"], position=[3.0, 1.0, 2.0, 9.0],
                         velocity=[0.3, 0.1, 0.2, 9.0])
        msg.header.stamp.sec, msg.header.stamp.nanosec = 1234, 500_000_000
        before = time.monotonic()
        # publish until received: a new publisher's first messages can precede discovery
        _wait(lambda: states.publish(msg) or robot.read() is not None, 10, 0.02)
        reading = robot.read()
        res["reading"] = None if reading is None else {
            "stamp": reading.stamp, "received_in_window": before <= reading.received <= time.monotonic(),
            "joint_pos": reading.joint_pos.tolist(), "joint_vel": reading.joint_vel.tolist(),
            "twist_before": reading.extras["command/base_velocity"].tolist()}
        twist = Twist()
        twist.linear.x, twist.linear.y, twist.angular.z = 0.5, -0.1, 0.3
        _wait(lambda: twists.publish(twist) or robot.read().extras["command/base_velocity"][0] == 0.5, 10, 0.02)
        res["twist"] = robot.read().extras["command/base_velocity"].tolist()
        bad = JointState(name=list(msg.name), position=[3.0, math.nan, 2.0, 9.0], velocity=list(msg.velocity))
        states.publish(bad)
        _wait(lambda: robot.rejected.count >= 1, 5)
        res["rejected"] = robot.rejected.count
        res["rejected_last"] = robot.rejected.last_error
        res["kept_joint_pos"] = robot.read().joint_pos.tolist()
        _wait(lambda: robot._command_subscribers() > 0, 10)
        res["sent"] = robot.send(np.array([0.1, 0.2])).tolist()
        _wait(lambda: got, 5)
        if got:
            m = got[0]
            res["command_msg"] = {"joint_names": list(m.joint_names), "positions": list(m.points[0].positions),
                                  "effort": list(m.points[0].effort),
                                  "time_from_start": m.points[0].time_from_start.sec
                                  + 1e-9 * m.points[0].time_from_start.nanosec,
                                  "parsed": parse_command(arm, m).tolist()}
        try:
            robot.send(np.zeros(3))
        except RobotError as exc:
            res["bad_send"] = str(exc)
    finally:
        robot.disconnect()
        res["connected_after_disconnect"] = robot.is_connected
        out["pieces"] = res
        try:  # it loads the policy, finds the mismatch and exits by itself
            misfit.wait(60)
        except subprocess.TimeoutExpired:
            pass
        out["misfit_exit"] = _end(misfit)
        out["misfit_log"] = (work / "policy_misfit.log").read_text()[-1500:]


def _ensure_features(path: Path) -> Path:
    """The Cartpole-Balance robot's features as the robot node describes them, written to ``path``."""
    from robolearn.sim2real.robots.sim_robot import SimulatedRobot
    from robolearn.sim2real.ros.node_common import write_text_atomic

    if not path.exists():
        write_text_atomic(path, json.dumps(SimulatedRobot("Cartpole-Balance").features.to_dict(), indent=2))
    return path


def main(argv: list[str] | None = None) -> int:
    """Run the phases; print the measurements as one JSON line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", required=True, help="exported Cartpole-Balance policy folder")
    p.add_argument("--workdir", required=True)
    p.add_argument("--balance-s", type=float, default=10.0)
    p.add_argument("--phases", default="abcd")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    from robolearn.sim2real.ros.ros2 import Spinner

    features = _ensure_features(work / "features.json")
    spinner = Spinner("probe", "/")
    out: dict[str, Any] = {"safety_a": SAFETY}
    phases = {"a": lambda: phase_a(spinner.node, args, work, features, out),
              "b": lambda: phase_b(spinner.node, args, work, features, out),
              "c": lambda: phase_c(spinner.node, args, work, out),
              "d": lambda: phase_d(spinner.node, args, work, out)}
    try:
        for key in args.phases:
            t0 = time.monotonic()
            phases[key]()
            out[f"phase_{key}_s"] = time.monotonic() - t0
    finally:
        spinner.shutdown()
    # The result is this program's output (its one stdout line), read by tests/test_ros2.py.
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
