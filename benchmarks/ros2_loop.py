"""The ROS 2 control loop at 200 and 500 Hz, inside ``unshare -n`` (BENCHMARKS.md, "Deployment").

The ROS 2 twin of ``benchmarks/ros_loop.py`` (same robot, controller, measurements and JSON rows):
the simulated robot node and the policy node (``robolearn.sim2real.ros.ros2_*_node``) as separate
processes over Fast DDS. DDS must not reach the network of a shared machine, so this script
re-runs itself in a fresh network namespace with only loopback up, under the ROS 2 venv's
interpreter (``.venv-ros2``), when started from anywhere else.

    python benchmarks/ros2_loop.py [--rates 200 500] [--duration 10] [--fifo-priority 20]

Target (issue 12): p99 period jitter < 1 ms. On a loaded 2-core machine the default scheduler's
tails miss it (other processes take the CPU from the loop); ``--fifo-priority 20`` runs every
process under ``SCHED_FIFO`` (``chrt -f``, root or CAP_SYS_NICE), as a robot's control computer
would, and the JSON's ``scheduling`` says which was used.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
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


def _scheduling() -> str:
    """This process's scheduling policy (the nodes inherit it), e.g. ``SCHED_FIFO 20``."""
    policy = os.sched_getscheduler(0)
    names = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR"}
    return f"{names.get(policy, policy)} {os.sched_getparam(0).sched_priority}"


def main() -> None:
    """Run every rate inside the namespace; print the JSON table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", type=float, nargs="+", default=[200.0, 500.0])
    p.add_argument("--duration", type=float, default=10.0, help="seconds of control per rate")
    p.add_argument("--task", default="Cartpole-Balance")
    p.add_argument("--fifo-priority", type=int, default=0,
                   help="run every process under SCHED_FIFO at this priority (chrt -f; 0: the default scheduler)")
    args = p.parse_args()
    if os.environ.get(INSIDE) != "1":
        if not ROS2_PYTHON.exists():
            raise SystemExit(f"{ROS2_PYTHON} is missing: run scripts/setup.sh (it makes the ROS 2 venv)")
        if shutil.which("unshare") is None or shutil.which("ip") is None:
            raise SystemExit("unshare or ip (util-linux, iproute2) is missing: ROS 2 only runs in a private network "
                             "namespace here")
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise SystemExit(f"unshare -n is not permitted ({probe.stderr.strip()}): ROS 2 must not run on the "
                             "shared network")
        # A PID namespace too where allowed: every node dies with the namespace, even on a hang.
        pid = subprocess.run(["unshare", "-n", "-p", "-f", "true"], capture_output=True).returncode == 0
        unshare = ["unshare", "-n", "-p", "-f", "--kill-child"] if pid else ["unshare", "-n", "--kill-child"]
        inner = " ".join([str(ROS2_PYTHON), str(Path(__file__).resolve()), "--rates", *map(str, args.rates),
                          "--duration", str(args.duration), "--task", args.task])
        env = {**os.environ, INSIDE: "1"}
        chrt = ["chrt", "-f", str(args.fifo_priority)] if args.fifo_priority > 0 else []
        raise SystemExit(subprocess.call([*chrt, *unshare, "sh", "-c", f"ip link set lo up && exec {inner}"], env=env))
    work = Path(tempfile.mkdtemp(prefix="ros2_loop_"))
    env = {**os.environ, "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp", "ROS_DOMAIN_ID": "7", "ROS_LOCALHOST_ONLY": "1",
           "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    shared = _ros1_loop()
    results = []
    for rate in args.rates:
        load_before = os.getloadavg()[0]
        row = shared.run_rate(rate, args.duration, args.task, work, env, ros=2)
        # A shared machine's other work shows in the tails: keep the load beside the figures.
        row["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        results.append(row)
    print(json.dumps({
        "benchmark": "ros2_loop",
        "transport": "ROS 2 (rclpy, Fast DDS) inside unshare -n, loopback only; robot and policy in separate processes",
        "task": args.task,
        "duration_s": args.duration,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "scheduling": _scheduling(),
        "work_dir": str(work),
        "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()
