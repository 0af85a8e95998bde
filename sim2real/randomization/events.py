"""Domain-randomisation events: batched, validated functions over per-world model fields and state.

Each function here is an event term ``(env, env_ids, **params) -> None`` for
:class:`~robolearn.envs.EventTerm` (or, for :func:`joint_noise_state`, an initial-state term for
:class:`~robolearn.envs.InitialState`). Every value an event draws comes from the worlds' own
seeded streams (``env.draw_uniform``/``env.draw_normal``), so a run is reproducible from its seed
and a reset of some worlds redraws only those; and every value drawn is recorded with
``env.record_drawn``, so the privileged observation group (``mdp.drawn``) and datasets
(``info["drawn"]``) see the parameters each world ran under.

Each event carries a ``validate`` hook that :class:`~robolearn.envs.managers.EventManager` calls
when the env is built, before anything runs: unknown fields or names, inverted ranges, bad
distribution or operation names, and ranges that could make the model invalid (a negative mass,
friction or damping; an inertia that breaks the triangle inequality) fail there, with a message
naming ``events.<term>.<param>`` and the offending value.

Conventions:

* Base values always come from the template model ``env.model`` (the task's compiled MJCF), never
  from the world's current values, so repeated resets never compound. A consequence: two events
  that write the same entry would undo each other, and validation refuses that configuration
  (each event function's ``writes(env, **params)`` attribute lists the entries it writes and the
  name it records its draws under; an event written elsewhere can join the check by having one).
* Each event's ``validate`` also creates its ``env.drawn`` record (filled with the draw that leaves
  the template unchanged), so the privileged observation has its full width from the start, even
  for an ``interval`` event that has not fired yet.
* ``range`` is ``(low, high)`` for ``uniform`` and ``log_uniform`` and ``(mean, std)`` for
  ``gaussian``; gaussian draws are clipped to ``mean +- 3 std`` so that validation over the range
  extremes means something (the clip moves 0.27 % of draws onto the bounds).
* ``operation`` ``scale`` writes ``base * draw``, ``add`` writes ``base + draw``, ``abs`` writes
  ``draw``. The recorded values are the draws (factors, offsets or absolute values), not the
  resulting field values.

A task config gives each randomised quantity a one-line comment saying what it models::

    from robolearn.sim2real.randomization.events import (
        apply_external_wrench, push_by_velocity, randomize_field, randomize_motor_strength,
    )

    cfg.events = {
        # Payload and build spread: torso mass x U(0.8, 1.2), redrawn every episode.
        "torso_mass": EventTerm(randomize_field, mode="reset",
                                params={"field": "mass", "elements": ["torso"], "range": (0.8, 1.2)}),
        # Floor/foot sliding friction x logU(0.5, 2), one factor per world for every geom.
        "friction": EventTerm(randomize_field, mode="startup",
                              params={"field": "friction", "axes": [0], "range": (0.5, 2.0),
                                      "distribution": "log_uniform", "shared": True}),
        # Slopes and accelerating frames, roughly: gravity z x N(1, 0.05).
        "gravity": EventTerm(randomize_field, mode="reset",
                             params={"field": "gravity", "axes": [2], "range": (1.0, 0.05),
                                     "distribution": "gaussian"}),
        # Motor wear and supply voltage: each actuator's force x U(0.9, 1.1).
        "strength": EventTerm(randomize_motor_strength, mode="reset", params={"range": (0.9, 1.1)}),
        # Kicks: every 2-4 s add U(-0.5, 0.5) m/s to the root's x velocity.
        "push": EventTerm(push_by_velocity, mode="interval", interval_range_s=(2.0, 4.0),
                          params={"velocity_range": {"rootx": (-0.5, 0.5)}}),
        # A tugging cable: a torso force of U(-20, 20) N per axis, redrawn every 1-2 s.
        "tug": EventTerm(apply_external_wrench, mode="interval", interval_range_s=(1.0, 2.0),
                         params={"body": "torso", "force_range": (-20.0, 20.0)}),
    }

Pushes and wrenches only work as ``interval`` events: a world's reset runs its reset events
before it restores the initial state, which sets ``qvel`` and zeroes ``xfrc_applied``, so a push
or wrench drawn at reset (or start-up) would be undone at once. Validation refuses other modes.
Their ``env.drawn`` rows hold the last draw until the next firing, across a world's reset too
(which does zero the applied wrench): events have no hook that runs after a reset.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import mujoco
import numpy as np
import torch

from robolearn.sim.backend import resolve_field
from robolearn.sim.names import KINDS, as_list, check_index, names_of

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

Distribution = Literal["uniform", "log_uniform", "gaussian"]
"""How a value is drawn: ``range`` is ``(low, high)``, ``(low, high)`` with ``low > 0``, or ``(mean, std)``."""
Operation = Literal["scale", "add", "abs"]
"""How a draw combines with the template value: ``base * draw``, ``base + draw`` or ``draw``."""
Shared = bool | Literal["elements", "axes"]
"""Which selected entries share a draw (see :func:`randomize_field`)."""
Selector = str | int
"""An element given by name or by index."""
Range = tuple[float, float]
"""A ``(low, high)`` pair, or ``(mean, std)`` for the gaussian distribution."""

DISTRIBUTIONS: tuple[str, ...] = ("uniform", "log_uniform", "gaussian")
"""The distribution names :func:`randomize_field` accepts."""
OPERATIONS: tuple[str, ...] = ("scale", "add", "abs")
"""The operation names :func:`randomize_field` accepts."""
GAUSSIAN_CLIP = 3.0
"""Gaussian draws are clipped to ``mean +- GAUSSIAN_CLIP * std``."""

# Fields whose entries must stay >= 0, and those whose positive template entries must stay > 0
# (a body with mass has to keep some; a massless one, such as the world body, may stay at zero).
_NONNEGATIVE = frozenset({
    "geom_friction", "dof_damping", "dof_armature", "dof_frictionloss", "jnt_stiffness",
    "tendon_damping", "tendon_stiffness", "tendon_armature", "tendon_frictionloss", "pair_friction",
    "actuator_armature", "actuator_damping", "geom_margin", "geom_gap", "opt.density", "opt.viscosity",
})
_POSITIVE = frozenset({"body_mass", "body_inertia", "geom_size", "opt.timestep"})

# Model-field prefixes and the kind of element their first dimension indexes (dof_ fields take
# joint names, expanded to their dofs, see _dof_ids).
_PREFIX_OBJ: dict[str, tuple[str, mujoco.mjtObj]] = {
    "body": ("body", mujoco.mjtObj.mjOBJ_BODY),
    "geom": ("geom", mujoco.mjtObj.mjOBJ_GEOM),
    "jnt": ("joint", mujoco.mjtObj.mjOBJ_JOINT),
    "actuator": ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR),
    "tendon": ("tendon", mujoco.mjtObj.mjOBJ_TENDON),
    "site": ("site", mujoco.mjtObj.mjOBJ_SITE),
    "cam": ("camera", mujoco.mjtObj.mjOBJ_CAMERA),
    "light": ("light", mujoco.mjtObj.mjOBJ_LIGHT),
    "mat": ("material", mujoco.mjtObj.mjOBJ_MATERIAL),
    "pair": ("pair", mujoco.mjtObj.mjOBJ_PAIR),
    "eq": ("equality", mujoco.mjtObj.mjOBJ_EQUALITY),
    "sensor": ("sensor", mujoco.mjtObj.mjOBJ_SENSOR),
}
_KIND_OF_OBJ = {obj: kind for kind, (obj, _) in KINDS.items()}

Entry = tuple[str, str, int]
"""Something an event writes: ``(field, element label, column)``, or ``("drawn", name, -1)``."""


# -- selections ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Selection:
    """The entries of one model field an event touches, resolved against the template model."""

    field: str
    """MuJoCo field name (``opt.<name>`` for options)."""
    shape: tuple[int, ...]
    """Per-world shape of the field."""
    rows: np.ndarray
    """Selected element indices (``[0]`` for an option field)."""
    cols: np.ndarray
    """Selected columns of each element."""
    labels: tuple[str, ...]
    """Element labels for messages, one per selected row."""
    base: np.ndarray
    """Template values of the selection ``[len(rows), len(cols)]``."""
    table: np.ndarray
    """The whole template field as ``[elements, columns]``."""


def _template(model: mujoco.MjModel, field: str) -> np.ndarray:
    """The template model's values of ``field`` (float64 copy)."""
    value = getattr(model.opt, field[4:]) if field.startswith("opt.") else getattr(model, field)
    return np.array(value, dtype=np.float64)


