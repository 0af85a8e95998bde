"""ROS 2 for real: robot nodes, policy nodes and a probe node over Fast DDS, inside ``unshare -n``.

DDS must never send a packet off this machine, so the whole scenario runs in a fresh network
namespace with only loopback up (``unshare -n``; ``ip link set lo up``), and in a fresh PID
namespace where the system allows one, so that every process of the scenario dies with it even
when the scenario hangs (``--kill-child``). rclpy lives in the ROS 2 venv (``.venv-ros2``, made by
``scripts/setup.sh``; its std_msgs would shadow ROS 1's here), so the scenario is
:mod:`robolearn.sim2real.ros.ros2_probe` run by that interpreter; it prints its measurements as JSON
and the assertions are here. Where the venv, ``unshare -n`` or ``ip`` is missing the tests are
skipped with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robolearn.data import Dataset
from robolearn.sim2real.deploy.safety import Intervention
from robolearn.sim2real.ros import ros2_robot_node
from tests.deploy_support import export_cartpole_lqr

pytestmark = pytest.mark.ros

REPO = Path(__file__).resolve().parents[1]
ROS2_PYTHON = Path(os.environ.get("ROBOLEARN_ROS2_PYTHON", REPO / ".venv-ros2" / "bin" / "python"))
ENV = {"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp", "ROS_DOMAIN_ID": "42", "ROS_LOCALHOST_ONLY": "1",
       "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
"""The scenario's environment: a fixed domain, Fast DDS, and localhost-only discovery besides the
namespace (belt and braces: the range for Kilted's rcl, ``ROS_LOCALHOST_ONLY`` for Jazzy's). The
robot and policy nodes turn both into their UDP profile (``common.control_node_transport``), the
probe keeps rmw_fastrtps's shared memory and UDP."""


def scenario_env() -> dict[str, str]:
    """This process's environment with :data:`ENV`, less any Fast DDS variable: a transport or
    profile set in the caller's shell would decide the nodes' transport instead of the code under test."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("FASTDDS_", "FASTRTPS_"))} | ENV


def probe_command(policy: Path, workdir: Path, balance_s: float) -> str:
    """The shell command that runs the scenario's probe inside the namespaces (loopback up first)."""
    return (f"ip link set lo up && exec {ROS2_PYTHON} -m robolearn.sim2real.ros.ros2_probe "
            f"--policy {policy} --workdir {workdir} --balance-s {balance_s}")


BALANCE_S = 10.0
EFFORT_LIMIT = 1.0
"""Cartpole-Balance's cart force limit (the robot node's features)."""
INITIAL_ANGLE = -0.00685479
"""The pole angle of Cartpole-Balance's first world at seed 0 (the robot node's ``--seed``)."""


def _logs(scenario: dict, *names: str) -> str:
    """The tails of the scenario's node logs ``names``, for a failure's message."""
    return "\n".join(f"--- {n}\n{scenario['logs'].get(n, '(no log)')}" for n in names)


