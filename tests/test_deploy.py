"""The deploy runtime: manifest checks, observation parity with the env, the loop, telemetry.

The robot is the simulated one (one real MuJoCo world of the task) except where a test needs a
robot that is not the simulator (the import check) or a clock it controls (the loop's timing).
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robolearn.data import Dataset
from robolearn.envs import ObsTerm, mdp
from robolearn.envs.registry import _REGISTRY, register, task_cfg
from robolearn.export import ExportManifest, read_manifest
from robolearn.sim2real.deploy.observations import ObservationAdapter
from robolearn.sim2real.deploy.policy import PolicyLoadError, load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime, check_robot
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig
from robolearn.sim2real.robots.base import Reading, RobotFeatures, RobotSpecError
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from tests.deploy_support import LQR_GAINS, DescribedRobot, export_cartpole_lqr

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lqr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The exported LQR cart-pole controller (ONNX + TorchScript, real manifest)."""
    return export_cartpole_lqr(tmp_path_factory.mktemp("lqr"), formats=("onnx", "torchscript"))


def _lqr_action(obs: np.ndarray) -> float:
    """The controller by hand: ``u = -(k0 x + k1 sin + k2 x_dot + k3 theta_dot)``."""
    k0, k1, k2, k3 = LQR_GAINS
    return -(k0 * obs[0] + k1 * obs[2] + k2 * obs[3] + k3 * obs[4])


# -- manifest and robot description ---------------------------------------------------------------
def test_manifest_and_robot_features_round_trip(lqr: Path) -> None:
    manifest = read_manifest(lqr)
    again = ExportManifest.from_dict(manifest.to_dict())
    assert again.spec == manifest.spec and again.obs_group == "policy" and again.files == manifest.files
    # version 3 carries what the runtime needs to compute each term from joints
    terms = {t.name: t for t in manifest.spec.observations["policy"].terms}
    assert terms["pole_cos_sin"].params == {"qpos_index": 1}
    assert terms["cart_vel"].source == "robolearn.envs.mdp.qvel" and terms["cart_vel"].params == {"start": 0, "stop": 1}
    robot = SimulatedRobot("Cartpole-Balance")
    features = RobotFeatures.from_dict(json.loads(json.dumps(robot.features.to_dict())))
    assert features == robot.features
    assert features.position_limits == ((-1.8, 1.8),) and features.effort_limits == (1.0,)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"command_kind": "fast"}, r"command_kind: expected one of"),
        ({"rate_hz": 0}, r"rate_hz: expected a positive number, got 0"),
        ({"joints": ["slider", "slider"]}, r"joints: joint names repeat"),
        ({"command_joints": ["cart"]}, r"command_joints: \['cart'\] are not measured joints"),
        ({"effort_limits": [1.0, 2.0]}, r"effort_limits: expected 1 values"),
        ({"effort_limits": [-1.0]}, r"effort_limits\[0\]: expected a positive limit, got -1.0"),
        ({"position_limits": [[1.0, -1.0]]}, r"position_limits\[0\]: low 1.0 is above high -1.0"),
        ({"default_pose": ["x"]}, r"default_pose\[0\]: expected a number, got 'x'"),
        ({"colour": "red"}, r"unknown fields \['colour'\]"),
    ],
)
def test_robot_description_errors_name_the_field(change: dict, message: str) -> None:
    data = SimulatedRobot("Cartpole-Balance").features.to_dict()
    data.update(change)
    with pytest.raises(RobotSpecError, match=message):
        RobotFeatures.from_dict(data)


def _features(**changes: object) -> RobotFeatures:
    base = SimulatedRobot("Cartpole-Balance").features
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"joints": ("slider", "hinge", "extra"), "command_joints": ("slider", "extra"),
          "position_limits": ((-1, 1), (-1, 1)), "velocity_limits": (1.0, 1.0), "effort_limits": (1.0, 1.0),
          "default_pose": (0.0, 0.0)}, ["command joints: the policy commands 1 joints", "action dimension"]),
        ({"joints": ("cart", "hinge"), "command_joints": ("cart",)},
         ["command joint names: the policy commands ['slider'], the robot takes ['cart']",
          "observations.policy.cart_pos: needs joints ['slider']"]),
        ({"command_kind": "joint_pos"}, ["action semantics: the policy's actions are ['torque'], the robot takes 'joint_pos'"]),
        ({"rate_hz": 50.0}, ["control rate: the policy was trained at 100 Hz, the robot runs at 50 Hz"]),
        ({"joints": ("slider", "pole"), "command_joints": ("slider",)},
         ["observations.policy.pole_cos_sin: needs joint 'hinge'", "observations.policy.pole_ang_vel: needs joints ['hinge']"]),
    ],
)
def test_each_mismatch_is_refused_and_named(lqr: Path, changes: dict, expected: list[str]) -> None:
    manifest = read_manifest(lqr)
    features = _features(**changes)
    problems = check_robot(manifest.spec, "policy", features)
    for text in expected:
        assert any(text in p for p in problems), (text, problems)

    with pytest.raises(DeployMismatch) as info:
        DeployRuntime(load_exported(lqr), DescribedRobot(features))
    assert info.value.problems == problems


