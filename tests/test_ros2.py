"""ROS 2 for real: robot node, policy node and a probe node over Fast DDS, inside ``unshare -n``.

DDS must never send a packet off this machine, so the whole scenario runs in a fresh network
namespace with only loopback up (``unshare -n``; ``ip link set lo up``). rclpy lives in the ROS 2
venv (``.venv-ros2``, made by ``scripts/setup.sh``; its std_msgs would shadow ROS 1's here), so
the scenario is :mod:`robolearn.sim2real.ros.ros2_probe` run by that interpreter; it prints its
measurements as JSON and the assertions are here. Where the venv, ``unshare -n`` or ``ip`` is
missing the test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy_support import export_cartpole_lqr

REPO = Path(__file__).resolve().parents[1]
ROS2_PYTHON = Path(os.environ.get("ROBOLEARN_ROS2_PYTHON", REPO / ".venv-ros2" / "bin" / "python"))


def _unavailable() -> str | None:
    """Why the ROS 2 scenario cannot run here (``None``: it can)."""
    if not ROS2_PYTHON.exists():
        return f"no ROS 2 interpreter at {ROS2_PYTHON} (scripts/setup.sh makes .venv-ros2)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) is missing: ROS 2 only runs in a private network namespace"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -n is not permitted here ({probe.stderr.strip()}): ROS 2 must not run on the shared network"
    check = subprocess.run(["unshare", "-n", "sh", "-c", f"ip link set lo up && {ROS2_PYTHON} -c 'import rclpy, robolearn'"],
                           capture_output=True, text=True, timeout=120)
    if check.returncode != 0:
        return f"the ROS 2 venv cannot import rclpy and robolearn: {check.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("ros2")
    policy = export_cartpole_lqr(work / "policy")
    env = {**os.environ, "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp", "ROS_DOMAIN_ID": "42", "ROS_LOCALHOST_ONLY": "1",
           "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = (f"ip link set lo up && exec {ROS2_PYTHON} -m robolearn.sim2real.ros.ros2_probe "
               f"--policy {policy} --workdir {work / 'run'} --balance-s 10 --max-delta 0.5")
    # everything runs in the namespace and dies with it; the timeout ends a hung scenario
    out = subprocess.run(["unshare", "-n", "--kill-child", "sh", "-c", command], capture_output=True, text=True,
                         timeout=420, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=1))
    logs = {p.name: p.read_text()[-2000:] for p in (work / "run").glob("*.log")}
    return {"result": result, "logs": logs}


@pytest.mark.ros
def test_ros2_policy_balances_the_cartpole_at_the_manifest_rate_within_limits(scenario: dict) -> None:
    r = scenario["result"]
    assert "error" not in r, scenario["logs"]
    assert r["balance_states"] >= 900  # 10 s at 100 Hz, seen by a third node
    assert r["balance_max_abs_angle"] < 0.1  # upright all along (the task's success is 10 degrees)
    assert r["balance_mean_reward"] > 0.99
    assert 90.0 <= r["command_rate_hz"] <= 110.0  # the manifest's 100 Hz within 10 %
    assert r["command_max_abs"] <= 1.0 + 1e-9  # the cart's effort limit
    assert r["command_max_step"] <= 0.5 + 1e-9  # the configured per-step change


@pytest.mark.ros
def test_ros2_robot_holds_when_the_policy_dies_and_policy_stops_when_the_robot_dies(scenario: dict) -> None:
    r = scenario["result"]
    assert r["hold_latency_s"] is not None and r["hold_latency_s"] < 0.3  # robot-side watchdog 0.1 s
    assert r["second_policy_ran"]
    statuses = r["after_robot_kill_statuses"]
    assert "stale" in statuses and statuses[-1] == "lost", statuses
    assert r["stale_after_s"] < r["lost_after_s"] < 2.0
    assert r["commands_after_lost"] == 0


@pytest.mark.ros
def test_ros2_estop_latches_at_policy_and_robot(scenario: dict) -> None:
    r = scenario["result"]
    assert r["estop_statuses"] == ["estop"]  # fresh good readings kept coming for a second
    assert r["estop_commands"] == [0.0]  # the torque hold at rest: -kd * 0
    assert r["robot_estop"] == {"estop": True, "holding": True, "commands_applied_after": 0}


@pytest.mark.ros
def test_ros2_malformed_messages_are_rejected_and_the_robot_held(scenario: dict) -> None:
    r = scenario["result"]
    expected = {"names": "name lacks joints ['slider', 'hinge']", "lengths": "position has 1 values for 2 names",
                "nan": "position of ['hinge'] is not finite"}
    for kind, text in expected.items():
        got = r["malformed_joint_states"][kind]
        assert got["malformed_added"] > 10 and text in got["last_error"], got
        assert got["status"] in ("stale", "lost")  # held: no command computed from a bad message
        assert got["recovered"] == "run"
    bad = r["malformed_commands"]
    assert bad["rejected"] > 10 and bad["commands"] == 0 and bad["holding"] is True
    assert "non-finite command" in bad["last_error"]
