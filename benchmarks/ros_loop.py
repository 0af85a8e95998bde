"""The ROS 1 control loop on loopback at 200 and 500 Hz (BENCHMARKS.md, "Deployment").

A real rosmaster on a free loopback port, the simulated robot node (``Cartpole-Balance`` with its
physics timestep set to the period, so the task's control rate is the loop's) and the policy node
(the LQR cart-pole controller of ``tests/deploy_support.py``, exported with that task's policy
spec, so its manifest says 200 or 500 Hz), as separate processes, as they would run beside a robot.
Measured, per rate:

* the loop's achieved rate and period jitter ``|period - nominal|`` (p50/p99/max) on the policy
  node's own ticks (:class:`~robolearn.sim2real.deploy.runtime.LoopStats`), and the period jitter of
  command receipts at the robot node;
* observation-to-command latency: the JointState's ``header.stamp`` (set when the robot published
  the state) to the receipt of the command computed from it, at the robot node (commands matched to
  the policy's telemetry by value). It includes the wait for the policy's next tick (the two loops
  are not phase-locked: up to one period), reported apart as ``tick_to_receipt`` (policy tick to
  receipt: step, publish and transport) ;
* the largest pole angle during the run (the controller still balances).

    python benchmarks/ros_loop.py [--rates 200 500] [--duration 10]

Prints one JSON object (``results``: one row per rate, with the machine's 1-minute load average
before and after it: on a shared 2-core machine the tails follow what else runs). Both nodes set
Python's thread switch interval to 0.5 ms (their ``--switch-interval``). Target (issue 12): p99
jitter < 1 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAFETY = {"ramp_s": 0.0, "exit_s": 0.1, "stale_timeout_s": 0.05}
"""The policy node's safety settings: no staged start (the LQR starts at once), a short exit."""
sys.path.insert(0, str(REPO))  # tests.deploy_support: the LQR controller the deploy tests use


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def export_lqr(task: str, timestep: float, out: Path) -> Path:
    """The LQR controller exported with the policy spec of ``task`` at physics ``timestep``."""
    import robolearn
    from robolearn.export import export_policy
    from tests.deploy_support import lqr_network

    spec = robolearn.make(task, 1, seed=0, timestep=timestep).policy_spec()
    export_policy(lqr_network(), spec, out, ("onnx",), parity_samples=16)
    return out


def percentiles(x: np.ndarray, scale: float = 1e3) -> dict[str, float]:
    """p50/p99/max of ``x`` times ``scale`` (milliseconds by default), rounded."""
    return {"p50": round(float(np.percentile(x, 50)) * scale, 4),
            "p99": round(float(np.percentile(x, 99)) * scale, 4),
            "max": round(float(np.max(x)) * scale, 4)}


def align(sent: np.ndarray, received: np.ndarray, window: int = 200) -> int:
    """The offset ``o`` with ``received[o + i] == sent[i]`` (the robot may have missed the first
    commands; it also got the exit's damping commands after the last recorded one)."""
    n = min(window, len(sent))
    for o in range(0, max(1, len(received) - n + 1)):
        if np.array_equal(received[o:o + n], sent[:n]):
            return o
    raise RuntimeError("could not match the policy's commands to the robot's receipts")


