"""Model-field draws: any per-world model field, the gains of position servos, and motor strength.

Three event terms (see :mod:`.common` for how a term is built and called):

* :class:`randomize_field` draws values of any per-world model field (masses, inertias, CoM,
  friction, damping, armature, gains, gravity ...) and writes them as ``template * draw``,
  ``template + draw`` or ``draw``.
* :class:`randomize_pd_gains` draws ``kp`` and ``kd`` of MuJoCo position servos, keeping the pair
  of entries that hold ``kp`` equal so the servo still holds its target.
* :class:`randomize_motor_strength` scales each actuator's whole force ``gain * ctrl + bias``.

The pieces a term is made of (:func:`select_field`, :func:`check_field_values`,
:func:`guard_servo_pairing`, :func:`force_plan`, :func:`scale_force`) are also what the sim2sim
perturbations (:mod:`.perturbations`) use, so a field factor or a motor strength means one thing.

Validation refuses, when the env is built, unknown fields or names, inverted ranges, bad
distribution or operation names, and ranges under which some world could get an invalid model (a
negative mass, friction or damping; an inertia that breaks the triangle inequality; a servo whose
two ``kp`` entries disagree), each with a message naming ``events.<term>.<param>`` and the value.

A task config gives each randomised quantity a one-line comment saying what it models::

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
    }
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np
import torch

from robolearn.sim.backend import resolve_field
from robolearn.sim.names import as_list, check_index, names_of
from robolearn.sim2real.randomization.common import (
    DISTRIBUTIONS,
    OPERATIONS,
    Distribution,
    EventTermBase,
    Operation,
    Range,
    Selector,
    Shared,
    check_bool,
    check_choice,
    check_name,
    check_range,
    check_shared,
    combine,
    draw,
    draw_bounds,
    neutral,
    register_drawn,
)

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

# Fields whose entries must stay >= 0, and those whose positive template entries must stay > 0
# (a body with mass has to keep some; a massless one, such as the world body, may stay at zero).
_NONNEGATIVE = frozenset({
    "geom_friction", "dof_damping", "dof_armature", "dof_frictionloss", "jnt_stiffness",
    "tendon_damping", "tendon_stiffness", "tendon_armature", "tendon_frictionloss", "pair_friction",
    "actuator_armature", "actuator_damping", "geom_margin", "geom_gap", "opt.density", "opt.viscosity",
})
# actuator_dynprm: the time constants of filter and muscle dynamics (a motor's lag) divide the
# activation's rate, so a drawn one must stay > 0; its unused (zero) entries stay >= 0.
_POSITIVE = frozenset({"body_mass", "body_inertia", "geom_size", "opt.timestep", "actuator_dynprm"})

# Model-field prefixes and the kind of element (robolearn.sim.names) their first dimension indexes;
# dof_ fields take joint names, expanded to their dofs. Other prefixes take indices only.
_PREFIX_KIND: dict[str, str] = {
    "body": "body", "geom": "geom", "jnt": "joint", "actuator": "actuator", "tendon": "tendon",
    "site": "site", "cam": "camera", "light": "light", "mat": "material", "pair": "pair",
    "eq": "equality", "sensor": "sensor",
}


# -- selections ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FieldSelection:
    """The entries of one model field a term touches, resolved against the template model."""

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

    def entries(self) -> set[str]:
        """Every entry it covers, as :attr:`EventTermBase.writes` words."""
        return {f"writes {self.field}[{label}, {int(c)}]" for label in self.labels for c in self.cols}

    def with_values(self, values: np.ndarray) -> np.ndarray:
        """The whole field, per-world shape, with the selection set to ``values`` ``[rows, cols]``."""
        table = self.table.copy()
        table[np.ix_(self.rows, self.cols)] = values
        return table.reshape(self.shape)


def template(model: mujoco.MjModel, field: str) -> np.ndarray:
    """The template model's values of MuJoCo field ``field`` (a float64 copy)."""
    value = getattr(model.opt, field[4:]) if field.startswith("opt.") else getattr(model, field)
    return np.array(value, dtype=np.float64)


