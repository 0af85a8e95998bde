"""Actuator models evaluated in Python at every physics substep: ideal PD, DC motor, delayed PD.

A model is referenced from a ``torque`` action term (``ActionTerm(actuator=IdealPD(...))``) whose
actuators are MuJoCo motors on hinge or slide joints. The term's processed action
(``offset + scale * clip(action)``) is the joint target; before each physics substep the env hands
the model the targets and the joints' positions and velocities, and the model's effort, divided by
the motor's gear and gain, becomes the motor's ``ctrl``. MuJoCo then still applies the motor's
``ctrlrange``/``forcerange`` (the hardware limit written in the MJCF).

Gains may be randomised per world: ``kp_scale``/``kd_scale`` are ranges of a factor drawn per world
and joint at every reset from the env's seeded streams; the drawn gains are recorded in
``env.drawn`` (``actuator/<term>/kp``, ``.../kd``), as is :class:`DelayedPD`'s delay
(``actuator/<term>/delay``). A degenerate range (``(1, 1)``, the default) draws nothing.

The PD law is written in the order MuJoCo evaluates an affine servo (``gain * ctrl + bias`` with
``bias = -kp * q - kd * qdot``), so :class:`IdealPD` reproduces ``ActionTerm(kind="joint_pos")``
up to the rounding of the effort's trip through ``ctrl = effort / gear``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from robolearn.envs.sync import host_any, host_nonzero
from robolearn.sim2real.randomization.latency import check_int_range, draw_int

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv


def _per_joint(
    where: str, value: float | Sequence[float], n: int, positive: bool = False, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """A scalar or ``n`` finite values as a float64 ``[n]`` tensor on ``device``, non-negative (or
    positive); checked on the host, once, when the env is built.
    """
    try:
        t = torch.as_tensor(value, dtype=torch.float64).flatten()
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{where}: expected a number or {n} numbers (one per joint), got {value!r}") from None
    if t.numel() == 1:
        t = t.expand(n).clone()
    if t.numel() != n:
        raise ValueError(f"{where}: expected a scalar or {n} values (one per joint), got {t.numel()}")
    bad = ~torch.isfinite(t) | ((t <= 0) if positive else (t < 0))
    if bool(bad.any()):
        raise ValueError(f"{where}: expected finite {'positive' if positive else 'non-negative'} values, got {t.tolist()}")
    return t.to(device)


def _check_scale(where: str, value: tuple[float, float]) -> tuple[float, float]:
    """A ``(low, high)`` gain-factor range with ``0 <= low <= high``, or an error naming ``where``."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a (low, high) pair of numbers, got {value!r}") from None
    if not 0.0 <= lo <= hi < math.inf:
        raise ValueError(f"{where}: expected finite 0 <= low <= high, got {value!r}")
    return lo, hi


@dataclass
class IdealPD:
    """Ideal PD actuator: ``effort = kp * (target - q) - kd * qdot``, clipped to ``effort_limit``."""

    kp: float | Sequence[float]
    """Position gain (per joint if a sequence), effort per unit of joint position."""
    kd: float | Sequence[float]
    """Damping gain (per joint if a sequence), effort per unit of joint velocity."""
    effort_limit: float | Sequence[float] | None = None
    """Symmetric effort limit (per joint if a sequence); ``None``: unlimited (the MJCF's motor
    limits still apply)."""
    kp_scale: tuple[float, float] = (1.0, 1.0)
    """Range of a factor on ``kp``, drawn per world and joint at reset."""
    kd_scale: tuple[float, float] = (1.0, 1.0)
    """Range of a factor on ``kd``, drawn per world and joint at reset."""

    def build(self, env: BatchedEnv, term: str, num_joints: int) -> PDState:
        """The actuator state of action term ``term`` of ``env``."""
        return PDState(env, term, num_joints, self)


