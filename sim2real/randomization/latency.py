"""Latency models: observation delay, action delay and control-period jitter.

Each model is a small dataclass referenced from a task config (``ObsGroup.delay``,
``TaskCfg.action_delay``, ``TaskCfg.control_jitter``); ``build`` gives each env its own state,
which the env resets per world, calls every step and checkpoints. Every per-world draw comes from
the env's seeded per-world streams and is recorded in ``env.drawn`` (so the privileged group and
``info["drawn"]`` see it). A range whose ends are equal draws nothing, so a fixed delay leaves the
random streams, and with them every other draw, exactly as without the model.

Rules:

* **Observation delay** (:class:`ObservationDelay`). Every control step the group's frame is
  measured (noise, clip and scale applied) and pushed into a per-world ring buffer of the last
  ``max_lag + 1`` frames. World ``i`` is delivered the frame of ``lag[i]`` steps ago, ``lag[i]``
  drawn uniformly from ``lag_range`` at reset. At reset the ring buffer is filled with the fresh
  frame, so the first ``lag`` steps of an episode see its first frame, never the previous episode.
  With ``jitter`` the lag is redrawn every step, and the delivered frame's age follows
  ``age_t = min(lag_t, age_{t-1} + 1)``: a frame older than the one already delivered is never
  delivered (the held frame is repeated instead), so delivered timestamps never go backwards. With
  ``hold_prob = p`` a world's delivered frame is, with probability ``p`` per step, not refreshed
  (``age_t = age_{t-1} + 1``): a dropped packet. The age of the delivered frame is recorded when
  it can differ from the lag (jitter or hold).
* **Action delay** (:class:`ActionDelay`). The action applied at control step ``t`` is the one the
  policy chose at ``t - lag`` (``lag`` drawn per world at reset). Until the first of an episode's
  actions arrives, the world applies the zero action: after the action term's scale and offset
  that is zero torque, or the default pose for a ``joint_pos`` term with ``offset="default"``.
* **Control-period jitter** (:class:`ControlJitter`). Each control step, per world, the new control
  takes effect ``late`` physics substeps into the period (``late`` uniform in
  ``[0, max_substeps]``), the previous control held for those substeps: a command delivered late
  within its period. At reset the "previous control" is that of the zero action.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from robolearn.envs.spec import Delay, uniform_int
from robolearn.envs.sync import host_any, host_nonzero

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv


def check_int_range(where: str, value: tuple[int, int], upper: int | None = None) -> tuple[int, int]:
    """``value`` as ``(low, high)`` integers with ``0 <= low <= high`` (``<= upper`` if given), or an
    error naming ``where``.
    """
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a (low, high) pair of integers, got {value!r}") from None
    # A bool is an int to Python, and 1.0 compares equal to 1: both are refused, not coerced.
    if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in (lo, hi)):
        raise ValueError(f"{where}: expected integers, got {value!r}")
    if not 0 <= lo <= hi:
        raise ValueError(f"{where}: expected integers 0 <= low <= high, got {value!r}")
    if upper is not None and hi > upper:
        raise ValueError(f"{where}: expected at most {upper}, got {value!r}")
    return int(lo), int(hi)


def draw_int(env: BatchedEnv, env_ids: torch.Tensor, low: int, high: int) -> torch.Tensor:
    """Uniform integers ``[len(env_ids)]`` in ``[low, high]`` from those worlds' streams (int64).

    ``low == high`` draws nothing: a fixed value must not shift the streams other draws use.
    """
    if low == high:
        return torch.full((env_ids.numel(),), low, dtype=torch.long, device=env.device)
    return scale_int(env.draw_uniform(env_ids, 1)[:, 0], low, high)


scale_int = uniform_int
"""Uniform draws ``u`` in ``[0, 1)`` mapped to integers in ``[low, high]`` (the processors' mapping)."""


def _record_all(env: BatchedEnv, name: str, values: torch.Tensor) -> None:
    """Record per-step values of every world (a direct write once the table exists)."""
    table = env.drawn.get(name)
    if table is None:
        env.record_drawn(name, env.all_ids, values)
    else:
        table[:, 0] = values


# -- observation delay -------------------------------------------------------------------------
@dataclass
class ObservationDelay:
    """Deliver an observation group's frames late: a per-world lag, optional jitter and holds."""

    lag_range: tuple[int, int] = (0, 0)
    """Lag in control steps, drawn uniformly per world at reset from ``[low, high]`` (inclusive)."""
    jitter: bool = False
    """Redraw the lag every step from ``lag_range``; a frame older than the last one delivered is
    not delivered again (the last one is held instead)."""
    hold_prob: float = 0.0
    """Probability, per world and step, that the delivered frame is not refreshed."""

    def build(self, env: BatchedEnv, group: str) -> ObservationDelayState:
        """The delay state of observation group ``group`` of ``env``."""
        where = f"observations.{group}.delay"
        lo, hi = check_int_range(f"{where}.lag_range", self.lag_range)
        if not isinstance(self.jitter, bool):
            raise ValueError(f"{where}.jitter: expected True or False, got {self.jitter!r}")
        if isinstance(self.hold_prob, bool) or not isinstance(self.hold_prob, numbers.Real) or not 0.0 <= self.hold_prob <= 1.0:
            raise ValueError(f"{where}.hold_prob: expected a probability in [0, 1], got {self.hold_prob}")
        return ObservationDelayState(env, group, lo, hi, bool(self.jitter), float(self.hold_prob))


class ObservationDelayState:
    """Per-env state of :class:`ObservationDelay`: the env's side of a :class:`robolearn.spec.
    processors.Delay` (which holds the ring buffer of measured frames, the lags and, with jitter or
    holds, the delivered frame and its age). This side draws from the env's per-world streams,
    records the draws in ``env.drawn``, and restarts worlds that reset.
    """

    def __init__(self, env: BatchedEnv, group: str, low: int, high: int, jitter: bool, hold_prob: float) -> None:
        """Allocate the per-world lags; the frame buffer is allocated on the first frame."""
        self.env = env
        self.delay = Delay(low, high, jitter=jitter, hold_prob=hold_prob, batch=env.num_envs, device=env.device)
        """The processor: buffers, lags and ages of every world."""
        self.lag_key = f"obs_delay/{group}"
        self.age_key = f"obs_age/{group}"
        self.rows = env.all_ids
        self.pending = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
        self.any_pending = True

    @property
    def lag(self) -> torch.Tensor:
        """Each world's current lag (int64 ``[N]``)."""
        return self.delay.lag

    @property
    def records_draws(self) -> bool:
        """Whether a step records values in ``env.drawn`` (jittered lags, delivered ages): terms
        read after the group (``mdp.drawn``) then see this step's values.
        """
        d = self.delay
        return (d.jitter and d.low != d.high) or d.tracks_age

    @property
    def age(self) -> torch.Tensor:
        """Age in steps of each world's delivered frame (int64 ``[N]``)."""
        return self.delay.age

    def reset(self, env_ids: torch.Tensor) -> None:
        """Redraw the lags of ``env_ids``; their buffers refill with their next (fresh) frame."""
        d = self.delay
        # A fixed lag draws nothing: it must not shift the streams other draws use.
        u = None if d.low == d.high else self.env.draw_uniform(env_ids, 1)[:, 0]
        self.env.record_drawn(self.lag_key, env_ids, d.draw_lags(env_ids, u))
        d.age.index_fill_(0, env_ids, 0)  # not `[ids] = 0`: a host scalar copy syncs on CUDA
        if d.tracks_age:
            self.env.record_drawn(self.age_key, env_ids, d.age[env_ids])
        self.pending.index_fill_(0, env_ids, True)
        self.any_pending = True

    def __call__(self, frame: torch.Tensor, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The delivered frame (module doc); ``env_ids``: only those worlds' rows, which restart."""
        d = self.delay
        if env_ids is not None:
            self._fill(env_ids, frame)
            return frame
        if self.any_pending and not host_any(~self.pending):
            # A reset of every world (construction, env.reset): nothing to delay yet, and no draws
            # either, so both paths leave the streams in the same place.
            self._fill(self.rows, frame)
            return frame
        # The step's uniforms, column 0 for the jitter's lag, the last for the hold: one call of
        # the streams for both, as each call costs far more than its width.
        k = d.draws_per_step
        out = d(frame, self.env.draw_step_uniform(self.lag_key, k) if k else None)
        if d.jitter and d.low != d.high:
            _record_all(self.env, self.lag_key, d.lag)
        if d.tracks_age:
            _record_all(self.env, self.age_key, d.age)
        if self.any_pending:
            # Worlds reset without a restart of their own rows: their fresh frame, undelayed.
            ids = host_nonzero(self.pending)
            if ids is not None:
                out = out.clone()
                out[ids] = frame[ids]
                self._fill(ids, frame[ids])
            else:
                self.any_pending = False
        return out

    def _fill(self, env_ids: torch.Tensor, rows: torch.Tensor) -> None:
        """Restart the buffers of ``env_ids`` filled with ``rows`` (their fresh frames)."""
        self.delay.restart(env_ids, rows)
        self.pending.index_fill_(0, env_ids, False)
        self.any_pending = host_any(self.pending)

    def state_dict(self) -> dict[str, Any]:
        """Ring buffer, write position, lags, ages, held frames and pending restarts."""
        return {**self.delay.state_dict(), "pending": self.pending.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.delay.load_state_dict(state)
        self.pending = state["pending"].to(self.env.device, copy=True)
        self.any_pending = host_any(self.pending)


# -- action delay ------------------------------------------------------------------------------
@dataclass
class ActionDelay:
    """Apply the action the policy chose ``lag`` control steps earlier (``lag`` per world)."""

    lag_range: tuple[int, int] = (0, 0)
    """Lag in control steps, drawn uniformly per world at reset from ``[low, high]`` (inclusive)."""

    def build(self, env: BatchedEnv) -> ActionDelayState:
        """The delay state of ``env``."""
        lo, hi = check_int_range("action_delay.lag_range", self.lag_range)
        return ActionDelayState(env, lo, hi)


class ActionDelayState:
    """Per-env state of :class:`ActionDelay`: a ring buffer of the policy's last actions."""

    key = "action_delay"
    """Name of the drawn lags in ``env.drawn``."""

    def __init__(self, env: BatchedEnv, low: int, high: int) -> None:
        """Allocate the ring buffer ``[N, high + 1, A]`` (zeros: the zero action)."""
        self.env = env
        self.low, self.high = low, high
        self.depth = high + 1
        # The observation delay's ring buffer without jitter or holds: a frame is an action here.
        self.delay = Delay(low, high, batch=env.num_envs, device=env.device)
        self.delay.buffer = torch.zeros(env.num_envs, self.depth, env.action_dim, dtype=torch.float64, device=env.device)

    @property
    def buffer(self) -> torch.Tensor:
        """The last ``high + 1`` actions of every world ``[N, high + 1, A]`` (float64)."""
        return self.delay.buffer  # type: ignore[return-value]

    @property
    def lag(self) -> torch.Tensor:
        """Each world's lag in control steps (int64 ``[N]``)."""
        return self.delay.lag

    @property
    def head(self) -> int:
        """Where the newest action sits in the ring buffer."""
        return self.delay.head

    def reset(self, env_ids: torch.Tensor) -> None:
        """Redraw the lags of ``env_ids`` and forget their actions (zero until new ones arrive)."""
        lag = draw_int(self.env, env_ids, self.low, self.high)
        self.delay.lag[env_ids] = lag
        self.env.record_drawn(self.key, env_ids, lag)
        self.buffer.index_fill_(0, env_ids, 0.0)

    def __call__(self, action: torch.Tensor) -> torch.Tensor:
        """Push the policy's ``action`` ``[N, A]``; return the one each world applies now."""
        return self.delay(action)

    def state_dict(self) -> dict[str, Any]:
        """Ring buffer, write position and lags."""
        return {"buffer": self.buffer.clone(), "head": self.head, "lag": self.lag.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        d = self.delay
        d.buffer = state["buffer"].clone()
        d.head = int(state["head"])
        d.lag = state["lag"].clone()


# -- control-period jitter ---------------------------------------------------------------------
@dataclass
class ControlJitter:
    """Let each new control take effect a drawn number of physics substeps into its period."""

    max_substeps: int = 0
    """Late substeps are uniform in ``[0, max_substeps]`` per world and step; at most the
    decimation (``decimation`` itself: the command missed the whole period). 0 draws nothing."""

    def build(self, env: BatchedEnv) -> ControlJitterState:
        """The jitter state of ``env``."""
        _, hi = check_int_range("control_jitter.max_substeps", (0, self.max_substeps), upper=env.cfg.decimation)
        return ControlJitterState(env, hi)


class ControlJitterState:
    """Per-env state of :class:`ControlJitter`: draws late substeps, records the last ones."""

    key = "control_jitter"
    """Name of the drawn late substeps in ``env.drawn``."""

    def __init__(self, env: BatchedEnv, max_substeps: int) -> None:
        """Keep the bound; nothing is drawn until the first step."""
        self.env = env
        self.max_substeps = max_substeps
        self.rows = env.all_ids

    def reset(self, env_ids: torch.Tensor) -> None:
        """A world that starts an episode has not been late yet: record 0."""
        self.env.record_drawn(self.key, env_ids, torch.zeros(env_ids.numel(), device=self.env.device))

    def draw(self) -> torch.Tensor:
        """Late substeps ``[N]`` for this control step (recorded in ``env.drawn``)."""
        if self.max_substeps == 0:  # nothing to draw (a fixed value must not cost a draw)
            late = torch.zeros(self.env.num_envs, dtype=torch.long, device=self.env.device)
        else:
            late = scale_int(self.env.draw_step_uniform(self.key, 1)[:, 0], 0, self.max_substeps)
        _record_all(self.env, self.key, late)
        return late

    def state_dict(self) -> dict[str, Any]:
        """Nothing beyond the env's streams and ``env.drawn``."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""