def select_field(model: mujoco.MjModel, field: str, elements: Any, axes: Any, where: str) -> FieldSelection:
    """Resolve ``field``/``elements``/``axes`` against the template model; errors name ``where.<param>``.

    ``elements=None`` selects every element (every body but the static world body, which has
    nothing to randomise); ``axes=None`` every column.
    """
    if not isinstance(field, str):
        raise ValueError(f"{where}.field: expected a model field name, got {field!r}")
    try:
        raw = resolve_field(field)
    except ValueError as exc:
        raise ValueError(f"{where}.field: {exc}") from None
    values = template(model, raw)
    is_option = raw.startswith("opt.")
    table = values.reshape(1, -1) if is_option else values.reshape(values.shape[0], -1)
    has_cols = values.ndim >= (1 if is_option else 2)
    names = names_of(model)
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
            rows = [d for item in as_list(elements) for d in names.dofs(item, f"{where}.elements")]
        labels = [names.dof_label(d) for d in rows]
    else:
        prefix = raw.split("_", 1)[0]
        kind = _PREFIX_KIND.get(prefix)
        first = 1 if prefix == "body" else 0
        if elements is None:
            rows = list(range(first, table.shape[0]))
        elif kind is None:
            rows = [check_index(i, table.shape[0], f"{where}.elements", f"{raw} row") for i in as_list(elements)]
        else:
            rows = names.ids(kind, as_list(elements), f"{where}.elements")
        labels = [f"#{i}" if kind is None else names.label(kind, i) for i in rows]
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
    return FieldSelection(raw, values.shape, r, c, tuple(labels), table[r[:, None], c[None, :]], table)


def check_field_values(where: str, sel: FieldSelection, operation: str, lo: float, hi: float, coupled: bool) -> None:
    """Refuse values in ``[lo, hi]`` under which some world could get an invalid entry.

    Checked at the extremes: each operation is monotone in the value, so the extremes bound every
    outcome. ``coupled``: the selected columns of an element share one value (matters for inertia).
    """
    at_lo, at_hi = combine(operation, sel.base, lo), combine(operation, sel.base, hi)
    low, high = np.minimum(at_lo, at_hi), np.maximum(at_lo, at_hi)
    span = f"{lo:g}" if lo == hi else f"a draw in [{lo:g}, {hi:g}]"
    field = sel.field
    if field in _NONNEGATIVE or field in _POSITIVE:
        must_be_positive = (sel.base > 0) if field in _POSITIVE else np.zeros_like(sel.base, dtype=bool)
        bad = (low < 0) | (must_be_positive & (low <= 0))
        if bad.any():
            r, c = np.argwhere(bad)[0]
            need = "> 0" if must_be_positive[r, c] else ">= 0"
            raise ValueError(
                f"{where}: {operation} by {span} could set {field}[{sel.labels[r]}, {sel.cols[c]}] "
                f"(template {sel.base[r, c]:g}) to {low[r, c]:g}; it must stay {need}"
            )
    if field == "body_inertia":
        _check_triangle(where, sel, (at_lo, at_hi), (low, high), coupled, f"[{lo:g}, {hi:g}]")


