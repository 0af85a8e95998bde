"""The ROS 2 control loop at 200 and 500 Hz, inside ``unshare -n`` (BENCHMARKS.md, "Deployment").

The ROS 2 twin of ``benchmarks/ros_loop.py`` (same robot, controller, measurements and JSON rows):
the simulated robot node and the policy node (``robolearn.sim2real.ros.ros2_*_node``) as separate
processes over Fast DDS. DDS must not reach the network of a shared machine, so this script
re-runs itself in a fresh network namespace with only loopback up, under the ROS 2 venv's
interpreter (``.venv-ros2``), when started from anywhere else.

    python benchmarks/ros2_loop.py [--rates 200 500] [--duration 10]

Target (issue 12): p99 period jitter < 1 ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ROS2_PYTHON = REPO / ".venv-ros2" / "bin" / "python"
INSIDE = "ROBOLEARN_ROS2_NETNS"
"""Set in the namespace, so the script knows it is already there."""


def _ros1_loop() -> Any:
    """``benchmarks/ros_loop.py`` as a module: the export, alignment and statistics it defines."""
    spec = importlib.util.spec_from_file_location("ros_loop", Path(__file__).with_name("ros_loop.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def run_rate(rate: float, duration: float, task: str, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """One rate: nodes up, ``duration`` s of control, nodes down; the measurements."""
    from robolearn.data import Dataset

    shared = _ros1_loop()
    timestep = 1.0 / rate
    policy_dir = shared.export_lqr(task, timestep, work / f"lqr_{rate:g}")
    logs = {name: open(work / f"{name}_{rate:g}.log", "wb") for name in ("robot", "policy")}
    py = [sys.executable, "-m"]
    ns = ["--namespace", f"/ros2_loop_{rate:g}"]
    robot = subprocess.Popen(py + ["robolearn.sim2real.ros.ros2_robot_node", "--task", task, *ns,
                                   "--override", f"timestep={timestep!r}", "--wait-for-policy", "60",
                                   "--command-log", str(work / f"commands_{rate:g}.npz")],
                             stdout=logs["robot"], stderr=subprocess.STDOUT, env=env)
    policy = None
    try:
        policy = subprocess.Popen(py + ["robolearn.sim2real.ros.ros2_policy_node", "--policy", str(policy_dir), *ns,
                                        "--robot", "from-topic", "--duration", str(duration),
                                        "--safety", json.dumps(shared.SAFETY),
                                        "--telemetry", str(work / f"telemetry_{rate:g}.h5"),
                                        "--summary", str(work / f"summary_{rate:g}.json")],
                                  stdout=logs["policy"], stderr=subprocess.STDOUT, env=env)
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
    if policy is None or policy.returncode != 0:
        raise RuntimeError(f"policy node failed:\n{(work / f'policy_{rate:g}.log').read_text()}")
    summary = json.loads((work / f"summary_{rate:g}.json").read_text())
    data = Dataset.load(work / f"telemetry_{rate:g}.h5")
    infos = {k: v.cpu().numpy() for k, v in data.infos.items()}
    log = np.load(work / f"commands_{rate:g}.npz")
    o = shared.align(infos["sent"], log["command"])
    n = min(len(infos["sent"]), len(log["command"]) - o)
    receipts = log["monotonic"][o:o + n]
    return {
        "rate_hz_target": rate,
        "rate_hz": round(summary["rate_hz"], 3),
        "ticks": int(summary["ticks"]),
        "missed": int(summary["missed"]),
        "jitter_ms": {k: round(summary[f"jitter_{k}_s"] * 1e3, 4) for k in ("p50", "p99", "max")},
        "step_cost_ms": {"p50": round(summary["step_cost_p50_s"] * 1e3, 4), "p99": round(summary["step_cost_p99_s"] * 1e3, 4)},
        "robot_receipt_rate_hz": round(float((len(receipts) - 1) / (receipts[-1] - receipts[0])), 3),
        "robot_receipt_jitter_ms": shared.percentiles(np.abs(np.diff(receipts) - 1.0 / rate)),
        "obs_to_command_ms": shared.percentiles(log["wall"][o:o + n] - infos["stamp"][:n]),
        "tick_to_receipt_ms": shared.percentiles(receipts - infos["tick"][:n]),
        "commands_matched": int(n),
        "max_abs_pole_angle_rad": round(float(np.abs(infos["joint_pos"][:, 1]).max()), 5),
        "interventions": summary.get("interventions", {}),
    }


def main() -> None:
    """Run every rate inside the namespace; print the JSON table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", type=float, nargs="+", default=[200.0, 500.0])
    p.add_argument("--duration", type=float, default=10.0, help="seconds of control per rate")
    p.add_argument("--task", default="Cartpole-Balance")
    args = p.parse_args()
    if os.environ.get(INSIDE) != "1":
        if not ROS2_PYTHON.exists():
            raise SystemExit(f"{ROS2_PYTHON} is missing: run scripts/setup.sh (it makes the ROS 2 venv)")
        inner = " ".join([str(ROS2_PYTHON), str(Path(__file__).resolve()), "--rates", *map(str, args.rates),
                          "--duration", str(args.duration), "--task", args.task])
        env = {**os.environ, INSIDE: "1"}
        raise SystemExit(subprocess.call(["unshare", "-n", "--kill-child", "sh", "-c", f"ip link set lo up && exec {inner}"],
                                         env=env))
    work = Path(tempfile.mkdtemp(prefix="ros2_loop_"))
    env = {**os.environ, "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp", "ROS_DOMAIN_ID": "7", "ROS_LOCALHOST_ONLY": "1",
           "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    results = [run_rate(rate, args.duration, args.task, work, env) for rate in args.rates]
    print(json.dumps({
        "benchmark": "ros2_loop",
        "transport": "ROS 2 (rclpy, Fast DDS) inside unshare -n, loopback only; robot and policy in separate processes",
        "task": args.task,
        "duration_s": args.duration,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "work_dir": str(work),
        "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()
