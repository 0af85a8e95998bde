"""Reading a live env into the typed policy spec (:class:`robolearn.spec.PolicySpec`).

The spec's dataclasses, its JSON layout, validation and versions live in ``robolearn.spec``
(importable without the simulator); this module only fills them in from a ``BatchedEnv`` and the
task config's terms. Runners write the result to ``policy_spec.json``; the exporter carries it
into the manifest the deploy runtime enforces (DESIGN.md, "Exported policy").
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mujoco

from robolearn.envs.cfg import ObsGroup, ObsTerm
from robolearn.spec import (
    SPEC_VERSION,
    ActionTermSpec,
    DelaySpec,
    ModelSpec,
    NoiseSpec,
    ObsGroupSpec,
    ObsTermSpec,
    PolicySpec,
)
from robolearn.spec.processors import Delay, uniform_int
from robolearn.utils.version import VERSION

if TYPE_CHECKING:
    import torch

    from robolearn.envs.batched_env import BatchedEnv


def _floats(value: Any) -> float | tuple[float, ...] | None:
    """A number or a sequence of numbers as float(s); ``None`` stays."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return tuple(float(v) for v in value)


def _pair(value: Any) -> tuple[float, float] | None:
    """A ``(low, high)`` clip as floats; ``None`` stays."""
    return None if value is None else (float(value[0]), float(value[1]))


def _jsonable(value: Any) -> Any:
    """A model field as a JSON value (tuples as lists, infinities as strings)."""
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def model_spec(model: Any) -> ModelSpec | None:
    """A latency or actuator model (a dataclass) as its class name and fields; ``None`` stays."""
    if model is None:
        return None
    fields = dataclasses.asdict(model) if dataclasses.is_dataclass(model) else dict(vars(model))
    return ModelSpec(type(model).__name__, {k: _jsonable(v) for k, v in fields.items()})


def delay_spec(model: Any, where: str) -> DelaySpec | None:
    """An observation delay model as a :class:`DelaySpec` (its ``lag_range``, ``jitter``, ``hold_prob``)."""
    if model is None:
        return None
    try:
        lo, hi = model.lag_range
        return DelaySpec(type(model).__name__, (int(lo), int(hi)), bool(getattr(model, "jitter", False)),
                         float(getattr(model, "hold_prob", 0.0)))
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: the policy spec records a delay by lag_range (low, high), jitter and "
                         f"hold_prob; {model!r} has none ({exc})") from None


def _term_params(term: ObsTerm) -> dict[str, Any]:
    """The term's parameters that are JSON values (numbers, strings, lists of them); others (a
    callable rule) are left out, since no runtime outside the simulator could evaluate them.
    """
    out: dict[str, Any] = {}
    for key, value in (term.params or {}).items():
        plain = _jsonable(value)
        try:
            json.dumps(plain, allow_nan=False)
        except (TypeError, ValueError):
            continue
        out[str(key)] = plain
    return out


def _source(term: ObsTerm) -> str:
    """The term function's qualified name (what a deploy runtime maps to a robot reading)."""
    func = term.func
    return f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', type(func).__name__)}".lstrip(".")


def obs_group_spec(
    name: str, group: ObsGroup, dims: Sequence[int], shape: Sequence[int], privileged: Sequence[bool]
) -> ObsGroupSpec:
    """The spec of group ``name`` of a task config, given each term's width and privileged flag
    (in order) and the group's observation shape, as the observation manager probed them.

    ``shape`` is the whole observation for a flat group (``frame_dim * history_length``) but one
    frame ``[H, W, C]`` for a shaped (image) group, whose ``history_length`` frames the env stacks
    along the channel axis: what ``ImageInputSpec`` checks (its ``frame_shape`` is one frame of
    the group, its ``frames`` the stack).
    """
    terms, start = [], 0
    for (tname, term), dim, priv in zip(group.terms.items(), dims, privileged, strict=True):
        noise = None
        if term.noise is not None and group.enable_noise:
            noise = NoiseSpec(term.noise.kind, float(term.noise.scale))
        terms.append(ObsTermSpec(
            name=tname, start=start, dim=int(dim), unit=term.unit, scale=_floats(term.scale), clip=_pair(term.clip),
            noise=noise, source=_source(term), privileged=bool(priv), params=_term_params(term),
        ))
        start += int(dim)
    return ObsGroupSpec(
        shape=tuple(int(s) for s in shape),
        frame_dim=start,
        terms=tuple(terms),
        history_length=int(group.history_length),
        delay=delay_spec(group.delay, f"observations.{name}.delay"),
    )


def _column(t: torch.Tensor) -> tuple[float, ...]:
    """A small build-time tensor as floats (read on the host: the spec is written once per run)."""
    return tuple(float(v) for v in t.cpu().tolist())


def read_policy_spec(env: BatchedEnv) -> PolicySpec:
    """The typed spec of ``env``: observation groups and terms in order, actions, rates, joints."""
    model = env.model
    om, am = env.observation_manager, env.action_manager
    actions = []
    for name, term in am.terms.items():
        sl = am.term_slices[name]
        ids = am.index[sl].tolist()
        joints = []
        for i in ids:
            is_joint = model.actuator_trntype[i] == mujoco.mjtTrn.mjTRN_JOINT
            joints.append(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, model.actuator_trnid[i, 0]) if is_joint else None)
        # MuJoCo's own names (None when unnamed), as the spec has recorded them since version 1.
        actions.append(ActionTermSpec(
            name=name,
            kind=term.kind,
            start=sl.start,
            dim=sl.stop - sl.start,
            actuators=tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in ids),
            joints=tuple(joints),
            scale=_column(am.scale[sl]),
            offset=_column(am.offset[sl]),
            clip=_pair(term.clip),
            low=_column(env.ctrl_low[sl]),
            high=_column(env.ctrl_high[sl]),
            kp=_floats(term.kp),
            kd=_floats(term.kd),
            actuator=model_spec(term.actuator),
        ))
    spec = PolicySpec(
        spec_version=SPEC_VERSION,
        robolearn_version=VERSION,
        task_id=env.task_id,
        control_rate_hz=1.0 / env.dt,
        dt=env.dt,
        physics_dt=env.physics_dt,
        decimation=env.cfg.decimation,
        episode_length=env.max_episode_length,
        observations=dict(om.specs),
        action_dim=env.action_dim,
        actions=tuple(actions),
        joint_order=tuple(j for a in actions for j in a.joints),
        action_delay=model_spec(env.cfg.action_delay),
        control_jitter=model_spec(env.cfg.control_jitter),
        qpos_joints=tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)),
        dtype=str(env.dtype).removeprefix("torch."),
    )
    spec.validate(f"policy spec of task {env.task_id!r}")
    return spec


def policy_spec(env: BatchedEnv) -> dict[str, Any]:
    """:func:`read_policy_spec` as the JSON-ready mapping written to ``policy_spec.json``."""
    return read_policy_spec(env).to_dict()


# Re-exported for robolearn.sim2real.randomization (its latency models build these processors):
# its layer reaches robolearn.spec through robolearn.envs.
__all__ = ["Delay", "delay_spec", "model_spec", "obs_group_spec", "policy_spec", "read_policy_spec", "uniform_int"]
