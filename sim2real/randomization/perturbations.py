"""The sim2sim perturbations of the model: field factors, motor strength and the integrator.

The sim2sim gate (``robolearn sim2sim``) evaluates a policy on its task with the model shifted
beyond the training ranges. A shift here is the same operation, with the same checks, as the
randomisation terms' (:mod:`.fields`), with one fixed value for every world instead of a draw:

* a field factor ``{"mass": 1.3}`` is :class:`~.fields.randomize_field` with ``operation="scale"``
  over every element and column and the degenerate range ``(1.3, 1.3)``: the same selection, the
  same refusal of values that make the model invalid (a negative mass, a negative friction, an
  inertia that breaks the triangle inequality, one half of a servo's gain pair);
* ``{"motor_strength": 0.7}`` is :class:`~.fields.randomize_motor_strength` with ``(0.7, 0.7)``:
  gain and bias parameters and the force range of force-limited actuators scale together.

Added latency is not here: it is the env's own :class:`~.latency.ActionDelay` and
:class:`~.latency.ObservationDelay`, configured through the task config.

The shift is written into the template model as well as into every world, and the env's event
terms are rebuilt around the new template, so a task's own randomisation (which draws around the
template) composes with the shift instead of undoing it at the next reset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robolearn.envs.validate import check_float
from robolearn.sim.backend import resolve_field
from robolearn.sim2real.randomization.fields import (
    FORCE_FIELDS,
    check_field_values,
    check_strength,
    force_plan,
    guard_servo_pairing,
    scale_force,
    select_field,
    template,
)

if TYPE_CHECKING:
    import mujoco

    from robolearn.envs.batched_env import BatchedEnv

MOTOR_STRENGTH = "motor_strength"
"""Pseudo-field of a perturbation: each actuator's whole force, as ``randomize_motor_strength``."""


def field_change(model: mujoco.MjModel, name: str, factor: Any, where: str) -> dict[str, np.ndarray]:
    """The new values (per-world shape) of the template fields that one factor changes, checked;
    ``model`` is not changed.

    Args:
        model: the template model.
        name: a field name (friendly or MuJoCo) or :data:`MOTOR_STRENGTH`.
        factor: what every selected entry is multiplied by.
        where: the factor's place in the config, e.g. ``perturbations.heavy.fields.mass``.

    Raises:
        ValueError: an unknown field, a factor that is not a finite number, or one under which the
            model would be invalid, named with ``where``.
    """
    f = check_float(where, factor)
    if name == MOTOR_STRENGTH:
        check_strength(where, f, factor)
        plan = force_plan(model, None, where, "cpu")
        rows = {field: torch.as_tensor(template(model, field)).unsqueeze(0) for field in FORCE_FIELDS}
        scale_force(plan, rows, torch.full((1, len(plan.labels)), f, dtype=torch.float64))
        return {field: rows[field][0].numpy() for field in FORCE_FIELDS}
    try:
        resolve_field(name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}; or {MOTOR_STRENGTH!r}") from None
    sel = select_field(model, name, None, None, where)
    check_field_values(where, sel, "scale", f, f, coupled=True)
    guard_servo_pairing(where, model, sel)
    return {sel.field: sel.with_values(sel.base * f)}


def check_model_shift(model: mujoco.MjModel, fields: Mapping[str, Any], where: str) -> None:
    """Check every factor of ``fields`` against the template ``model`` (see :func:`field_change`),
    before anything runs; ``where`` is the mapping's place, e.g. ``perturbations.heavy.fields``.
    """
    if not isinstance(fields, Mapping):
        raise ValueError(f"{where}: expected a mapping of model field to factor, got {fields!r}")
    for name, factor in fields.items():
        field_change(model, name, factor, f"{where}.{name}")


def shift_model(env: BatchedEnv, fields: Mapping[str, Any], where: str, integrator: int | None = None) -> None:
    """Apply field factors (and another integrator) to ``env``'s template model and every world,
    rebuild its event terms around the new template, run its start-up events again and reset
    every world.

    The factors apply in the order given, each to the template as the previous ones left it, so
    two factors on one field compose.

    Args:
        env: the environment, as built for the perturbation.
        fields: field name (friendly or MuJoCo, or :data:`MOTOR_STRENGTH`) to factor.
        where: the mapping's place in the config, for messages.
        integrator: a ``mujoco.mjtIntegrator`` value, or ``None`` to keep the task's.
    """
    check_model_shift(env.model, fields, where)
    model = env.model
    for name, factor in fields.items():
        for field, value in field_change(model, name, factor, f"{where}.{name}").items():
            _write_everywhere(env, field, value)
    if integrator is not None:
        _write_everywhere(env, "opt.integrator", np.asarray(int(integrator)))
    # The event terms resolved their template values when the env was built: re-plan them, and
    # run the start-up ones again, as at construction, so their draws land around the new template.
    env.event_manager.rebuild()
    env.event_manager.apply("startup", env.all_ids)
    env.reset()


def _write_everywhere(env: BatchedEnv, field: str, value: np.ndarray) -> None:
    """Set MuJoCo field ``field`` of the template model and of every world to ``value``."""
    model = env.model
    if field.startswith("opt."):
        setattr(model.opt, field[4:], value.item() if value.ndim == 0 else value)
    else:
        getattr(model, field)[...] = value
    rows = torch.as_tensor(value).expand(env.num_envs, *value.shape).clone()
    env.sim.set_model_field(field, rows)


__all__ = ["MOTOR_STRENGTH", "check_model_shift", "field_change", "shift_model"]
