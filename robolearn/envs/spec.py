"""The policy spec: what each observation and action number means, captured from a live env.

Runners write it to ``policy_spec.json`` at training time; the exporter turns it into the
manifest the deploy runtime enforces (DESIGN.md, "Exported policy"). It is plain JSON data.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

from robolearn.utils.version import VERSION

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

SPEC_VERSION = 1
"""Bumped when the layout below changes incompatibly."""


def _jsonable(value: Any) -> Any:
    """Numbers, tuples and arrays as JSON values (inf becomes a string, which JSON lacks)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        v = float(arr)
        return v if np.isfinite(v) else ("inf" if v > 0 else "-inf")
    return [_jsonable(v) for v in arr.tolist()]


def _model(model: Any) -> dict[str, Any] | None:
    """A latency or actuator model (a dataclass) as ``{"type": name, <fields>}``; ``None`` stays."""
    if model is None:
        return None
    fields = dataclasses.asdict(model) if dataclasses.is_dataclass(model) else dict(vars(model))
    return {"type": type(model).__name__, **{k: _jsonable(v) for k, v in fields.items()}}


def policy_spec(env: BatchedEnv) -> dict[str, Any]:
    """The JSON-ready spec of ``env``: observation groups and terms in order, actions, rates, joints."""
    model = env.model
    om, am = env.observation_manager, env.action_manager
    groups: dict[str, Any] = {}
    for gname, group in om.groups.items():
        terms, start = [], 0
        for name, dim in om.term_dims(gname).items():
            term = group.terms[name]
            terms.append(
                {
                    "name": name,
                    "start": start,
                    "dim": dim,
                    "unit": term.unit,
                    "scale": _jsonable(term.scale),
                    "clip": _jsonable(term.clip),
                    "noise": None
                    if term.noise is None or not group.enable_noise
                    else {"kind": term.noise.kind, "scale": term.noise.scale},
                }
            )
            start += dim
        groups[gname] = {
            "shape": list(om.shapes[gname]),
            "history_length": group.history_length,
            "frame_dim": start,
            "terms": terms,
            # What the policy was trained to tolerate: the deploy runtime can compare its latency.
            "delay": _model(group.delay),
        }
    actions = []
    for name, term in am.terms.items():
        sl = am.term_slices[name]
        ids = am.index[sl].tolist()
        joints = []
        for i in ids:
            trn = model.actuator_trnid[i, 0]
            is_joint = model.actuator_trntype[i] == mujoco.mjtTrn.mjTRN_JOINT
            joints.append(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, trn) if is_joint else None)
        actions.append(
            {
                "name": name,
                "kind": term.kind,
                "start": sl.start,
                "dim": sl.stop - sl.start,
                "actuators": [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in ids],
                "joints": joints,
                "scale": _jsonable(am.scale[sl].numpy()),
                "offset": _jsonable(am.offset[sl].numpy()),
                "clip": _jsonable(term.clip),
                "low": _jsonable(env.ctrl_low[sl].numpy()),
                "high": _jsonable(env.ctrl_high[sl].numpy()),
                "kp": _jsonable(term.kp),
                "kd": _jsonable(term.kd),
                "actuator": _model(term.actuator),
            }
        )
    return {
        "spec_version": SPEC_VERSION,
        "robolearn_version": VERSION,
        "task_id": env.task_id,
        "control_rate_hz": 1.0 / env.dt,
        "dt": env.dt,
        "physics_dt": env.physics_dt,
        "decimation": env.cfg.decimation,
        "episode_length": env.max_episode_length,
        "observations": groups,
        "action_dim": env.action_dim,
        "actions": actions,
        "joint_order": [j for a in actions for j in a["joints"]],
        "action_delay": _model(env.cfg.action_delay),
        "control_jitter": _model(env.cfg.control_jitter),
        "qpos_joints": [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)],
    }