def _check_triangle(
    where: str,
    sel: FieldSelection,
    at_ends: tuple[np.ndarray, np.ndarray],
    bounds: tuple[np.ndarray, np.ndarray],
    coupled: bool,
    span: str,
) -> None:
    """Principal inertias must satisfy ``A + B >= C`` for every ordering, in every world.

    With one value per element (``coupled``) the three move together and the inequality is linear
    in the value, so its two extremes suffice; with independent draws per axis, the worst case is
    two axes at their smallest and the third at its largest.
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
                tmpl = np.array2string(sel.table[sel.rows[r]], precision=4)
                raise ValueError(
                    f"{where}: body_inertia of body {sel.labels[r]!r} (template {tmpl}) "
                    f"could break the triangle inequality I{a} + I{b} >= I{c} for draws in {span}; scale the "
                    "axes of a body together (shared='axes') or narrow the range"
                )


def is_servo(model: mujoco.MjModel, i: int) -> bool:
    """Whether actuator ``i`` is a position servo: fixed gain kp > 0, affine bias ``-kp*q - kd*qdot``."""
    return (
        int(model.actuator_gaintype[i]) == mujoco.mjtGain.mjGAIN_FIXED
        and int(model.actuator_biastype[i]) == mujoco.mjtBias.mjBIAS_AFFINE
        and model.actuator_gainprm[i, 0] > 0
        and model.actuator_biasprm[i, 1] == -model.actuator_gainprm[i, 0]
    )


def guard_servo_pairing(where: str, model: mujoco.MjModel, sel: FieldSelection) -> None:
    """Refuse a change of a position servo's kp in only one of gain and bias (they must move together)."""
    col = {"actuator_gainprm": 0, "actuator_biasprm": 1}.get(sel.field)
    if col is None or col not in sel.cols:
        return
    for r, label in zip(sel.rows, sel.labels, strict=True):
        if is_servo(model, int(r)):
            raise ValueError(
                f"{where}: actuator {label!r} is a position servo, whose gainprm[0] = kp and biasprm[1] = -kp "
                f"must change together; use randomize_pd_gains or randomize_motor_strength"
            )


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


def _representatives(base: np.ndarray, shared: Shared) -> np.ndarray:
    """One template value per draw (the first entry that shares it), flattened: ``[k]``."""
    if shared is True:
        return base[:1, :1].ravel()
    if shared == "axes":
        return base[:, :1].ravel()
    if shared == "elements":
        return base[:1].ravel()
    return base.ravel()


def _default_name(field: str, elements: Any, axes: Any) -> str:
    """``field``, then the elements and axes if given: ``friction/ffoot,bfoot/axes=0``."""
    parts = [field]
    if elements is not None:
        parts.append(",".join(str(e) for e in as_list(elements)))
    if axes is not None:
        parts.append("axes=" + ",".join(str(a) for a in as_list(axes)))
    return "/".join(parts)


def _read_rows(env: BatchedEnv, field: str, env_ids: torch.Tensor) -> torch.Tensor:
    """The current values of ``field`` in worlds ``env_ids`` (a copy, float64): a term rewrites
    only its own entries and keeps the others, which another term may own.
    """
    return env.sim.get_model_field(field)[env_ids].to(torch.float64)