def _label(model: mujoco.MjModel, obj: mujoco.mjtObj, i: int) -> str:
    """An element's name, or ``#i`` if it has none (from the model's name tables)."""
    return names_of(model).label(_KIND_OF_OBJ[obj], i)


def _named_ids(
    model: mujoco.MjModel, kind: str, obj: mujoco.mjtObj, count: int, names: Sequence[Selector], where: str
) -> list[int]:
    """Indices of named (or indexed) elements of one kind; unknown names list the valid ones."""
    return names_of(model).ids(kind, list(names), where)


def _dof_ids(model: mujoco.MjModel, item: Selector, where: str) -> list[int]:
    """The dofs of a joint name, of ``"<joint>/<axis>"`` (free: x y z wx wy wz; ball: wx wy wz), or an index."""
    return names_of(model).dofs(item, where)


def _dof_label(model: mujoco.MjModel, dof: int) -> str:
    """``joint`` or ``joint/axis`` of a dof, for messages."""
    return names_of(model).dof_label(dof)


def _memoized(fn: Callable[..., Any], values: Callable[..., bytes] | None = None) -> Callable[..., Any]:
    """Cache a pure resolver of names against a template model: events call them at every reset
    or interval firing, and resolving names through MuJoCo each time cost more than the draw.
    The key is the model object (kept alive by the entry, so its id cannot be reused), the
    ``repr`` of the arguments (configs hold lists and dicts, which do not hash) and, through
    ``values``, the template values the result copies (the sim2sim gate rescales the template).
    """
    cache: dict[tuple[int, str, bytes], tuple[Any, Any]] = {}

    def cached(model: mujoco.MjModel, *args: Any) -> Any:
        try:
            extra = values(model, *args) if values is not None else b""
        except ValueError:  # an unknown field: let the resolver raise its own message
            return fn(model, *args)
        key = (id(model), repr(args), extra)
        hit = cache.get(key)
        if hit is not None and hit[0] is model:
            return hit[1]
        value = fn(model, *args)
        cache[key] = (model, value)
        return value

    cached.__doc__ = fn.__doc__
    cached.__wrapped__ = fn  # type: ignore[attr-defined]
    return cached


def _select(
    model: mujoco.MjModel, field: str, elements: Any, axes: Any, where: str
) -> _Selection:
    """Resolve ``field``/``elements``/``axes`` against the template model (errors name ``where.<param>``)."""
    try:
        raw = resolve_field(field)
    except ValueError as exc:
        raise ValueError(f"{where}.field: {exc}") from None
    values = _template(model, raw)
    is_option = raw.startswith("opt.")
    table = values.reshape(1, -1) if is_option else values.reshape(values.shape[0], -1)
    has_cols = values.ndim >= (1 if is_option else 2)
    # Rows: named elements of the field's kind; every one by default (but the world body, which
    # is static, so randomising it only ever changes nothing or breaks something).
    if is_option:
        if elements is not None:
            raise ValueError(
                f"{where}.elements: field {raw!r} is one value per world, not per element; got {elements!r}"
            )
        rows, labels = [0], ["world"]
    elif raw.startswith("dof_"):
        if elements is None:
            rows = list(range(model.nv))
        else:
            rows = [d for item in as_list(elements) for d in _dof_ids(model, item, f"{where}.elements")]
        labels = [_dof_label(model, d) for d in rows]
    else:
        prefix = raw.split("_", 1)[0]
        kind, obj = _PREFIX_OBJ.get(prefix, (prefix, mujoco.mjtObj.mjOBJ_UNKNOWN))
        first = 1 if prefix == "body" else 0
        if elements is None:
            rows = list(range(first, table.shape[0]))
        elif obj == mujoco.mjtObj.mjOBJ_UNKNOWN:
            rows = [check_index(i, table.shape[0], f"{where}.elements", f"{raw} row") for i in as_list(elements)]
        else:
            rows = _named_ids(model, kind, obj, table.shape[0], as_list(elements), f"{where}.elements")
        labels = [f"#{i}" if obj == mujoco.mjtObj.mjOBJ_UNKNOWN else _label(model, obj, i) for i in rows]
    if len(set(rows)) != len(rows):
        raise ValueError(f"{where}.elements: an element is selected twice in {elements!r}")
    if not rows:
        raise ValueError(f"{where}.elements: nothing selected in field {raw!r}")
    if axes is None:
        cols = list(range(table.shape[1]))
    elif not has_cols:
        raise ValueError(f"{where}.axes: field {raw!r} has one value per element; leave axes unset, got {axes!r}")
    else:
        cols = [check_index(a, table.shape[1], f"{where}.axes", "column") for a in as_list(axes)]
        if len(set(cols)) != len(cols):
            raise ValueError(f"{where}.axes: a column is selected twice in {axes!r}")
    r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    return _Selection(raw, values.shape, r, c, tuple(labels), table[r[:, None], c[None, :]], table)



