"""Declarative task configuration: small dataclasses of terms that the managers turn into an MDP.

A term is a plain function ``(env, **params) -> Tensor`` (observations, rewards, terminations)
or ``(env, env_ids, **params) -> None`` (events, initial state). Tasks are built by listing terms;
nothing here subclasses anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import torch

    from robolearn.envs.batched_env import BatchedEnv

Func = Callable[..., Any]


# -- latency and actuator models ---------------------------------------------------------------
# The env knows only these small protocols; the concrete models (observation/action delay,
# control-period jitter, PD and DC-motor actuators) live in robolearn.sim2real.randomization, so
# envs stay free of sim2real imports. A model in a config is a stateless description: ``build``
# gives each env its own state object (buffers, per-world draws), which the env resets, steps and
# checkpoints. The same config can therefore build any number of envs.


class ModelState(Protocol):
    """Per-env state of a latency or actuator model: redrawn per world at reset, checkpointed."""

    def reset(self, env_ids: torch.Tensor) -> None:
        """Worlds ``env_ids`` start an episode: redraw their parameters, clear their buffers."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Buffers and draws a resumed run needs to continue exactly."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...


class ObsDelayState(ModelState, Protocol):
    """Delays one observation group's frames."""

    def __call__(self, frame: torch.Tensor, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The frame delivered this step given the freshly measured ``frame`` ``[N, ...]``; with
        ``env_ids`` (worlds just reset, ``frame`` holds only their rows) their buffers restart
        filled with ``frame``, which is delivered as it is.
        """
        ...


class ObsDelayModel(Protocol):
    """Config of an observation delay (``ObsGroup.delay``)."""

    def build(self, env: BatchedEnv, group: str) -> ObsDelayState:
        """The delay state of ``group`` in ``env``."""
        ...


class ActionDelayState(ModelState, Protocol):
    """Delays the policy's actions by whole control steps."""

    def __call__(self, action: torch.Tensor) -> torch.Tensor:
        """The action ``[N, A]`` applied this step, given the one the policy chose now."""
        ...


class ActionDelayModel(Protocol):
    """Config of an action delay (``TaskCfg.action_delay``)."""

    def build(self, env: BatchedEnv) -> ActionDelayState:
        """The delay state of ``env``."""
        ...


class ControlJitterState(ModelState, Protocol):
    """Draws, per control step and world, how many physics substeps the new control comes late."""

    max_substeps: int
    """The most substeps a control can come late (the env splits the physics at each possible value)."""

    def draw(self) -> torch.Tensor:
        """Late substeps ``[N]`` (int64, each in ``[0, decimation]``) for this control step."""
        ...


class ControlJitterModel(Protocol):
    """Config of control-period jitter (``TaskCfg.control_jitter``)."""

    def build(self, env: BatchedEnv) -> ControlJitterState:
        """The jitter state of ``env``."""
        ...


class ActuatorState(ModelState, Protocol):
    """An actuator model evaluated in Python once per physics substep."""

    def __call__(self, target: torch.Tensor, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """Joint efforts ``[N, n]`` from the commanded targets and the joints' positions and
        velocities (all ``[N, n]`` float64), called once per physics substep.
        """
        ...


class ActuatorModel(Protocol):
    """Config of an actuator model (``ActionTerm.actuator``)."""

    def build(self, env: BatchedEnv, term: str, num_joints: int) -> ActuatorState:
        """The actuator state of action term ``term``, which drives ``num_joints`` joints."""
        ...


@dataclass
class NoiseCfg:
    """Additive observation noise, drawn per world and step from the env's seeded streams."""

    kind: Literal["uniform", "gaussian"] = "gaussian"
    """``uniform`` draws from ``[-scale, scale]``; ``gaussian`` from ``N(0, scale^2)``."""
    scale: float = 0.0
    """Half-width (uniform) or standard deviation (gaussian)."""


@dataclass
class ObsTerm:
    """One named observation term; hooks run in the order noise, clip, scale."""

    func: Func
    """``(env, **params) -> Tensor[N, k]`` (or ``[N]``)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""
    noise: NoiseCfg | None = None
    """Additive noise (skipped when the group disables noise)."""
    clip: tuple[float, float] | None = None
    """Clip to ``[low, high]`` after the noise."""
    scale: float | Sequence[float] | None = None
    """Multiply by this after clipping (per element if a sequence)."""
    unit: str = ""
    """Physical unit, recorded in the policy spec (``rad``, ``m/s``, ...)."""
    privileged: bool | None = None
    """What only the simulator knows (true state, randomisation draws, delays). ``None`` takes the
    function's own ``privileged`` attribute (False if it has none). Such a term may not appear in a
    deployable group (``policy``, ``history``, ``image``) unless that group allows it."""


@dataclass
class ObsGroup:
    """A named group of terms, concatenated in order into one ``[N, D]`` tensor."""

    terms: dict[str, ObsTerm]
    """Terms by name, in concatenation order."""
    enable_noise: bool = True
    """Apply each term's noise (off for critic and privileged groups, typically)."""
    history_length: int = 0
    """Stack this many (``k``) past frames, oldest first; 0 keeps one frame, unstacked. A flat group
    gives ``[N, k * D]``; an image group (one ``[N, H, W, C]`` term) stacks along the channel axis,
    ``[N, H, W, k * C]`` in the term's dtype (uint8 stays uint8). An episode start fills every slot
    with its first frame."""
    allow_privileged: bool = False
    """Let privileged terms into a deployable group: an explicit, reviewed exception (the robot
    will have to measure those quantities)."""
    delay: ObsDelayModel | None = None
    """Deliver the group's frames late (e.g. ``robolearn.sim2real.randomization.latency.
    ObservationDelay``): applied after noise, clip and scale and before history stacking, so the
    history holds the frames as delivered. The default critic group (``policy`` plus
    ``privileged``) is built undelayed. ``None``: no delay and no per-step cost."""


@dataclass
class ActionTerm:
    """How the policy's action vector becomes MuJoCo controls.

    ``torque`` writes ``ctrl`` directly. ``joint_pos`` and ``joint_vel`` turn the selected
    actuators into MuJoCo PD servos (gain ``kp``, bias ``-kp*q - kd*qdot``; or gain ``kd``, bias
    ``-kd*qdot``) so the control law runs inside the batched C step at the physics rate.
    """

    kind: Literal["torque", "joint_pos", "joint_vel"] = "torque"
    """Action semantics."""
    actuators: Sequence[str] | None = None
    """Actuator names, in action order; ``None`` takes every actuator in model order."""
    scale: float | Sequence[float] = 1.0
    """``ctrl = offset + scale * clip(action)``."""
    offset: float | Sequence[float] | Literal["default"] = 0.0
    """Added after scaling; ``default`` uses each joint's ``qpos0`` (``joint_pos`` only)."""
    clip: tuple[float, float] | None = None
    """Clip the raw action before scaling."""
    kp: float | Sequence[float] | None = None
    """Position gain of ``joint_pos`` servos; ``None`` keeps the MJCF actuator as it is."""
    kd: float | Sequence[float] | None = None
    """Damping gain of ``joint_pos``/``joint_vel`` servos."""
    actuator: ActuatorModel | None = None
    """An actuator model run in Python at every physics substep (``IdealPD``, ``DCMotor``,
    ``DelayedPD`` of ``robolearn.sim2real.randomization.actuators``). Needs ``kind="torque"`` on
    motor actuators with a joint transmission; ``offset + scale * clip(action)`` is then the
    model's target and the model's effort, divided by the motor's gear and gain, becomes ``ctrl``
    (MuJoCo's ``ctrlrange``/``forcerange`` still clamp it: the motor's hardware limit)."""


@dataclass
class RewardTerm:
    """A weighted reward term; the reward is the sum of ``weight * func(env, **params)``."""

    func: Func
    """``(env, **params) -> Tensor[N]``."""
    weight: float = 1.0
    """Multiplier."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""


@dataclass
class TerminationTerm:
    """A done condition: ``terminated`` (MDP end) or, with ``time_out``, ``truncated``."""

    func: Func
    """``(env, **params) -> Tensor[N] bool``."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""
    time_out: bool = False
    """Count as a truncation (learners bootstrap) instead of a termination."""


@dataclass
class EventTerm:
    """Something done to selected worlds: at start-up, at every reset, or at intervals."""

    func: Func
    """``(env, env_ids, **params) -> None``."""
    mode: Literal["startup", "reset", "interval"] = "reset"
    """When it runs."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""
    interval_range_s: tuple[float, float] = (1.0, 1.0)
    """For ``interval``: seconds between firings, drawn per world from this range."""


@dataclass
class CommandTerm:
    """A goal the policy is given (target velocity, pose ...), resampled per world."""

    func: Func
    """``(env, env_ids, **params) -> Tensor[len(env_ids), dim]``: fresh commands."""
    dim: int
    """Command width."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""
    resampling_time_s: tuple[float, float] = (1e9, 1e9)
    """Seconds between resamplings, drawn per world (the default: only at reset)."""


@dataclass
class SuccessTerm:
    """Whether an episode succeeded, judged on its last state (before the reset)."""

    func: Func
    """``(env, **params) -> Tensor[N] bool``."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""


@dataclass
class InitialState:
    """How a world's state is drawn at reset: ``func(env, env_ids, **params) -> (qpos, qvel)``, or
    ``(qpos, qvel, act)`` to also set the actuator activations (``[n, na]``: filter or integrator
    states such as a motor's first-order lag, which a physics reset zeroes); any may be ``None``.
    """

    func: Func | None = None
    """``None`` resets to the model's ``qpos0`` and zero velocity."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""


@dataclass
class CurriculumTerm:
    """A curriculum term: reads how the ending episodes went and moves task parameters.

    Called when worlds reset after their episode ended, before the episode statistics are cleared
    and before the new episode's events, initial state and commands, so the new episode runs under
    the moved values (``robolearn.envs.curriculum`` has the generic terms and the addresses a term
    can move: ``rewards.<term>.weight``, ``<section>.<term>.params.<key>``, ``task.<name>``).
    """

    func: Func
    """A class, built once per env as ``func(env, where="curriculum.<name>", **params)`` (validated
    then) and called as ``(env, env_ids)``, with ``state_dict()``/``load_state_dict()`` for
    checkpoints; or a function ``(env, env_ids, **params)``. What it returns (a tensor, a number or
    ``None``) is logged as ``info["curriculum"][<name>]`` and the runner's column ``curriculum/<name>``."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``func``."""


@dataclass
class TaskCfg:
    """Everything that defines a task: the model, the control rate, and the MDP terms."""

    mjcf: str | os.PathLike[str]
    """Path of the MJCF file (or an XML string)."""
    decimation: int = 1
    """Physics substeps per control step."""
    timestep: float | None = None
    """Physics timestep override in seconds; ``None`` keeps the MJCF's."""
    solver: str | None = None
    """Constraint solver override (``PGS``, ``CG`` or ``Newton``); ``None`` keeps the MJCF's. MuJoCo
    Warp implements CG and Newton only, so a PGS model (Gymnasium's Humanoid) runs there with
    ``solver="Newton"``: the same task with a different solver, not Gymnasium's model any more."""
    episode_length: int = 1000
    """Control steps before a time-out (``truncated``)."""
    observations: dict[str, ObsGroup] = field(default_factory=dict)
    """Observation groups by name (``policy``, ``critic``, ``privileged``, ``history``, ``image``)."""
    actions: dict[str, ActionTerm] = field(default_factory=lambda: {"torque": ActionTerm()})
    """Action terms, concatenated in order into the action vector."""
    action_delay: ActionDelayModel | None = None
    """Apply the action the policy chose some control steps earlier (e.g. ``robolearn.sim2real.
    randomization.latency.ActionDelay``); ``env.action`` stays the policy's own choice."""
    control_jitter: ControlJitterModel | None = None
    """Let each control step's new control take effect a drawn number of physics substeps late,
    the previous one held meanwhile (e.g. ``robolearn.sim2real.randomization.latency.
    ControlJitter``); the physics then runs in segments or per substep instead of one call."""
    rewards: dict[str, RewardTerm] = field(default_factory=dict)
    """Reward terms by name, each logged."""
    terminations: dict[str, TerminationTerm] = field(default_factory=dict)
    """Termination and time-out terms by name."""
    events: dict[str, EventTerm] = field(default_factory=dict)
    """Event terms by name."""
    commands: dict[str, CommandTerm] = field(default_factory=dict)
    """Command terms by name."""
    initial_state: InitialState = field(default_factory=InitialState)
    """How worlds are placed at reset."""
    task_params: dict[str, float | Sequence[float]] = field(default_factory=dict)
    """Named task parameters (goal spread, command range, terrain level ...): ``env.task_params[name]``
    is a float64 tensor (``[]`` or ``[d]``, or ``[N, ...]`` once a per-world curriculum term owns it)
    that task terms read at call time and curriculum terms move (address ``task.<name>``). The
    values given here are the task as it is meant to be solved (what evaluation runs without a
    curriculum)."""
    curriculum: dict[str, CurriculumTerm] = field(default_factory=dict)
    """Curriculum terms by name, run in order where episodes end; each logged as ``curriculum/<name>``.
    An env built with ``curriculum={}`` (a ``make`` override) runs the task at its declared values."""
    success: SuccessTerm | None = None
    """Success criterion, reported per finished episode (``info["episode"]["success"]``)."""
    contact_forces: bool = False
    """Compute per-body contact forces (``cfrc_ext``) as Gymnasium does, after every step."""
    data_fields: tuple[str, ...] = ()
    """Further ``MjData`` outputs the terms read through ``env.sim.data_field`` (``cinert``,
    ``xipos``, ``qfrc_actuator`` ...): the CPU backend copies them out of every step only if declared."""
    prev_fields: tuple[str, ...] = ()
    """``MjData`` fields whose values before the step terms need (``env.prev[name]``), e.g. ``xpos``
    for a body's finite-difference velocity; ``qpos`` is always kept (``env.prev_qpos``)."""
    forward_after_step: bool = False
    """Make derived quantities (``xpos`` ...) current after each step instead of one substep behind."""
    description: str = ""
    """One line shown by ``robolearn.list_tasks``."""