def test_joint_order_mismatch_is_named_as_order(lqr: Path) -> None:
    spec = read_manifest(lqr).spec
    # a two-joint policy against a robot listing the same joints the other way round
    swapped = dataclasses.replace(spec, joint_order=("a", "b"))
    features = RobotFeatures("r", ("b", "a"), ("b", "a"), "torque", 100.0, ((-1, 1), (-1, 1)), (1.0, 1.0), (1.0, 1.0), (0.0, 0.0))
    problems = check_robot(swapped, "policy", features)
    assert any(p.startswith("command joint order: the policy's is ['a', 'b'], the robot's is ['b', 'a']") for p in problems)
    assert check_robot(spec, "policy", SimulatedRobot("Cartpole-Balance").features, rate_hz=120.0) == [
        "rate: 120 Hz was asked for, the policy was trained at 100 Hz"
    ]


def test_edited_policy_is_refused(lqr: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(lqr, copy)
    (copy / "policy.onnx").write_bytes((copy / "policy.onnx").read_bytes() + b"\0")
    with pytest.raises(PolicyLoadError, match="onnx artifact policy.onnx is missing or modified"):
        load_exported(copy)
    with pytest.raises(PolicyLoadError, match="format 'tflite' was not exported"):
        load_exported(lqr, "tflite")


# -- observation parity with the env ---------------------------------------------------------------
def _processed_cartpole() -> object:
    """Cart-pole with every processing stage the runtime must reproduce: clip, scale, history, last action."""
    cfg = task_cfg("Cartpole-Balance")
    group = cfg.observations["policy"]
    group.terms["cart_pos"].clip = (-0.05, 0.05)
    group.terms["cart_vel"].scale = 0.5
    group.terms["pole_ang_vel"].scale = (2.0,)
    group.terms["last"] = ObsTerm(mdp.last_action)
    group.history_length = 3
    return cfg


@pytest.fixture(scope="module")
def processed_task() -> str:
    name = "Test-Deploy-CartpoleProcessed"
    if name not in _REGISTRY:
        register(name, _processed_cartpole, "cart-pole with clip, scale, history and last action (deploy parity)")
    return name


@pytest.mark.parametrize("task", ["Cartpole-Balance", "Test-Deploy-CartpoleProcessed", "Pendulum-Swingup", "HalfCheetah"])
def test_observation_parity_with_the_env(task: str, processed_task: str) -> None:
    """The runtime's observation of the robot's readings is the env's observation, step by step."""
    robot = SimulatedRobot(task, seed=3)
    env = robot.env
    adapter = ObservationAdapter(_typed(env.policy_spec()), "policy", robot.features, dtype=torch.float64)
    assert adapter.mismatches() == []
    gen = torch.Generator().manual_seed(0)
    dim = len(robot.features.command_joints)
    checked = 0
    with robot:
        reading = robot.read()
        last = np.zeros(dim)
        for _ in range(40):
            ours = adapter(reading, last)
            theirs = env.obs["policy"].to(torch.float64).numpy()
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12 if theirs.dtype == np.float64 else 1e-6)
            checked += 1
            action = (torch.rand(1, dim, generator=gen, dtype=torch.float64) * 2 - 1) * 0.8
            command = robot._offset + robot._scale * action.numpy()[0]
            robot.send(command)
            last = action.numpy()[0]
            reading = robot.read()
    assert checked == 40


def _typed(spec: dict) -> object:
    from robolearn.spec import PolicySpec

    return PolicySpec.from_dict(spec)


