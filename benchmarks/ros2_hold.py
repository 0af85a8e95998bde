"""The ROS 2 robot node's hold after its policy's SIGKILL, over many scenario runs (BENCHMARKS.md,
"The scenario figures").

``tests/test_ros2.py`` runs the scenario once per test session and asserts the robot holds within
0.3 s of the policy's death (its watchdog: 0.1 s). A stall that hits one run in twenty (a Fast DDS
shared-memory write towards the dead reader, ``common.control_node_transport``) needs repeats:
this runs the same probe (``robolearn.sim2real.ros.ros2_probe``) ``--runs`` times, each in its own
network and PID namespace with the tests' environment, and prints one JSON row per run (hold
latency, dropped ticks, the Fast DDS segments each node mapped) and a summary line per transport.
``--transports udp shm`` interleaves runs on the nodes' own choice (UDP) with runs where
``FASTDDS_BUILTIN_TRANSPORTS=DEFAULT`` keeps rmw_fastrtps's shared memory, the transport before 11f4345.

    python benchmarks/ros2_hold.py [--runs 20] [--balance-s 3] [--transports udp shm]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.* (the LQR export and the scenario's environment)


def main() -> None:
    """Run the probe ``--runs`` times and print its hold figures (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20, help="scenario runs")
    p.add_argument("--balance-s", type=float, default=3.0, help="seconds of balancing before the kill (tests: 10)")
    p.add_argument("--transports", nargs="+", choices=["udp", "shm"], default=["udp"],
                   help="runs per transport, interleaved: udp (the nodes' choice) and/or shm (shared memory kept)")
    args = p.parse_args()
    if args.runs < 1:
        raise SystemExit(f"--runs: expected a count >= 1, got {args.runs}")
    from tests.deploy_support import export_cartpole_lqr
    from tests.test_ros2 import _namespace_command, probe_command, scenario_env

    unshare, reason = _namespace_command()
    if unshare is None:
        raise SystemExit(f"cannot run the ROS 2 scenario here: {reason}")
    work = Path(tempfile.mkdtemp(prefix="ros2_hold_"))
    policy = export_cartpole_lqr(work / "policy")
    holds: dict[str, list[float | None]] = {t: [] for t in args.transports}
    for run in range(args.runs):
        for transport in args.transports:
            env = scenario_env() | ({"FASTDDS_BUILTIN_TRANSPORTS": "DEFAULT"} if transport == "shm" else {})
            command = probe_command(policy, work / f"{transport}{run}", args.balance_s)
            out = subprocess.run([*unshare, "sh", "-c", command], capture_output=True, text=True, timeout=300,
                                 env=env, cwd=REPO)
            lines = out.stdout.strip().splitlines()
            result = json.loads(lines[-1]) if out.returncode == 0 and lines else {"error": out.stderr[-500:]}
            row = {"run": run, "transport": transport, "hold_s": result.get("hold_latency_s"),
                   "dropped_ticks": result.get("robot_dropped_ticks"),
                   "robot_shm_segments": len(result.get("robot_shm_segments") or []),
                   "policy_shm_segments": len(result.get("policy_shm_segments") or []), "error": result.get("error")}
            holds[transport].append(row["hold_s"])
            print(json.dumps(row), flush=True)
    for transport, values in holds.items():
        done = sorted(h for h in values if h is not None)
        print(json.dumps({"transport": transport, "runs": len(values), "hold_s_min": done[0] if done else None,
                          "hold_s_max": done[-1] if done else None, "over_0_3_s": sum(h > 0.3 for h in done),
                          "no_hold": len(values) - len(done), "work_dir": str(work)}))


if __name__ == "__main__":
    main()