_select = _memoized(_select, lambda model, field, *_: np.ascontiguousarray(_template(model, resolve_field(field))).tobytes())

def _entries(sel: _Selection) -> set[Entry]:
    """Every ``(field, element, column)`` a selection writes."""
    return {(sel.field, label, int(c)) for label in sel.labels for c in sel.cols}


# -- draws -----------------------------------------------------------------------------------------
def _ids(env_ids: Any) -> torch.Tensor:
    """World indices as a flat long tensor."""
    return torch.as_tensor(env_ids, dtype=torch.long).flatten()


def _draw(env: BatchedEnv, env_ids: torch.Tensor, distribution: str, range: Range, size: int) -> torch.Tensor:
    """``[len(env_ids), size]`` float64 draws of ``distribution`` from those worlds' streams."""
    lo, hi = float(range[0]), float(range[1])
    if distribution == "uniform":
        return env.draw_uniform(env_ids, size, lo, hi)
    if distribution == "log_uniform":
        return torch.exp(env.draw_uniform(env_ids, size, math.log(lo), math.log(hi)))
    if distribution == "gaussian":
        bound = GAUSSIAN_CLIP * hi
        return lo + env.draw_normal(env_ids, size, hi).clamp(-bound, bound)
    raise ValueError(f"distribution: expected one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}")


def _draw_bounds(distribution: str, range: Range) -> tuple[float, float]:
    """The smallest and largest value a draw can take."""
    lo, hi = float(range[0]), float(range[1])
    if distribution == "gaussian":
        return lo - GAUSSIAN_CLIP * hi, lo + GAUSSIAN_CLIP * hi
    return lo, hi


def _combine(operation: str, base: Any, draw: Any) -> Any:
    """``base * draw``, ``base + draw`` or ``draw`` (broadcast), for tensors or arrays."""
    if operation == "scale":
        return base * draw
    if operation == "add":
        return base + draw
    # abs: the draw alone, broadcast to the shape the other operations would give.
    if isinstance(base, torch.Tensor) or isinstance(draw, torch.Tensor):
        d, b = torch.as_tensor(draw, dtype=torch.float64), torch.as_tensor(base, dtype=torch.float64)
        return torch.broadcast_tensors(d, b)[0]
    return np.broadcast_to(np.asarray(draw, dtype=np.float64), np.broadcast_shapes(np.shape(draw), np.shape(base)))


def _spread(draws: torch.Tensor, shared: Shared, n_rows: int, n_cols: int) -> torch.Tensor:
    """Draws ``[n, k]`` laid out over the selection ``[n, rows, cols]`` per the sharing rule."""
    n = draws.shape[0]
    if shared is True:
        return draws.reshape(n, 1, 1).expand(n, n_rows, n_cols)
    if shared == "axes":
        return draws.reshape(n, n_rows, 1).expand(n, n_rows, n_cols)
    if shared == "elements":
        return draws.reshape(n, 1, n_cols).expand(n, n_rows, n_cols)
    return draws.reshape(n, n_rows, n_cols)


def _num_draws(shared: Shared, n_rows: int, n_cols: int) -> int:
    """Independent draws per world for a selection of ``n_rows x n_cols`` entries."""
    if shared is True:
        return 1
    return n_rows if shared == "axes" else n_cols if shared == "elements" else n_rows * n_cols


def _write(env: BatchedEnv, sel: _Selection, env_ids: torch.Tensor, values: torch.Tensor) -> None:
    """Write ``values[n, rows, cols]`` into the selected entries of worlds ``env_ids``, leaving the
    field's other entries of those worlds as they are (another event may own them).
    """
    current = env.sim.get_model_field(sel.field)[env_ids].to(torch.float64)
    table = current.reshape(env_ids.numel(), sel.table.shape[0], sel.table.shape[1])
    rows = torch.from_numpy(sel.rows)[:, None]
    cols = torch.from_numpy(sel.cols)[None, :]
    table[:, rows, cols] = values
    env.sim.set_model_field(sel.field, table.reshape(env_ids.numel(), *sel.shape), env_ids)


# -- validation helpers ----------------------------------------------------------------------------
def _bind(func: Callable[..., Any], where: str, params: dict[str, Any]) -> dict[str, Any]:
    """The event's keyword arguments with defaults filled in, or a ValueError naming ``where``."""
    try:
        bound = inspect.signature(func).bind(None, None, **params)
    except TypeError as exc:
        raise ValueError(f"{where}.params: {exc}") from None
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k not in ("env", "env_ids")}


