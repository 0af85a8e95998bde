"""Hopper, Walker2d, Ant, Humanoid and Reacher reproduce Gymnasium's v5 tasks step for step (float64, relative 1e-6).

Each world starts from the state of a Gymnasium env, both take the same actions, and after every
termination or time-out the Gymnasium env is reset and its state copied into ours (which reset
that world on its own). Some worlds act hard enough to fall, others gently enough to reach the
time limit, so both kinds of episode end are compared, as are the per-term rewards.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import robolearn
from robolearn.envs import BatchedEnv

N = 4
STEPS = 1000
TOL = {"rtol": 1e-6, "atol": 1e-9}


def _sync(env: BatchedEnv, g: gym.Env, i: int) -> None:
    """Put our world ``i`` in Gymnasium env ``g``'s state; the observations must then agree."""
    env.set_state(
        torch.from_numpy(g.unwrapped.data.qpos.copy()),
        torch.from_numpy(g.unwrapped.data.qvel.copy()),
        torch.tensor([i]),
    )
    np.testing.assert_allclose(env.obs["policy"][i].numpy(), g.unwrapped._get_obs(), rtol=1e-12, atol=1e-12)


def _run_parity(
    task: str,
    gym_id: str,
    terms: dict[str, str],
    action_scale: list[float],
    episode_length: int | None = None,
) -> tuple[int, int]:
    """Step ``task`` and ``gym_id`` side by side; return the counts of (terminations, time-outs).

    ``terms`` maps our reward-term names to Gymnasium's ``info`` keys. ``episode_length`` shortens
    the time limit on both sides so a time-out comes within the test.
    """
    overrides = {} if episode_length is None else {"episode_length": episode_length}
    env = robolearn.make(task, N, seed=0, dtype=torch.float64, **overrides)
    limit = {} if episode_length is None else {"max_episode_steps": episode_length}
    gyms = [gym.make(gym_id, **limit) for _ in range(N)]
    for i, g in enumerate(gyms):
        g.reset(seed=100 + i)
        _sync(env, g, i)
    names = env.reward_manager.names
    assert sorted(names) == sorted(terms), f"{task}: reward terms {names}"
    columns = {key: names.index(name) for name, key in terms.items()}
    scale = np.asarray(action_scale)[:, None]
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for t in range(STEPS):
        actions = scale * rng.uniform(-1.0, 1.0, (N, env.action_dim))
        _, reward, terminated, truncated, info = env.step(torch.from_numpy(actions))
        final = info["final_obs"]["policy"].numpy()
        for i, g in enumerate(gyms):
            g_obs, g_rew, g_term, g_trunc, g_info = g.step(actions[i])
            where = f"{task} world {i} step {t}"
            np.testing.assert_allclose(final[i], g_obs, **TOL, err_msg=f"obs {where}")
            np.testing.assert_allclose(reward[i].item(), g_rew, **TOL, err_msg=f"reward {where}")
            for key, k in columns.items():
                np.testing.assert_allclose(
                    info["reward_terms"][i, k].item(), g_info[key], **TOL, err_msg=f"{key} {where}"
                )
            assert bool(terminated[i]) == g_term, f"termination mismatch {where}"
            # Gymnasium's TimeLimit may report both flags; ours keeps a terminal end terminal only.
            assert bool(truncated[i]) == (g_trunc and not g_term), f"time-out mismatch {where}"
            if g_term or g_trunc:
                ends["terminated" if g_term else "truncated"] += 1
                g.reset(seed=1000 * (i + 1) + t)
                _sync(env, g, i)
    return ends["terminated"], ends["truncated"]


@pytest.mark.parametrize(
    ("task", "gym_id"),
    [("Hopper", "Hopper-v5"), ("Walker2d", "Walker2d-v5")],
)
def test_planar_walker_matches_gymnasium_v5(task: str, gym_id: str) -> None:
    terms = {"forward": "reward_forward", "healthy": "reward_survive", "ctrl_cost": "reward_ctrl"}
    # Full-range random torques topple the robot; small ones let it stand to the (shortened) limit.
    terminations, time_outs = _run_parity(task, gym_id, terms, [1.0, 1.0, 0.05, 0.05], episode_length=100)
    assert terminations >= 1 and time_outs >= 1, (terminations, time_outs)


def test_ant_matches_gymnasium_v5() -> None:
    # The observation holds the contact forces, which Gymnasium computes after the RK4 step.
    terms = {"forward": "reward_forward", "healthy": "reward_survive", "ctrl_cost": "reward_ctrl", "contact_cost": "reward_contact"}
    terminations, time_outs = _run_parity("Ant", "Ant-v5", terms, [1.0, 1.0, 0.1, 0.1], episode_length=100)
    assert terminations >= 1 and time_outs >= 1, (terminations, time_outs)