# -- randomize_field -------------------------------------------------------------------------------
class randomize_field(EventTermBase):  # lower case: a task config reads it as a verb
    """Draw per-world values of a model field and write them (see the module doc)."""

    def __init__(
        self,
        env: BatchedEnv,
        *,
        field: str,
        range: Range,
        distribution: Distribution = "uniform",
        operation: Operation = "scale",
        elements: Sequence[Selector] | Selector | None = None,
        axes: Sequence[int] | int | None = None,
        shared: Shared = False,
        name: str | None = None,
        where: str = "randomize_field",
        mode: str | None = None,
    ) -> None:
        """Check the parameters against ``env``'s model and resolve the selection.

        Args:
            env: the environment.
            field: friendly name (``mass``, ``inertia``, ``com``, ``friction``, ``damping``,
                ``armature``, ``frictionloss``, ``actuator_gain``, ``actuator_bias``, ``gravity``)
                or MjModel field name.
            range: ``(low, high)``; ``(mean, std)`` for ``gaussian`` (draws clipped to ``mean +- 3 std``).
            distribution: ``uniform``, ``log_uniform`` (``exp`` of a uniform between the bounds'
                logs) or ``gaussian``.
            operation: ``scale`` (``template * draw``), ``add`` (``template + draw``) or ``abs`` (``draw``).
            elements: names or indices of the field's elements: bodies (``body_*``), geoms,
                actuators, joints (``jnt_*``), tendons, sites ...; for ``dof_*`` fields joint names
                (all their dofs), ``"<joint>/<axis>"`` for one dof of a free (x y z wx wy wz) or
                ball (wx wy wz) joint, or dof indices. ``None``: every element (every body but the
                static world body). Option fields such as gravity have no elements.
            axes: columns of a multi-column field (friction: 0 sliding, 1 torsional, 2 rolling; com
                and gravity: x y z; gainprm/biasprm: the parameter index); ``None``: every column.
            shared: ``False`` draws every selected entry independently; ``True`` draws one value per
                world for all of them; ``"axes"`` one per element, shared by its selected columns
                (keeps an inertia's proportions); ``"elements"`` one per column, shared by the
                elements (one friction factor for every geom).
            name: key of the draws in ``env.drawn`` (``[N, number of draws]``); default derived from
                ``field``, ``elements`` and ``axes``, e.g. ``mass/torso`` or ``gravity/axes=2``.
            where: prefix of error messages (the event manager passes ``events.<name>``).
            mode: when the term runs (the event manager passes it).
        """
        super().__init__(where=where, mode=mode)
        check_choice(f"{where}.distribution", distribution, DISTRIBUTIONS)
        check_choice(f"{where}.operation", operation, OPERATIONS)
        check_shared(f"{where}.shared", shared)
        check_name(f"{where}.name", name)
        sel = select_field(env.model, field, elements, axes, where)
        self.range = check_range(f"{where}.range", range, distribution)
        lo, hi = draw_bounds(distribution, self.range)
        check_field_values(f"{where}.range", sel, operation, lo, hi, coupled=shared in (True, "axes"))
        guard_servo_pairing(f"{where}.field", env.model, sel)
        self.field, self.shape = sel.field, sel.shape
        self.distribution, self.operation, self.shared = distribution, operation, shared
        self.name = name or _default_name(field, elements, axes)
        self.n_rows, self.n_cols = len(sel.rows), len(sel.cols)
        self.num_draws = (
            1 if shared is True
            else self.n_rows if shared == "axes"
            else self.n_cols if shared == "elements"
            else self.n_rows * self.n_cols
        )
        device = env.device
        self.table_shape = sel.table.shape
        self.base = torch.as_tensor(sel.base, device=device)
        self.rows = torch.as_tensor(sel.rows, device=device)[:, None]
        self.cols = torch.as_tensor(sel.cols, device=device)[None, :]
        self.writes = frozenset(sel.entries() | {f"records its draws under {self.name!r}"})
        register_drawn(env, self.name, neutral(operation, _representatives(sel.base, shared)))

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        """Draw for worlds ``env_ids``, write ``template (op) draw`` into the selection, record the draws."""
        n = env_ids.numel()
        if n == 0:
            return
        draws = draw(env, env_ids, self.distribution, self.range, self.num_draws)
        values = combine(self.operation, self.base, _spread(draws, self.shared, self.n_rows, self.n_cols))
        table = _read_rows(env, self.field, env_ids).reshape(n, *self.table_shape)
        table[:, self.rows, self.cols] = values
        env.sim.set_model_field(self.field, table.reshape(n, *self.shape), env_ids)
        env.record_drawn(self.name, env_ids, draws)


# -- actuators -------------------------------------------------------------------------------------
def _actuator_ids(model: mujoco.MjModel, actuators: Sequence[Selector] | Selector | None, where: str) -> list[int]:
    """Actuator indices by name or index (all by default)."""
    ids = names_of(model).ids("actuator", actuators, where)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: an actuator is selected twice in {actuators!r}")
    if not ids:
        raise ValueError(f"{where}: no actuator selected (the model has {model.nu})")
    return ids