def _namespace_command() -> tuple[list[str] | None, str]:
    """The ``unshare`` command line of the scenario's namespaces, or ``None`` and why there is none."""
    if not ROS2_PYTHON.exists():
        return None, f"no ROS 2 interpreter at {ROS2_PYTHON} (scripts/setup.sh makes .venv-ros2)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None, "unshare or ip (util-linux, iproute2) is missing: ROS 2 only runs in a private network namespace"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"unshare -n is not permitted here ({probe.stderr.strip()}): ROS 2 must not run on the shared network"
    # A PID namespace as well where allowed: its processes all die with its first one.
    pid = subprocess.run(["unshare", "-n", "-p", "-f", "true"], capture_output=True, text=True)
    unshare = ["unshare", "-n", "-p", "-f", "--kill-child"] if pid.returncode == 0 else ["unshare", "-n", "--kill-child"]
    check = subprocess.run([*unshare, "sh", "-c", f"ip link set lo up && {ROS2_PYTHON} -c 'import rclpy, robolearn'"],
                           capture_output=True, text=True, timeout=120)
    if check.returncode != 0:
        return None, f"the ROS 2 venv cannot import rclpy and robolearn: {check.stderr.strip()[-300:]}"
    return unshare, ""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The probe's measurements (``ros2_probe`` module doc), its logs under ``"logs"``."""
    unshare, reason = _namespace_command()
    if unshare is None:  # no ROS 2 venv, no unshare -n, no ip: skipped, saying why
        raise pytest.skip.Exception(reason)
    work = tmp_path_factory.mktemp("ros2")
    policy = export_cartpole_lqr(work / "policy")
    command = probe_command(policy, work / "run", BALANCE_S)
    # Everything runs in the namespaces and dies with them; the timeout ends a hung scenario.
    out = subprocess.run([*unshare, "sh", "-c", command], capture_output=True, text=True, timeout=300,
                         env=scenario_env(), cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["logs"] = {p.name: p.read_text()[-2000:] for p in (work / "run").glob("*.log")}
    for key in ("error", "error_b", "error_c"):
        assert key not in result, (result[key], result["logs"])
    return result


def test_policy_balances_the_cartpole_robot_node_for_10_s(scenario: dict) -> None:
    """The LQR policy node keeps the robot node's pole up from its first command on."""
    b = scenario["balance"]
    print(f"\nbalance: {json.dumps(b)}")
    logs = _logs(scenario, "policy_a.log", "robot_a.log")
    # Joint states at 100 Hz, seen by a third node: the loop ran for the whole time. A share, not the
    # full count: on a loaded machine late ticks and DDS delivery cost some (836 of 1,000 seen once in
    # a fresh-clone run, while the pole stayed up); a stalled loop would show far fewer.
    assert b["states"] >= 0.75 * BALANCE_S * 100, logs
    assert b["resets"] == 0, logs  # the pole never fell
    # the robot stood still until the policy's first command: the seed's initial angle, exactly (the
    # probe's reader has matched the robot's writer before the world starts, the gate reader of
    # ros2_probe's phase A: it sees the states from the start; the printed states_before_first_command
    # and first_state_after_first_command_s say how early)
    assert abs(b["first_angle"] - INITIAL_ANGLE) < 5e-4, logs
    assert b["max_abs_angle"] < 0.1, logs  # upright all along (the task's success is 10 degrees)
    assert b["max_abs_angle_last_s"] < 0.01, logs  # and settled
    assert b["mean_reward"] > 0.99, logs


def test_command_rate_is_the_manifests_within_10_percent(scenario: dict) -> None:
    """Commands arrive at 100 Hz (+-10 %), measured from their receipt by the probe."""
    c = scenario["commands"]
    print(f"\ncommand rate {c['rate_hz']:.2f} Hz over {c['count']} commands; period ms {c['period_ms']}")
    assert 90.0 <= c["rate_hz"] <= 110.0


def test_every_command_is_within_the_effort_limit_and_the_per_step_change(scenario: dict) -> None:
    """Every command, from the first (the probe was matched before the policy sent any), is within
    the robot's effort limit and the safety layer's ``max_delta`` of the one before."""
    c = scenario["commands"]
    max_delta = scenario["safety_a"]["max_delta"]
    print(f"\n|command| max {c['max_abs']:.4f} (limit {EFFORT_LIMIT}); |change| {c['step']} (limit {max_delta}); "
          f"first {c['first']}; policy sent {c['policy_sent']}, probe received {c['received_by_then']}; "
          f"interventions { {k: v for k, v in c['interventions'].items() if v} }")
    assert c["received_by_then"] >= c["policy_sent"]  # none missed: the limits were checked on all
    assert abs(c["first"]) <= max_delta + 1e-12  # the first command came from zero
    assert c["max_abs"] <= EFFORT_LIMIT + 1e-12
    assert c["max_step"] <= max_delta + 1e-9
    assert c["interventions"]["rate"] > 0  # the change limit did act (the LQR's first wish is ~0.03)
    assert c["max_abs"] > 0.01  # and so did the policy


def test_killing_the_policy_makes_the_robot_hold_within_0_3_s(scenario: dict) -> None:
    """SIGKILL on the policy node: the robot node's watchdog (0.1 s) holds; a new policy takes over."""
    latency = scenario["hold_latency_s"]
    print(f"\nhold {latency if latency is None else round(latency * 1e3, 1)} ms after the policy's SIGKILL; "
          f"the robot's last command {scenario['last_command_after_kill_s']} s after it; "
          f"{scenario.get('robot_dropped_ticks')} ticks dropped unpublished by then")
    context = (f"dropped ticks {scenario.get('robot_dropped_ticks')}, the robot's shared-memory segments "
               f"{scenario.get('robot_shm_segments')}\n")
    assert latency is not None and 0.05 < latency < 0.3, context + _logs(scenario, "policy_a.log", "robot_a.log")
    assert scenario["second_policy_ran"]  # --robot from-topic: the latched description


_FIND_CHILD = ("import subprocess, sys\n"
               "from robolearn.sim2real.ros.ros2_probe import _proc_pid\n"
               "c = subprocess.Popen(['sleep', '30']); p = _proc_pid(c.pid)\n"
               "print(c.pid, p, open(f'/proc/{p}/cmdline').read().split(chr(0))[:2]); c.kill()\n")
"""Start ``sleep 30``, print its pid as ``Popen`` saw it, ``_proc_pid``'s answer and that /proc entry's argv."""


def _pid_namespace_allowed() -> bool:
    """Whether ``unshare -p`` (a PID namespace, as the scenario uses where allowed) runs here."""
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-p", "-f", "true"], capture_output=True).returncode == 0


def test_the_probe_finds_its_child_without_a_pid_namespace() -> None:
    """The shared-memory check reads each node's ``/proc`` entry: without a PID namespace it is the
    ``Popen`` pid itself."""
    out = subprocess.run([sys.executable, "-c", _FIND_CHILD], capture_output=True, text=True, timeout=60, cwd=REPO)
    child, found, argv = out.stdout.split(maxsplit=2)
    assert found == child and argv.strip() == "['sleep', '30']", out.stderr


@pytest.mark.skipif(not _pid_namespace_allowed(), reason="unshare -p is not permitted here: no PID namespace")
def test_the_probe_finds_its_child_in_a_pid_namespace() -> None:
    """In the scenario's PID namespace ``/proc`` is still the host's, where the pid ``Popen`` gave
    names another process (or none): ``ros2_probe._proc_pid`` goes through ``NSpid``."""
    out = subprocess.run(["unshare", "-p", "-f", "--kill-child", sys.executable, "-c", _FIND_CHILD],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    child, found, argv = out.stdout.split(maxsplit=2)
    assert found != child and argv.strip() == "['sleep', '30']", (out.stdout, out.stderr)


def test_the_robot_and_policy_nodes_keep_off_fast_dds_shared_memory(scenario: dict) -> None:
    """Under the scenario's ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` rmw_fastrtps would add its
    shared-memory transport (ignoring ``FASTDDS_BUILTIN_TRANSPORTS``), where a write towards the
    killed policy's segment can stall the robot's publish, and its watchdog, ~1 s with the GIL held
    (``common.control_node_transport``): neither node's process maps a Fast DDS segment, and both
    still talk to every peer (the balance and kill tests)."""
    assert scenario["robot_shm_segments"] == [], scenario["robot_shm_segments"]
    assert scenario["policy_shm_segments"] == [], scenario["policy_shm_segments"]
    assert "Fast DDS over UDP with localhost discovery (peers 127.0.0.1;" in (scenario["robot_transport"] or ""), \
        scenario["robot_transport"]


def test_killing_the_robot_makes_the_policy_stale_then_lost_and_silent(scenario: dict) -> None:
    """SIGKILL on the robot node: the policy reports ``stale`` (0.1 s), then ``lost`` (0.5 s) and
    sends nothing more."""
    statuses = scenario["after_robot_kill_statuses"]
    print(f"\nafter the robot's SIGKILL: {statuses}; stale after {scenario['stale_after_s']} s, "
          f"lost after {scenario['lost_after_s']} s")
    assert "stale" in statuses and statuses[-1] == "lost", statuses
    assert scenario["stale_after_s"] < scenario["lost_after_s"] < 2.0
    assert scenario["commands_after_lost"] == 0


def test_malformed_joint_states_are_rejected_and_the_policy_holds(scenario: dict) -> None:
    """Wrong names, wrong lengths, NaN: counted, named in ``policy_status``, the robot held (stale,
    then lost) and running again on good readings."""
    expected = {"names": "name lacks joints ['slider', 'hinge']", "lengths": "position has 1 values for 2 names",
                "nan": "position of ['hinge'] is not finite"}
    for kind, text in expected.items():
        got = scenario["malformed_joint_states"][kind]
        print(f"\n{kind}: {got}")
        assert got["malformed_added"] > 10 and text in got["last_error"], got
        # held: no command computed from a bad message (stale: the hold; lost, after 0.5 s: nothing)
        assert "stale" in got["statuses"] and set(got["statuses"]) <= {"stale", "lost"}, got
        assert got["recovered"] == "run"


def test_policy_estop_latches_against_good_readings(scenario: dict) -> None:
    """``estop`` true: the policy sends the hold (-damping * 0 at rest) while good readings go on."""
    print(f"\ne-stop reported after {scenario['estop_reported_after_s']:.3f} s; statuses {scenario['estop_statuses']}")
    assert scenario["estop_statuses"] == ["estop"]
    assert scenario["estop_commands"] == [0.0]


def test_sigterm_stops_the_policy_node_and_saves_its_telemetry(scenario: dict) -> None:
    """The parameter-file policy node exits 0 on SIGTERM, reports ``stopped`` and saves a dataset
    with the stale and e-stop steps flagged."""
    assert scenario["policy_b_exit"] == 0, scenario["logs"]["policy_b.log"]
    assert scenario["policy_b_final_status"] == "stopped"
    data = Dataset.load(scenario["telemetry_b"])
    flags = data.infos["interventions"].numpy()
    print(f"\ntelemetry: {len(data)} steps")
    assert len(data) >= 100 and data.metadata.extra["rewards"] == "unlabelled"
    assert np.any(flags & int(Intervention.STALE)) and np.any(flags & int(Intervention.ESTOP))
    assert "SIGTERM; stopping" in scenario["logs"]["policy_b.log"]


def test_robot_node_rejects_malformed_trajectories_and_keeps_holding(scenario: dict) -> None:
    """Wrong joint names, wrong length, NaN, two points: each rejected naming the field, none
    applied, the robot holding; good trajectories are applied."""
    expected = {"names": "command.joint_names: ['cart'] are not the robot's command joints ['slider']",
                "lengths": "command.points[0].effort: 2 values for 1 joint_names",
                "nan": "command.points[0].effort: non-finite command [nan]",
                "points": "command.points: expected 1 point (the next command), got 2"}
    for kind, text in expected.items():
        got = scenario["malformed_commands"][kind]
        print(f"\n{kind}: {got}")
        assert got["rejected_added"] > 10 and got["last_error"] == text, got
        assert got["commands"] == 0 and got["holding"] is True
    good = scenario["good_commands"]
    assert good["commands"] > 10 and good["holding"] is False


def test_robot_node_estop_latches(scenario: dict) -> None:
    """``estop`` true at the robot node: it holds and ignores good commands from then on."""
    assert scenario["robot_estop"] == {"estop": True, "holding": True, "commands_applied_after": 0}


def test_ros2_robot_reads_joint_states_and_twist_and_publishes_trajectories(scenario: dict) -> None:
    """Ros2Robot: a JointState becomes a Reading (header stamp, receipt time, the robot's joint
    order), a Twist the ``command/base_velocity`` extra, ``send`` a JointTrajectory in the field of
    the command kind; a malformed state is counted and the last good reading kept."""
    p = scenario["pieces"]
    assert p["read_before_connect"] == "robot 'arm': read() before connect()"
    assert p["first_read"] == "None"
    assert p["reading"] == {"stamp": 1234.5, "received_in_window": True, "joint_pos": [1.0, 2.0, 3.0],
                            "joint_vel": [0.1, 0.2, 0.3], "twist_before": [0.0, 0.0, 0.0]}
    assert p["twist"] == [0.5, -0.1, 0.3]
    assert p["rejected"] == 1 and "position of ['shoulder'] is not finite" in p["rejected_last"]
    assert p["kept_joint_pos"] == [1.0, 2.0, 3.0]
    assert p["sent"] == [0.1, 0.2]
    assert p["command_msg"] == {"joint_names": ["shoulder", "elbow"], "positions": [0.1, 0.2], "effort": [],
                                "time_from_start": pytest.approx(0.02), "parsed": [0.1, 0.2]}
    assert p["bad_send"] == "robot 'arm': expected a command of 2 values, got shape [3]"
    assert p["connected_after_disconnect"] is False


def test_policy_node_refuses_a_robot_that_does_not_fit(scenario: dict) -> None:
    """A policy node given another robot exits 2, naming each mismatch."""
    assert scenario["misfit_exit"] == 2, scenario["misfit_log"]
    for text in ("command joints: the policy commands 1 joints ['slider']", "control rate: the policy was trained at "
                 "100 Hz, the robot runs at 50 Hz", "observations.policy.pole_cos_sin: needs joint 'hinge'"):
        assert text in scenario["misfit_log"]


def test_robot_node_waits_for_joint_state_subscribers_and_checks_the_flag(caplog: pytest.LogCaptureFixture) -> None:
    """``--wait-for-subscribers N`` waits for the Nth matched reader (no ROS needed: the count is a
    function), warns and gives up after the timeout, and refuses a negative count or a missing
    ``--wait-for-policy``."""
    log = logging.getLogger("test_ros2")
    counts = iter([0, 0, 1, 2, 3])
    assert ros2_robot_node.wait_for_subscribers(lambda: next(counts), 2, 5.0, log) is True
    assert next(counts) == 3  # it stopped polling at the second reader
    with caplog.at_level(logging.WARNING):
        assert ros2_robot_node.wait_for_subscribers(lambda: 1, 2, 0.05, log) is False
    assert "1 of 2 joint_states subscribers after 0.05 s" in caplog.text
    parse = ros2_robot_node.build_parser().parse_args
    ros2_robot_node.check_wait_for_subscribers(parse(["--task", "T", "--wait-for-policy", "5", "--wait-for-subscribers", "2"]))
    with pytest.raises(SystemExit, match="--wait-for-subscribers: expected a count >= 0, got -1"):
        ros2_robot_node.check_wait_for_subscribers(parse(["--task", "T", "--wait-for-policy", "5",
                                                          "--wait-for-subscribers", "-1"]))
    with pytest.raises(SystemExit, match="--wait-for-subscribers 2: needs --wait-for-policy S"):
        ros2_robot_node.check_wait_for_subscribers(parse(["--task", "T", "--wait-for-subscribers", "2"]))
