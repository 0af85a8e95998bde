"""The ROS 2 deployment scenario, run end to end and measured: ``tests/test_ros2.py`` runs it.

    unshare -n sh -c 'ip link set lo up && .venv-ros2/bin/python -m robolearn.sim2real.ros.ros2_probe
        --policy <export dir> --workdir <dir>'

It starts the simulated robot node and the policy node as separate processes (all inside the
caller's network namespace), watches their topics from a third node, acts on them (kills, e-stop,
malformed messages) and prints one JSON object of measurements as its last line. The test process
cannot import rclpy (ROS 1's message packages share its interpreter), so it parses that line.

Phases:

A. robot and policy on ``/rl_a``: balance for ``--balance-s`` seconds (pole angle, reward,
   command rate, command limits and per-step change); SIGKILL the policy and time the robot's hold;
   start a second policy node; SIGKILL the robot and watch the policy report ``stale`` then
   ``lost`` and stop sending.
B. a policy node on ``/rl_b`` fed by this probe: good joint states, then malformed ones (wrong
   names, wrong lengths, NaN): the policy rejects them, counts them and holds (``stale``); then the
   e-stop: the status stays ``estop`` and the commands the safe ones while good readings go on.
C. a robot node on ``/rl_c`` fed malformed commands (wrong length, NaN): rejected, robot holding;
   its e-stop latches and later good commands are ignored.
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


def _node(module: str, *args: str, log: Path) -> subprocess.Popen:
    """Start ``python -m module args`` in this interpreter, its output in ``log``."""
    fh = open(log, "w")  # noqa: SIM115 - the child owns it until it ends
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=fh, stderr=subprocess.STDOUT,
                            env=dict(os.environ))


def _wait(predicate: Any, timeout_s: float, step_s: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout_s``; return whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())


class Watch:
    """Subscriptions of one namespace, recorded with monotonic receipt times."""

    def __init__(self, node: Any, ns: str) -> None:
        """Subscribe to the namespace's topics."""
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64, Float64MultiArray, String

        self.lock = threading.Lock()
        self.states: list[tuple[float, list[float]]] = []
        self.commands: list[tuple[float, list[float]]] = []
        self.rewards: list[float] = []
        self.policy: list[tuple[float, dict]] = []
        self.robot: list[tuple[float, dict]] = []
        qos = 50
        node.create_subscription(JointState, f"{ns}/joint_states", lambda m: self._add(self.states, list(m.position)), qos)
        node.create_subscription(Float64MultiArray, f"{ns}/command", lambda m: self._add(self.commands, list(m.data)), qos)
        node.create_subscription(Float64, f"{ns}/reward", lambda m: self.rewards.append(m.data), qos)
        node.create_subscription(String, f"{ns}/policy_status", lambda m: self._add(self.policy, json.loads(m.data)), qos)
        node.create_subscription(String, f"{ns}/robot_status", lambda m: self._add(self.robot, json.loads(m.data)), qos)

    def _add(self, where: list, value: Any) -> None:
        with self.lock:
            where.append((time.monotonic(), value))

    def last(self, where: list) -> Any:
        """The newest value of a record (``None`` when empty)."""
        with self.lock:
            return where[-1][1] if where else None


