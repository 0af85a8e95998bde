"""The deploy runtime: an exported policy driving a robot in a fixed-rate loop behind a safety layer.

One control step (:meth:`DeployRuntime.step`)::

    reading = robot.read()                       # newest joint state (and camera frames), stamped
    obs     = adapter(reading, last_action)      # the training observation processing (robolearn.spec)
    images  = image_adapter(reading)             # image policies: preprocessed, stacked camera frames
    action  = policy(obs, images=images)         # ONNX Runtime, batch 1
    command = action_processor(action)           # offset + scale * clip(action): physical units
    command, flags = safety.filter(command, reading, now)
    sent    = robot.send(command)                # what the robot applied
    telemetry.record(...)

The loop (:meth:`DeployRuntime.run`) ticks on the monotonic clock at absolute deadlines
``t0 + k * period``, so a late tick never shifts the ones after it (no drift); it sleeps until just
before a deadline and spins the rest (``spin_s``), which keeps the period jitter well under a
millisecond on a loaded machine. A tick that falls more than a period behind is skipped, counted
in :attr:`LoopStats.missed`, not made up by a burst of commands.

Before anything moves, :func:`check_robot` compares the policy's manifest with the robot's declared
features and refuses to start, naming every mismatch: command joints (names and order), widths,
control rate, action semantics (torque / position / velocity targets), and every observation term
the robot cannot give. While running, a reading older than the safety layer's ``stale_timeout_s``
makes the layer hold (status ``stale``); older than ``lost_timeout_s``, the robot is taken for gone
and the runtime stops sending (status ``lost``) until fresh readings return. An e-stop latches
(status ``estop``). On exit the runtime damps for the safety layer's ``exit_s``.

An **image policy** (manifest version 5, ``images``) is fed by
:class:`~robolearn.sim2real.deploy.images.ImageAdapter`: each image input reads one robot camera
(``cameras={input: camera}``, default the camera its image term was rendered from), through the
env's preprocessing (``robolearn.spec.image_ops.ImagePipeline``, what the image term recorded, and
the colour conversion from the camera's encoding), stacked ``[H, W, k*C]`` oldest first; with a
vector group too (image + proprioception) the ``obs`` row is built as for any policy.
:func:`check_robot` names a camera the robot lacks, one whose frames cannot become the input's
frame and one whose declared rate gives a frame no more often than ``camera_stale_timeout_s``. Until every camera has delivered a frame nothing is sent and the safety layer does not start
(status ``no_camera``), nor while a camera's frame is not fresh before the start (status
``stale_camera``, nothing sent: a hold there would use up the staged start); a frame older than the safety layer's ``camera_stale_timeout_s`` makes the
step hold (``Intervention.STALE_CAMERA``, status ``stale_camera``), a discontinuity like any hold;
so does a malformed frame (not the camera's declared shape and dtype: a custom robot's bug), counted
in :attr:`DeployRuntime.bad_frames` and logged (throttled), rather than ending the loop.

One unbroken run of the policy on the robot is what one episode is in training. Before the first
policy step after any discontinuity -- the (re)start of the safety layer (first step, restart after
an e-stop is cleared, a new :meth:`DeployRuntime.run`), a step whose command did not come from the
policy (e-stop, hold, stale or unusable reading, a non-finite action) and a lost robot -- the
policy starts over as the env starts a world's episode: a recurrent policy's hidden state from
zeros (:class:`ExportedPolicy` otherwise feeds each step's ``h_out`` back as the next ``h_in``),
every stacked observation history (a ``history`` group, a group with ``history_length``, an image
input's frame stack) from the next frame, which fills all its slots, and the last action from zeros (``env.action`` is zero at an
episode start). Nothing carries across a discontinuity.

A policy whose input spans several observation groups (manifest ``obs_groups``: a history encoder
reads ``policy`` then ``history``) is checked and fed group by group, concatenated in that order.

A **chunked generative policy** (manifest version 4) runs through the chunk execution it was
trained and evaluated with, :class:`robolearn.spec.chunking.ChunkExecutor` built from the
manifest's ``chunking``: each step's frame is pushed into the executor's observation history; only
when the executor asks for a plan (every ``execute`` steps, or every step with temporal ensembling)
is the sampler called, on the stacked frames and a noise chunk drawn from the runtime's own seeded
generator (``seed``; ``noise="zero"`` feeds zeros, the distribution's mode, for a deterministic
deployment); every other step plays the next queued action. At every discontinuity the executor
restarts like the env's world at an episode start: the queue is dropped and the next frame fills
the whole history (``tests/test_generative_export.py`` checks the runtime against the torch sampler
under the same noise).

The deploy side imports neither MuJoCo nor the task registry (``tests/test_deploy.py`` checks
``sys.modules``): only :mod:`robolearn.spec`, :mod:`robolearn.export`, :mod:`robolearn.data`, NumPy,
torch (the shared observation processors) and ONNX Runtime; OpenCV only when an image pipeline
step that needs it runs.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from robolearn.sim2real.deploy.images import ImageAdapter
from robolearn.sim2real.deploy.observations import ObservationAdapter
from robolearn.sim2real.deploy.policy import ExportedPolicy
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig, SafetyLayer
from robolearn.sim2real.deploy.telemetry import Telemetry
from robolearn.sim2real.robots.base import Reading, Robot, RobotFeatures
from robolearn.spec import ActionProcessor, PolicySpec
from robolearn.spec.chunking import ChunkExecutor
from robolearn.spec.manifest import ImageInputSpec

log = logging.getLogger(__name__)

_ESTOP, _STALE, _RAMP = int(Intervention.ESTOP), int(Intervention.STALE), int(Intervention.RAMP)
_STALE_CAMERA = int(Intervention.STALE_CAMERA)
_HOLD_OR_NONFINITE = int(Intervention.HOLD | Intervention.NONFINITE)
_POLICY_OFF = int(Intervention.RAMP | Intervention.HOLD | Intervention.ESTOP | Intervention.STALE | Intervention.NONFINITE
                  | Intervention.STALE_CAMERA)
"""Flags of a step whose command did not come from the policy (recorded as ``policy_active`` false)."""
_DISCONTINUITY = int(Intervention.HOLD | Intervention.ESTOP | Intervention.STALE | Intervention.NONFINITE
                     | Intervention.STALE_CAMERA)
"""Flags after which the policy starts over: hidden state, observation history, last action (module doc)."""


_BAD_FRAME_LOG_S = 5.0
"""Seconds between warnings about one camera's malformed frames (while what it delivers stays the same)."""