class randomize_pd_gains(EventTermBase):  # lower case: a task config reads it as a verb
    """Draw the gains of MuJoCo position servos per world: ``kp`` and ``kd`` from their ranges.

    A servo (what ``ActionTerm(kind="joint_pos", kp=..., kd=...)`` builds) has gain ``kp`` and bias
    ``-kp*q - kd*qdot``: ``gainprm[0] = kp``, ``biasprm[1] = -kp``, ``biasprm[2] = -kd``. Both kp
    entries are written together so the servo still holds its target.
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        kp_range: Range,
        kd_range: Range,
        actuators: Sequence[Selector] | Selector | None = None,
        distribution: Distribution = "uniform",
        operation: Operation = "scale",
        shared: bool = False,
        name: str = "pd_gains",
        where: str = "randomize_pd_gains",
        mode: str | None = None,
    ) -> None:
        """Check the parameters against ``env``'s model and resolve the servos.

        Args:
            env: the environment.
            kp_range: range of the position-gain draw (a factor with ``scale``).
            kd_range: range of the damping-gain draw.
            actuators: servo names or indices; ``None``: every actuator (all must be servos).
            distribution: as :class:`randomize_field`, for both gains.
            operation: as :class:`randomize_field`, for both gains.
            shared: one kp draw and one kd draw per world for every selected actuator.
            name: key of the draws in ``env.drawn``: ``[kp draws..., kd draws...]`` per world.
            where: prefix of error messages (the event manager passes ``events.<name>``).
            mode: when the term runs (the event manager passes it).
        """
        super().__init__(where=where, mode=mode)
        check_choice(f"{where}.distribution", distribution, DISTRIBUTIONS)
        check_choice(f"{where}.operation", operation, OPERATIONS)
        self.shared = check_bool(f"{where}.shared", shared)
        check_name(f"{where}.name", name)
        model, names = env.model, names_of(env.model)
        ids = _actuator_ids(model, actuators, f"{where}.actuators")
        labels = names.labels("actuator", ids)
        for i, label in zip(ids, labels, strict=True):
            if not is_servo(model, i):
                raise ValueError(
                    f"{where}.actuators: actuator {label!r} is not a position servo (gain kp > 0, bias -kp*q - kd*qdot; "
                    f"has gainprm[0]={model.actuator_gainprm[i, 0]:g}, "
                    f"biasprm[1:3]={model.actuator_biasprm[i, 1:3].tolist()}); "
                    "declare it with ActionTerm(kind='joint_pos', kp=..., kd=...)"
                )
        kp0 = model.actuator_gainprm[ids, 0].astype(np.float64)
        kd0 = -model.actuator_biasprm[ids, 2].astype(np.float64)
        ranges = {}
        for param, value, base, positive in (("kp_range", kp_range, kp0, True), ("kd_range", kd_range, kd0, False)):
            ranges[param] = check_range(f"{where}.{param}", value, distribution)
            lo, hi = draw_bounds(distribution, ranges[param])
            worst = np.minimum(combine(operation, base, lo), combine(operation, base, hi))
            bad = worst <= 0 if positive else worst < 0
            if bad.any():
                r = int(np.argmax(bad))
                raise ValueError(
                    f"{where}.{param}: {operation} over {value!r} could set {param[:2]} of actuator {labels[r]!r} "
                    f"(template {base[r]:g}) to {worst[r]:g}; it must stay {'> 0' if positive else '>= 0'}"
                )
        self.kp_range, self.kd_range = ranges["kp_range"], ranges["kd_range"]
        self.distribution, self.operation, self.name = distribution, operation, name
        self.count = len(ids)
        self.k = 1 if self.shared else self.count
        self.ids = torch.as_tensor(ids, device=env.device)
        self.kp0 = torch.as_tensor(kp0, device=env.device)
        self.kd0 = torch.as_tensor(kd0, device=env.device)
        entries = {f"writes actuator_gainprm[{a}, 0]" for a in labels}
        entries |= {f"writes actuator_biasprm[{a}, {c}]" for a in labels for c in (1, 2)}
        self.writes = frozenset(entries | {f"records its draws under {name!r}"})
        register_drawn(env, name, np.concatenate([neutral(operation, kp0[: self.k]), neutral(operation, kd0[: self.k])]))

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        """Draw kp and kd for worlds ``env_ids``, write both servo entries, record the draws."""
        if env_ids.numel() == 0:
            return
        kp_draw = draw(env, env_ids, self.distribution, self.kp_range, self.k).expand(-1, self.count)
        kd_draw = draw(env, env_ids, self.distribution, self.kd_range, self.k).expand(-1, self.count)
        kp = combine(self.operation, self.kp0, kp_draw)
        kd = combine(self.operation, self.kd0, kd_draw)
        gain = _read_rows(env, "actuator_gainprm", env_ids)
        bias = _read_rows(env, "actuator_biasprm", env_ids)
        gain[:, self.ids, 0] = kp
        bias[:, self.ids, 1] = -kp
        bias[:, self.ids, 2] = -kd
        env.sim.set_model_field("actuator_gainprm", gain, env_ids)
        env.sim.set_model_field("actuator_biasprm", bias, env_ids)
        env.record_drawn(self.name, env_ids, torch.cat([kp_draw[:, : self.k], kd_draw[:, : self.k]], dim=1))


# -- motor strength --------------------------------------------------------------------------------
FORCE_FIELDS = ("actuator_gainprm", "actuator_biasprm", "actuator_forcerange")
"""The model fields a strength factor scales (forcerange only for force-limited actuators)."""


@dataclass(frozen=True)
class ForcePlan:
    """What a strength factor scales, resolved once: the actuators and their template parameters."""

    ids: torch.Tensor
    """Actuator indices ``[k]``."""
    gain: torch.Tensor
    """Template ``gainprm[ids, 0:3]`` ``[k, 3]``."""
    bias: torch.Tensor
    """Template ``biasprm[ids, 0:3]`` ``[k, 3]``."""
    limited: torch.Tensor
    """Positions in ``ids`` of the force-limited actuators ``[m]``."""
    limited_ids: torch.Tensor
    """Their actuator indices ``[m]``."""
    forcerange: torch.Tensor
    """Their template ``forcerange`` ``[m, 2]``."""
    labels: tuple[str, ...]
    """Actuator labels, for messages."""
    forcelimited: tuple[str, ...]
    """Labels of the force-limited ones."""

    def entries(self) -> set[str]:
        """Every entry a strength factor writes, as :attr:`EventTermBase.writes` words."""
        out = {f"writes {f}[{a}, {c}]" for f in FORCE_FIELDS[:2] for a in self.labels for c in range(3)}
        return out | {f"writes actuator_forcerange[{a}, {c}]" for a in self.forcelimited for c in range(2)}


def force_plan(
    model: mujoco.MjModel, actuators: Sequence[Selector] | Selector | None, where: str, device: torch.device | str
) -> ForcePlan:
    """Resolve and check the actuators a strength factor scales: only fixed or affine gains and
    no or affine biases scale as a force (muscle and user-defined actuators are refused).
    """
    ids = _actuator_ids(model, actuators, f"{where}.actuators")
    labels = names_of(model).labels("actuator", ids)
    supported_gain = (mujoco.mjtGain.mjGAIN_FIXED, mujoco.mjtGain.mjGAIN_AFFINE)
    supported_bias = (mujoco.mjtBias.mjBIAS_NONE, mujoco.mjtBias.mjBIAS_AFFINE)
    for i, label in zip(ids, labels, strict=True):
        gain, bias = int(model.actuator_gaintype[i]), int(model.actuator_biastype[i])
        if gain not in supported_gain or bias not in supported_bias:
            raise ValueError(
                f"{where}.actuators: actuator {label!r} has gain type {mujoco.mjtGain(gain).name} and bias type "
                f"{mujoco.mjtBias(bias).name}; only fixed/affine gains and none/affine biases scale as a force"
            )
    limited = [j for j, i in enumerate(ids) if model.actuator_forcelimited[i]]
    limited_ids = [ids[j] for j in limited]

    def tensor(value: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return torch.as_tensor(np.asarray(value), dtype=dtype, device=device)

    return ForcePlan(
        ids=tensor(ids, torch.long),
        gain=tensor(template(model, "actuator_gainprm")[ids, 0:3]),
        bias=tensor(template(model, "actuator_biasprm")[ids, 0:3]),
        limited=tensor(limited, torch.long),
        limited_ids=tensor(limited_ids, torch.long),
        forcerange=tensor(template(model, "actuator_forcerange")[limited_ids].reshape(-1, 2)),
        labels=tuple(labels),
        forcelimited=tuple(labels[j] for j in limited),
    )


def check_strength(where: str, lowest: float, given: Any) -> None:
    """Refuse a strength factor that can be negative (it would reverse the motor)."""
    if lowest < 0:
        raise ValueError(f"{where}: a strength factor must stay >= 0 (a negative one reverses the motor), "
                         f"but {given!r} reaches {lowest:g}")


def scale_force(plan: ForcePlan, rows: Mapping[str, torch.Tensor], factor: torch.Tensor) -> None:
    """Set, in ``rows`` (per-world actuator tables ``[n, nu, ...]`` of :data:`FORCE_FIELDS`, in
    place), each planned actuator's force to its template's times ``factor`` ``[n, k]``:
    ``gainprm[0:3]`` and ``biasprm[0:3]`` (so a servo's kp and kd scale together and it still holds
    its target) and, for force-limited actuators, ``forcerange`` (a weaker motor saturates lower).
    """
    f = factor.unsqueeze(-1)
    rows["actuator_gainprm"][:, plan.ids, 0:3] = plan.gain * f
    rows["actuator_biasprm"][:, plan.ids, 0:3] = plan.bias * f
    if plan.limited.numel():
        rows["actuator_forcerange"][:, plan.limited_ids] = plan.forcerange * f[:, plan.limited]


class randomize_motor_strength(EventTermBase):  # lower case: a task config reads it as a verb
    """Scale each actuator's whole force ``gain * ctrl + bias`` by a drawn factor per world (see
    :func:`scale_force` for the entries).
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        range: Range,
        actuators: Sequence[Selector] | Selector | None = None,
        distribution: Distribution = "uniform",
        shared: bool = False,
        name: str = "motor_strength",
        where: str = "randomize_motor_strength",
        mode: str | None = None,
    ) -> None:
        """Check the parameters against ``env``'s model and resolve the actuators.

        Args:
            env: the environment.
            range: range of the strength factor (``>= 0``; 1 is nominal).
            actuators: actuator names or indices; ``None``: every actuator.
            distribution: as :class:`randomize_field`.
            shared: one factor per world for every selected actuator.
            name: key of the factors in ``env.drawn``.
            where: prefix of error messages (the event manager passes ``events.<name>``).
            mode: when the term runs (the event manager passes it).
        """
        super().__init__(where=where, mode=mode)
        check_choice(f"{where}.distribution", distribution, DISTRIBUTIONS)
        self.shared = check_bool(f"{where}.shared", shared)
        check_name(f"{where}.name", name)
        self.plan = force_plan(env.model, actuators, where, env.device)
        self.range = check_range(f"{where}.range", range, distribution)
        check_strength(f"{where}.range", draw_bounds(distribution, self.range)[0], range)
        self.distribution, self.name = distribution, name
        self.count = len(self.plan.labels)
        self.k = 1 if self.shared else self.count
        self.fields = FORCE_FIELDS if self.plan.limited.numel() else FORCE_FIELDS[:2]
        self.writes = frozenset(self.plan.entries() | {f"records its draws under {name!r}"})
        register_drawn(env, name, np.ones(self.k))

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        """Draw a factor per world (and actuator) for ``env_ids``, scale the forces, record the factors."""
        if env_ids.numel() == 0:
            return
        factor = draw(env, env_ids, self.distribution, self.range, self.k).expand(-1, self.count)
        rows = {f: _read_rows(env, f, env_ids) for f in self.fields}
        scale_force(self.plan, rows, factor)
        for f, values in rows.items():
            env.sim.set_model_field(f, values, env_ids)
        env.record_drawn(self.name, env_ids, factor[:, : self.k])


__all__ = [
    "FORCE_FIELDS",
    "FieldSelection",
    "ForcePlan",
    "check_field_values",
    "check_strength",
    "force_plan",
    "guard_servo_pairing",
    "is_servo",
    "randomize_field",
    "randomize_motor_strength",
    "randomize_pd_gains",
    "scale_force",
    "select_field",
    "template",
]