def _check_choice(where: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{where}: expected one of {', '.join(choices)}, got {value!r}")


def _check_range(where: str, value: Any, distribution: str) -> Range:
    """A finite pair, ordered (or with ``std >= 0`` for gaussian), positive for log-uniform."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a pair of numbers, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{where}: expected finite numbers, got {value!r}")
    if distribution == "gaussian":
        if hi < 0:
            raise ValueError(f"{where}: a gaussian range is (mean, std) with std >= 0, got {value!r}")
    elif lo > hi:
        raise ValueError(f"{where}: inverted range {value!r}: low {lo} > high {hi}")
    if distribution == "log_uniform" and lo <= 0:
        raise ValueError(f"{where}: log_uniform needs positive bounds, got {value!r}")
    return lo, hi


def _check_shared(where: str, shared: Any) -> None:
    if not (isinstance(shared, bool) or shared in ("elements", "axes")):
        raise ValueError(f"{where}: expected False, True, 'elements' or 'axes', got {shared!r}")


def _check_name(where: str, name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{where}: expected a non-empty string, got {name!r}")


def _check_valid_values(where: str, sel: _Selection, operation: str, dlo: float, dhi: float, coupled: bool) -> None:
    """Refuse a range under which some world could get an invalid value (checked at the extremes:
    each operation is monotone in the draw, so the extremes bound every outcome).
    """
    at_lo, at_hi = _combine(operation, sel.base, dlo), _combine(operation, sel.base, dhi)
    low, high = np.minimum(at_lo, at_hi), np.maximum(at_lo, at_hi)
    field = sel.field
    if field in _NONNEGATIVE or field in _POSITIVE:
        must_be_positive = (sel.base > 0) if field in _POSITIVE else np.zeros_like(sel.base, dtype=bool)
        bad = (low < 0) | (must_be_positive & (low <= 0))
        if bad.any():
            r, c = np.argwhere(bad)[0]
            need = "> 0" if must_be_positive[r, c] else ">= 0"
            raise ValueError(
                f"{where}: {operation} by a draw in [{dlo:g}, {dhi:g}] could set {field}[{sel.labels[r]}, {sel.cols[c]}] "
                f"(template {sel.base[r, c]:g}) to {low[r, c]:g}; it must stay {need}"
            )
    if field == "body_inertia":
        _check_triangle(where, sel, (at_lo, at_hi), (low, high), coupled, f"[{dlo:g}, {dhi:g}]")


def _check_triangle(
    where: str,
    sel: _Selection,
    at_ends: tuple[np.ndarray, np.ndarray],
    bounds: tuple[np.ndarray, np.ndarray],
    coupled: bool,
    span: str,
) -> None:
    """Principal inertias must satisfy ``A + B >= C`` for every ordering, in every world.

    With one draw per element (``coupled``) the three values move together and the inequality is
    linear in the draw, so its two extremes suffice; with independent draws per axis, the worst
    case is two axes at their smallest and the third at its largest.
    """
    full = sel.table[sel.rows]  # [rows, 3]: unselected axes keep their template values
    cases = []
    if coupled:
        for values in at_ends:
            v = full.copy()
            v[:, sel.cols] = values
            cases.append((v, v))
    else:
        lo_v, hi_v = full.copy(), full.copy()
        lo_v[:, sel.cols], hi_v[:, sel.cols] = bounds
        cases.append((lo_v, hi_v))
    for lo_v, hi_v in cases:
        for a, b, c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
            margin = lo_v[:, a] + lo_v[:, b] - hi_v[:, c]
            bad = margin < -1e-12 * np.abs(hi_v).max(axis=1)
            if bad.any():
                r = int(np.argmax(bad))
                template = np.array2string(sel.table[sel.rows[r]], precision=4)
                raise ValueError(
                    f"{where}: body_inertia of body {sel.labels[r]!r} (template {template}) "
                    f"could break the triangle inequality I{a} + I{b} >= I{c} for draws in {span}; scale the "
                    "axes of a body together (shared='axes') or narrow the range"
                )


def _servo_pairing_guard(where: str, model: mujoco.MjModel, sel: _Selection) -> None:
    """Refuse a write to a position servo's kp in only one of gain and bias (they must move together)."""
    if sel.field == "actuator_gainprm":
        col = 0
    elif sel.field == "actuator_biasprm":
        col = 1
    else:
        return
    if col not in sel.cols:
        return
    for r, label in zip(sel.rows, sel.labels, strict=True):
        if _is_servo(model, int(r)):
            raise ValueError(
                f"{where}: actuator {label!r} is a position servo, whose gainprm[0] = kp and biasprm[1] = -kp "
                f"must change together; use randomize_pd_gains or randomize_motor_strength"
            )


def _is_servo(model: mujoco.MjModel, i: int) -> bool:
    """Whether actuator ``i`` is a position servo: fixed gain kp > 0, affine bias ``-kp*q - kd*qdot``."""
    return (
        int(model.actuator_gaintype[i]) == mujoco.mjtGain.mjGAIN_FIXED
        and int(model.actuator_biastype[i]) == mujoco.mjtBias.mjBIAS_AFFINE
        and model.actuator_gainprm[i, 0] > 0
        and model.actuator_biasprm[i, 1] == -model.actuator_gainprm[i, 0]
    )


def _check_conflicts(env: BatchedEnv, where: str, mine: set[Entry]) -> None:
    """Refuse two events that write the same entry (or record draws under the same name): each
    writes from the template, so the later would silently undo the earlier.
    """
    key = where.split(".", 1)[1] if where.startswith("events.") else None
    for other_key, term in getattr(env.cfg, "events", {}).items():
        writes = getattr(term.func, "writes", None)
        if other_key == key or not callable(writes):
            continue
        try:
            theirs = writes(env, **term.params)
        except (TypeError, ValueError):
            continue  # that event's own validation reports its problem
        common = sorted(mine & theirs)
        if common:
            f, label, col = common[0]
            what = f"records its draws under {label!r}" if f == "drawn" else f"writes {f}[{label}, {col}]"
            raise ValueError(
                f"{where}: {what}, and so does events.{other_key}; one would undo the other "
                "(merge them into one event, or give each a distinct name)"
            )


def _preregister(env: BatchedEnv, name: str, neutral: np.ndarray) -> None:
    """Create ``env.drawn[name]`` at validation, filled with the draw that leaves the template as it
    is, so the record's width (and the privileged observation's) is fixed from the start even for
    an interval event that has not fired yet.
    """
    if name not in env.drawn:
        row = torch.as_tensor(np.asarray(neutral, dtype=np.float64).reshape(1, -1))
        env.record_drawn(name, env.all_ids, row.expand(env.num_envs, -1))


def _neutral(operation: str, base: np.ndarray) -> np.ndarray:
    """The draws under which ``operation`` returns ``base``: 1 (scale), 0 (add) or ``base`` (abs)."""
    if operation == "scale":
        return np.ones_like(base)
    return np.zeros_like(base) if operation == "add" else base


def _require_interval(env: BatchedEnv, where: str, what: str) -> None:
    """Pushes and wrenches are undone by the reset that follows a reset/start-up event."""
    key = where.split(".", 1)[1] if where.startswith("events.") else None
    term = getattr(env.cfg, "events", {}).get(key)
    if term is not None and term.mode != "interval":
        raise ValueError(
            f"{where}.mode: {what} needs mode 'interval', got {term.mode!r}: a world's reset restores its "
            "initial state (qvel, zero applied wrenches) right after its reset events run"
        )


# -- randomize_field -------------------------------------------------------------------------------
def randomize_field(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    *,
    field: str,
    range: Range,
    distribution: Distribution = "uniform",
    operation: Operation = "scale",
    elements: Sequence[Selector] | Selector | None = None,
    axes: Sequence[int] | int | None = None,
    shared: Shared = False,
    name: str | None = None,
) -> None:
    """Draw per-world values of a model field for worlds ``env_ids`` and write them.

    Args:
        env: the environment.
        env_ids: the worlds to redraw.
        field: friendly name (``mass``, ``inertia``, ``com``, ``friction``, ``damping``, ``armature``,
            ``frictionloss``, ``actuator_gain``, ``actuator_bias``, ``gravity``) or MjModel field name.
        range: ``(low, high)``; ``(mean, std)`` for ``gaussian`` (draws clipped to ``mean +- 3 std``).
        distribution: ``uniform``, ``log_uniform`` (``exp`` of a uniform between the bounds' logs) or
            ``gaussian``.
        operation: ``scale`` (``template * draw``), ``add`` (``template + draw``) or ``abs`` (``draw``).
        elements: names or indices of the field's elements: bodies (``body_*``), geoms, actuators,
            joints (``jnt_*``), tendons, sites ...; for ``dof_*`` fields joint names (all their dofs),
            ``"<joint>/<axis>"`` for one dof of a free (x y z wx wy wz) or ball (wx wy wz) joint, or dof
            indices. ``None``: every element (every body but the static world body). Option fields
            such as gravity have no elements.
        axes: columns of a multi-column field (friction: 0 sliding, 1 torsional, 2 rolling; com and
            gravity: x y z; gainprm/biasprm: the parameter index); ``None``: every column.
        shared: ``False`` draws every selected entry independently; ``True`` draws one value per
            world for all of them; ``"axes"`` one per element, shared by its selected columns (keeps
            an inertia's proportions); ``"elements"`` one per column, shared by the elements (one
            friction factor for every geom).
        name: key of the draws in ``env.drawn`` (``[N, number of draws]``); default derived from
            ``field``, ``elements`` and ``axes``, e.g. ``mass/torso`` or ``gravity/axes=2``.
    """
    env_ids = _ids(env_ids)
    if env_ids.numel() == 0:
        return
    sel = _select(env.model, field, elements, axes, "randomize_field")
    n_rows, n_cols = len(sel.rows), len(sel.cols)
    draws = _draw(env, env_ids, distribution, range, _num_draws(shared, n_rows, n_cols))
    base = torch.from_numpy(sel.base)
    values = _combine(operation, base, _spread(draws, shared, n_rows, n_cols))
    _write(env, sel, env_ids, values)
    env.record_drawn(name or _default_name(field, elements, axes), env_ids, draws)


def _default_name(field: str, elements: Any, axes: Any) -> str:
    """``field``, then the elements and axes if given: ``friction/ffoot,bfoot/axes=0``."""
    parts = [field]
    if elements is not None:
        parts.append(",".join(str(e) for e in as_list(elements)))
    if axes is not None:
        parts.append("axes=" + ",".join(str(a) for a in as_list(axes)))
    return "/".join(parts)


def _validate_randomize_field(env: BatchedEnv, where: str, **params: Any) -> None:
    """The ``validate`` hook of :func:`randomize_field` (see the module doc)."""
    p = _bind(randomize_field, where, params)
    _check_choice(f"{where}.distribution", p["distribution"], DISTRIBUTIONS)
    _check_choice(f"{where}.operation", p["operation"], OPERATIONS)
    _check_shared(f"{where}.shared", p["shared"])
    _check_name(f"{where}.name", p["name"])
    sel = _select(env.model, p["field"], p["elements"], p["axes"], where)
    dlo, dhi = _draw_bounds(p["distribution"], _check_range(f"{where}.range", p["range"], p["distribution"]))
    _check_valid_values(f"{where}.range", sel, p["operation"], dlo, dhi, coupled=p["shared"] in (True, "axes"))
    _servo_pairing_guard(f"{where}.field", env.model, sel)
    _check_conflicts(env, where, _writes_randomize_field(env, **params))
    # One representative template value per draw (the first entry that shares it).
    shared, base = p["shared"], sel.base
    if shared is True:
        base = base[:1, :1]
    elif shared == "axes":
        base = base[:, :1]
    elif shared == "elements":
        base = base[:1]
    name = p["name"] or _default_name(p["field"], p["elements"], p["axes"])
    _preregister(env, name, _neutral(p["operation"], base))


def _writes_randomize_field(env: BatchedEnv, **params: Any) -> set[Entry]:
    """Entries :func:`randomize_field` writes with ``params``."""
    p = _bind(randomize_field, "randomize_field", params)
    sel = _select(env.model, p["field"], p["elements"], p["axes"], "randomize_field")
    name = p["name"] or _default_name(p["field"], p["elements"], p["axes"])
    return _entries(sel) | {("drawn", name, -1)}


randomize_field.validate = _validate_randomize_field  # type: ignore[attr-defined]
randomize_field.writes = _writes_randomize_field  # type: ignore[attr-defined]


# -- actuators -------------------------------------------------------------------------------------
def _actuator_ids(model: mujoco.MjModel, actuators: Sequence[Selector] | Selector | None, where: str) -> list[int]:
    """Actuator indices by name or index (all by default)."""
    if actuators is None:
        return list(range(model.nu))
    return _named_ids(model, "actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, model.nu, as_list(actuators), where)


def _actuator_labels(model: mujoco.MjModel, ids: Sequence[int]) -> list[str]:
    return [_label(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in ids]


def randomize_pd_gains(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    *,
    kp_range: Range,
    kd_range: Range,
    actuators: Sequence[Selector] | Selector | None = None,
    distribution: Distribution = "uniform",
    operation: Operation = "scale",
    shared: bool = False,
    name: str = "pd_gains",
) -> None:
    """Draw the gains of MuJoCo position servos per world: ``kp`` and ``kd`` from their ranges.

    A servo (what ``ActionTerm(kind="joint_pos", kp=..., kd=...)`` builds) has gain ``kp`` and bias
    ``-kp*q - kd*qdot``: ``gainprm[0] = kp``, ``biasprm[1] = -kp``, ``biasprm[2] = -kd``. Both kp
    entries are written together so the servo still holds its target.

    Args:
        env: the environment.
        env_ids: the worlds to redraw.
        kp_range: range of the position-gain draw (a factor with ``scale``).
        kd_range: range of the damping-gain draw.
        actuators: servo names or indices; ``None``: every actuator (all must be servos).
        distribution: as :func:`randomize_field`, for both gains.
        operation: as :func:`randomize_field`, for both gains.
        shared: one kp draw and one kd draw per world for every selected actuator.
        name: key of the draws in ``env.drawn``: ``[kp draws..., kd draws...]`` per world.
    """
    env_ids = _ids(env_ids)
    if env_ids.numel() == 0:
        return
    ids = _actuator_ids(env.model, actuators, "randomize_pd_gains.actuators")
    k = 1 if shared else len(ids)
    kp_draw = _draw(env, env_ids, distribution, kp_range, k).expand(-1, len(ids))
    kd_draw = _draw(env, env_ids, distribution, kd_range, k).expand(-1, len(ids))
    kp0, kd0 = _servo_gains(env.model, ids)
    kp = _combine(operation, torch.from_numpy(kp0), kp_draw)
    kd = _combine(operation, torch.from_numpy(kd0), kd_draw)
    gain = _actuator_rows(env, "actuator_gainprm", env_ids)
    bias = _actuator_rows(env, "actuator_biasprm", env_ids)
    gain[:, ids, 0] = kp
    bias[:, ids, 1] = -kp
    bias[:, ids, 2] = -kd
    env.sim.set_model_field("actuator_gainprm", gain, env_ids)
    env.sim.set_model_field("actuator_biasprm", bias, env_ids)
    env.record_drawn(name, env_ids, torch.cat([kp_draw[:, :k], kd_draw[:, :k]], dim=1))


def _servo_gains(model: mujoco.MjModel, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Template ``kp`` and ``kd`` of servos ``ids``."""
    return model.actuator_gainprm[ids, 0].astype(np.float64), -model.actuator_biasprm[ids, 2].astype(np.float64)


def _actuator_rows(env: BatchedEnv, field: str, env_ids: torch.Tensor) -> torch.Tensor:
    """The current ``[len(env_ids), nu, 10]`` values of an actuator parameter field."""
    return env.sim.get_model_field(field)[env_ids].to(torch.float64)


def _validate_pd_gains(env: BatchedEnv, where: str, **params: Any) -> None:
    """The ``validate`` hook of :func:`randomize_pd_gains`."""
    p = _bind(randomize_pd_gains, where, params)
    _check_choice(f"{where}.distribution", p["distribution"], DISTRIBUTIONS)
    _check_choice(f"{where}.operation", p["operation"], OPERATIONS)
    _check_shared(f"{where}.shared", p["shared"])
    _check_name(f"{where}.name", p["name"])
    model = env.model
    ids = _actuator_ids(model, p["actuators"], f"{where}.actuators")
    for i, label in zip(ids, _actuator_labels(model, ids), strict=True):
        if not _is_servo(model, i):
            raise ValueError(
                f"{where}.actuators: actuator {label!r} is not a position servo (gain kp > 0, bias -kp*q - kd*qdot; "
                f"has gainprm[0]={model.actuator_gainprm[i, 0]:g}, "
                f"biasprm[1:3]={model.actuator_biasprm[i, 1:3].tolist()}); "
                "declare it with ActionTerm(kind='joint_pos', kp=..., kd=...)"
            )
    kp0, kd0 = _servo_gains(model, ids)
    labels = _actuator_labels(model, ids)
    for param, base, positive in (("kp_range", kp0, True), ("kd_range", kd0, False)):
        lo, hi = _draw_bounds(p["distribution"], _check_range(f"{where}.{param}", p[param], p["distribution"]))
        worst = np.minimum(_combine(p["operation"], base, lo), _combine(p["operation"], base, hi))
        bad = worst <= 0 if positive else worst < 0
        if bad.any():
            r = int(np.argmax(bad))
            raise ValueError(
                f"{where}.{param}: {p['operation']} over {p[param]!r} could set {param[:2]} of actuator {labels[r]!r} "
                f"(template {base[r]:g}) to {worst[r]:g}; it must stay {'> 0' if positive else '>= 0'}"
            )
    _check_conflicts(env, where, _writes_pd_gains(env, **params))
    k = 1 if p["shared"] else len(ids)
    _preregister(env, p["name"], np.concatenate([_neutral(p["operation"], kp0[:k]), _neutral(p["operation"], kd0[:k])]))


def _writes_pd_gains(env: BatchedEnv, **params: Any) -> set[Entry]:
    p = _bind(randomize_pd_gains, "randomize_pd_gains", params)
    labels = _actuator_labels(env.model, _actuator_ids(env.model, p["actuators"], "randomize_pd_gains.actuators"))
    entries = {("actuator_gainprm", a, 0) for a in labels}
    entries |= {("actuator_biasprm", a, c) for a in labels for c in (1, 2)}
    return entries | {("drawn", p["name"], -1)}


randomize_pd_gains.validate = _validate_pd_gains  # type: ignore[attr-defined]
randomize_pd_gains.writes = _writes_pd_gains  # type: ignore[attr-defined]


def randomize_motor_strength(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    *,
    range: Range,
    actuators: Sequence[Selector] | Selector | None = None,
    distribution: Distribution = "uniform",
    shared: bool = False,
    name: str = "motor_strength",
) -> None:
    """Scale each actuator's whole force ``gain * ctrl + bias`` by a drawn factor per world.

    The factor multiplies ``gainprm[0:3]`` and ``biasprm[0:3]`` (so a servo's kp and kd scale
    together and it still holds its target) and, for force-limited actuators, ``forcerange``: a
    weaker motor also saturates lower. Muscle and user-defined actuators are refused.

    Args:
        env: the environment.
        env_ids: the worlds to redraw.
        range: range of the strength factor (``>= 0``; 1 is nominal).
        actuators: actuator names or indices; ``None``: every actuator.
        distribution: as :func:`randomize_field`.
        shared: one factor per world for every selected actuator.
        name: key of the factors in ``env.drawn``.
    """
    env_ids = _ids(env_ids)
    if env_ids.numel() == 0:
        return
    model = env.model
    ids = _actuator_ids(model, actuators, "randomize_motor_strength.actuators")
    k = 1 if shared else len(ids)
    factor = _draw(env, env_ids, distribution, range, k).expand(-1, len(ids))
    f = factor.unsqueeze(-1)
    for field in ("actuator_gainprm", "actuator_biasprm"):
        rows = _actuator_rows(env, field, env_ids)
        rows[:, ids, 0:3] = torch.from_numpy(_template(model, field)[ids, 0:3]) * f
        env.sim.set_model_field(field, rows, env_ids)
    limited = [j for j, i in enumerate(ids) if model.actuator_forcelimited[i]]
    if limited:
        sub = [ids[j] for j in limited]
        rows = _actuator_rows(env, "actuator_forcerange", env_ids)
        rows[:, sub] = torch.from_numpy(_template(model, "actuator_forcerange")[sub]) * f[:, limited]
        env.sim.set_model_field("actuator_forcerange", rows, env_ids)
    env.record_drawn(name, env_ids, factor[:, :k])


def _validate_motor_strength(env: BatchedEnv, where: str, **params: Any) -> None:
    """The ``validate`` hook of :func:`randomize_motor_strength`."""
    p = _bind(randomize_motor_strength, where, params)
    _check_choice(f"{where}.distribution", p["distribution"], DISTRIBUTIONS)
    _check_shared(f"{where}.shared", p["shared"])
    _check_name(f"{where}.name", p["name"])
    model = env.model
    ids = _actuator_ids(model, p["actuators"], f"{where}.actuators")
    lo, _ = _draw_bounds(p["distribution"], _check_range(f"{where}.range", p["range"], p["distribution"]))
    if lo < 0:
        raise ValueError(f"{where}.range: a strength factor must stay >= 0 (a negative one reverses the motor), "
                         f"but {p['range']!r} reaches {lo:g}")
    supported_gain = (mujoco.mjtGain.mjGAIN_FIXED, mujoco.mjtGain.mjGAIN_AFFINE)
    supported_bias = (mujoco.mjtBias.mjBIAS_NONE, mujoco.mjtBias.mjBIAS_AFFINE)
    for i, label in zip(ids, _actuator_labels(model, ids), strict=True):
        gain, bias = int(model.actuator_gaintype[i]), int(model.actuator_biastype[i])
        if gain not in supported_gain or bias not in supported_bias:
            raise ValueError(
                f"{where}.actuators: actuator {label!r} has gain type {mujoco.mjtGain(gain).name} and bias type "
                f"{mujoco.mjtBias(bias).name}; only fixed/affine gains and none/affine biases scale as a force"
            )
    _check_conflicts(env, where, _writes_motor_strength(env, **params))
    _preregister(env, p["name"], np.ones(1 if p["shared"] else len(ids)))


def _writes_motor_strength(env: BatchedEnv, **params: Any) -> set[Entry]:
    p = _bind(randomize_motor_strength, "randomize_motor_strength", params)
    ids = _actuator_ids(env.model, p["actuators"], "randomize_motor_strength.actuators")
    labels = _actuator_labels(env.model, ids)
    entries = {(f, a, c) for f in ("actuator_gainprm", "actuator_biasprm") for a in labels for c in range(3)}
    entries |= {("actuator_forcerange", _label(env.model, mujoco.mjtObj.mjOBJ_ACTUATOR, i), c)
                for i in ids if env.model.actuator_forcelimited[i] for c in range(2)}
    return entries | {("drawn", p["name"], -1)}


randomize_motor_strength.validate = _validate_motor_strength  # type: ignore[attr-defined]
randomize_motor_strength.writes = _writes_motor_strength  # type: ignore[attr-defined]


# -- pushes and wrenches ---------------------------------------------------------------------------
@_memoized
def _push_plan(model: mujoco.MjModel, velocity_range: Any, dofs: Any, where: str) -> tuple[list[int], np.ndarray]:
    """Dof indices and their ``[k, 2]`` ranges from either form of :func:`push_by_velocity`'s arguments."""
    if isinstance(velocity_range, Mapping):
        if dofs is not None:
            raise ValueError(
                f"{where}.dofs: give the dofs as the keys of velocity_range or here, not both; got {dofs!r}"
            )
        ids, ranges = [], []
        for key, rng in velocity_range.items():
            found = _dof_ids(model, key, f"{where}.velocity_range")
            pair = _check_range(f"{where}.velocity_range[{key!r}]", rng, "uniform")
            ids += found
            ranges += [pair] * len(found)
    else:
        pair = _check_range(f"{where}.velocity_range", velocity_range, "uniform")
        if dofs is None:
            ids = list(range(model.nv))
        else:
            ids = [d for s in as_list(dofs) for d in _dof_ids(model, s, f"{where}.dofs")]
        ranges = [pair] * len(ids)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}.velocity_range: a dof is selected twice ({[_dof_label(model, d) for d in ids]})")
    if not ids:
        raise ValueError(f"{where}.velocity_range: no dof selected")
    return ids, np.asarray(ranges, dtype=np.float64)


def push_by_velocity(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    *,
    velocity_range: Mapping[Selector, Range] | Range,
    dofs: Sequence[Selector] | Selector | None = None,
    name: str = "push",
) -> None:
    """Add a drawn velocity ``U(low, high)`` to selected dofs of worlds ``env_ids``: a kick.

    Use as ``mode="interval"``. A free joint's linear velocity (``root/x``, ``root/y``,
    ``root/z``) is in the world frame and its angular one (``root/wx`` ...) in the body frame,
    as MuJoCo's ``qvel``.

    Args:
        env: the environment.
        env_ids: the worlds to push.
        velocity_range: ``{dof: (low, high)}`` with dofs as joint names (every dof of the joint),
            ``"<joint>/<axis>"`` or dof indices; or one ``(low, high)`` for every dof in ``dofs``.
        dofs: with a single range: the dofs it applies to (``None``: every dof).
        name: key of the drawn velocity changes in ``env.drawn`` (``[N, dofs]``, in the order given).
    """
    env_ids = _ids(env_ids)
    if env_ids.numel() == 0:
        return
    ids, ranges = _push_plan(env.model, velocity_range, dofs, "push_by_velocity")
    u = env.draw_uniform(env_ids, len(ids))
    lo, hi = torch.from_numpy(ranges[:, 0]), torch.from_numpy(ranges[:, 1])
    dv = lo + (hi - lo) * u
    env.sim.add_qvel(dv, env_ids, ids)
    env.record_drawn(name, env_ids, dv)


def _validate_push(env: BatchedEnv, where: str, **params: Any) -> None:
    """The ``validate`` hook of :func:`push_by_velocity`."""
    p = _bind(push_by_velocity, where, params)
    _check_name(f"{where}.name", p["name"])
    ids, _ = _push_plan(env.model, p["velocity_range"], p["dofs"], where)
    _require_interval(env, where, "push_by_velocity")
    _check_conflicts(env, where, _writes_push(env, **params))
    _preregister(env, p["name"], np.zeros(len(ids)))


def _writes_push(env: BatchedEnv, **params: Any) -> set[Entry]:
    # Pushes add, so two pushes on one dof compose; only their recorded draws could collide.
    return {("drawn", _bind(push_by_velocity, "push_by_velocity", params)["name"], -1)}


push_by_velocity.validate = _validate_push  # type: ignore[attr-defined]
push_by_velocity.writes = _writes_push  # type: ignore[attr-defined]


def _body_id(model: mujoco.MjModel, body: Selector, where: str) -> int:
    """A body's index by name or index."""
    return _named_ids(model, "body", mujoco.mjtObj.mjOBJ_BODY, model.nbody, [body], where)[0]


def _axis_ranges(value: Any, where: str) -> np.ndarray:
    """One ``(low, high)`` for all three axes, or three pairs, as ``[3, 2]``."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected (low, high) or three (low, high) pairs, got {value!r}") from None
    if arr.shape == (2,):
        arr = np.tile(arr, (3, 1))
    if arr.shape != (3, 2):
        raise ValueError(f"{where}: expected (low, high) or three (low, high) pairs, got {value!r}")
    for k in range(3):
        _check_range(where, tuple(arr[k]), "uniform")
    return arr


def apply_external_wrench(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    *,
    body: Selector,
    force_range: Range | Sequence[Range] = (0.0, 0.0),
    torque_range: Range | Sequence[Range] = (0.0, 0.0),
    name: str | None = None,
) -> None:
    """Draw a wrench ``U(low, high)`` per axis and apply it to ``body`` in worlds ``env_ids``.

    The wrench is MuJoCo's ``xfrc_applied``: world frame, at the body's centre of mass. It persists
    until this event draws again for that world or the world resets (which zeroes it); use
    ``mode="interval"``, whose interval is how long each wrench lasts. For a brief kick, prefer
    :func:`push_by_velocity`.

    Args:
        env: the environment.
        env_ids: the worlds to redraw.
        body: body name or index.
        force_range: ``(low, high)`` in N for x, y and z, or one pair per axis.
        torque_range: ``(low, high)`` in N m for x, y and z, or one pair per axis.
        name: key of the drawn wrenches ``[N, 6]`` (force, torque) in ``env.drawn``; default ``wrench/<body>``.
    """
    env_ids = _ids(env_ids)
    if env_ids.numel() == 0:
        return
    model = env.model
    b = _body_id(model, body, "apply_external_wrench.body")
    ranges = torch.from_numpy(np.concatenate([
        _axis_ranges(force_range, "apply_external_wrench.force_range"),
        _axis_ranges(torque_range, "apply_external_wrench.torque_range"),
    ]))
    wrench = ranges[:, 0] + (ranges[:, 1] - ranges[:, 0]) * env.draw_uniform(env_ids, 6)
    xfrc = env.sim.xfrc_applied[env_ids].clone()
    xfrc[:, b] = wrench
    env.sim.set_xfrc_applied(xfrc, env_ids)
    env.record_drawn(name or f"wrench/{body}", env_ids, wrench)


def _validate_wrench(env: BatchedEnv, where: str, **params: Any) -> None:
    """The ``validate`` hook of :func:`apply_external_wrench`."""
    p = _bind(apply_external_wrench, where, params)
    _check_name(f"{where}.name", p["name"])
    model = env.model
    if _body_id(model, p["body"], f"{where}.body") == 0:
        raise ValueError(f"{where}.body: the world body is static; a wrench on it does nothing")
    _axis_ranges(p["force_range"], f"{where}.force_range")
    _axis_ranges(p["torque_range"], f"{where}.torque_range")
    _require_interval(env, where, "apply_external_wrench")
    _check_conflicts(env, where, _writes_wrench(env, **params))
    _preregister(env, p["name"] or f"wrench/{p['body']}", np.zeros(6))


def _writes_wrench(env: BatchedEnv, **params: Any) -> set[Entry]:
    p = _bind(apply_external_wrench, "apply_external_wrench", params)
    label = _label(env.model, mujoco.mjtObj.mjOBJ_BODY, _body_id(env.model, p["body"], "apply_external_wrench.body"))
    return {("xfrc_applied", label, c) for c in range(6)} | {("drawn", p["name"] or f"wrench/{p['body']}", -1)}


apply_external_wrench.validate = _validate_wrench  # type: ignore[attr-defined]
apply_external_wrench.writes = _writes_wrench  # type: ignore[attr-defined]


# -- initial state -----------------------------------------------------------------------------------
def _qpos_ids(model: mujoco.MjModel, item: Selector, where: str) -> int:
    """The qpos coordinate of a hinge/slide joint name, of ``"<free joint>/x|y|z"``, or an index."""
    return names_of(model).qpos_address(item, where)


def joint_noise_state(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    *,
    qpos_ranges: Mapping[Selector, Range] | None = None,
    qvel_ranges: Mapping[Selector, Range] | None = None,
    name: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Initial state ``qpos0 + U(range)`` and ``U(range)`` velocities, per joint, for ``InitialState``.

    Joints not named keep ``qpos0`` and zero velocity. :func:`robolearn.envs.mdp.noisy_state` adds
    one range to every coordinate; this one gives each joint its own (a wide hinge spread, a small
    height jitter ...).

    Args:
        env: the environment.
        env_ids: the worlds being reset.
        qpos_ranges: ``{joint: (low, high)}`` offsets from ``qpos0``: hinge/slide joint names,
            ``"<free joint>/x|y|z"`` or qpos indices.
        qvel_ranges: ``{dof: (low, high)}`` velocities, dofs as in :func:`push_by_velocity`.
        name: if given, record the offsets ``[qpos offsets..., velocities...]`` under this name (the
            state itself is already in the privileged ``true_state``; this is for datasets).
    """
    env_ids = _ids(env_ids)
    model, n = env.model, env_ids.numel()
    qpos = torch.as_tensor(model.qpos0, dtype=torch.float64).expand(n, -1).clone()
    qvel = torch.zeros(n, model.nv, dtype=torch.float64)
    drawn = []
    for ranges, target, to_ids in (
        (qpos_ranges, qpos, lambda key, w: [_qpos_ids(model, key, w)]),
        (qvel_ranges, qvel, lambda key, w: _dof_ids(model, key, w)),
    ):
        if not ranges:
            continue
        which = "qpos_ranges" if target is qpos else "qvel_ranges"
        cols, bounds = [], []
        for key, rng in ranges.items():
            found = to_ids(key, f"initial_state.{which}")
            pair = _check_range(f"initial_state.{which}[{key!r}]", rng, "uniform")
            cols += found
            bounds += [pair] * len(found)
        b = torch.as_tensor(bounds, dtype=torch.float64)
        offset = b[:, 0] + (b[:, 1] - b[:, 0]) * env.draw_uniform(env_ids, len(cols))
        target[:, cols] += offset
        drawn.append(offset)
    if name is not None and drawn:
        env.record_drawn(name, env_ids, torch.cat(drawn, dim=1))
    return qpos, qvel


__all__ = [
    "DISTRIBUTIONS",
    "GAUSSIAN_CLIP",
    "OPERATIONS",
    "apply_external_wrench",
    "joint_noise_state",
    "push_by_velocity",
    "randomize_field",
    "randomize_motor_strength",
    "randomize_pd_gains",
]