NOISE_MODES = ("normal", "zero")
"""How the runtime draws a chunked policy's sampler noise: standard normal from its seeded generator,
or zeros (deterministic)."""


class DeployMismatch(ValueError):
    """A policy and a robot that do not fit; the message lists every mismatch."""

    def __init__(self, problems: list[str]) -> None:
        """Keep the list (``problems``) and say all of it."""
        self.problems = list(problems)
        super().__init__("the policy does not match the robot:\n  - " + "\n  - ".join(self.problems))


def check_robot(spec: PolicySpec, group: str | Sequence[str], features: RobotFeatures, rate_hz: float | None = None,
                rate_rtol: float = 0.01, images: Sequence[ImageInputSpec] = (),
                cameras: Mapping[str, str] | None = None, camera_stale_timeout_s: float | None = None) -> list[str]:
    """Every reason policy ``spec`` (reading observation ``group``, or the groups its input row
    concatenates: ``manifest.obs_groups``; none for a pixels-only policy) cannot run on a robot
    with ``features`` at ``rate_hz`` (default: the policy's rate); empty when it can. ``images``:
    the manifest's image inputs (``manifest.images``), fed from the robot's cameras as ``cameras``
    maps them (:class:`~robolearn.sim2real.deploy.images.ImageAdapter`). With
    ``camera_stale_timeout_s`` (the safety layer's), a camera whose declared ``rate_hz`` delivers a
    frame no more often than that is refused: each of its frames would go stale before the next one
    came, and the loop would hold and restart for ever (a camera with no declared rate is not checked).
    """
    problems: list[str] = []
    want = [str(j) for j in spec.joint_order]
    have = list(features.command_joints)
    if len(want) != len(have):
        problems.append(f"command joints: the policy commands {len(want)} joints {want}, the robot takes {len(have)} {have}")
    elif want != have:
        if sorted(want) == sorted(want) and set(want) == set(have):
            problems.append(f"command joint order: the policy's is {want}, the robot's is {have}")
        else:
            problems.append(f"command joint names: the policy commands {want}, the robot takes {have}")
    if spec.action_dim != len(have):
        problems.append(f"action dimension: the policy outputs {spec.action_dim} numbers, the robot takes {len(have)}")
    kinds = sorted({a.kind for a in spec.actions})
    if kinds != [features.command_kind]:
        problems.append(f"action semantics: the policy's actions are {kinds}, the robot takes {features.command_kind!r} commands")
    policy_rate = float(spec.control_rate_hz)
    if abs(features.rate_hz - policy_rate) > rate_rtol * policy_rate:
        problems.append(f"control rate: the policy was trained at {policy_rate:g} Hz, the robot runs at {features.rate_hz:g} Hz")
    if rate_hz is not None and abs(rate_hz - policy_rate) > rate_rtol * policy_rate:
        problems.append(f"rate: {rate_hz:g} Hz was asked for, the policy was trained at {policy_rate:g} Hz")
    groups = (group,) if isinstance(group, str) else tuple(group)
    if any(groups):
        problems.extend(ObservationAdapter(spec, group, features).mismatches())
    elif not images:
        problems.append("observations: the policy reads no observation group and no image")
    if images:
        adapter = ImageAdapter(spec, images, features, cameras)
        problems.extend(adapter.mismatches())
        if camera_stale_timeout_s is not None:
            problems.extend(_slow_cameras(adapter.cameras, features, float(camera_stale_timeout_s)))
    return problems


