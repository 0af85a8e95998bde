"""The DMC-style classic tasks: tolerance numerics, reward ranges, initial states, time-outs, and
hand-written controllers that show each task is solvable with the model as written."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

import robolearn
from robolearn.assets import asset_path
from robolearn.tasks.classic.cartpole import smooth_balance
from robolearn.tasks.classic.pendulum import DMC_ANGLE_BOUND_DEG, upright_sparse
from robolearn.tasks.classic.rewards import SIGMOIDS, tolerance

TASKS = ["Cartpole-Balance", "Cartpole-Swingup", "Pendulum-Swingup"]
OBS_DIM = {"Cartpole-Balance": 5, "Cartpole-Swingup": 5, "Pendulum-Swingup": 3}


def t64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# -- tolerance -----------------------------------------------------------------------------------
@pytest.mark.parametrize("sigmoid", SIGMOIDS)
def test_tolerance_is_one_inside_bounds_and_value_at_margin_one_margin_out(sigmoid):
    value_at_margin = 0.0 if sigmoid in ("linear", "quadratic", "cosine") else 0.25
    x = t64(-1.0, -0.3, 0.0, 0.7, 2.0)
    inside = tolerance(x, bounds=(-1.0, 2.0), margin=0.5, sigmoid=sigmoid, value_at_margin=value_at_margin)
    assert torch.equal(inside, torch.ones(5, dtype=torch.float64))  # bounds are inclusive
    at_margin = tolerance(t64(-1.5, 2.5), bounds=(-1.0, 2.0), margin=0.5, sigmoid=sigmoid, value_at_margin=0.3)
    torch.testing.assert_close(at_margin, t64(0.3, 0.3), rtol=0, atol=1e-12)


@pytest.mark.parametrize("sigmoid", SIGMOIDS)
def test_tolerance_falls_monotonically_and_symmetrically(sigmoid):
    d = torch.linspace(0.0, 4.0, 201, dtype=torch.float64)
    above = tolerance(1.0 + d, bounds=(0.0, 1.0), margin=1.0, sigmoid=sigmoid, value_at_margin=0.1)
    below = tolerance(0.0 - d, bounds=(0.0, 1.0), margin=1.0, sigmoid=sigmoid, value_at_margin=0.1)
    torch.testing.assert_close(above, below, rtol=1e-12, atol=1e-15)  # (1 + d) - 1 rounds unlike d
    assert bool((above[1:] <= above[:-1]).all())
    assert bool(((above >= 0) & (above <= 1)).all())
    assert above[0] == 1.0 and above[-1] < above[1]


def test_tolerance_hand_computed_values():
    # gaussian: f(x) = v ** (x^2), so half a margin out with v = 0.1 gives 0.1 ** 0.25.
    g = tolerance(t64(0.5, 3.0), margin=1.0)
    torch.testing.assert_close(g, t64(0.1**0.25, 0.1**9), rtol=1e-12, atol=0)
    # long_tail: f(x) = 1 / (x^2 (1/v - 1) + 1): two margins out, v = 0.1 -> 1 / 37.
    lt = tolerance(t64(4.0), margin=2.0, sigmoid="long_tail", value_at_margin=0.1)
    torch.testing.assert_close(lt, t64(1.0 / 37.0), rtol=1e-12, atol=0)
    # quadratic with v = 0 (the cart-pole control term): 1 - x^2 inside one margin, 0 beyond.
    q = tolerance(t64(0.0, 0.5, -0.5, 1.0, 1.7), margin=1.0, sigmoid="quadratic", value_at_margin=0.0)
    torch.testing.assert_close(q, t64(1.0, 0.75, 0.75, 0.0, 0.0), rtol=0, atol=1e-15)
    # linear with v = 0.5: 1 - x / 2 up to two margins, then 0.
    lin = tolerance(t64(3.5, 4.0, 6.0), bounds=(0.0, 3.0), margin=1.0, sigmoid="linear", value_at_margin=0.5)
    torch.testing.assert_close(lin, t64(0.75, 0.5, 0.0), rtol=0, atol=1e-15)
    # margin 0: the indicator of the bounds.
    ind = tolerance(t64(-0.1, 0.0, 0.5, 1.0, 1.1), bounds=(0.0, 1.0))
    assert torch.equal(ind, t64(0.0, 1.0, 1.0, 1.0, 0.0))


def test_tolerance_rejects_bad_arguments():
    x = t64(0.0)
    with pytest.raises(ValueError, match="bounds"):
        tolerance(x, bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="margin"):
        tolerance(x, margin=-1.0)
    with pytest.raises(ValueError, match="sigmoid"):
        tolerance(x + 1, margin=1.0, sigmoid="nope")
    with pytest.raises(ValueError, match="value_at_margin"):
        tolerance(x + 1, margin=1.0, sigmoid="gaussian", value_at_margin=0.0)


# -- models ---------------------------------------------------------------------------------------
def test_models_carry_dmc_parameters():
    cp = mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))
    assert cp.opt.timestep == 0.01 and cp.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
    np.testing.assert_allclose(cp.body_mass[1:], [1.0, 0.1])
    np.testing.assert_allclose(cp.body_ipos[2], [0.0, 0.0, 0.5])  # 1 m pole, centre of mass halfway
    np.testing.assert_allclose(cp.jnt_range[0], [-1.8, 1.8])
    np.testing.assert_allclose(cp.dof_damping, [5e-4, 2e-6])
    np.testing.assert_allclose(cp.actuator_gear[0, 0], 10.0)
    np.testing.assert_allclose(cp.actuator_ctrlrange[0], [-1.0, 1.0])
    pd = mujoco.MjModel.from_xml_path(str(asset_path("pendulum.xml")))
    assert pd.opt.timestep == 0.02 and pd.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER
    np.testing.assert_allclose(pd.body_mass[1], 1.0)
    np.testing.assert_allclose(pd.body_ipos[1], [0.0, 0.0, 0.5])
    np.testing.assert_allclose(pd.dof_damping, [0.1])
    np.testing.assert_allclose(pd.actuator_gear[0, 0], 1.0)
    np.testing.assert_allclose(pd.actuator_ctrlrange[0], [-1.0, 1.0])
    for model in (cp, pd):
        assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "fixed") >= 0


# -- rewards, observations, initial states ---------------------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_random_rollout_rewards_in_unit_interval(task):
    env = robolearn.make(task, 8, seed=3, nthread=1)
    obs, _ = env.reset()
    assert obs["policy"].shape == (8, OBS_DIM[task])
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        # Actions past the [-1, 1] range too: the control cost must see the clipped, applied action.
        action = torch.rand(8, 1, generator=gen, dtype=torch.float64) * 3.0 - 1.5
        obs, reward, terminated, truncated, _ = env.step(action)
        assert bool(((reward >= 0) & (reward <= 1)).all())
        assert torch.isfinite(obs["policy"]).all()
        assert not terminated.any() and not truncated.any()


def test_cartpole_reward_hand_computed():
    env = robolearn.make("Cartpole-Balance", 3, seed=0, dtype=torch.float64, nthread=1)
    env.set_state(t64(0.5, 0.3, 0.0, 0.0, -1.0, math.pi).reshape(3, 2), t64(0.0, 2.0, 0.1, 0.0, 0.0, 0.0).reshape(3, 2))
    env.action = t64(0.5, 1.7, 0.0).reshape(3, 1)
    upright = (math.cos(0.3) + 1) / 2
    centered = (1 + 0.1 ** ((0.5 / 2) ** 2)) / 2  # gaussian tolerance, margin 2: 0.1 ** (d / 2)^2
    small_control = (4 + (1 - 0.5**2)) / 5  # quadratic, value 0 at the margin 1
    small_velocity = (1 + 0.1 ** ((2.0 / 5) ** 2)) / 2
    expected_0 = upright * centered * small_control * small_velocity
    # World 1: upright and centred at rest, but an action of 1.7 is applied as 1.0: small_control = 4/5.
    # World 2: pole straight down: the upright factor is 0.
    expected = t64(expected_0, 4 / 5, 0.0)
    torch.testing.assert_close(smooth_balance(env), expected, rtol=1e-12, atol=1e-15)


def test_cartpole_balance_zero_action_starts_near_one():
    env = robolearn.make("Cartpole-Balance", 8, seed=1, nthread=1)
    qpos = env.sim.qpos
    assert bool((qpos[:, 0].abs() <= 0.1).all()) and bool((qpos[:, 1].abs() <= 0.034).all())
    # Worst start: |x| = 0.1 and |angle| = 0.034 at rest, zero action:
    # (cos(0.034) + 1)/2 * (1 + 0.1 ** (0.05 ** 2))/2 = 0.99971 * 0.99713 = 0.99684.
    worst = (math.cos(0.034) + 1) / 2 * (1 + 0.1 ** (0.05**2)) / 2
    _, reward, *_ = env.step(torch.zeros(8, 1))
    assert bool((reward >= worst - 1e-3).all()), reward
    # At the exact upright equilibrium nothing moves and every factor is exactly 1.
    env.set_state(torch.zeros(8, 2), torch.zeros(8, 2))
    _, reward, *_ = env.step(torch.zeros(8, 1))
    assert torch.equal(reward, torch.ones(8))


def test_cartpole_swingup_starts_hanging_with_small_reward():
    env = robolearn.make("Cartpole-Swingup", 8, seed=2, nthread=1)
    obs, _ = env.reset()
    assert bool((obs["policy"][:, 1] < -0.99).all())  # cos(angle) ~ -1: hanging down
    _, reward, *_ = env.step(torch.zeros(8, 1))
    # upright = (1 + cos(pi + e)) / 2 ~ e^2 / 4 with e ~ N(0, 0.01^2).
    assert bool((reward < 1e-3).all()), reward


def test_pendulum_sparse_reward_is_one_exactly_within_the_bound():
    degrees = [0.0, 7.9, -7.9, 8.1, -8.1, 29.9, 30.1, 180.0, 360.0 + 5.0]
    env = robolearn.make("Pendulum-Swingup", len(degrees), seed=0, dtype=torch.float64, nthread=1)
    env.set_state(torch.deg2rad(t64(*degrees)).reshape(-1, 1), torch.zeros(len(degrees), 1))
    assert DMC_ANGLE_BOUND_DEG == 8.0
    assert torch.equal(upright_sparse(env), t64(1, 1, 1, 0, 0, 0, 0, 0, 1))
    assert torch.equal(upright_sparse(env, angle_bound_deg=30.0), t64(1, 1, 1, 1, 1, 1, 0, 0, 1))
    # Through the env: the step's reward is the indicator of the post-step angle being in bounds.
    env.reset()
    cos_bound = math.cos(math.radians(DMC_ANGLE_BOUND_DEG))
    for _ in range(100):
        _, reward, *_ = env.step(torch.ones(len(degrees), 1))
        assert torch.equal(reward, (torch.cos(env.sim.qpos[:, 0]) >= cos_bound).double())


def test_pendulum_initial_angles_cover_the_circle_at_rest():
    env = robolearn.make("Pendulum-Swingup", 64, seed=4, nthread=1)
    angle = env.sim.qpos[:, 0]
    assert bool(((angle >= -math.pi) & (angle < math.pi)).all())
    assert angle.min() < -2.5 and angle.max() > 2.5
    assert torch.equal(env.sim.qvel, torch.zeros(64, 1, dtype=torch.float64))


@pytest.mark.parametrize("task", TASKS)
def test_episodes_truncate_at_exactly_1000_steps(task):
    env = robolearn.make(task, 2, seed=0, nthread=1)
    env.reset()
    action = torch.zeros(2, 1)
    for t in range(1000):
        _, _, terminated, truncated, info = env.step(action)
        assert not terminated.any()
        if t < 999:
            assert not truncated.any(), f"truncated early at step {t + 1}"
    assert truncated.all()
    assert torch.equal(info["episode"]["length"], torch.tensor([1000, 1000]))
    assert bool((info["episode"]["return"] <= 1000).all())
    assert torch.equal(env.episode_length, torch.zeros(2, dtype=torch.long))  # reset inside the step


# -- hand-written controllers ----------------------------------------------------------------------
def rollout(task: str, policy, num_envs: int, seed: int) -> torch.Tensor:
    """Undiscounted return of each world over one full episode under ``policy(obs) -> action``."""
    env = robolearn.make(task, num_envs, seed=seed, dtype=torch.float64, nthread=1)
    obs, _ = env.reset()
    ret = torch.zeros(num_envs, dtype=torch.float64)
    for _ in range(env.max_episode_length):
        obs, reward, _, truncated, _ = env.step(policy(obs["policy"]))
        ret += reward
    assert truncated.all()
    return ret


def cartpole_lqr_gain() -> torch.Tensor:
    """Discrete LQR gain on ``[x, angle, x_dot, angle_dot]``, from MuJoCo's own linearisation."""
    model = mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))
    # Finite-difference linearisation does not support RK4; Euler at 10 ms is close enough for a gain.
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    a, b = np.zeros((4, 4)), np.zeros((4, 1))
    mujoco.mjd_transitionFD(model, data, 1e-6, True, a, b, None, None)
    q, r = np.diag([1.0, 10.0, 0.1, 0.1]), np.eye(1)
    p = q.copy()
    for _ in range(3000):  # Riccati iteration to the fixed point
        k = np.linalg.solve(r + b.T @ p @ b, b.T @ p @ a)
        p = q + a.T @ p @ (a - b @ k)
    return torch.from_numpy(k[0])