def run_rate(rate: float, duration: float, task: str, work: Path, env: dict[str, str], ros: int = 1) -> dict[str, Any]:
    """One rate: nodes up, ``duration`` s of control, nodes down; the measurements. ``ros=2`` runs
    the ROS 2 nodes (the caller is then inside a network namespace, under the ROS 2 venv's python:
    ``benchmarks/ros2_loop.py``), whose robot description travels on a latched topic.
    """
    from robolearn.data import Dataset

    timestep = 1.0 / rate
    policy_dir = export_lqr(task, timestep, work / f"lqr_{rate:g}")
    logs = {name: open(work / f"{name}_{rate:g}.log", "wb") for name in ("robot", "policy")}
    py = [sys.executable, "-m"]
    ns = ["--namespace", f"/ros_loop_{rate:g}"]  # a fresh namespace: no parameter left by another run
    robot = subprocess.Popen(py + [f"robolearn.sim2real.ros.ros{ros}_robot_node", "--task", task, *ns,
                                   "--override", f"timestep={timestep!r}", "--wait-for-policy", "60",
                                   "--command-log", str(work / f"commands_{rate:g}.npz")],
                             stdout=logs["robot"], stderr=subprocess.STDOUT, env=env, start_new_session=True)
    policy = None
    try:
        policy = subprocess.Popen(py + [f"robolearn.sim2real.ros.ros{ros}_policy_node", "--policy", str(policy_dir),
                                        *ns,
                                        "--robot", "from-params" if ros == 1 else "from-topic",
                                        "--duration", str(duration),
                                        "--safety", json.dumps(SAFETY),
                                        "--telemetry", str(work / f"telemetry_{rate:g}.h5"),
                                        "--summary", str(work / f"summary_{rate:g}.json")],
                                  stdout=logs["policy"], stderr=subprocess.STDOUT, env=env, start_new_session=True)
        policy.wait(timeout=duration + 120)
    finally:
        for proc in (policy, robot):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for fh in logs.values():
            fh.close()
    if policy.returncode != 0:
        text = (work / f"policy_{rate:g}.log").read_text()
        raise RuntimeError(f"policy node failed ({policy.returncode}):\n{text}")
    summary = json.loads((work / f"summary_{rate:g}.json").read_text())
    data = Dataset.load(work / f"telemetry_{rate:g}.h5")
    infos = {k: v.cpu().numpy() for k, v in data.infos.items()}
    log = np.load(work / f"commands_{rate:g}.npz")
    o = align(infos["sent"], log["command"])
    n = min(len(infos["sent"]), len(log["command"]) - o)
    latency = log["wall"][o:o + n] - infos["stamp"][:n]
    tick_to_receipt = log["monotonic"][o:o + n] - infos["tick"][:n]
    receipts = log["monotonic"][o:o + n]
    period = 1.0 / rate
    robot_periods = np.diff(receipts)
    hinge = 1  # Cartpole: joints (slider, hinge)
    return {
        "rate_hz_target": rate,
        "rate_hz": round(summary["rate_hz"], 3),
        "ticks": int(summary["ticks"]),
        "missed": int(summary["missed"]),
        "jitter_ms": {k: round(summary[f"jitter_{k}_s"] * 1e3, 4) for k in ("p50", "p99", "max")},
        "step_cost_ms": {"p50": round(summary["step_cost_p50_s"] * 1e3, 4),
                         "p99": round(summary["step_cost_p99_s"] * 1e3, 4)},
        "robot_receipt_rate_hz": round(float((len(receipts) - 1) / (receipts[-1] - receipts[0])), 3),
        "robot_receipt_jitter_ms": percentiles(np.abs(robot_periods - period)),
        "obs_to_command_ms": percentiles(latency),
        "tick_to_receipt_ms": percentiles(tick_to_receipt),
        "commands_matched": int(n),
        "max_abs_pole_angle_rad": round(float(np.abs(infos["joint_pos"][:, hinge]).max()), 5),
        "interventions": summary.get("interventions", {}),
    }


def main() -> None:
    """Run every rate; print the JSON table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", type=float, nargs="+", default=[200.0, 500.0])
    p.add_argument("--duration", type=float, default=10.0, help="seconds of control per rate")
    p.add_argument("--task", default="Cartpole-Balance")
    args = p.parse_args()
    rosmaster = shutil.which("rosmaster") or "/usr/bin/rosmaster"
    work = Path(tempfile.mkdtemp(prefix="ros_loop_"))
    port = free_port()
    env = {**os.environ, "ROS_MASTER_URI": f"http://127.0.0.1:{port}", "ROS_IP": "127.0.0.1",
           "ROS_HOSTNAME": "127.0.0.1", "ROS_HOME": str(work / "home"), "ROS_LOG_DIR": str(work / "log"),
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("ROS_NAMESPACE", None)
    master_log = open(work / "rosmaster.log", "wb")
    master = subprocess.Popen([rosmaster, "--core", "-p", str(port)], stdout=master_log, stderr=subprocess.STDOUT,
                              env=env, start_new_session=True)
    results = []
    try:
        time.sleep(1.0)
        for rate in args.rates:
            load_before = os.getloadavg()[0]
            row = run_rate(rate, args.duration, args.task, work, env)
            # A shared machine's other work shows in the tails: keep the load beside the figures.
            row["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            results.append(row)
    finally:
        master.send_signal(signal.SIGINT)
        try:
            master.wait(timeout=10)
        except subprocess.TimeoutExpired:
            master.kill()
        master_log.close()
    print(json.dumps({
        "benchmark": "ros_loop",
        "transport": "ROS 1 (rospy, TCPROS, tcp_nodelay) on loopback; robot and policy in separate processes",
        "task": args.task,
        "duration_s": args.duration,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "work_dir": str(work),
        "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()