def _slow_cameras(names: Sequence[str], features: RobotFeatures, timeout: float) -> list[str]:
    """The cameras among ``names`` whose declared period is not under ``timeout`` (:func:`check_robot`)."""
    problems = []
    for name in names:
        feature = features.cameras.get(name)
        if feature is None or feature.rate_hz is None:
            continue
        period = 1.0 / feature.rate_hz
        if period >= timeout:
            problems.append(
                f"robot.cameras.{name}.rate_hz: {feature.rate_hz:g} Hz, a frame every {period:.4g} s, which is not under "
                f"safety.camera_stale_timeout_s {timeout:g} s: every frame would be stale before the next one came; "
                f"raise safety.camera_stale_timeout_s above {period:.4g} s or the camera's rate"
            )
    return problems


@dataclass
class LoopStats:
    """What a run of the loop measured."""

    ticks: list[float] = field(default_factory=list)
    """Monotonic time of every tick."""
    step_costs: list[float] = field(default_factory=list)
    """Seconds from a tick to its command being sent (read + policy + safety + send)."""
    missed: int = 0
    """Deadlines skipped because the loop fell more than a period behind."""
    sent: int = 0
    """Commands sent."""

    def periods(self) -> np.ndarray:
        """Seconds between consecutive ticks."""
        return np.diff(np.asarray(self.ticks))

    def summary(self, period: float) -> dict[str, float]:
        """Achieved rate, period jitter (``|period - nominal|`` p50/p99/max) and step cost p50/p99, seconds."""
        p = self.periods()
        if p.size == 0:
            return {"ticks": float(len(self.ticks)), "missed": float(self.missed)}
        jitter = np.abs(p - period)
        cost = np.asarray(self.step_costs) if self.step_costs else np.zeros(1)
        return {
            "ticks": float(len(self.ticks)),
            "rate_hz": float((len(self.ticks) - 1) / (self.ticks[-1] - self.ticks[0])),
            "jitter_p50_s": float(np.percentile(jitter, 50)),
            "jitter_p99_s": float(np.percentile(jitter, 99)),
            "jitter_max_s": float(jitter.max()),
            "step_cost_p50_s": float(np.percentile(cost, 50)),
            "step_cost_p99_s": float(np.percentile(cost, 99)),
            "missed": float(self.missed),
            "sent": float(self.sent),
        }