def test_parity_catches_a_reader_on_the_wrong_joint(processed_task: str) -> None:
    """The parity check is not vacuous: reading the hinge where the cart belongs breaks it."""
    robot = SimulatedRobot("Cartpole-Balance", seed=1)
    spec = _typed(robot.env.policy_spec())
    swapped = dataclasses.replace(robot.features, joints=("hinge", "slider"))
    adapter = ObservationAdapter(spec, "policy", swapped, dtype=torch.float64)
    with robot:
        robot.send(np.array([0.7]))
        reading = robot.read()
        flipped = Reading(reading.stamp, reading.joint_pos[::-1].copy(), reading.joint_vel[::-1].copy())
        np.testing.assert_allclose(adapter(flipped, np.zeros(1)), robot.env.obs["policy"].numpy(), atol=1e-6)
        assert not np.allclose(adapter(reading, np.zeros(1)), robot.env.obs["policy"].numpy(), atol=1e-6)


def test_action_processing_on_numpy_is_the_env_processing() -> None:
    """The runtime's NumPy path of the shared ActionProcessor gives the torch path's controls."""
    from robolearn.spec import ActionProcessor

    spec = _typed(SimulatedRobot("HalfCheetah").env.policy_spec())
    scaled = [dataclasses.replace(a, scale=tuple(0.5 + 0.1 * i for i in range(a.dim)),
                                  offset=tuple(0.2 * i for i in range(a.dim)), clip=(-0.8, 0.9)) for a in spec.actions]
    proc = ActionProcessor.from_spec(scaled)
    actions = torch.randn(64, spec.action_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    np.testing.assert_allclose(proc.apply_numpy(actions.numpy()), proc(actions).numpy(), rtol=1e-15, atol=1e-15)
    assert not np.allclose(proc.apply_numpy(actions.numpy()), actions.numpy())  # the map is not the identity here


# -- the runtime on the simulated robot ---------------------------------------------------------
def test_runtime_balances_the_cartpole_and_records_telemetry(lqr: Path, tmp_path: Path) -> None:
    robot = SimulatedRobot("Cartpole-Balance", seed=0)
    runtime = DeployRuntime(load_exported(lqr), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0, stale_timeout_s=0.02),
                            clock=robot.clock)
    rewards, commands = [], []
    with robot:
        for _ in range(1000):
            reading = robot.read()
            flags = runtime.step()
            assert flags == 0
            rewards.append(robot.last_reward)
            commands.append((reading, runtime.telemetry.sent[-1][0]))
        final = robot.read()
    assert sum(rewards) > 990.0  # the pole stays up for the whole 10 s episode
    assert abs(final.joint_pos[1]) < 0.05
    # every command is the controller's output on the reading it was computed from
    for reading, sent in commands[:50]:
        obs = np.array([reading.joint_pos[0], math.cos(reading.joint_pos[1]), math.sin(reading.joint_pos[1]),
                        reading.joint_vel[0], reading.joint_vel[1]])
        assert sent == pytest.approx(float(np.clip(_lqr_action(obs), -1, 1)), abs=1e-5)
    path = runtime.telemetry.save(tmp_path / "telemetry.h5", "Cartpole-Balance")
    data = Dataset.load(path)
    assert len(data) == 999 and data.metadata.extra["rewards"] == "unlabelled"
    assert torch.equal(data.infos["interventions"], torch.zeros(999, dtype=torch.int64))
    np.testing.assert_allclose(data.infos["sent"][:, 0].numpy(), [c for _, c in commands[:999]], atol=1e-12)
    assert torch.equal(data.observations["policy"][1], torch.from_numpy(runtime.telemetry.obs[1]))
    assert bool(data.timeouts[-1]) and not bool(data.terminals.any())


def test_runtime_holds_on_stale_readings_and_stops_sending_when_lost(lqr: Path) -> None:
    now = [0.0]
    robot = SimulatedRobot("Cartpole-Balance", seed=0)
    runtime = DeployRuntime(load_exported(lqr), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0, stale_timeout_s=0.05),
                            lost_timeout_s=0.2, clock=lambda: now[0])
    with robot:
        last = robot.read()
        # the robot stops publishing after its first reading, received at t = 0: it ages
        frozen = Reading(last.stamp, last.joint_pos, last.joint_vel, received=0.0)
        robot.read = lambda: frozen
        assert runtime.step() == 0 and runtime.status == "run"
        now[0] = 0.04
        assert runtime.step() == 0
        now[0] = 0.06
        flags = runtime.step()
        assert flags & Intervention.STALE and runtime.status == "stale"
        # the hold of a torque robot damps: -kd * velocity, not the policy's command
        assert runtime.telemetry.sent[-1][0] == pytest.approx(-1.0 * frozen.joint_vel[0], abs=1e-12)
        sent_before = runtime.stats.sent
        now[0] = 0.25
        assert runtime.step() is None and runtime.status == "lost"
        assert runtime.stats.sent == sent_before