def phase_a(node: Any, args: argparse.Namespace, work: Path, out: dict) -> None:
    """Balance, kill the policy, e-stop, kill the robot (module doc)."""
    ns = "/rl_a"
    w = Watch(node, ns)
    features = work / "features.json"
    safety = json.dumps({"ramp_s": 0.0, "max_delta": args.max_delta, "stale_timeout_s": 0.1, "exit_s": 0.2})
    robot = _node("robolearn.sim2real.ros.ros2_robot_node", "--task", "Cartpole-Balance", "--namespace", ns,
                  "--wait-for-policy", "60", "--features-out", str(features), log=work / "robot_a.log")
    policy = _node("robolearn.sim2real.ros.ros2_policy_node", "--policy", args.policy, "--robot", "from-topic",
                   "--namespace", ns, "--safety", safety, "--telemetry", str(work / "telemetry.h5"),
                   log=work / "policy_a.log")
    try:
        if not _wait(lambda: len(w.commands) > 0, 90):
            out["error"] = "phase A: no command within 90 s"
            return
        t_start = time.monotonic()
        time.sleep(args.balance_s)
        with w.lock:
            states = [s for t, s in w.states if t >= t_start]
            cmds = [(t, c) for t, c in w.commands if t >= t_start]
        out["balance_states"] = len(states)
        out["balance_max_abs_angle"] = float(max(abs(s[1]) for s in states)) if states else None
        out["balance_rewards"] = len(w.rewards)
        out["balance_mean_reward"] = float(np.mean(w.rewards[-len(states):])) if states else None
        times = np.array([t for t, _ in cmds])
        values = np.array([c for _, c in cmds]).reshape(len(cmds), -1)
        out["command_rate_hz"] = float((len(times) - 1) / (times[-1] - times[0])) if len(times) > 1 else 0.0
        out["command_max_abs"] = float(np.abs(values).max()) if len(values) else None
        out["command_max_step"] = float(np.abs(np.diff(values, axis=0)).max()) if len(values) > 1 else None
        gaps = np.diff(times)
        out["command_period_p50_ms"] = float(np.percentile(gaps, 50) * 1e3) if gaps.size else None
        out["command_period_p99_ms"] = float(np.percentile(gaps, 99) * 1e3) if gaps.size else None

        # the policy dies: the robot holds by itself
        kill_at = time.monotonic()
        policy.send_signal(signal.SIGKILL)
        policy.wait(10)
        _wait(lambda: (w.last(w.robot) or {}).get("holding") is True, 5)
        status = w.last(w.robot) or {}
        out["hold_latency_s"] = (status["last_hold"] - kill_at) if status.get("last_hold") else None

        # a second policy takes over
        policy = _node("robolearn.sim2real.ros.ros2_policy_node", "--policy", args.policy, "--robot", str(features),
                       "--namespace", ns, "--safety", safety, log=work / "policy_a2.log")
        started = time.monotonic()
        # status messages of the new process only (the killed one's last words said "run" too)
        out["second_policy_ran"] = _wait(lambda: (w.last(w.policy) or {}).get("monotonic", 0) > started
                                         and (w.last(w.policy) or {}).get("status") in ("run", "ramp"), 60)

        # the robot dies: the policy reports stale, then lost, and stops sending
        kill_at = time.monotonic()
        robot.send_signal(signal.SIGKILL)
        robot.wait(10)
        _wait(lambda: (w.last(w.policy) or {}).get("status") == "lost", 5)
        with w.lock:
            seen = [(t, s.get("status")) for t, s in w.policy if t > kill_at]
        out["after_robot_kill_statuses"] = [s for _, s in seen]
        lost_at = next((t for t, s in seen if s == "lost"), None)
        stale_at = next((t for t, s in seen if s == "stale"), None)
        out["stale_after_s"] = (stale_at - kill_at) if stale_at else None
        out["lost_after_s"] = (lost_at - kill_at) if lost_at else None
        time.sleep(0.5)
        with w.lock:
            out["commands_after_lost"] = sum(1 for t, _ in w.commands if lost_at is not None and t > lost_at + 0.05)
    finally:
        for p in (policy, robot):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def _estop(node: Any, ns: str, w: Watch, between: Any, out: dict, key: str = "estop_reported_after_s",
           field: str = "status", value: Any = "estop", which: str = "policy") -> None:
    """Press the e-stop of ``ns`` until ``which`` reports it (a button publishes while pressed; a
    new publisher's first messages can precede discovery), calling ``between`` between presses.
    """
    from std_msgs.msg import Bool

    pub = node.create_publisher(Bool, f"{ns}/estop", 10)
    record = w.policy if which == "policy" else w.robot
    pressed = time.monotonic()
    while (w.last(record) or {}).get(field) != value and time.monotonic() - pressed < 20:
        pub.publish(Bool(data=True))
        between()
    out[key] = time.monotonic() - pressed