class DeployRuntime:
    """An exported policy on a robot (module doc)."""

    def __init__(
        self,
        policy: ExportedPolicy,
        robot: Robot,
        safety: SafetyConfig | None = None,
        *,
        rate_hz: float | None = None,
        lost_timeout_s: float = 0.5,
        record: bool = True,
        spin_s: float = 0.0005,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        seed: int = 0,
        noise: str = "normal",
        cameras: Mapping[str, str] | None = None,
    ) -> None:
        """Check the policy against the robot (raise :class:`DeployMismatch`) and build the stages.

        ``clock`` and ``sleep`` are the loop's time source and its way to wait (default: the
        monotonic clock and an interruptible wait); a test passes a simulated pair. ``seed`` and
        ``noise`` (one of :data:`NOISE_MODES`) set how a chunked policy's sampler noise is drawn.
        ``cameras``: ``{image input: robot camera}`` for an image policy's inputs that do not read
        the camera their image term was rendered from (module doc).
        """
        if noise not in NOISE_MODES:
            raise ValueError(f"noise: expected one of {', '.join(NOISE_MODES)}, got {noise!r}")
        spec = policy.manifest.spec
        group = policy.manifest.obs_groups
        images = policy.manifest.images
        safety = safety or SafetyConfig()
        problems = check_robot(spec, group, robot.features, rate_hz, images=images, cameras=cameras,
                               camera_stale_timeout_s=safety.camera_stale_timeout_s)
        if problems:
            raise DeployMismatch(problems)
        self.policy = policy
        self.robot = robot
        self.spec = spec
        self.rate_hz = float(rate_hz or spec.control_rate_hz)
        self.period = 1.0 / self.rate_hz
        self.clock = clock
        self.spin_s = float(spin_s)
        self.lost_timeout_s = float(lost_timeout_s)
        self.adapter = ObservationAdapter(spec, group, robot.features) if group else None
        """The vector observation's adapter (``None``: a pixels-only policy, whose ``obs`` row is empty)."""
        self.images = ImageAdapter(spec, images, robot.features, cameras) if images else None
        """An image policy's camera inputs (``None``: no image input)."""
        self._empty_obs = np.zeros((1, 0), np.float32)
        self.action_processor = ActionProcessor.from_spec(spec.actions)
        self.safety = SafetyLayer(robot.features, safety, clock=clock,
                                  cameras=self.images.cameras if self.images is not None else ())
        self.last_action = np.zeros(spec.action_dim)
        self.telemetry = (
            Telemetry(policy.frame_dim, spec.action_dim, len(robot.features.command_joints), len(robot.features.joints),
                      cameras=self.safety.cameras)
            if record else None
        )
        chunk = policy.manifest.chunk
        self.executor: ChunkExecutor | None = None
        """A chunked policy's chunk execution (observation history, action queue); ``None`` otherwise."""
        self.noise = noise
        self.seed = int(seed)
        self.plans = 0
        """Sampler calls (a chunked policy plans only when its executor asks)."""
        if chunk is not None:
            self.executor = ChunkExecutor(chunk.chunking, 1, policy.frame_dim, spec.action_dim)
            self._noise_shape = (1, *chunk.sampler.noise_shape)
            self._noise_gen = torch.Generator().manual_seed(self.seed)
        self.stats = LoopStats()
        self._recurrent = policy.recurrent
        self._fresh_state = True
        """Whether the policy starts over before its next step: hidden state, history, last action (module doc)."""
        self.status = "idle"
        """``idle``, ``ramp``, ``run``, ``hold``, ``stale``, ``stale_camera`` (a camera's frame is not fresh:
        the hold is sent, or nothing before the safety layer started), ``no_camera`` (a camera never
        delivered: nothing is sent), ``lost``, ``estop``, ``exit``, ``stopped``."""
        self._stop = threading.Event()
        self._sleep = sleep if sleep is not None else self._stop.wait
        self.bad_frames: dict[str, int] = {}
        """Malformed camera frames seen (not the camera's declared shape and dtype), per camera: each
        held the step as a stale camera."""
        self._bad_frame_logged: dict[str, tuple[str, float]] = {}

    # -- one step ------------------------------------------------------------------------------
    def act(self, reading: Reading) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Observation ``[1, D]``, raw action ``[A]`` and command ``[A]`` (physical units) for
        ``reading``, without the safety layer or any state change (benchmarks, parity checks; a
        recurrent policy acts from its carried state and keeps it; stacked histories are not advanced).
        """
        if self.images is not None:
            # Copies of the inputs: the stacks are put back below, acting here leaves no trace.
            stacks = self.images.state()
            images = [x.copy() for x in self.images(reading)]
            self.images.restore(stacks)
            obs = self._observe(reading)
            action = self.policy(obs, images=images).reshape(-1)
            return obs, action, self.action_processor.apply_numpy(action)
        windows = self.adapter.history_state()
        obs = self.adapter(reading, self.last_action)
        self.adapter.restore_history(windows)
        if self.executor is not None:
            # The executor and the noise stream are put back: acting here leaves no trace.
            kept, noise_state, plans = copy.deepcopy(self.executor), self._noise_gen.get_state(), self.plans
            action = self._chunk_action(obs)
            self.executor, self.plans = kept, plans
            self._noise_gen.set_state(noise_state)
        elif self._recurrent:
            kept = self.policy.state
            action = self.policy(obs).reshape(-1)
            self.policy.state = kept
        else:
            action = self.policy(obs).reshape(-1)
        command = self.action_processor.apply_numpy(action)
        return obs, action, command

    def reset_policy_state(self) -> None:
        """Have the policy start over before its next step, as at an episode start: a recurrent
        policy's hidden state, the observation histories and the last action (the runtime does this
        at every discontinuity, module doc).
        """
        self._fresh_state = True

    def _observe(self, reading: Reading) -> np.ndarray:
        """An image policy's ``obs`` row ``[1, D]`` without advancing any history (``[1, 0]``: none)."""
        if self.adapter is None:
            return self._empty_obs
        windows = self.adapter.history_state()
        obs = self.adapter(reading, self.last_action)
        self.adapter.restore_history(windows)
        return obs

    def _start_over(self) -> None:
        """The episode start of the policy's inputs and state (:meth:`reset_policy_state`)."""
        if self.adapter is not None:
            self.adapter.reset()
        if self.images is not None:
            self.images.reset()
        self.last_action = np.zeros(self.spec.action_dim)
        if self._recurrent:
            self.policy.reset()
        if self.executor is not None:
            self.executor.reset()
        self._fresh_state = False

    def draw_noise(self) -> np.ndarray:
        """The next sampler noise ``[1, H, A]`` float32: standard normal from the runtime's generator
        (seeded with ``seed``), or zeros with ``noise="zero"``.
        """
        if self.noise == "zero":
            return np.zeros(self._noise_shape, np.float32)
        return torch.randn(self._noise_shape, generator=self._noise_gen).numpy()

    def _chunk_action(self, obs: np.ndarray) -> np.ndarray:
        """One step of a chunked policy (module doc): push the frame, plan if the executor asks, play."""
        assert self.executor is not None
        cond = self.executor.observe(torch.from_numpy(obs))
        if bool(self.executor.needs_plan()[0]):
            chunk = self.policy(cond.numpy(), self.draw_noise())
            self.executor.plan(torch.from_numpy(chunk))
            self.plans += 1
        return self.executor.act().numpy().reshape(-1)

    def step(self) -> int | None:
        """One control step (module doc); return the interventions sent, or ``None`` when nothing was
        sent (no reading yet, or the robot is lost).
        """
        now = self.clock()
        reading = self.robot.read()
        if reading is None or now - reading.age_reference > self.lost_timeout_s:
            if self.status != "lost" and self.status != "idle":
                log.warning("deploy: no reading for %.3f s; the robot is lost, sending nothing",
                            math.inf if reading is None else now - reading.age_reference)
            self.status = "lost" if self.status != "idle" else "idle"
            self._fresh_state = True
            return None
        if self.safety.state == "idle":
            missing = self.safety.missing_cameras(reading)
            if missing or not self.safety.cameras_fresh(reading, now):
                # No frame yet, or none fresh: the policy cannot see, so nothing starts and nothing is
                # sent. Starting here and holding would run the staged start's clock during the hold:
                # the policy's command would then go out with no ramp.
                word = "no_camera" if missing else "stale_camera"
                if not missing:
                    self._note_bad_frames(reading, now)
                if self.status != word:
                    if missing:
                        log.warning("deploy: camera(s) %s have not delivered a frame; waiting before starting", missing)
                    else:
                        log.warning("deploy: camera frames are not fresh (ages %s s, limit %g s); waiting before "
                                    "starting", [round(a, 3) for a in self.safety.camera_ages(reading, now)],
                                    self.safety.config.camera_stale_timeout_s)
                self.status = word
                self._fresh_state = True
                return None
            self.safety.start(reading, now)
            self._fresh_state = True
        fresh = now - reading.age_reference <= self.safety.config.stale_timeout_s
        seeing = self.images is None or self.safety.cameras_fresh(reading, now)
        if not seeing:
            self._note_bad_frames(reading, now)
        obs = action = command = None
        if fresh and seeing and self.safety.state != "estop":
            if self._fresh_state:
                self._start_over()
            if self.images is not None:
                obs = self.adapter(reading, self.last_action) if self.adapter is not None else self._empty_obs
                action = self.policy(obs, images=self.images(reading)).reshape(-1)
            else:
                obs = self.adapter(reading, self.last_action)
                action = self._chunk_action(obs) if self.executor is not None else self.policy(obs).reshape(-1)
            command = self.action_processor.apply_numpy(action)
            if math.isfinite(float(action.sum())):
                # The last-action term is the policy's own choice, as env.action is in training.
                self.last_action = action.astype(np.float64)
        safe, flags = self.safety.filter(command, reading, now)
        if flags & _DISCONTINUITY:
            self._fresh_state = True
        sent = self.robot.send(safe)
        sent_at = self.clock()
        self.stats.sent += 1
        self.stats.step_costs.append(sent_at - now)
        self.status = self._status(flags, fresh)
        if self.telemetry is not None:
            self.telemetry.record(
                obs if obs is not None else self._last_obs(),
                action if action is not None else np.zeros(self.spec.action_dim),
                safe, sent, reading.joint_pos, reading.joint_vel,
                stamp=reading.stamp, tick=now, sent_at=sent_at, interventions=flags,
                policy_active=obs is not None and not flags & _POLICY_OFF,
                camera_ages=self.safety.camera_ages(reading, now) if self.images is not None else (),
            )
        return flags

    def _note_bad_frames(self, reading: Reading, now: float) -> None:
        """Count each malformed camera frame in ``reading`` (:attr:`bad_frames`) and warn, at most once
        every ``_BAD_FRAME_LOG_S`` per camera unless what it delivers changes (a custom robot's bug must
        not flood the log at the control rate).
        """
        for name, what in self.safety.malformed_cameras(reading).items():
            self.bad_frames[name] = self.bad_frames.get(name, 0) + 1
            said, at = self._bad_frame_logged.get(name, ("", -math.inf))
            if what != said or now - at >= _BAD_FRAME_LOG_S:
                log.warning("deploy: malformed frame, holding as a stale camera (%d so far): %s", self.bad_frames[name], what)
                self._bad_frame_logged[name] = (what, now)

    def _last_obs(self) -> np.ndarray:
        """The observation recorded for a step the policy did not see (the previous one, or zeros)."""
        if self.telemetry is not None and len(self.telemetry):
            return self.telemetry.obs[-1]
        return np.zeros(self.policy.frame_dim, np.float32)

    def _status(self, flags: int, fresh: bool) -> str:
        """The status word after a step."""
        if not flags:
            return "run" if fresh else "stale"
        if flags & _ESTOP:
            return "estop"
        if not fresh or flags & _STALE:
            return "stale"
        if flags & _STALE_CAMERA:
            return "stale_camera"
        if flags & _RAMP:
            return "ramp"
        if flags & _HOLD_OR_NONFINITE:
            return "hold"
        return "run"

    def estop(self, reason: str = "e-stop") -> None:
        """Latch the e-stop: from the next step on only the safe command is sent."""
        log.warning("deploy: e-stop (%s)", reason)
        self.safety.estop(reason)

    def stop(self) -> None:
        """Ask :meth:`run` to finish (it damps for ``exit_s`` first); safe from any thread."""
        self._stop.set()

    # -- the loop ------------------------------------------------------------------------------
    def _wait_until(self, deadline: float) -> None:
        """Sleep until ``spin_s`` before ``deadline``, then spin (the OS wakes threads late)."""
        remaining = deadline - self.clock() - self.spin_s
        if remaining > 0:
            self._sleep(remaining)
        while self.clock() < deadline and not self._stop.is_set():
            pass

    def run(self, duration_s: float | None = None, steps: int | None = None,
            on_step: Callable[[DeployRuntime, int | None], None] | None = None) -> LoopStats:
        """Run the loop until ``duration_s`` passed, ``steps`` ticks ran or :meth:`stop` was called;
        then damp for the safety layer's ``exit_s``. ``on_step`` sees the runtime after every tick.
        """
        self._stop.clear()
        self._fresh_state = True  # a new run is a new episode for the policy (state, history, last action)
        t0 = self.clock()
        k = 0
        try:
            while not self._stop.is_set():
                if steps is not None and k >= steps:
                    break
                deadline = t0 + k * self.period
                if duration_s is not None and deadline - t0 > duration_s:
                    break
                self._wait_until(deadline)
                if self._stop.is_set():
                    break
                self.stats.ticks.append(self.clock())
                flags = self.step()
                if on_step is not None:
                    on_step(self, flags)
                k += 1
                late = self.clock() - (t0 + k * self.period)
                if late > self.period:
                    skip = int(late / self.period)
                    self.stats.missed += skip
                    k += skip
        finally:
            self.exit()
        return self.stats

    def exit(self) -> None:
        """Damp for the safety layer's ``exit_s`` at the loop's rate, then stop sending."""
        if self.status in ("stopped", "idle"):
            self.status = "stopped"
            return
        self.status = "exit"
        t0 = self.clock()
        k = 0
        while self.clock() - t0 < self.safety.config.exit_s and self.robot.is_connected:
            reading = self.robot.read()
            if reading is None or self.clock() - reading.age_reference > self.lost_timeout_s:
                break
            cmd, flags = self.safety.exit_command(reading, self.clock())
            self.robot.send(cmd)
            k += 1
            self._sleep(max(0.0, t0 + k * self.period - self.clock()))
        self.status = "stopped"