def test_estop_latches_in_the_runtime(lqr: Path) -> None:
    robot = SimulatedRobot("Cartpole-Balance", seed=0)
    runtime = DeployRuntime(load_exported(lqr), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0), clock=robot.clock)
    with robot:
        for _ in range(5):
            runtime.step()
        runtime.estop("test")
        for _ in range(20):
            flags = runtime.step()
            assert flags & Intervention.ESTOP and runtime.status == "estop"
        assert runtime.telemetry.scalars["policy_active"][-1] == 0.0


# -- the loop's clock ------------------------------------------------------------------------------
class FakeTime:
    """A simulated monotonic clock: reads advance it a microsecond, sleeps advance it exactly."""

    def __init__(self) -> None:
        self.now = 100.0

    def clock(self) -> float:
        self.now += 1e-6
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def test_loop_ticks_on_absolute_deadlines_without_drift(lqr: Path) -> None:
    """Ticks never come early and stay on ``t0 + k * period`` whatever each step costs: a step
    that overruns by more than a period skips deadlines (counted) instead of bursting, a shorter
    overrun makes the next tick late, and the schedule after either is unshifted.
    """
    fake = FakeTime()
    robot = SimulatedRobot("Cartpole-Balance", seed=0)
    runtime = DeployRuntime(load_exported(lqr), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0, stale_timeout_s=math.inf),
                            clock=fake.clock, sleep=fake.sleep, record=False)
    steps = 600
    costs = np.random.default_rng(0).uniform(0.0, 0.008, steps)
    costs[100] = 0.025  # 1.5 periods past the next deadline: one deadline skipped, the tick after it late
    costs[300] = 0.013  # 0.3 periods past the next deadline: that tick late, none skipped
    k = [0]

    def on_step(rt: DeployRuntime, flags: int | None) -> None:
        fake.now += costs[k[0]]
        k[0] += 1

    with robot:
        robot.read = lambda: Reading(fake.now, np.zeros(2), np.zeros(2))  # always fresh
        stats = runtime.run(steps=steps, on_step=on_step)
    ticks = np.asarray(stats.ticks)
    # the deadline each tick served (the first tick, at t0, is read a few simulated microseconds late)
    index = np.floor((ticks - ticks[0]) / runtime.period + 1e-3).astype(int)
    lateness = ticks - ticks[0] - index * runtime.period
    assert (lateness >= -1e-5).all() and (lateness < runtime.period).all()
    assert stats.missed == 1 and len(ticks) + stats.missed == steps
    assert len(set(index.tolist())) == len(index)  # one tick per deadline at most
    assert index[-1] == steps - 1  # no drift: the last tick serves the last deadline
    on_time = lateness < 1e-4
    assert on_time.sum() >= len(ticks) - 6  # only the ticks right after the overruns are late
    assert not on_time[101] and not on_time[301]  # the ticks after the two overruns