def test_humanoid_matches_gymnasium_v5() -> None:
    terms = {"forward": "reward_forward", "healthy": "reward_survive", "ctrl_cost": "reward_ctrl", "contact_cost": "reward_contact"}
    terminations, time_outs = _run_parity("Humanoid", "Humanoid-v5", terms, [1.0, 1.0, 0.05, 0.05], episode_length=25)
    assert terminations >= 1 and time_outs >= 1, (terminations, time_outs)


def test_reacher_matches_gymnasium_v5() -> None:
    terms = {"distance": "reward_dist", "ctrl_cost": "reward_ctrl"}
    terminations, time_outs = _run_parity("Reacher", "Reacher-v5", terms, [1.0] * N)
    assert terminations == 0 and time_outs == N * STEPS // 50


SPACES = [
    ("Hopper", "Hopper-v5", 11, 3, 0.008, 1000),
    ("Walker2d", "Walker2d-v5", 17, 6, 0.008, 1000),
    ("Reacher", "Reacher-v5", 10, 2, 0.02, 50),
    ("Ant", "Ant-v5", 105, 8, 0.05, 1000),
    ("Humanoid", "Humanoid-v5", 348, 17, 0.015, 1000),
]
"""The tasks of this file's step-for-step parity tests, with their Gymnasium twins' spaces."""


@pytest.mark.parametrize(("task", "gym_id", "obs_dim", "action_dim", "dt", "limit"), SPACES)
def test_spaces_match_gymnasium_v5(
    task: str, gym_id: str, obs_dim: int, action_dim: int, dt: float, limit: int
) -> None:
    env = robolearn.make(task, 2, seed=0, dtype=torch.float64)
    g = gym.make(gym_id)
    assert env.obs_dims["policy"] == g.observation_space.shape[0] == obs_dim
    assert env.action_dim == g.action_space.shape[0] == action_dim
    # Gymnasium keeps the bounds in float32 (its Box dtype); compare at that precision.
    np.testing.assert_array_equal(env.ctrl_low.numpy().astype(g.action_space.dtype), g.action_space.low)
    np.testing.assert_array_equal(env.ctrl_high.numpy().astype(g.action_space.dtype), g.action_space.high)
    assert env.dt == pytest.approx(g.unwrapped.dt) and env.dt == pytest.approx(dt)
    assert env.max_episode_length == g.spec.max_episode_steps == limit


@pytest.mark.parametrize("task", ["Hopper", "Walker2d"])
def test_planar_walker_reset_distribution(task: str) -> None:
    env = robolearn.make(task, 512, seed=1, dtype=torch.float64)
    dq = env.sim.qpos - torch.from_numpy(env.model.qpos0.copy())
    assert 4.9e-3 < dq.abs().max() <= 5e-3  # U(-5e-3, 5e-3)
    assert 4.9e-3 < env.sim.qvel.abs().max() <= 5e-3
    assert abs(dq.mean().item()) < 2e-4


def test_reacher_reset_distribution() -> None:
    env = robolearn.make("Reacher", 2048, seed=2, dtype=torch.float64)
    goal = env.sim.qpos[:, 2:]
    radius = torch.linalg.vector_norm(goal, dim=1)
    assert radius.max() < 0.2
    # Uniform in the disc: the radius's CDF is (r / 0.2)^2, so half the goals lie within 0.2 / sqrt(2).
    assert abs((radius < 0.2 / 2**0.5).double().mean().item() - 0.5) < 0.04
    assert 0.095 < env.sim.qpos[:, :2].abs().max() <= 0.1
    assert env.sim.qvel[:, 2:].abs().max() == 0.0
    assert 4.9e-3 < env.sim.qvel[:, :2].abs().max() <= 5e-3


def test_ant_and_humanoid_reset_distributions() -> None:
    ant = robolearn.make("Ant", 512, seed=3, dtype=torch.float64)
    dq = ant.sim.qpos - torch.from_numpy(ant.model.qpos0.copy())
    assert 0.098 < dq.abs().max() <= 0.1  # U(-0.1, 0.1)
    assert abs(ant.sim.qvel.std().item() - 0.1) < 0.005  # 0.1 * N(0, 1)
    assert (ant.sim.cfrc_ext == 0).all() and (ant.obs["policy"][:, 27:] == 0).all(), "no contact forces before a step"
    hum = robolearn.make("Humanoid", 512, seed=4, dtype=torch.float64)
    dq = hum.sim.qpos - torch.from_numpy(hum.model.qpos0.copy())
    assert 0.0098 < dq.abs().max() <= 0.01 and 0.0098 < hum.sim.qvel.abs().max() <= 0.01  # U(-1e-2, 1e-2)


def test_the_registrys_gymnasium_twins_are_the_pairs_the_parity_tests_check() -> None:
    # The benchmark trains SB3 on these Gymnasium envs as if they were robolearn's tasks: a pair listed
    # without a parity test (here, or HalfCheetah's in test_halfcheetah_parity.py) would compare two MDPs.
    from robolearn.envs.registry import GYMNASIUM_TWINS

    checked = {task: gym_id for task, gym_id, *_ in SPACES} | {"HalfCheetah": "HalfCheetah-v5"}
    assert GYMNASIUM_TWINS == checked
