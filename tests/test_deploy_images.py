"""Image policies in the deploy runtime: a DrQ-v2 actor exported with its image input runs on the
simulated pixel cart-pole and acts as the torch agent does on the env's observations; frame stacks
restart at discontinuities; a stale or silent camera holds; mismatched cameras are refused before
anything moves; the CLI runs it.

Images are 32x32 (task overrides) and the networks tiny, so every test takes seconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import robolearn
from robolearn.algos.drqv2 import DrQV2, DrQV2Config
from robolearn.cli.main import main
from robolearn.data import Dataset
from robolearn.export import read_manifest
from robolearn.export.vision import export_image_policy, image_input_of
from robolearn.sim2real.deploy.images import ImageAdapter
from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime, check_robot
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig, SafetyConfigError
from robolearn.sim2real.robots.base import CameraFeature, CameraFrame, Reading, Robot, RobotFeatures
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.spec import PolicySpec
from robolearn.spec.manifest import ImageInputSpec
from tests.deploy_support import DescribedRobot

REPO = Path(__file__).resolve().parents[1]
TASK = "Cartpole-Swingup-Pixels"
SIZE = 32
K = 3
SMALL_IMAGES = {"observations__image__terms__rgb__params__width": SIZE,
                "observations__image__terms__rgb__params__height": SIZE}  # fmt: skip
TINY = {"batch_size": 16, "buffer_size": 200, "feature_dim": 8, "hidden_dim": 16, "cnn_channels": 4,
        "frame_stack": K}  # fmt: skip
STALE = int(Intervention.STALE)
STALE_CAMERA = int(Intervention.STALE_CAMERA)
RAMP = int(Intervention.RAMP)


def _robot(**kw: object) -> SimulatedRobot:
    return SimulatedRobot(TASK, overrides=dict(SMALL_IMAGES), **kw)


@pytest.fixture(scope="module")
def drq(tmp_path_factory: pytest.TempPathFactory) -> tuple[DrQV2, Path, dict]:
    """A tiny DrQ-v2 agent (3 stacked frames) on the 32x32 pixel cart-pole, exported in both formats."""
    env = robolearn.make(TASK, 1, seed=0, **SMALL_IMAGES)
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(**TINY), action_low=env.ctrl_low,
                  action_high=env.ctrl_high, seed=4)  # fmt: skip
    spec = env.policy_spec()
    out = tmp_path_factory.mktemp("drq") / "export"
    export_image_policy(agent.policy_module(), spec, out, ("onnx", "torchscript"), images=[image_input_of(agent.encoder)],
                        obs_groups=(), parity_samples=4)  # fmt: skip
    return agent, out, spec


class Recording:
    """The exported policy, keeping a copy of every image stack it is fed."""

    def __init__(self, policy: object) -> None:
        self.policy = policy
        self.fed: list[np.ndarray] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.policy, name)

    def __call__(self, obs: np.ndarray, noise: np.ndarray | None = None, images: list | None = None) -> np.ndarray:
        self.fed.append(images[0][0].copy())
        return self.policy(obs, noise, images)


def _frame(v: int) -> np.ndarray:
    """A hand-built 32x32 RGB frame: channel c holds ``v + 100 c`` everywhere (every slot distinct)."""
    return ((np.full((SIZE, SIZE, 3), v, np.int64) + np.array([0, 100, 200])) % 256).astype(np.uint8)


class Scripted(Robot):
    """The simulated robot with a scripted camera (a fake of the hardware's timing): frame ``v`` at
    the ``v``-th reading, a camera that stops (frozen stamp, same frame), joints that go stale, or a
    camera that has not delivered yet.
    """

    def __init__(self, inner: SimulatedRobot) -> None:
        self.inner = inner
        self.features = inner.features
        self.reads = 0
        self.freeze_camera = False
        self.freeze_joints = False
        self.silent_reads = 0
        self._camera: CameraFrame | None = None
        self._joints_at: float | None = None

    def connect(self) -> None:
        self.inner.connect()

    def disconnect(self) -> None:
        self.inner.disconnect()

    @property
    def is_connected(self) -> bool:
        return self.inner.is_connected

    def read(self) -> Reading:
        r = self.inner.read()
        self.reads += 1
        if self.reads <= self.silent_reads:
            return dataclasses.replace(r, images={})
        if not (self.freeze_camera and self._camera is not None):
            # A ROS epoch stamp, far from the monotonic receipt time: staleness is the receipt's.
            self._camera = CameraFrame(_frame(self.reads), 1.7e9 + r.stamp, r.received)
        if self.freeze_joints:
            self._joints_at = self._joints_at if self._joints_at is not None else r.received
            r = dataclasses.replace(r, received=self._joints_at)
        else:
            self._joints_at = None
        return dataclasses.replace(r, images={"fixed": self._camera})

    def send(self, command: np.ndarray) -> np.ndarray:
        return self.inner.send(command)


def _stack(*values: int) -> np.ndarray:
    return np.concatenate([_frame(v) for v in values], axis=-1)


# -- parity with the torch agent on the env's observations --------------------------------------------
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_runtime_acts_as_the_agent_on_the_envs_observations(drq: tuple, fmt: str) -> None:
    agent, out, _ = drq
    robot = _robot(seed=2)
    reference = robolearn.make(TASK, 1, seed=0, dtype=torch.float64, **SMALL_IMAGES)
    policy = load_exported(out, fmt)
    assert policy.has_images and policy.obs_dim == 0
    runtime = DeployRuntime(policy, robot, SafetyConfig(ramp_s=0.0), clock=robot.clock)
    assert runtime.images is not None and runtime.images.cameras == ("fixed",)
    agent.reset(torch.ones(1, dtype=torch.bool))
    theirs = []
    with robot:
        robot.set_state(np.array([0.3, 2.5]), np.array([0.5, -1.0]))  # off the rest pose: frames change
        for t in range(10):
            qpos, qvel = robot.env.sim.qpos.clone(), robot.env.sim.qvel.clone()
            obs = reference.set_state(qpos, qvel)
            # the robot's camera frame is the env's observation of the same state, byte for byte
            assert np.array_equal(robot.read().images["fixed"].image, obs["image"][0].numpy()), t
            theirs.append(agent.act_inference(obs)[0].numpy())
            assert runtime.step() == 0 and runtime.status == "run"
    ours = np.stack(runtime.telemetry.actions)
    theirs = np.stack(theirs)
    assert np.abs(theirs[1:] - theirs[:-1]).max() > 1e-4  # the actions do move with the frames
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("task", "camera"), [(TASK, "fixed"), ("Reacher-Pixels", "rgb")])
def test_simulated_robot_declares_and_delivers_its_pixel_tasks_camera(task: str, camera: str) -> None:
    """An MJCF camera is named by its name, a free camera (Reacher's top-down view) by its term's;
    each reading's frame is the env's observation of that state, stamped with the reading.
    """
    robot = SimulatedRobot(task, overrides=dict(SMALL_IMAGES))
    rate = robot.features.rate_hz
    assert robot.features.cameras == {camera: CameraFeature(SIZE, SIZE, "rgb8", rate)}
    again = RobotFeatures.from_dict(json.loads(json.dumps(robot.features.to_dict())))
    assert again.cameras == robot.features.cameras
    with robot:
        for _ in range(3):
            reading = robot.read()
            frame = reading.images[camera]
            assert frame.stamp == reading.stamp and frame.image.dtype == np.uint8
            np.testing.assert_array_equal(frame.image, robot.env.obs["image"][0].numpy())
            robot.send(np.full(len(robot.features.command_joints), 0.5 * max(robot.features.effort_limits)))
        assert robot.read().images[camera].stamp > 0


def test_runtime_stacks_as_the_env_stacks_an_image_group(tmp_path: Path) -> None:
    """A policy trained on the env's own frame stack (``history_length=3`` on the image group): the
    runtime's stack is the robot's env observation, byte for byte, step by step (both start at the
    same first frame), and so are the actions.
    """
    stacked = {**SMALL_IMAGES, "observations__image__history_length": K}
    robot = SimulatedRobot(TASK, overrides=stacked, seed=1)
    env = robot.env
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(**{**TINY, "frame_stack": 1, "image_channels": 3 * K}),
                  action_low=env.ctrl_low, action_high=env.ctrl_high, seed=5)  # fmt: skip
    image = image_input_of(agent.encoder)  # 9 channels of RGB: 3 frames, as the group's history_length
    assert image.frames == K and image.shape == (SIZE, SIZE, 3 * K)
    export_image_policy(agent.policy_module(), env.policy_spec(), tmp_path, ("onnx",), images=[image], obs_groups=(),
                        parity_samples=4)  # fmt: skip
    runtime = DeployRuntime(load_exported(tmp_path), robot, SafetyConfig(ramp_s=0.0), clock=robot.clock)
    runtime.policy = rec = Recording(runtime.policy)
    want = []
    with robot:
        for _ in range(6):
            obs = env.obs["image"]
            with torch.no_grad():
                want.append(agent.actor(obs)[0].numpy())
            assert runtime.step() == 0
            np.testing.assert_array_equal(rec.fed[-1], obs[0].numpy())
    assert robot.resets == 0 and not np.array_equal(rec.fed[0], rec.fed[-1])
    np.testing.assert_allclose(np.stack(runtime.telemetry.actions), np.stack(want), rtol=0, atol=1e-5)


def test_real_time_robot_renders_its_camera_in_its_stepping_thread(drq: tuple) -> None:
    """The real-time world steps (and renders) in its own thread; the loop sees fresh frames."""
    _, out, _ = drq
    robot = _robot(realtime=True)
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0, stale_timeout_s=1.0,
                                                                    camera_stale_timeout_s=1.0))  # fmt: skip
    with robot:
        first = robot.read().images["fixed"].stamp
        # The thread's first render makes its OpenGL context (slow on a loaded machine): wait for it.
        for _ in range(400):
            if robot.read().images["fixed"].stamp > first:
                break
            time.sleep(0.05)
        runtime.run(steps=30)
        last = robot.read().images["fixed"]
    assert robot.steps > 0 and last.stamp > first and last.image.shape == (SIZE, SIZE, 3)
    assert runtime.safety.counts["stale_camera"] == 0 and sum(runtime.telemetry.scalars["policy_active"]) > 0


# -- frame stacks and discontinuities ------------------------------------------------------------------
def test_frame_stack_restarts_after_a_hold(drq: tuple) -> None:
    _, out, _ = drq
    robot = Scripted(_robot())
    cfg = SafetyConfig(ramp_s=0.0, stale_timeout_s=0.005, camera_stale_timeout_s=0.015)
    runtime = DeployRuntime(load_exported(out), robot, cfg, clock=robot.inner.clock)
    runtime.policy = rec = Recording(runtime.policy)
    with robot:
        flags = [runtime.step() for _ in range(3)]  # readings 1, 2, 3
        robot.freeze_joints = True
        flags += [runtime.step() for _ in range(2)]  # reading 4 is fresh (age 0), reading 5 stale
        robot.freeze_joints = False
        flags += [runtime.step() for _ in range(3)]  # readings 6, 7, 8: the policy starts over at 6
    assert flags[:4] == [0, 0, 0, 0] and flags[4] & STALE and flags[5:] == [0, 0, 0]
    expected = [_stack(1, 1, 1), _stack(1, 1, 2), _stack(1, 2, 3), _stack(2, 3, 4),
                _stack(6, 6, 6), _stack(6, 6, 7), _stack(6, 7, 8)]  # fmt: skip
    assert len(rec.fed) == len(expected)
    for got, want in zip(rec.fed, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_new_run_restarts_the_frame_stack(drq: tuple) -> None:
    """A second :meth:`DeployRuntime.run` is a new episode for the policy: its first frame fills the
    stack, nothing of the first run's frames (nor of the exit damping's readings) is carried over.
    """
    _, out, _ = drq
    robot = Scripted(_robot())
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0, exit_s=0.02), clock=robot.inner.clock)
    runtime.policy = rec = Recording(runtime.policy)
    with robot:
        runtime.run(steps=3)  # readings 1, 2, 3; then the exit damping reads on
        assert runtime.status == "stopped" and robot.reads > 3
        n = robot.reads
        runtime.run(steps=2)
    expected = [_stack(1, 1, 1), _stack(1, 1, 2), _stack(1, 2, 3), _stack(n + 1, n + 1, n + 1), _stack(n + 1, n + 1, n + 2)]
    assert len(rec.fed) == len(expected)
    for got, want in zip(rec.fed, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_image_adapter_stacks_chw_and_converts_colour() -> None:
    """A CHW, BGR input of 2 frames from an rgb8 camera: the channel swap, then the frames oldest first."""
    spec = _spec_with(camera="front")
    image = ImageInputSpec("image", (6, SIZE, SIZE), "CHW", color="bgr", frames=2)
    features = dataclasses.replace(_robot().features, cameras={"front": CameraFeature(SIZE, SIZE, "rgb8")})
    adapter = ImageAdapter(spec, [image], features)
    assert adapter.mismatches() == []

    def reading(v: int) -> Reading:
        return Reading(0.0, np.zeros(2), np.zeros(2), images={"front": CameraFrame(_frame(v), 0.0)})

    def chw_bgr(v: int) -> np.ndarray:
        return _frame(v)[..., ::-1].transpose(2, 0, 1)

    np.testing.assert_array_equal(adapter(reading(5))[0][0], np.concatenate([chw_bgr(5), chw_bgr(5)]))
    np.testing.assert_array_equal(adapter(reading(9))[0][0], np.concatenate([chw_bgr(5), chw_bgr(9)]))
    adapter.reset()
    np.testing.assert_array_equal(adapter(reading(1))[0][0], np.concatenate([chw_bgr(1), chw_bgr(1)]))


def test_recorded_preprocessing_is_applied_as_in_the_env() -> None:
    """An image term that recorded a resize: a 64x64 camera fits a 32x32 input, through the same pipeline."""
    from robolearn.spec.image_ops import ImagePipeline, Resize

    steps = [{"op": "resize", "width": SIZE, "height": SIZE, "interpolation": "area"}]
    spec = _spec_with(camera="front", preprocess=steps)
    image = ImageInputSpec("image", (SIZE, SIZE, 3), "HWC")
    big = CameraFeature(2 * SIZE, 2 * SIZE, "rgb8")
    features = dataclasses.replace(_robot().features, cameras={"front": big})
    adapter = ImageAdapter(spec, [image], features)
    assert adapter.mismatches() == []
    raw = np.random.default_rng(0).integers(0, 256, (2 * SIZE, 2 * SIZE, 3), dtype=np.uint8)
    got = adapter(Reading(0.0, np.zeros(2), np.zeros(2), images={"front": CameraFrame(raw, 0.0)}))[0][0]
    np.testing.assert_array_equal(got, ImagePipeline([Resize(SIZE, SIZE)])(raw[None])[0])
    # a 2x2 block average, by hand, at one pixel
    assert abs(int(got[3, 5, 1]) - raw[6:8, 10:12, 1].mean()) <= 0.5


# -- the camera in the safety layer ----------------------------------------------------------------------
def test_a_stale_camera_holds_and_the_policy_starts_over(drq: tuple, tmp_path: Path) -> None:
    _, out, _ = drq
    robot = Scripted(_robot())
    cfg = SafetyConfig(ramp_s=0.0, camera_stale_timeout_s=0.015)
    runtime = DeployRuntime(load_exported(out), robot, cfg, clock=robot.inner.clock)
    runtime.policy = rec = Recording(runtime.policy)
    statuses = []
    with robot:
        flags = [runtime.step() for _ in range(2)]  # readings 1, 2
        robot.freeze_camera = True  # the camera stops after frame 2 (stamp 0.01 s)
        for _ in range(4):  # readings 3..6 at 0.02..0.05 s: frame 2 is 0.01, 0.02, 0.03, 0.04 s old
            flags.append(runtime.step())
            statuses.append(runtime.status)
        robot.freeze_camera = False
        flags += [runtime.step() for _ in range(2)]  # readings 7, 8
        statuses.append(runtime.status)
    assert flags[:3] == [0, 0, 0]
    assert all(f & STALE_CAMERA and not f & STALE for f in flags[3:6]) and flags[6:] == [0, 0]
    assert statuses == ["run", "stale_camera", "stale_camera", "stale_camera", "run"]
    assert runtime.safety.counts["stale_camera"] == 3 and runtime.safety.counts["stale"] == 0
    # reading 3 still sees frame 2; after the hold the stack restarts from frame 7
    expected = [_stack(1, 1, 1), _stack(1, 1, 2), _stack(1, 2, 2), _stack(7, 7, 7), _stack(7, 7, 8)]
    assert len(rec.fed) == len(expected)
    for got, want in zip(rec.fed, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    telemetry = runtime.telemetry.to_dataset(TASK).infos
    np.testing.assert_allclose(telemetry["camera_age.fixed"][:6].numpy(), [0, 0, 0.01, 0.02, 0.03, 0.04], atol=1e-9)
    assert (telemetry["interventions"][3:6] & STALE_CAMERA).all() and not telemetry["policy_active"][3:6].any()
    path = runtime.telemetry.save(tmp_path / "t.h5", TASK)
    assert Dataset.load(path).infos["camera_age.fixed"].shape == (7,)


class OldCamera(Scripted):
    """A camera whose frames arrive 1 s old (a driver that delivered once and stalled) until ``old`` is cleared."""

    def __init__(self, inner: SimulatedRobot) -> None:
        super().__init__(inner)
        self.old = True

    def read(self) -> Reading:
        r = super().read()
        if self.old:
            f = r.images["fixed"]
            r = dataclasses.replace(r, images={"fixed": CameraFrame(f.image, f.stamp, f.received - 1.0)})
        return r


def test_a_camera_stale_at_start_does_not_use_up_the_staged_start(drq: tuple) -> None:
    """The safety layer starts only when every camera is fresh: a hold on a stale frame before the
    start must not run the ramp's clock, or the policy's command goes out with no staged start.
    """
    _, out, _ = drq
    robot = OldCamera(_robot())
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.03, camera_stale_timeout_s=0.05),
                            clock=robot.inner.clock)  # fmt: skip
    with robot:
        flags = [runtime.step() for _ in range(5)]
        assert runtime.status == "stale_camera" and runtime.safety.state == "idle" and robot.inner.steps == 0
        robot.old = False
        flags += [runtime.step() for _ in range(5)]
    # nothing sent while stale; then the ramp from the start (0, 0.01, 0.02 s into 0.03 s), then the policy
    assert flags == [None] * 5 + [RAMP] * 3 + [0, 0]
    assert runtime.status == "run"


class BadFrames(Scripted):
    """A custom robot whose camera delivers frames of the wrong shape or dtype while ``bad`` says so."""

    def __init__(self, inner: SimulatedRobot) -> None:
        super().__init__(inner)
        self.bad: np.ndarray | None = None

    def read(self) -> Reading:
        r = super().read()
        if self.bad is not None:
            f = r.images["fixed"]
            r = dataclasses.replace(r, images={"fixed": CameraFrame(self.bad, f.stamp, f.received)})
        return r


def test_a_malformed_frame_holds_as_a_stale_camera(drq: tuple, caplog: pytest.LogCaptureFixture) -> None:
    """A frame not of the camera's declared shape and dtype is no frame: the step holds
    (``STALE_CAMERA``, counted), a throttled warning names the camera and the shapes, and the policy
    starts over when good frames return; before the start, the layer waits for a good frame.
    """
    _, out, _ = drq
    robot = BadFrames(_robot())
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0), clock=robot.inner.clock)
    runtime.policy = rec = Recording(runtime.policy)
    with robot, caplog.at_level("WARNING", logger="robolearn.sim2real.deploy.runtime"):
        robot.bad = np.zeros((SIZE, SIZE, 4), np.uint8)
        assert runtime.step() is None and runtime.status == "stale_camera" and runtime.safety.state == "idle"
        robot.bad = None
        flags = [runtime.step() for _ in range(2)]  # readings 2, 3
        robot.bad = np.zeros((SIZE, SIZE, 3), np.float32)
        flags += [runtime.step() for _ in range(3)]  # readings 4..6
        statuses = [runtime.status]
        robot.bad = None
        flags += [runtime.step() for _ in range(2)]  # readings 7, 8
        statuses.append(runtime.status)
    assert flags[:2] == [0, 0] and all(f & STALE_CAMERA for f in flags[2:5]) and flags[5:] == [0, 0]
    assert statuses == ["stale_camera", "run"]
    assert runtime.safety.counts["stale_camera"] == 3 and runtime.bad_frames == {"fixed": 4}
    warned = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(warned) == 2, warned  # one per kind of bad frame, not one per step
    assert "camera 'fixed'" in warned[0] and "shape (32, 32, 4)" in warned[0] and "[32, 32, 3] uint8" in warned[0]
    assert "dtype float32" in warned[1]
    expected = [_stack(2, 2, 2), _stack(2, 2, 3), _stack(7, 7, 7), _stack(7, 7, 8)]
    assert len(rec.fed) == len(expected)
    for got, want in zip(rec.fed, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_camera_that_never_delivered_blocks_the_start(drq: tuple) -> None:
    _, out, _ = drq
    robot = Scripted(_robot())
    robot.silent_reads = 3
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0), clock=robot.inner.clock)
    with robot:
        first = [runtime.step() for _ in range(3)]
        assert first == [None, None, None] and runtime.status == "no_camera"
        assert runtime.safety.state == "idle" and robot.inner.steps == 0  # nothing sent, nothing started
        assert runtime.step() == 0 and runtime.status == "run" and robot.inner.steps == 1


def test_camera_timeout_is_a_validated_setting() -> None:
    cfg = SafetyConfig(camera_stale_timeout_s=0.05)
    assert cfg.to_dict()["camera_stale_timeout_s"] == 0.05
    assert SafetyConfig.from_dict(cfg.to_dict()) == cfg
    for bad in (0, -1.0, True, "x"):
        with pytest.raises(SafetyConfigError, match="camera_stale_timeout_s: expected"):
            SafetyConfig.from_dict({"camera_stale_timeout_s": bad}, "deploy.safety")


# -- refusals before anything moves ------------------------------------------------------------------------
def _spec_with(camera: str, preprocess: list | None = None) -> PolicySpec:
    """The 32x32 pixel cart-pole's spec whose image term records ``camera`` (and ``preprocess``)."""
    data = robolearn.make(TASK, 1, seed=0, **SMALL_IMAGES).policy_spec()
    term = data["observations"]["image"]["terms"][0]
    term["params"] = {**term["params"], "camera": camera, **({"preprocess": preprocess} if preprocess else {})}
    return PolicySpec.from_dict(data)


def test_camera_mismatches_are_refused_naming_the_camera_and_field(drq: tuple) -> None:
    _, out, _ = drq
    manifest = read_manifest(out)
    images = manifest.images
    base = _robot().features

    def problems(cameras: dict, mapping: dict | None = None) -> list[str]:
        features = dataclasses.replace(base, cameras=cameras)
        return check_robot(manifest.spec, manifest.obs_groups, features, images=images, cameras=mapping)

    assert problems(base.cameras) == []
    missing = problems({})
    assert len(missing) == 1 and "images.image: reads camera 'fixed'" in missing[0] and "robot.cameras: none" in missing[0]
    assert "camera.image=<camera>" in missing[0]
    big = problems({"fixed": CameraFeature(48, 64, "rgb8")})
    assert len(big) == 1 and "camera 'fixed' delivers [48, 64, 3] rgb8 frames (robot.cameras.fixed)" in big[0]
    assert "the input's frame is [32, 32, 3]" in big[0]
    mono = problems({"fixed": CameraFeature(SIZE, SIZE, "mono8")})
    assert len(mono) == 1 and "robot.cameras.fixed" in mono[0] and "mono8 frames" in mono[0] and "cannot become rgb" in mono[0]
    # an explicit mapping: to a camera the robot has, to one it lacks, for an input the policy lacks
    front = {"front": CameraFeature(SIZE, SIZE, "rgb8")}
    assert problems(front, {"image": "front"}) == []
    assert "reads camera 'back' (the camera given for it)" in problems(front, {"image": "back"})[0]
    assert problems(base.cameras, {"pixels": "fixed"}) == [
        "cameras: ['pixels'] name no image input of the policy (its image inputs: ['image'])"]

    with pytest.raises(DeployMismatch, match=r"images.image: reads camera 'fixed'"):
        DeployRuntime(load_exported(out), DescribedRobot(dataclasses.replace(base, cameras={})))


def test_a_camera_too_slow_for_the_stale_timeout_is_refused(drq: tuple) -> None:
    """A camera whose declared period is not under ``camera_stale_timeout_s`` could never be fresh:
    refused before anything moves, naming both settings and values; no declared rate, no check.
    """
    _, out, _ = drq
    manifest = read_manifest(out)
    base = _robot().features

    def problems(rate: float | None, timeout: float | None) -> list[str]:
        features = dataclasses.replace(base, cameras={"fixed": CameraFeature(SIZE, SIZE, "rgb8", rate)})
        return check_robot(manifest.spec, manifest.obs_groups, features, images=manifest.images,
                           camera_stale_timeout_s=timeout)  # fmt: skip

    slow = problems(4.0, 0.2)  # a frame every 0.25 s
    assert len(slow) == 1 and slow[0].startswith("robot.cameras.fixed.rate_hz: 4 Hz, a frame every 0.25 s")
    assert "safety.camera_stale_timeout_s 0.2 s" in slow[0]
    assert len(problems(5.0, 0.2)) == 1  # a period equal to the timeout: stale at every tick before the next frame
    assert problems(5.5, 0.2) == [] and problems(None, 0.2) == [] and problems(4.0, None) == []
    robot = _robot()  # declares its camera at the control rate, 100 Hz: a frame every 0.01 s
    assert robot.features.cameras["fixed"].rate_hz == 100.0
    with pytest.raises(DeployMismatch, match=r"robot.cameras.fixed.rate_hz: 100 Hz.*camera_stale_timeout_s 0.01 s"):
        DeployRuntime(load_exported(out), robot, SafetyConfig(camera_stale_timeout_s=0.01), clock=robot.clock)
    DeployRuntime(load_exported(out), robot, SafetyConfig(camera_stale_timeout_s=0.0101), clock=robot.clock)


# -- the CLI -------------------------------------------------------------------------------------------------
def test_cli_deploys_an_image_policy_on_the_simulated_robot(drq: tuple, tmp_path: Path, capsys) -> None:
    _, out, _ = drq
    dest = tmp_path / "deployment"
    overrides = [f"overrides.{k}={v}" for k, v in SMALL_IMAGES.items()]
    assert main(["deploy", f"policy={out}", "robot=sim", "realtime=false", "duration=0.1", f"out={dest}",
                 "camera.image=fixed", "safety.camera_stale_timeout_s=0.05", *overrides]) == 0
    summary = json.loads((dest / "summary.json").read_text())
    assert summary["steps"] == 10 and summary["final_status"] == "stopped"
    assert summary["interventions"]["stale_camera"] == 0
    data = Dataset.load(dest / "telemetry.h5")
    assert len(data) == 9 and bool(data.infos["policy_active"].all())
    assert data.observations["policy"].shape == (9, 0)  # pixels only: the obs row is empty
    # a camera the robot lacks is refused before anything moves
    assert main(["deploy", f"policy={out}", "realtime=false", f"out={tmp_path / 'never'}", "camera.image=back",
                 *overrides]) == 2
    assert "images.image: reads camera 'back'" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


# -- the deploy side stays light ---------------------------------------------------------------------------
def test_deploy_side_of_an_image_policy_imports_no_simulator_nor_opencv(drq: tuple) -> None:
    """An image policy on a robot that is not the simulator: no MuJoCo, no envs, and no OpenCV when
    the pipeline is the identity (no resize, no colour conversion).
    """
    _, out, _ = drq
    features = json.dumps(_robot().features.to_dict())
    code = f"""
import json, sys
import numpy as np
from robolearn.sim2real.deploy import DeployRuntime, SafetyConfig, load_exported
from robolearn.sim2real.robots.base import CameraFrame, Reading, Robot, RobotFeatures

class Camera(Robot):
    features = RobotFeatures.from_dict(json.loads({features!r}))
    def connect(self): pass
    def disconnect(self): pass
    @property
    def is_connected(self): return True
    def read(self):
        frame = CameraFrame(np.full(({SIZE}, {SIZE}, 3), 7, np.uint8), 0.0)
        return Reading(0.0, np.zeros(2), np.zeros(2), received=0.0, images={{"fixed": frame}})
    def send(self, command): self.sent = command; return command

robot = Camera()
rt = DeployRuntime(load_exported({str(out)!r}), robot, SafetyConfig(ramp_s=0.0), clock=lambda: 0.0)
flags = rt.step()
banned = [m for m in sys.modules if m == "mujoco" or m.startswith("mujoco.") or m.startswith("robolearn.envs")
          or m.startswith("robolearn.tasks") or m.startswith("robolearn.sim.") or m == "robolearn.sim" or m == "cv2"]
print(repr(banned), flags, float(robot.sent[0]))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr
    banned, flags, sent = res.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    assert banned == "[]" and flags == "0" and math.isfinite(float(sent))
