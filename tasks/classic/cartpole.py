"""``Cartpole-Balance`` and ``Cartpole-Swingup``: the DeepMind Control Suite cart-pole tasks.

Model ``assets/cartpole.xml`` (DMC's masses, lengths, damping, rail limits and actuator). One
physics step of 10 ms per control step and 1000 steps per episode: DMC's 10 s time limit. The
reward is DMC's smooth one, in ``[0, 1]`` per step::

    upright        = (cos(angle) + 1) / 2
    centered       = (1 + tolerance(cart_pos, margin=2)) / 2
    small_control  = (4 + tolerance(ctrl, margin=1, value_at_margin=0, sigmoid="quadratic")) / 5
    small_velocity = (1 + tolerance(angular_vel, margin=5)) / 2
    reward         = upright * centered * small_control * small_velocity

Observation (``policy``, 5-D): cart position, cos and sin of the pole angle, cart velocity, pole
angular velocity (DMC's ``position`` then ``velocity``). No termination: only the 1000-step
time-out, reported as ``truncated``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from robolearn.assets import asset_path
from robolearn.envs import ActionTerm, InitialState, ObsGroup, ObsTerm, RewardTerm, SuccessTerm, TaskCfg, mdp

from .rewards import tolerance

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

CART = 0
"""Index of the slider (cart position) in ``qpos``/``qvel``."""
POLE = 1
"""Index of the pole hinge (angle, 0 = upright) in ``qpos``/``qvel``."""


# -- reward ------------------------------------------------------------------------------------
def applied_control(env: BatchedEnv) -> torch.Tensor:
    """Return the action as the actuators received it: clipped to the bounds of their ``ctrlrange``.

    MuJoCo clamps ``ctrl`` of a ctrl-limited actuator, so an action outside the range moves the
    cart no harder than the bound; the control cost is charged on that, not on the raw request.
    """
    return torch.maximum(torch.minimum(env.action, env.ctrl_high), env.ctrl_low)


def smooth_balance(env: BatchedEnv) -> torch.Tensor:
    """DMC's smooth cart-pole reward ``[N]`` in ``[0, 1]`` at the post-step state (module doc)."""
    qpos, qvel = env.sim.qpos, env.sim.qvel
    upright = (torch.cos(qpos[:, POLE]) + 1.0) / 2.0
    centered = (1.0 + tolerance(qpos[:, CART], margin=2.0)) / 2.0
    ctrl = applied_control(env)[:, 0]
    small_control = (4.0 + tolerance(ctrl, margin=1.0, value_at_margin=0.0, sigmoid="quadratic")) / 5.0
    small_velocity = (1.0 + tolerance(qvel[:, POLE], margin=5.0)) / 2.0
    return upright * centered * small_control * small_velocity


# -- initial state -----------------------------------------------------------------------------
def balance_state(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    cart_uniform: float = 0.1,
    angle_uniform: float = 0.034,
    vel_gaussian: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Start near upright (DMC ``balance``): cart ``U(-a, a)``, angle ``U(-b, b)``, qvel ``N(0, c^2)``."""
    n = env_ids.numel()
    qpos = torch.empty(n, 2, dtype=torch.float64, device=env.device)
    qpos[:, CART] = env.draw_uniform(env_ids, 1, -cart_uniform, cart_uniform)[:, 0]
    qpos[:, POLE] = env.draw_uniform(env_ids, 1, -angle_uniform, angle_uniform)[:, 0]
    # The velocity kick breaks the symmetry of a state that would otherwise sit at an equilibrium.
    qvel = env.draw_normal(env_ids, 2, vel_gaussian)
    return qpos, qvel


def swingup_state(
    env: BatchedEnv,
    env_ids: torch.Tensor,
    cart_gaussian: float = 0.01,
    angle_gaussian: float = 0.01,
    vel_gaussian: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Start hanging (DMC ``swingup``): cart ``N(0, a^2)``, angle ``pi + N(0, b^2)``, qvel ``N(0, c^2)``."""
    n = env_ids.numel()
    qpos = torch.empty(n, 2, dtype=torch.float64, device=env.device)
    qpos[:, CART] = env.draw_normal(env_ids, 1, cart_gaussian)[:, 0]
    qpos[:, POLE] = math.pi + env.draw_normal(env_ids, 1, angle_gaussian)[:, 0]
    qvel = env.draw_normal(env_ids, 2, vel_gaussian)
    return qpos, qvel


# -- configs -----------------------------------------------------------------------------------
def _cartpole_cfg(initial_state: InitialState, description: str) -> TaskCfg:
    """Build the shared cart-pole config; the two tasks differ only in their initial state."""
    return TaskCfg(
        mjcf=asset_path("cartpole.xml"),
        decimation=1,
        episode_length=1000,
        observations={
            "policy": ObsGroup(
                terms={
                    "cart_pos": ObsTerm(mdp.qpos, params={"start": CART, "stop": CART + 1}, unit="m"),
                    "pole_cos_sin": ObsTerm(mdp.hinge_cos_sin, params={"qpos_index": POLE}),
                    "cart_vel": ObsTerm(mdp.qvel, params={"start": CART, "stop": CART + 1}, unit="m/s"),
                    "pole_ang_vel": ObsTerm(mdp.qvel, params={"start": POLE, "stop": POLE + 1}, unit="rad/s"),
                }
            )
        },
        # MuJoCo clamps ctrl to [-1, 1] anyway; clipping here states the action bounds in the task
        # and keeps backends that do not clamp (a GPU port) on the same dynamics.
        actions={"slide": ActionTerm(kind="torque", clip=(-1.0, 1.0))},
        rewards={"smooth_balance": RewardTerm(smooth_balance, weight=1.0)},
        initial_state=initial_state,
        success=SuccessTerm(mdp.hinge_upright, params={"qpos_index": POLE, "max_angle_deg": 10.0}),
        description=description,
    )


def cartpole_balance_cfg() -> TaskCfg:
    """Return the config of ``Cartpole-Balance``: keep the pole up from a near-upright start."""
    return _cartpole_cfg(
        InitialState(balance_state),
        "DMC cartpole-balance: keep the pole upright; 5-D obs, 1-D force, reward in [0, 1], 1000 steps",
    )


def cartpole_swingup_cfg() -> TaskCfg:
    """Return the config of ``Cartpole-Swingup``: swing the pole up from hanging down, then balance."""
    return _cartpole_cfg(
        InitialState(swingup_state),
        "DMC cartpole-swingup: swing the pole up, balance; 5-D obs, 1-D force, reward in [0, 1], 1000 steps",
    )