# -- the deploy side needs no simulator ------------------------------------------------------------
def test_deploy_side_imports_neither_mujoco_nor_tasks(lqr: Path) -> None:
    code = f"""
import sys, numpy as np
from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployRuntime
from robolearn.sim2real.deploy.safety import SafetyConfig
from robolearn.sim2real.robots.base import Reading, Robot, RobotFeatures

class Bench(Robot):
    features = RobotFeatures("bench", ("slider", "hinge"), ("slider",), "torque", 100.0, ((-1.8, 1.8),), (10.0,), (1.0,), (0.0,))
    def connect(self): pass
    def disconnect(self): pass
    @property
    def is_connected(self): return True
    def read(self): return Reading(0.0, np.array([0.1, 0.05]), np.zeros(2), received=None)
    def send(self, command): self.sent = command; return command

robot = Bench()
rt = DeployRuntime(load_exported({str(lqr)!r}), robot, SafetyConfig(ramp_s=0.0, stale_timeout_s=float("inf")), clock=lambda: 0.0)
rt.step()
banned = [m for m in sys.modules if m == "mujoco" or m.startswith("mujoco.") or m.startswith("robolearn.envs")
          or m.startswith("robolearn.tasks") or m.startswith("robolearn.sim.") or m == "robolearn.sim"]
print(repr(banned), float(robot.sent[0]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    banned, sent = out.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert banned == "[]"
    expected = _lqr_action(np.array([0.1, math.cos(0.05), math.sin(0.05), 0.0, 0.0]))
    assert float(sent) == pytest.approx(float(np.clip(expected, -1, 1)), abs=1e-5)


# -- a position-controlled robot -------------------------------------------------------------------
def _cheetah_servo() -> object:
    """HalfCheetah with PD position servos (``joint_pos`` actions around the default pose)."""
    from robolearn.envs import ActionTerm

    cfg = task_cfg("HalfCheetah")
    cfg.actions = {"pd": ActionTerm(kind="joint_pos", kp=40.0, kd=2.0, scale=0.5, offset="default")}
    return cfg


def test_position_robot_staged_start_and_limits_on_real_physics(tmp_path: Path) -> None:
    """A position-controlled simulated robot (PD servos): the staged start moves the targets from
    the measured pose to the default pose along a line, then a policy asking for far-away targets
    gets them clamped to the joint ranges and rate-limited by the joints' velocity limits."""
    from robolearn.export import export_policy

    name = "Test-Deploy-CheetahServo"
    if name not in _REGISTRY:
        register(name, _cheetah_servo, "HalfCheetah with PD position servos (deploy tests)")
    robot = SimulatedRobot(name, seed=0, velocity_limit=5.0)
    spec = robot.env.policy_spec()
    assert robot.features.command_kind == "joint_pos"
    joints = list(robot.features.command_joints)
    limits = np.array(robot.features.position_limits)
    assert np.isfinite(limits).all()  # HalfCheetah's joints have ranges: the clamp can bite

    class Far(torch.nn.Module):  # a policy that always asks for targets beyond every range
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.full((obs.shape[0], len(joints)), 10.0) + 0.0 * obs[:, :1]

    export_policy(Far(), spec, tmp_path / "far", ("onnx",), parity_samples=4)
    runtime = DeployRuntime(load_exported(tmp_path / "far"), robot, SafetyConfig(ramp_s=0.5, exit_s=0.0),
                            clock=robot.clock)
    with robot:
        start = robot.read().joint_pos[robot.features.command_index].copy()
        for _ in range(80):  # 4 s at 20 Hz
            runtime.step()
    sent = np.stack(runtime.telemetry.sent)
    flags = np.array(runtime.telemetry.scalars["interventions"], dtype=np.int64)
    default = np.array(robot.features.default_pose)
    ramp = (flags & int(Intervention.RAMP)) != 0
    assert ramp[:10].all() and not ramp[12:].any()  # 0.5 s at 20 Hz
    # the ramp's targets lie on the line from the measured start to the default pose
    k = 5
    expected = start + (k / 10) * (default - start)
    np.testing.assert_allclose(sent[k], np.clip(expected, limits[:, 0], limits[:, 1]), atol=1e-9)
    # after it, the policy's 10 rad targets: within the ranges, moving at most 5 rad/s * 0.05 s a step
    assert (sent >= limits[:, 0] - 1e-12).all() and (sent <= limits[:, 1] + 1e-12).all()
    assert np.abs(np.diff(sent, axis=0)).max() <= 5.0 / robot.features.rate_hz + 1e-9
    np.testing.assert_allclose(sent[-1], limits[:, 1])  # reached the upper ends and held there
    assert ((flags[20:] & int(Intervention.POSITION)) != 0).all()


def test_a_manifest_without_term_params_says_to_export_again(lqr: Path) -> None:
    """A policy exported before spec version 3 (no term parameters) is refused with the way out."""
    spec = read_manifest(lqr).spec
    group = spec.observations["policy"]
    old = dataclasses.replace(spec, observations={"policy": dataclasses.replace(
        group, terms=tuple(dataclasses.replace(t, params={}) for t in group.terms))})
    problems = check_robot(old, "policy", SimulatedRobot("Cartpole-Balance").features)
    assert any("cart_pos" in p and "written before policy spec version 3" in p for p in problems), problems