def phase_b(node: Any, args: argparse.Namespace, work: Path, out: dict) -> None:
    """Malformed joint states at a policy node (module doc)."""
    from sensor_msgs.msg import JointState

    ns = "/rl_b"
    w = Watch(node, ns)
    policy = _node("robolearn.sim2real.ros.ros2_policy_node", "--policy", args.policy, "--robot",
                   str(work / "features.json"), "--namespace", ns,
                   "--safety", json.dumps({"ramp_s": 0.0, "stale_timeout_s": 0.1}), log=work / "policy_b.log")
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
        if not _wait(lambda: (stream(0.1, *good) or (w.last(w.policy) or {}).get("status") == "run"), 90, 0.0):
            out["error_b"] = "phase B: the policy never ran on good joint states"
            return
        results = {}
        for kind, msg in {"names": (["cart", "pole"], [0.0, 0.01], [0.0, 0.0]),
                          "lengths": (["slider", "hinge"], [0.0], [0.0, 0.0]),
                          "nan": (["slider", "hinge"], [0.0, math.nan], [0.0, 0.0])}.items():
            before = (w.last(w.policy) or {}).get("malformed", 0)
            stream(0.5, *msg)
            st = w.last(w.policy) or {}
            results[kind] = {"malformed_added": st.get("malformed", 0) - before, "status": st.get("status"),
                             "last_error": st.get("malformed_last", "")}
            stream(0.3, *good)  # fresh good readings: running again
            results[kind]["recovered"] = (w.last(w.policy) or {}).get("status")
        out["malformed_joint_states"] = results
        _estop(node, ns, w, lambda: stream(0.02, *good), out)
        stream(1.0, *good)  # fresh readings keep coming: the latch must hold
        with w.lock:
            recent = [s.get("status") for t, s in w.policy if t > time.monotonic() - 0.9]
            sent = [c for t, c in w.commands if t > time.monotonic() - 0.9]
        out["estop_statuses"] = sorted(set(recent))
        out["estop_commands"] = sorted({round(float(c[0]), 9) for c in sent})
    finally:
        policy.send_signal(signal.SIGTERM)
        try:
            policy.wait(10)
        except subprocess.TimeoutExpired:
            policy.kill()


def phase_c(node: Any, args: argparse.Namespace, work: Path, out: dict) -> None:
    """Malformed commands at a robot node (module doc)."""
    from std_msgs.msg import Float64MultiArray

    ns = "/rl_c"
    w = Watch(node, ns)
    robot = _node("robolearn.sim2real.ros.ros2_robot_node", "--task", "Cartpole-Balance", "--namespace", ns,
                  log=work / "robot_c.log")
    pub = node.create_publisher(Float64MultiArray, f"{ns}/command", 10)
    try:
        if not _wait(lambda: w.last(w.robot) is not None and pub.get_subscription_count() > 0, 90):
            out["error_c"] = "phase C: the robot node never reported"
            return
        for data in ([0.1, 0.2], [math.nan]):
            end = time.monotonic() + 0.4
            while time.monotonic() < end:
                pub.publish(Float64MultiArray(data=data))
                time.sleep(0.01)
        time.sleep(0.3)
        st = w.last(w.robot) or {}
        out["malformed_commands"] = {"rejected": st.get("rejected"), "holding": st.get("holding"),
                                     "commands": st.get("commands"), "last_error": st.get("rejected_last")}
        _estop(node, ns, w, lambda: time.sleep(0.02), out, "robot_estop_reported_after_s", "estop", True, "robot")
        before = (w.last(w.robot) or {}).get("commands")
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # good commands after the latch are ignored
            pub.publish(Float64MultiArray(data=[0.5]))
            time.sleep(0.01)
        time.sleep(0.2)
        st = w.last(w.robot) or {}
        out["robot_estop"] = {"estop": st.get("estop"), "holding": st.get("holding"),
                              "commands_applied_after": (st.get("commands") or 0) - (before or 0)}
    finally:
        robot.send_signal(signal.SIGTERM)
        try:
            robot.wait(10)
        except subprocess.TimeoutExpired:
            robot.kill()


def main(argv: list[str] | None = None) -> int:
    """Run the phases; print the measurements as one JSON line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", required=True, help="exported Cartpole-Balance policy folder")
    p.add_argument("--workdir", required=True)
    p.add_argument("--balance-s", type=float, default=10.0)
    p.add_argument("--max-delta", type=float, default=0.5)
    p.add_argument("--phases", default="abc")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    from robolearn.sim2real.ros.ros2 import Spinner

    spinner = Spinner("probe", "/")
    out: dict[str, Any] = {}
    try:
        if "a" in args.phases:
            phase_a(spinner.node, args, work, out)
        if "b" in args.phases:
            phase_b(spinner.node, args, work, out)
        if "c" in args.phases:
            phase_c(spinner.node, args, work, out)
    finally:
        spinner.shutdown()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
