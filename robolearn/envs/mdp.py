"""Generic MDP terms: small functions over the batched state, reused by every task family.

Observation and reward terms are ``(env, **params) -> Tensor[N, ...]``; initial-state terms are
``(env, env_ids, **params) -> (qpos, qvel)``; events are ``(env, env_ids, **params) -> None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

Func = Callable[..., torch.Tensor]
"""A term function ``(env, **params) -> Tensor``."""


# -- observations ----------------------------------------------------------------------------
def qpos(env: BatchedEnv, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Generalised positions ``qpos[:, start:stop]``."""
    q = env.sim.qpos
    return q if start == 0 and stop is None else q[:, start:stop]  # the whole view needs no slicing op


def qvel(env: BatchedEnv, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Generalised velocities ``qvel[:, start:stop]``."""
    v = env.sim.qvel
    return v if start == 0 and stop is None else v[:, start:stop]


def last_action(env: BatchedEnv) -> torch.Tensor:
    """The action applied at the last step ``[N, A]``."""
    return env.action


def hinge_cos_sin(env: BatchedEnv, qpos_index: int) -> torch.Tensor:
    """``[cos(q), sin(q)]`` of one hinge angle: continuous, unlike the wrapped angle."""
    angle = env.sim.qpos[:, qpos_index]
    return torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)


def camera_image(env: BatchedEnv, camera: str | int = -1, width: int = 64, height: int = 64) -> torch.Tensor:
    """RGB images ``[N, height, width, 3]`` in ``[0, 1]`` from one camera of every world.

    Rendering is offscreen and per world (CPU rasterisation here), so an ``image`` group costs
    milliseconds per world and step: use small images and few worlds.
    """
    frames = env.render(list(range(env.num_envs)), width=width, height=height, camera=camera)
    return torch.from_numpy(frames).to(env.device, torch.float32).div_(255.0)


def command(env: BatchedEnv, name: str) -> torch.Tensor:
    """The current value of command ``name`` ``[N, dim]``."""
    return env.command_manager.values[name]


def body_offset(env: BatchedEnv, body: str, reference: str, dims: int = 3) -> torch.Tensor:
    """World-frame ``xpos[body] - xpos[reference]``, first ``dims`` coordinates ``[N, dims]``.

    ``xpos`` is as the backend leaves it after a step (one substep behind unless the task sets
    ``forward_after_step``), which is what Gymnasium's ``get_body_com`` reads after ``mj_step``.
    """
    return (env.sim.xpos[:, _body_id(env, body)] - env.sim.xpos[:, _body_id(env, reference)])[:, :dims]


def _body_id(env: BatchedEnv, name: str | int) -> int:
    """The id of body ``name`` from the env's name tables (built once), or an error naming the bodies."""
    return env.names.id("body", name, "body")


# -- rewards ---------------------------------------------------------------------------------
def forward_velocity(env: BatchedEnv, qpos_index: int = 0) -> torch.Tensor:
    """Finite-difference velocity of one coordinate over the control step, as Gymnasium computes it."""
    return (env.sim.qpos[:, qpos_index] - env.prev_qpos[:, qpos_index]) / env.dt


def body_velocity(env: BatchedEnv, body: str | int, axis: int = 0) -> torch.Tensor:
    """Finite-difference world velocity of a body's frame along ``axis`` over the control step,
    from ``xpos`` (Gymnasium's Ant); the task must list ``xpos`` in ``TaskCfg.prev_fields``.
    """
    b = _body_id(env, body)
    return (env.sim.xpos[:, b, axis] - env.prev["xpos"][:, b, axis]) / env.dt


def mass_center(env: BatchedEnv, xipos: torch.Tensor) -> torch.Tensor:
    """Centre of mass ``[N, 3]`` of every body's ``xipos``, weighted by each world's own masses."""
    mass = env.sim.get_model_field("body_mass").to(xipos.dtype)
    return (mass.unsqueeze(-1) * xipos).sum(dim=1) / mass.sum(dim=1, keepdim=True)


def com_velocity(env: BatchedEnv, axis: int = 0) -> torch.Tensor:
    """Finite-difference velocity of the centre of mass along ``axis`` (Gymnasium's Humanoid); the
    task must list ``xipos`` in ``TaskCfg.prev_fields``.
    """
    after = mass_center(env, env.sim.data_field("xipos"))
    before = mass_center(env, env.prev["xipos"])
    return (after[:, axis] - before[:, axis]) / env.dt


def contact_forces(env: BatchedEnv, clip: tuple[float, float] | None = None, first_body: int = 1) -> torch.Tensor:
    """Per-body com-based external forces ``cfrc_ext[:, first_body:]`` flattened ``[N, 6 * bodies]``,
    optionally clipped; the task must set ``contact_forces=True``.
    """
    f = env.sim.cfrc_ext[:, first_body:]
    if clip is not None:
        f = f.clamp(clip[0], clip[1])
    return f.reshape(env.num_envs, -1)


def contact_force_l2(
    env: BatchedEnv, clip: tuple[float, float] | None = None, max_cost: float | None = None
) -> torch.Tensor:
    """``sum(cfrc_ext^2)`` over every body (optionally clipping each entry first and capping the sum
    at ``max_cost``); weight it negatively as a cost.
    """
    f = contact_forces(env, clip=clip, first_body=0)
    total = (f * f).sum(dim=1)
    return total if max_cost is None else total.clamp(max=max_cost)


def data_field(env: BatchedEnv, name: str, first: int = 0) -> torch.Tensor:
    """Rows ``first:`` of an ``MjData`` output field, flattened ``[N, k]`` (``cinert``, ``cvel``,
    ``qfrc_actuator`` ...); the task must list the field in ``TaskCfg.data_fields`` unless it is one
    the backend always provides (``xpos``, ``xquat``, ``cvel``, ``sensordata``).
    """
    if name in ("xpos", "xquat", "cvel", "sensordata"):
        value = getattr(env.sim, name)
    else:
        value = env.sim.data_field(name)
    return value[:, first:].reshape(env.num_envs, -1)


def drawn(env: BatchedEnv, names: list[str] | tuple[str, ...] | None = None) -> torch.Tensor:
    """The values drawn per world (``env.drawn``: randomised parameters, delays ...) concatenated
    ``[N, k]``, all of them in name order or ``names`` in the given order. Privileged.
    """
    keys = sorted(env.drawn) if names is None else list(names)
    missing = [k for k in keys if k not in env.drawn]
    if missing:
        raise ValueError(f"drawn: no values drawn under {missing}; drawn so far: {sorted(env.drawn)}")
    if not keys:
        return torch.zeros(env.num_envs, 0, dtype=torch.float64, device=env.device)
    return torch.cat([env.drawn[k] for k in keys], dim=1)


drawn.privileged = True  # type: ignore[attr-defined]


def true_state(env: BatchedEnv) -> torch.Tensor:
    """The full simulator state ``concat(qpos, qvel)`` ``[N, nq + nv]``. Privileged."""
    return torch.cat([env.sim.qpos, env.sim.qvel], dim=1)


true_state.privileged = True  # type: ignore[attr-defined]
contact_forces.privileged = True  # type: ignore[attr-defined]


def action_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared norm of the action ``sum(a^2)``; weight it negatively as a cost."""
    a = env.action
    return (a * a).sum(dim=1)


def alive(env: BatchedEnv) -> torch.Tensor:
    """1 for every world, every step."""
    return torch.ones(env.num_envs, dtype=torch.float64, device=env.device)


def body_distance(env: BatchedEnv, body: str, reference: str) -> torch.Tensor:
    """Euclidean distance between two bodies' positions ``[N]``; weight it negatively as a cost."""
    return torch.linalg.vector_norm(body_offset(env, body, reference), dim=1)


def healthy(env: BatchedEnv, rule: Func | None = None, **params: Any) -> torch.Tensor:
    """1 where ``rule`` (default :func:`is_healthy`; called with the other parameters) holds, else
    0: Gymnasium's survive bonus.
    """
    return (rule or is_healthy)(env, **params).to(torch.float64)


def is_healthy(
    env: BatchedEnv,
    z_range: tuple[float, float],
    angle_range: tuple[float, float],
    state_range: tuple[float, float] | None = None,
    z_index: int = 1,
    angle_index: int = 2,
    state_start: int = 2,
) -> torch.Tensor:
    """True where a planar walker stands, by Gymnasium's rule for Hopper and Walker2d ``[N]`` bool.

    The torso height ``qpos[z_index]`` and pitch ``qpos[angle_index]`` lie strictly inside their
    ranges and, if ``state_range`` is given, so does every entry of ``concat(qpos, qvel)[state_start:]``.
    The bounds are open, as Gymnasium's ``low < x < high``, so a state exactly on one is unhealthy.
    """
    qpos, qvel = env.sim.qpos, env.sim.qvel
    z, angle = qpos[:, z_index], qpos[:, angle_index]
    ok = (z_range[0] < z) & (z < z_range[1]) & (angle_range[0] < angle) & (angle < angle_range[1])
    if state_range is not None:
        state = torch.cat([qpos, qvel], dim=1)[:, state_start:]
        ok = ok & ((state_range[0] < state) & (state < state_range[1])).all(dim=1)
    return ok


# -- terminations ----------------------------------------------------------------------------
def non_finite_state(env: BatchedEnv) -> torch.Tensor:
    """True where ``qpos`` or ``qvel`` holds NaN or inf."""
    qpos, qvel = env.sim.qpos, env.sim.qvel
    return ~(torch.isfinite(qpos).all(dim=1) & torch.isfinite(qvel).all(dim=1))


def height_in_range(
    env: BatchedEnv,
    z_range: tuple[float, float],
    z_index: int = 2,
    closed: bool = False,
    finite_state: bool = False,
) -> torch.Tensor:
    """True where ``qpos[z_index]`` lies in ``z_range`` ``[N]`` bool: Gymnasium's healthy rule for
    Ant (``closed=True``, ``finite_state=True``: every qpos/qvel entry finite) and Humanoid (open).
    """
    z = env.sim.qpos[:, z_index]
    if closed:
        ok = (z_range[0] <= z) & (z <= z_range[1])
    else:
        ok = (z_range[0] < z) & (z < z_range[1])
    if finite_state:
        ok = ok & ~non_finite_state(env)
    return ok


def unhealthy(env: BatchedEnv, rule: Func | None = None, **params: Any) -> torch.Tensor:
    """True where ``rule`` (default :func:`is_healthy`; same parameters) is false: a fall ends the episode."""
    return ~(rule or is_healthy)(env, **params)


# -- success ---------------------------------------------------------------------------------
def hinge_upright(env: BatchedEnv, qpos_index: int, max_angle_deg: float = 10.0) -> torch.Tensor:
    """True where a hinge (0 = upright) is within ``max_angle_deg`` of upright."""
    return torch.cos(env.sim.qpos[:, qpos_index]) >= math.cos(math.radians(max_angle_deg))


# -- initial state ---------------------------------------------------------------------------
def default_state(env: BatchedEnv, env_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's ``qpos0`` and zero velocity for every reset world."""
    n = env_ids.numel()
    q0 = env.default_qpos
    return q0.expand(n, -1).clone(), torch.zeros(n, env.model.nv, dtype=torch.float64, device=q0.device)


def noisy_state(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    qpos_uniform: float = 0.0,
    qvel_uniform: float = 0.0,
    qvel_gaussian: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``qpos0 + U(-a, a)`` and ``U(-b, b)`` or ``N(0, c^2)`` velocities (Gymnasium's reset noise)."""
    qpos0, qvel0 = default_state(env, env_ids)
    if qpos_uniform:
        qpos0 += env.draw_uniform(env_ids, env.model.nq, -qpos_uniform, qpos_uniform)
    if qvel_uniform:
        qvel0 += env.draw_uniform(env_ids, env.model.nv, -qvel_uniform, qvel_uniform)
    if qvel_gaussian:
        qvel0 += env.draw_normal(env_ids, env.model.nv, qvel_gaussian)
    return qpos0, qvel0
