"""A simulated robot: one MuJoCo world of a registered task behind the :class:`Robot` interface.

It is the robot the deploy runtime, the ROS bridges and their tests drive on a machine without
hardware. The world is the task's own env (one world of :class:`robolearn.envs.BatchedEnv`), so
the task's actuator models, action latency and randomisation events act exactly as in training;
commands arrive in physical units (what a real robot would be sent) and are mapped back onto the
env's action (``action = (command - offset) / scale``, the inverse of the task's action processing),
so the env applies the task's own clipping and the robot reports what it actually applied.

Two clocks:

* **lockstep** (``realtime=False``): each :meth:`send` advances the world one control step; the
  reading's stamp is simulation time. Deterministic: tests and the parity checks use it.
* **real time** (``realtime=True``): a thread steps the world at the task's control rate on the
  monotonic clock, applying the newest command (zero-order hold), like a motor driver. A robot-side
  watchdog applies the hold command (torque: damping ``-kd * velocity`` clipped to the effort limits;
  position targets: the position measured when the hold began; velocity targets: zero) when no
  command arrived for ``command_timeout_s``, as a real driver does when its host goes quiet.

Joint readings are the 1-DoF joints (hinge, slide) of the model in ``qpos`` order; a free or ball
joint (a floating base) has no joint reading and is offered as the extras ``<joint>/qpos`` and
``<joint>/qvel`` instead, the state an estimator would publish. ``sensor_noise`` adds Gaussian noise
to the joint readings (the task's observation noise stays the policy's own processing).

Cameras: every colour camera term of the task (``robolearn.envs.camera.camera_rgb``, such as the
``image`` group of ``Cartpole-Swingup-Pixels`` and ``Reacher-Pixels``) is a declared camera
(``rgb8``, the term's width and height; rate: the control rate over its ``render_every``), named as
the deploy runtime looks a policy's camera up: the term's ``camera`` parameter when it is a name
(Cartpole's ``fixed``), else the term's name (``rgb`` for a free camera). Every reading carries the
newest frame of each (:attr:`Reading.images`), rendered by the term itself from the world's state at
the task's camera and size, so it is the env's observation of that state, stamped with the
reading's stamp.

The episode never times out on a robot (the time limit is the task's training device); a task's
termination (a fall) resets the world, counted in :attr:`SimulatedRobot.resets`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np
import torch

from robolearn.envs.camera import camera_rgb, close_cameras
from robolearn.envs.registry import make
from robolearn.sim2real.robots.base import (
    CameraFeature,
    CameraFrame,
    Reading,
    Robot,
    RobotError,
    RobotFeatures,
)

log = logging.getLogger(__name__)

NEVER = 1 << 40
"""Episode length that stands for "no time limit" (the env counts steps in an integer)."""


class SimulatedRobot(Robot):
    """One world of task ``task_id`` as a robot (module doc)."""

    def __init__(
        self,
        task_id: str,
        *,
        seed: int = 0,
        realtime: bool = False,
        command_timeout_s: float = 0.1,
        hold_kd: float = 1.0,
        sensor_noise: float = 0.0,
        overrides: dict[str, Any] | None = None,
        velocity_limit: float = math.inf,
        start_on_command: bool = False,
    ) -> None:
        """Build the world (not yet running: :meth:`connect` starts it).

        ``overrides`` are task-config overrides (``robolearn.make``'s keywords); ``hold_kd`` is the
        damping gain of the torque hold; ``velocity_limit`` is declared for every command joint (a
        simulated joint has none of its own). ``start_on_command`` (real time): the world stands
        still after :meth:`connect`, its reading re-published every period, until the first command
        arrives, like a driver that enables its motors on its controller's first command; a
        balancing task then starts from the same state however long the controller took to start.
        """
        if command_timeout_s <= 0:
            raise ValueError(f"command_timeout_s: expected a positive number of seconds, got {command_timeout_s!r}")
        if sensor_noise < 0:
            raise ValueError(f"sensor_noise: expected a standard deviation >= 0, got {sensor_noise!r}")
        kwargs = {"episode_length": NEVER, **(overrides or {})}
        self.task_id = task_id
        self.env = make(task_id, 1, seed=seed, dtype=torch.float64, **kwargs)
        self.env.reset()
        self.spec = self.env.policy_spec()
        self.realtime = bool(realtime)
        self.command_timeout_s = float(command_timeout_s)
        self.hold_kd = float(hold_kd)
        self.sensor_noise = float(sensor_noise)
        self._noise = np.random.default_rng(seed + 1)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._connected = False
        self.resets = 0
        """Terminations that put the world back to an initial state."""
        self.steps = 0
        """Control steps taken since :meth:`connect`."""
        self.holding = False
        """Whether the robot-side watchdog holds (real time: no fresh command)."""
        self.hold_events: list[float] = []
        """Monotonic times at which a hold began (real time)."""
        self.last_reward = 0.0
        """The task's reward of the last control step (for checks; a real robot has none)."""
        self.sim_time = 0.0
        self.start_on_command = bool(start_on_command)
        self._armed = True
        self._commanded = False
        """Seconds of simulated time since :meth:`connect`."""
        self.on_tick: Callable[[], None] | None = None
        """Called after every control step (from the stepping thread in real time), so a bridge can
        publish each state as soon as it exists; ``None``: nothing."""
        self._build_features(velocity_limit)
        self._command = np.zeros(len(self.features.command_joints))
        self._command_time = -math.inf
        self._hold_target: np.ndarray | None = None
        self._reading = self._measure(0.0)

    # -- description ---------------------------------------------------------------------------
    def _build_features(self, velocity_limit: float) -> None:
        """Joints, command semantics, limits and default pose from the model and the policy spec."""
        model = self.env.model
        joints, qadr, dadr, extras = [], [], [], {}
        free = (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL)
        for j in range(model.njnt):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"
            if model.jnt_type[j] in free:
                nq = 7 if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 4
                extras[f"{name}/qpos"] = nq
                extras[f"{name}/qvel"] = nq - 1
                continue
            joints.append(name)
            qadr.append(int(model.jnt_qposadr[j]))
            dadr.append(int(model.jnt_dofadr[j]))
        self._free = [
            (f"{mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f'joint{j}'}", int(model.jnt_qposadr[j]),
             int(model.jnt_dofadr[j]), 7 if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 4)
            for j in range(model.njnt) if model.jnt_type[j] in free
        ]
        self._qadr = np.array(qadr, dtype=np.int64)
        self._dadr = np.array(dadr, dtype=np.int64)
        kinds = {a["kind"] for a in self.spec["actions"]}
        if len(kinds) != 1:
            raise RobotError(f"task {self.task_id}: a robot takes one command kind; its action terms mix {sorted(kinds)}")
        cmd_joints = [j for a in self.spec["actions"] for j in a["joints"]]
        if any(j is None for j in cmd_joints):
            raise RobotError(f"task {self.task_id}: an actuator without a joint transmission cannot be a robot command joint")
        scale = np.array([s for a in self.spec["actions"] for s in a["scale"]], dtype=np.float64)
        offset = np.array([s for a in self.spec["actions"] for s in a["offset"]], dtype=np.float64)
        # the spec writes infinite bounds as "inf"/"-inf" strings, which NumPy reads as floats
        low = np.array([v for a in self.spec["actions"] for v in a["low"]], dtype=np.float64)
        high = np.array([v for a in self.spec["actions"] for v in a["high"]], dtype=np.float64)
        self._scale, self._offset = scale, offset
        ctrl_low, ctrl_high = offset + scale * low, offset + scale * high
        kind = kinds.pop()
        pos_limits, effort = [], []
        for k, jname in enumerate(cmd_joints):
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, jname)
            if model.jnt_limited[jid]:
                pos_limits.append((float(model.jnt_range[jid, 0]), float(model.jnt_range[jid, 1])))
            else:
                pos_limits.append((-math.inf, math.inf))
            lo, hi = sorted((float(ctrl_low[k]), float(ctrl_high[k])))
            effort.append(max(abs(lo), abs(hi)) if kind == "torque" else math.inf)
        default = [float(model.qpos0[model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j)]])
                   for j in cmd_joints]
        self._cmd_cols = np.array([joints.index(j) for j in cmd_joints], dtype=np.int64)
        units = {j: ("m" if model.jnt_type[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j)]
                     == mujoco.mjtJoint.mjJNT_SLIDE else "rad") for j in joints}
        cameras: dict[str, CameraFeature] = {}
        self._cameras: list[tuple[str, Any]] = []
        """``(camera name, ObsTerm)`` of every colour camera term (module doc)."""
        rate = float(self.spec["control_rate_hz"])
        for group in self.env.cfg.observations.values():
            for tname, term in group.terms.items():
                if term.func is not camera_rgb:
                    continue
                params = dict(term.params or {})
                cam = params.get("camera")
                name = cam if isinstance(cam, str) and cam else tname
                feature = CameraFeature(int(params.get("height", 84)), int(params.get("width", 84)), "rgb8",
                                        rate / int(params.get("render_every", 1)))
                if name in cameras:
                    if cameras[name] != feature:
                        raise RobotError(f"task {self.task_id}: two camera terms named {name!r} render different frames")
                    continue
                cameras[name] = feature
                self._cameras.append((name, term))
        self.features = RobotFeatures(
            name=self.task_id,
            joints=tuple(joints),
            command_joints=tuple(cmd_joints),
            command_kind=kind,
            rate_hz=float(self.spec["control_rate_hz"]),
            position_limits=tuple(pos_limits),
            velocity_limits=tuple(float(velocity_limit) for _ in cmd_joints),
            effort_limits=tuple(effort),
            default_pose=tuple(default),
            extras=extras,
            units=units,
            cameras=cameras,
        )

    # -- Robot ---------------------------------------------------------------------------------
    def clock(self) -> float:
        """The robot's time in seconds: simulation time in lockstep, ``time.monotonic()`` in real
        time. A runtime driving a lockstep robot uses it as its clock (``DeployRuntime(clock=...)``),
        so ramps and timeouts count simulated seconds.
        """
        return time.monotonic() if self.realtime else self.sim_time

    @property
    def is_connected(self) -> bool:
        """Whether the world is running."""
        return self._connected

    def connect(self) -> None:
        """Start the world (and, in real time, its stepping thread); idempotent."""
        if self._connected:
            return
        self._connected = True
        self._command_time = time.monotonic()
        self._armed = not (self.realtime and self.start_on_command)
        if self.realtime:
            self._stop.clear()
            # An OpenGL context is current in one thread at a time: the stepping thread renders the
            # camera terms from now on, in contexts of its own (made at its first render).
            close_cameras(self.env)
            self._thread = threading.Thread(target=self._run, name=f"sim-robot-{self.task_id}", daemon=True)
            self._thread.start()

    def disconnect(self) -> None:
        """Stop the stepping thread; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self._connected = False

    def read(self) -> Reading:
        """The newest measurement."""
        if not self._connected:
            raise RobotError(f"robot {self.task_id}: read() before connect()")
        with self._lock:
            return self._reading

    def send(self, command: np.ndarray) -> np.ndarray:
        """Apply ``command`` (lockstep: step the world now; real time: from the next tick); return the
        command as the actuators take it (the task's action clipping applied).
        """
        if not self._connected:
            raise RobotError(f"robot {self.task_id}: send() before connect()")
        cmd = np.asarray(command, dtype=np.float64).reshape(-1)
        n = len(self.features.command_joints)
        if cmd.shape != (n,):
            raise RobotError(f"robot {self.task_id}: expected a command of {n} values, got shape {list(cmd.shape)}")
        if not np.all(np.isfinite(cmd)):
            raise RobotError(f"robot {self.task_id}: refused a non-finite command {cmd.tolist()}")
        applied = self._applied(cmd)
        if self.realtime:
            with self._lock:
                self._command = cmd
                self._command_time = time.monotonic()
                self._armed = self._commanded = True
        else:
            self._step(cmd)
        return applied

    # -- simulation ----------------------------------------------------------------------------
    def _action(self, command: np.ndarray) -> torch.Tensor:
        """The env action whose processing gives ``command`` (before the task's clipping)."""
        safe = np.where(self._scale != 0, self._scale, 1.0)
        return torch.from_numpy((command - self._offset) / safe).reshape(1, -1)

    def _applied(self, command: np.ndarray) -> np.ndarray:
        """``command`` after the task's action clipping, in command units."""
        action = self._action(command)
        processed = self.env.action_manager.processor(action.to(torch.float64))
        return processed.reshape(-1).numpy().astype(np.float64)

    def _step(self, command: np.ndarray) -> None:
        """One control step under ``command``; update the reading."""
        _, reward, terminated, _, _ = self.env.step(self._action(command))
        self.steps += 1
        self.sim_time += self.env.dt
        self.last_reward = float(reward[0])
        if bool(terminated[0]):
            self.resets += 1
        stamp = time.monotonic() if self.realtime else self.sim_time
        reading = self._measure(stamp)
        with self._lock:
            self._reading = reading
        if self.on_tick is not None:
            self.on_tick()

    @property
    def last_command_time(self) -> float | None:
        """Monotonic time of the newest command (real time; ``None`` before the first)."""
        with self._lock:
            return self._command_time if self._commanded and math.isfinite(self._command_time) else None

    def latch_hold(self) -> None:
        """Hold from the next tick on, as if the last command were long gone (an e-stop at the robot:
        the watchdog's hold stays until a new command arrives, which an e-stopped bridge never
        forwards).
        """
        with self._lock:
            self._command_time = -math.inf
            self._armed = True  # an e-stop before the first command starts the world in the hold

    def _measure(self, stamp: float) -> Reading:
        """The world's joint state as a :class:`Reading` (noise added when configured)."""
        qpos = self.env.sim.qpos[0].numpy()
        qvel = self.env.sim.qvel[0].numpy()
        pos = qpos[self._qadr].astype(np.float64, copy=True)
        vel = qvel[self._dadr].astype(np.float64, copy=True)
        if self.sensor_noise > 0:
            pos += self._noise.normal(0.0, self.sensor_noise, pos.shape)
            vel += self._noise.normal(0.0, self.sensor_noise, vel.shape)
        extras = {}
        for name, qa, da, nq in self._free:
            extras[f"{name}/qpos"] = qpos[qa:qa + nq].astype(np.float64, copy=True)
            extras[f"{name}/qvel"] = qvel[da:da + nq - 1].astype(np.float64, copy=True)
        # received: when the state became available, on the robot's clock (simulation time in
        # lockstep, the monotonic clock in real time): a runtime judges staleness on that clock.
        received = self.clock()
        images = {}
        for name, term in self._cameras:
            # The term's own render of this state (held between its render_every steps, cached when
            # the env's observation already drew it): the env's observation, byte for byte.
            frame = term.func(self.env, **term.params)[0].cpu().numpy()
            images[name] = CameraFrame(np.ascontiguousarray(frame, dtype=np.uint8), stamp, received)
        return Reading(stamp=stamp, joint_pos=pos, joint_vel=vel, extras=extras, received=received, images=images)

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Put the world in state ``(qpos, qvel)`` (the model's full ``qpos``/``qvel``), as a person
        placing a real robot would; the next reading shows it.
        """
        self.env.set_state(torch.as_tensor(np.asarray(qpos, dtype=np.float64)).reshape(1, -1),
                           torch.as_tensor(np.asarray(qvel, dtype=np.float64)).reshape(1, -1))
        stamp = time.monotonic() if self.realtime else self.sim_time
        reading = self._measure(stamp)
        with self._lock:
            self._reading = reading

    def hold_command(self) -> np.ndarray:
        """What the robot-side watchdog applies (module doc)."""
        reading = self._reading
        kind = self.features.command_kind
        if kind == "torque":
            effort = np.asarray(self.features.effort_limits)
            return np.clip(-self.hold_kd * reading.joint_vel[self._cmd_cols], -effort, effort)
        if kind == "joint_vel":
            return np.zeros(len(self._cmd_cols))
        if self._hold_target is None:
            self._hold_target = reading.joint_pos[self._cmd_cols].copy()
        return self._hold_target

    def _run(self) -> None:
        """The real-time loop: one control step per period on the monotonic clock, no drift."""
        try:
            self._loop()
        finally:
            # The contexts are current in this thread: freed here, so another thread can render again.
            close_cameras(self.env)

    def _loop(self) -> None:
        """:meth:`_run`'s ticks."""
        period = self.env.dt
        start = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                command, fresh = self._command, now - self._command_time <= self.command_timeout_s
                armed = self._armed
            if not armed:  # before the first command: the world stands still, the sensors report
                reading = self._measure(now)
                with self._lock:
                    self._reading = reading
                if self.on_tick is not None:
                    self.on_tick()
            else:
                if fresh:
                    self.holding, self._hold_target = False, None
                else:
                    if not self.holding:
                        self.hold_events.append(now)
                        log.info("robot %s: no command for %.3f s; holding", self.task_id, now - self._command_time)
                    self.holding = True
                    command = self.hold_command()
                self._step(command)
            tick += 1
            # Deadlines are multiples of the period from the start: a late tick does not shift the rest.
            delay = start + tick * period - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            elif delay < -10 * period:  # far behind (a stalled machine): skip ahead rather than sprint
                tick = int((time.monotonic() - start) / period)

