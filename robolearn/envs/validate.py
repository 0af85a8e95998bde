"""Type and range checks of every numeric setting of a task, run when the env is built.

A bad value fails here, naming the field (``decimation``, ``rewards.ctrl.weight``,
``observations.policy.joint_vel.noise.scale``, the model field ``body_mass[torso]`` ...), the value
and what was expected, before any physics runs: a fractional count, a boolean given for a number,
a zero interval that would later divide by zero, a NaN or infinite timestep or model field (which
would otherwise give NaN observations with ``diverged`` false). Nothing is silently coerced.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

if TYPE_CHECKING:
    from robolearn.envs.cfg import TaskCfg

SOLVERS: dict[str, int] = {
    "PGS": int(mujoco.mjtSolver.mjSOL_PGS),
    "CG": int(mujoco.mjtSolver.mjSOL_CG),
    "Newton": int(mujoco.mjtSolver.mjSOL_NEWTON),
}
"""``TaskCfg.solver`` names and MuJoCo's solver enum values."""


def check_int(where: str, value: Any, minimum: int = 0) -> int:
    """``value`` as an ``int >= minimum``; a bool, a float (even ``2.0``) or a string is refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{where}: expected an integer >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{where}: expected an integer >= {minimum}, got {value}")
    return int(value)


def check_float(where: str, value: Any, *, positive: bool = False, nonnegative: bool = False) -> float:
    """``value`` as a finite ``float`` (``> 0`` or ``>= 0`` if asked); bools and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{where}: expected a number, got {value!r} ({type(value).__name__})")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    if positive and x <= 0:
        raise ValueError(f"{where}: expected a number > 0, got {value!r}")
    if nonnegative and x < 0:
        raise ValueError(f"{where}: expected a number >= 0, got {value!r}")
    return x


def check_interval(where: str, value: Any) -> tuple[float, float]:
    """A ``(low, high)`` pair of seconds with ``0 < low <= high``, both finite (an interval of 0
    would fire every step forever; an infinite one, never).
    """
    lo, hi = _pair(where, value)
    check_float(f"{where}[0]", lo, positive=True)
    check_float(f"{where}[1]", hi, positive=True)
    if lo > hi:
        raise ValueError(f"{where}: expected low <= high, got {value!r}")
    return float(lo), float(hi)


def check_bounds(where: str, value: Any) -> tuple[float, float]:
    """A ``(low, high)`` clip pair: numbers (infinite allowed, NaN not), ``low <= high``."""
    lo, hi = _pair(where, value)
    for k, v in enumerate((lo, hi)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(float(v)):
            raise ValueError(f"{where}[{k}]: expected a number, got {v!r}")
    if lo > hi:
        raise ValueError(f"{where}: low {lo} > high {hi}")
    return float(lo), float(hi)


def check_numbers(where: str, value: Any, *, nonzero: bool = False) -> None:
    """A finite number or a sequence of finite numbers (``nonzero``: none of them 0)."""
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    for k, v in enumerate(items):
        at = where if len(items) == 1 and not isinstance(value, (list, tuple, np.ndarray)) else f"{where}[{k}]"
        x = check_float(at, v.item() if isinstance(v, np.generic) else v)
        if nonzero and x == 0:
            raise ValueError(f"{at}: expected a non-zero number, got {v!r}")


def _pair(where: str, value: Any) -> tuple[Any, Any]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ValueError(f"{where}: expected a (low, high) pair, got {value!r}")
    return value[0], value[1]


def validate_task_cfg(cfg: TaskCfg) -> None:
    """Check the numeric settings of ``cfg`` and its terms (module doc); raise on the first bad one."""
    check_int("decimation", cfg.decimation, 1)
    check_int("episode_length", cfg.episode_length, 1)
    if cfg.timestep is not None:
        check_float("timestep", cfg.timestep, positive=True)
    if cfg.solver is not None and cfg.solver not in SOLVERS:
        raise ValueError(f"solver: expected one of {', '.join(SOLVERS)} (or None for the MJCF's), got {cfg.solver!r}")
    for flag in ("contact_forces", "forward_after_step"):
        if not isinstance(getattr(cfg, flag), bool):
            raise ValueError(f"{flag}: expected True or False, got {getattr(cfg, flag)!r}")
    for gname, group in cfg.observations.items():
        check_int(f"observations.{gname}.history_length", group.history_length, 0)
        for tname, term in group.terms.items():
            where = f"observations.{gname}.{tname}"
            if term.noise is not None:
                check_float(f"{where}.noise.scale", term.noise.scale, nonnegative=True)
            if term.clip is not None:
                check_bounds(f"{where}.clip", term.clip)
            if term.scale is not None:
                check_numbers(f"{where}.scale", term.scale)
    for name, action in cfg.actions.items():
        where = f"actions.{name}"
        # A zero scale would map every action to the offset, and the action bounds divide by it.
        check_numbers(f"{where}.scale", action.scale, nonzero=True)
        if action.offset != "default":
            check_numbers(f"{where}.offset", action.offset)
        if action.clip is not None:
            check_bounds(f"{where}.clip", action.clip)
        for gain in ("kp", "kd"):
            value = getattr(action, gain)
            if value is not None:
                check_numbers(f"{where}.{gain}", value)
                if any(float(v) < 0 for v in np.atleast_1d(np.asarray(value, dtype=np.float64))):
                    raise ValueError(f"{where}.{gain}: expected gains >= 0, got {value!r}")
    for name, reward in cfg.rewards.items():
        check_float(f"rewards.{name}.weight", reward.weight)
    for name, term in cfg.terminations.items():
        if not isinstance(term.time_out, bool):
            raise ValueError(f"terminations.{name}.time_out: expected True or False, got {term.time_out!r}")
    for name, event in cfg.events.items():
        if event.mode == "interval":
            check_interval(f"events.{name}.interval_range_s", event.interval_range_s)
    for name, value in cfg.task_params.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"task_params: names are identifiers (they appear in addresses 'task.<name>'), got {name!r}")
        if isinstance(value, (list, tuple)) and not value:
            raise ValueError(f"task_params.{name}: expected a number or a non-empty sequence of numbers, got {value!r}")
        check_numbers(f"task_params.{name}", value)
    for name, term in cfg.curriculum.items():
        where = f"curriculum.{name}"
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"curriculum: term names are non-empty strings without '/' (logged as curriculum/<name>), got {name!r}")
        if not (hasattr(term, "func") and hasattr(term, "params")):
            raise ValueError(f"{where}: expected a CurriculumTerm(func, params), got {term!r}")
        if not callable(term.func):
            raise ValueError(f"{where}.func: expected a curriculum class or a function (env, env_ids, **params), got {term.func!r}")
        if not isinstance(term.params, dict):
            raise ValueError(f"{where}.params: expected a dict of keyword arguments, got {term.params!r}")
    for name, command in cfg.commands.items():
        check_int(f"commands.{name}.dim", command.dim, 1)
        lo, hi = _pair(f"commands.{name}.resampling_time_s", command.resampling_time_s)
        # Unlike event intervals these may be huge (the default 1e9 s: only at reset), not zero.
        check_float(f"commands.{name}.resampling_time_s[0]", lo, positive=True)
        check_float(f"commands.{name}.resampling_time_s[1]", hi, positive=True)
        if lo > hi:
            raise ValueError(f"commands.{name}.resampling_time_s: expected low <= high, got {command.resampling_time_s!r}")