def make_lqr_policy():
    gain = cartpole_lqr_gain()

    def policy(obs: torch.Tensor) -> torch.Tensor:
        x, c, s, xd, w = obs.unbind(1)
        state = torch.stack([x, torch.atan2(s, c), xd, w], dim=1)
        return (-(state @ gain)).clamp(-1, 1).unsqueeze(1)

    return policy


def test_lqr_balances_cartpole():
    ret = rollout("Cartpole-Balance", make_lqr_policy(), num_envs=4, seed=0)
    assert bool((ret >= 990).all()), ret  # measured: 999.7-999.9


def test_energy_swingup_then_lqr_solves_cartpole_swingup():
    lqr = make_lqr_policy()
    # Pole energy about the hinge, zero when upright at rest: J = I_com + m (l/2)^2 and m g l/2.
    model = mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))
    inertia, mgl = model.body_inertia[2, 1] + 0.1 * 0.5**2, 0.1 * 9.81 * 0.5

    def policy(obs: torch.Tensor) -> torch.Tensor:
        x, c, _, xd, w = obs.unbind(1)
        energy = 0.5 * inertia * w**2 + mgl * (c - 1.0)
        # Pushing the cart feeds the pole power -m a (l/2) cos(angle) w; this sign makes it >= 0
        # while the energy is short of upright, plus a weak pull back to the rail centre.
        pump = 20.0 * energy * c * w - 0.2 * x - 1.0 * xd
        near_top = c > math.cos(math.radians(30.0))
        return torch.where(near_top, lqr(obs)[:, 0], pump).clamp(-1, 1).unsqueeze(1)

    ret = rollout("Cartpole-Swingup", policy, num_envs=4, seed=0)
    assert bool((ret >= 800).all()), ret  # measured: ~846-849 (swing-up takes ~1.5 s of the 10)


def test_energy_swingup_solves_pendulum():
    # Bob of 1 kg at 0.5 m: J = I_sphere + m l^2 about the hinge; m g l of potential energy at the top.
    model = mujoco.MjModel.from_xml_path(str(asset_path("pendulum.xml")))
    inertia, mgl = model.body_inertia[1, 1] + 1.0 * 0.5**2, 1.0 * 9.81 * 0.5

    def policy(obs: torch.Tensor) -> torch.Tensor:
        c, s, w = obs.unbind(1)
        energy = 0.5 * inertia * w**2 + mgl * c  # m g l when upright at rest
        # Torque along the velocity adds energy; 1 N m cannot lift 4.9 N m, so it pumps over swings.
        pump = 10.0 * (mgl - energy) * torch.sign(w + 1e-9)
        hold = -10.0 * torch.atan2(s, c) - 1.0 * w
        return torch.where(c > math.cos(math.radians(30.0)), hold, pump).clamp(-1, 1).unsqueeze(1)

    ret = rollout("Pendulum-Swingup", policy, num_envs=8, seed=0)
    # Measured: mean ~800, min ~640 (a start hanging straight down needs ~6 s of pumping).
    assert ret.mean() >= 750 and ret.min() >= 600, ret