class PDState:
    """Per-env state of a PD actuator: per-world gains (redrawn at reset) and the effort limits."""

    def __init__(self, env: BatchedEnv, term: str, n: int, cfg: IdealPD) -> None:
        """Validate ``cfg`` and set every world's gains to the nominal ones."""
        where = f"actions.{term}.actuator"
        self.env = env
        self.keys = (f"actuator/{term}/kp", f"actuator/{term}/kd")
        self.kp0 = _per_joint(f"{where}.kp", cfg.kp, n, device=env.device)
        self.kd0 = _per_joint(f"{where}.kd", cfg.kd, n, device=env.device)
        self.kp_scale = _check_scale(f"{where}.kp_scale", cfg.kp_scale)
        self.kd_scale = _check_scale(f"{where}.kd_scale", cfg.kd_scale)
        self.limit = None if cfg.effort_limit is None else _per_joint(f"{where}.effort_limit", cfg.effort_limit, n, device=env.device)
        self.kp = self.kp0.expand(env.num_envs, n).clone()
        self.kd = self.kd0.expand(env.num_envs, n).clone()
        self._negate()

    def _negate(self) -> None:
        """Cache ``-kp`` and ``-kd`` (MuJoCo's bias coefficients) once per reset, not per substep."""
        self.neg_kp, self.neg_kd = -self.kp, -self.kd

    def reset(self, env_ids: torch.Tensor) -> None:
        """Redraw the gains of ``env_ids`` (where a gain range is given) and record them."""
        for gains, nominal, (lo, hi), key in (
            (self.kp, self.kp0, self.kp_scale, self.keys[0]),
            (self.kd, self.kd0, self.kd_scale, self.keys[1]),
        ):
            if lo != hi:
                gains[env_ids] = nominal * self.env.draw_uniform(env_ids, nominal.numel(), lo, hi)
                self.env.record_drawn(key, env_ids, gains[env_ids])
        self._negate()

    def pd(self, target: torch.Tensor, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """The unclipped PD effort, in MuJoCo's order of evaluation (module doc)."""
        return self.kp * target + (self.neg_kp * q + self.neg_kd * qd)

    def __call__(self, target: torch.Tensor, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """Efforts ``[N, n]``: the PD law, clipped to the effort limit."""
        effort = self.pd(target, q, qd)
        if self.limit is not None:
            effort = torch.clamp(effort, -self.limit, self.limit)
        return effort

    def state_dict(self) -> dict[str, Any]:
        """The per-world gains."""
        return {"kp": self.kp.clone(), "kd": self.kd.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.kp.copy_(state["kp"])
        self.kd.copy_(state["kd"])
        self._negate()


@dataclass(kw_only=True)
class DCMotor(IdealPD):
    """PD control through a DC motor's torque-speed envelope.

    The torque a motor can produce in the direction it turns falls linearly with speed, from
    ``saturation_effort`` at rest to zero at ``velocity_limit``; torque against the motion (braking)
    is not reduced. Both bounds are then clipped to the continuous ``effort_limit``::

        upper = clip(saturation_effort * (1 - qdot / velocity_limit), 0, effort_limit)
        lower = clip(saturation_effort * (-1 - qdot / velocity_limit), -effort_limit, 0)
        effort = clip(kp * (target - q) - kd * qdot, lower, upper)
    """

    saturation_effort: float | Sequence[float]
    """Peak (stall) effort of the motor, per joint if a sequence."""
    velocity_limit: float | Sequence[float]
    """No-load speed: no effort in the direction of motion at or above it."""

    def build(self, env: BatchedEnv, term: str, num_joints: int) -> DCMotorState:
        """The actuator state of action term ``term`` of ``env``."""
        return DCMotorState(env, term, num_joints, self)


class DCMotorState(PDState):
    """Per-env state of :class:`DCMotor`."""

    def __init__(self, env: BatchedEnv, term: str, n: int, cfg: DCMotor) -> None:
        """Validate the envelope's parameters (all positive) on top of the PD's."""
        super().__init__(env, term, n, cfg)
        where = f"actions.{term}.actuator"
        if cfg.effort_limit is None:
            raise ValueError(f"{where}.effort_limit: a DC motor needs its continuous effort limit")
        self.limit = _per_joint(f"{where}.effort_limit", cfg.effort_limit, n, positive=True, device=env.device)
        self.saturation = _per_joint(f"{where}.saturation_effort", cfg.saturation_effort, n, True, env.device)
        self.velocity_limit = _per_joint(f"{where}.velocity_limit", cfg.velocity_limit, n, True, env.device)
        # saturation * (+-1 - qd / v) = +-saturation - slope * qd: fewer tensor ops per substep.
        self.slope = self.saturation / self.velocity_limit

    def envelope(self, qd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Lower and upper effort bounds ``[N, n]`` at joint velocities ``qd`` (class doc)."""
        drop = self.slope * qd
        upper = (self.saturation - drop).clamp_(min=0.0).minimum(self.limit)
        lower = (-self.saturation - drop).clamp_(max=0.0).maximum(-self.limit)  # type: ignore[operator]
        return lower, upper

    def __call__(self, target: torch.Tensor, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """Efforts ``[N, n]``: the PD law inside the torque-speed envelope."""
        lower, upper = self.envelope(qd)
        return torch.clamp(self.pd(target, q, qd), lower, upper)


@dataclass
class DelayedPD(IdealPD):
    """An ideal PD whose target arrives ``delay`` physics substeps late (``delay`` drawn per world
    at reset from ``[min_delay, max_delay]``): a motor driver's own pipeline latency.

    After a reset the delay line is filled with the episode's first target, so the first ``delay``
    substeps track that target (not the previous episode's).
    """

    min_delay: int = 0
    """Fewest physics substeps of delay."""
    max_delay: int = 0
    """Most physics substeps of delay."""

    def build(self, env: BatchedEnv, term: str, num_joints: int) -> DelayedPDState:
        """The actuator state of action term ``term`` of ``env``."""
        return DelayedPDState(env, term, num_joints, self)


class DelayedPDState(PDState):
    """Per-env state of :class:`DelayedPD`: the PD's gains plus a ring buffer of targets."""

    def __init__(self, env: BatchedEnv, term: str, n: int, cfg: DelayedPD) -> None:
        """Validate the delay range and allocate the ring buffer ``[N, max_delay + 1, n]``."""
        super().__init__(env, term, n, cfg)
        where = f"actions.{term}.actuator.(min_delay, max_delay)"
        self.low, self.high = check_int_range(where, (cfg.min_delay, cfg.max_delay))
        self.key = f"actuator/{term}/delay"
        self.depth = self.high + 1
        self.rows = env.all_ids
        self.buffer = torch.zeros(env.num_envs, self.depth, n, dtype=torch.float64, device=env.device)
        self.delay = torch.full((env.num_envs,), self.low, dtype=torch.long, device=env.device)
        self.pending = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
        self.any_pending = True
        self.head = 0

    def reset(self, env_ids: torch.Tensor) -> None:
        """Redraw gains and delays of ``env_ids``; their delay lines refill with the next target."""
        super().reset(env_ids)
        self.delay[env_ids] = draw_int(self.env, env_ids, self.low, self.high)
        self.env.record_drawn(self.key, env_ids, self.delay[env_ids])
        # index_fill_ passes True as a kernel argument: `pending[env_ids] = True` would copy a host
        # scalar to the device first, a synchronising copy on CUDA in every reset.
        self.pending.index_fill_(0, env_ids, True)
        self.any_pending = True

    def __call__(self, target: torch.Tensor, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """Push ``target``; the efforts track the target of ``delay`` substeps ago."""
        if self.any_pending:
            # Restart the delay lines of worlds reset since the last substep: one host sync per
            # reset, not per substep (the flag is host-side).
            ids = host_nonzero(self.pending)
            if ids is not None:
                self.buffer[ids] = target[ids].unsqueeze(1)
                self.pending.index_fill_(0, ids, False)
            self.any_pending = False
        self.head = (self.head + 1) % self.depth
        self.buffer[:, self.head] = target
        return super().__call__(self.buffer[self.rows, (self.head - self.delay) % self.depth], q, qd)

    def state_dict(self) -> dict[str, Any]:
        """Gains, ring buffer, write position, delays and pending refills."""
        return {
            **super().state_dict(),
            "buffer": self.buffer.clone(),
            "head": self.head,
            "delay": self.delay.clone(),
            "pending": self.pending.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.buffer = state["buffer"].clone()
        self.head = int(state["head"])
        self.delay = state["delay"].clone()
        self.pending = state["pending"].to(self.env.device, copy=True)
        self.any_pending = host_any(self.pending)
