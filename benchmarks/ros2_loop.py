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
import subprocess
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ROS2_PYTHON = REPO / ".venv-ros2" / "bin" / "python"
INSIDE = "ROBOLEARN_ROS2_NETNS"
"""Set in the namespace, so the script knows it is already there."""


def _ros1_loop() -> Any:
    """``benchmarks/ros_loop.py`` as a module: its ``run_rate`` runs either ROS version's nodes."""
    spec = importlib.util.spec_from_file_location("ros_loop", Path(__file__).with_name("ros_loop.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


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
    shared = _ros1_loop()
    results = [shared.run_rate(rate, args.duration, args.task, work, env, ros=2) for rate in args.rates]
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
