"""Declarative task configuration: small dataclasses of terms that the managers turn into an MDP.

A term is a plain function ``(env, **params) -> Tensor`` (observations, rewards, terminations)
or ``(env, env_ids, **params) -> None`` (events, initial state). Tasks are built by listing terms;
nothing here subclasses anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Func = Callable[..., Any]


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
    """Stack this many past frames (``[N, H * D]``, newest last); 0 keeps one frame, unstacked."""
    allow_privileged: bool = False
    """Let privileged terms into a deployable group: an explicit, reviewed exception (the robot
    will have to measure those quantities)."""


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
    """How a world's state is drawn at reset: ``func(env, env_ids, **params) -> (qpos, qvel)``."""

    func: Func | None = None
    """``None`` resets to the model's ``qpos0`` and zero velocity."""
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
    episode_length: int = 1000
    """Control steps before a time-out (``truncated``)."""
    observations: dict[str, ObsGroup] = field(default_factory=dict)
    """Observation groups by name (``policy``, ``critic``, ``privileged``, ``history``, ``image``)."""
    actions: dict[str, ActionTerm] = field(default_factory=lambda: {"torque": ActionTerm()})
    """Action terms, concatenated in order into the action vector."""
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
