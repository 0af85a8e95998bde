"""Generic MDP terms: small functions over the batched state, reused by every task family.

Observation and reward terms are ``(env, **params) -> Tensor[N, ...]``; initial-state terms are
``(env, env_ids, **params) -> (qpos, qvel)``; events are ``(env, env_ids, **params) -> None``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import mujoco
import torch

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv


# -- observations ----------------------------------------------------------------------------
def qpos(env: BatchedEnv, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Generalised positions ``qpos[:, start:stop]``."""
    return env.sim.qpos[:, start:stop]


def qvel(env: BatchedEnv, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Generalised velocities ``qvel[:, start:stop]``."""
    return env.sim.qvel[:, start:stop]


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
    return torch.from_numpy(frames).to(torch.float32).div_(255.0)


def command(env: BatchedEnv, name: str) -> torch.Tensor:
    """The current value of command ``name`` ``[N, dim]``."""
    return env.command_manager.values[name]


def body_offset(env: BatchedEnv, body: str, reference: str, dims: int = 3) -> torch.Tensor:
    """World-frame ``xpos[body] - xpos[reference]``, first ``dims`` coordinates ``[N, dims]``.

    ``xpos`` is as the backend leaves it after a step (one substep behind unless the task sets
    ``forward_after_step``), which is what Gymnasium's ``get_body_com`` reads after ``mj_step``.
    """
    return (env.sim.xpos[:, _body_id(env, body)] - env.sim.xpos[:, _body_id(env, reference)])[:, :dims]


def _body_id(env: BatchedEnv, name: str) -> int:
    """The id of body ``name``, or an error naming the bodies there are."""
    body_id = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_BODY, name)
    if body_id < 0:
        names = [env.model.body(i).name for i in range(env.model.nbody)]
        raise ValueError(f"no body {name!r} in the model; bodies: {', '.join(names)}")
    return body_id


# -- rewards ---------------------------------------------------------------------------------
def forward_velocity(env: BatchedEnv, qpos_index: int = 0) -> torch.Tensor:
    """Finite-difference velocity of one coordinate over the control step, as Gymnasium computes it."""
    return (env.sim.qpos[:, qpos_index] - env.prev_qpos[:, qpos_index]) / env.dt


def action_l2(env: BatchedEnv) -> torch.Tensor:
    """Squared norm of the action ``sum(a^2)``; weight it negatively as a cost."""
    a = env.action
    return (a * a).sum(dim=1)


def alive(env: BatchedEnv) -> torch.Tensor:
    """1 for every world, every step."""
    return torch.ones(env.num_envs, dtype=torch.float64)


def body_distance(env: BatchedEnv, body: str, reference: str) -> torch.Tensor:
    """Euclidean distance between two bodies' positions ``[N]``; weight it negatively as a cost."""
    return torch.linalg.vector_norm(body_offset(env, body, reference), dim=1)


def healthy(env: BatchedEnv, **params: Any) -> torch.Tensor:
    """1 where a planar walker is healthy (:func:`is_healthy`, same parameters), else 0: Gymnasium's
    survive bonus.
    """
    return is_healthy(env, **params).to(torch.float64)


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
    return ~(torch.isfinite(env.sim.qpos).all(dim=1) & torch.isfinite(env.sim.qvel).all(dim=1))


def unhealthy(env: BatchedEnv, **params: Any) -> torch.Tensor:
    """True where :func:`is_healthy` (same parameters) is false: a fall ends the episode."""
    return ~is_healthy(env, **params)


# -- success ---------------------------------------------------------------------------------
def hinge_upright(env: BatchedEnv, qpos_index: int, max_angle_deg: float = 10.0) -> torch.Tensor:
    """True where a hinge (0 = upright) is within ``max_angle_deg`` of upright."""
    return torch.cos(env.sim.qpos[:, qpos_index]) >= math.cos(math.radians(max_angle_deg))


# -- initial state ---------------------------------------------------------------------------
def default_state(env: BatchedEnv, env_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's ``qpos0`` and zero velocity for every reset world."""
    n = env_ids.numel()
    q0 = torch.as_tensor(env.model.qpos0, dtype=torch.float64)
    return q0.expand(n, -1).clone(), torch.zeros(n, env.model.nv, dtype=torch.float64)


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