# Model fields that must be finite and non-negative (those randomisation and overrides write, and
# that a hand-written MJCF could get wrong); the timestep must be positive.
_NONNEGATIVE_FIELDS = (
    "body_mass", "body_inertia", "geom_friction", "dof_damping", "dof_armature", "dof_frictionloss",
)
_FINITE_FIELDS = ("body_ipos", "actuator_gainprm", "actuator_biasprm", "actuator_ctrlrange", "actuator_forcerange",
                  "jnt_range", "qpos0")
_OBJ_OF = {"body": mujoco.mjtObj.mjOBJ_BODY, "geom": mujoco.mjtObj.mjOBJ_GEOM, "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
           "jnt": mujoco.mjtObj.mjOBJ_JOINT}


def validate_model(model: mujoco.MjModel, source: str) -> None:
    """Refuse a compiled model whose timestep, gravity or dynamics fields are not finite (or negative
    where a negative value is meaningless), naming the field, the element and the value.
    """
    dt = float(model.opt.timestep)
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"{source}: opt.timestep must be a finite number > 0, got {dt}")
    if not np.isfinite(model.opt.gravity).all():
        raise ValueError(f"{source}: opt.gravity must be finite, got {model.opt.gravity.tolist()}")
    for field in _NONNEGATIVE_FIELDS + _FINITE_FIELDS:
        values = np.asarray(getattr(model, field), dtype=np.float64)
        bad = ~np.isfinite(values)
        if field in _NONNEGATIVE_FIELDS:
            bad |= values < 0
        if bad.any():
            row, col = (np.argwhere(bad)[0].tolist() + [0])[:2]
            label = _element(model, field, row)
            need = "finite and >= 0" if field in _NONNEGATIVE_FIELDS else "finite"
            where = f"{field}[{label}]" if values.ndim == 1 else f"{field}[{label}, {col}]"
            raise ValueError(f"{source}: {where} must be {need}, got {values.reshape(values.shape[0], -1)[row, col]}")


def _element(model: mujoco.MjModel, field: str, row: int) -> str:
    """A row's element name (or index) for messages."""
    prefix = field.split("_", 1)[0]
    if prefix == "dof":
        return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, int(model.dof_jntid[row])) or f"dof {row}"
    obj = _OBJ_OF.get(prefix)
    return (mujoco.mj_id2name(model, obj, row) if obj is not None else None) or f"#{row}"
