"""Gymnasium and Stable-Baselines3 adapters: env checkers, done semantics, final obs, set_state, PPO."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.vector import AutoresetMode

import robolearn
from robolearn.envs import (
    BatchedEnv,
    RobolearnGymEnv,
    RobolearnSB3VecEnv,
    RobolearnVectorEnv,
    TerminationTerm,
    gym_id,
    task_cfg,
)

TASKS = robolearn.list_tasks()


def _terminating_env(num_envs: int, at: int = 3) -> BatchedEnv:
    """HalfCheetah whose every world terminates at step ``at`` (float64 observations)."""
    cfg = task_cfg("HalfCheetah")
    cfg.terminations["all_at"] = TerminationTerm(lambda env: env.episode_length == at)
    return BatchedEnv(cfg, num_envs, seed=0, dtype=torch.float64, task_id="HalfCheetah")


def _actions(steps: int, n: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (steps, n, dim)).astype(np.float32)


# -- checkers ----------------------------------------------------------------------------------
@pytest.mark.filterwarnings(
    "ignore:.*Box observation space m:UserWarning"
)  # unbounded, as Gymnasium's MuJoCo envs
@pytest.mark.parametrize("task_id", TASKS)
def test_gymnasium_check_env(task_id: str):
    env = gymnasium.make(gym_id(task_id))
    gym_check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("task_id", TASKS)
def test_sb3_check_env(task_id: str):
    from stable_baselines3.common.env_checker import check_env

    env = RobolearnGymEnv(task_id, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # advisory warnings (e.g. unnormalised float64 Box)
        check_env(env, warn=False)


def test_registration_and_spaces():
    assert all(gym_id(t) in gymnasium.registry for t in TASKS)
    env = gymnasium.make("robolearn/HalfCheetah-v0")
    assert env.unwrapped.dt == pytest.approx(0.05)
    assert env.observation_space.dtype == np.float64 and env.observation_space.shape == (17,)
    assert np.all(np.isfinite(env.action_space.low)) and np.all(np.isfinite(env.action_space.high))
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float64 and env.observation_space.contains(obs)
    vec = RobolearnVectorEnv("HalfCheetah", 3, seed=0)
    assert vec.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert vec.observation_space.shape == (3, 17) and vec.action_space.shape == (3, 6)


# -- done semantics ----------------------------------------------------------------------------
def test_single_env_time_out_is_truncation_and_waits_for_reset():
    env = RobolearnGymEnv("HalfCheetah", seed=0, episode_length=5)
    env.reset(seed=0)
    for t, a in enumerate(_actions(5, 1, 6)):
        obs, rew, term, trunc, info = env.step(a[0])
        assert isinstance(rew, float) and isinstance(term, bool) and isinstance(trunc, bool)
        assert (term, trunc) == (False, t == 4)
    assert info["episode"]["length"] == 5
    with pytest.raises(RuntimeError, match="reset"):
        env.step(a[0])
    obs2, _ = env.reset()
    assert not np.array_equal(obs, obs2)
    assert not env.step(a[0])[3]


def test_single_env_termination():
    env = RobolearnGymEnv(env=_terminating_env(1))
    env.reset()
    flags = [env.step(a[0])[2:4] for a in _actions(3, 1, 6)]
    assert flags == [(False, False), (False, False), (True, False)]


def test_vector_env_done_semantics_and_final_obs():
    vec = RobolearnVectorEnv(env=_terminating_env(2))
    vec.reset()
    for a in _actions(3, 2, 6):
        obs, rew, term, trunc, info = vec.step(a)
    assert term.tolist() == [True, True] and not trunc.any()
    assert info["_final_obs"].tolist() == [True, True] and info["_final_info"].all()
    assert info["final_info"]["episode"]["l"].tolist() == [3, 3]
    assert not np.array_equal(np.stack(info["final_obs"]), obs)
    vec = RobolearnVectorEnv("HalfCheetah", 2, seed=0, episode_length=4)
    vec.reset()
    for t, a in enumerate(_actions(4, 2, 6)):
        obs, rew, term, trunc, info = vec.step(a)
        assert ("final_obs" in info) == (t == 3)
    assert trunc.all() and not term.any() and rew.shape == (2,)


def test_sb3_vec_env_done_semantics():
    for env, at, truncated in (
        (_terminating_env(2), 3, False),
        (robolearn.make("HalfCheetah", 2, seed=0, episode_length=3), 3, True),
    ):
        vec = RobolearnSB3VecEnv(env=env)
        vec.reset()
        for t, a in enumerate(_actions(at, 2, 6)):
            vec.step_async(a)
            obs, rew, dones, infos = vec.step_wait()
            assert dones.tolist() == [t == at - 1] * 2
        for info in infos:
            assert info["TimeLimit.truncated"] is truncated
            assert info["terminal_observation"].shape == (17,)
            assert info["episode"]["l"] == at
            assert not np.array_equal(info["terminal_observation"], obs[0])


def test_single_env_terminal_obs_equals_vector_final_obs():
    single = RobolearnGymEnv("HalfCheetah", seed=7, episode_length=6)
    vec = RobolearnVectorEnv("HalfCheetah", 1, seed=7, episode_length=6)
    single.reset(seed=7)
    vec.reset(seed=7)
    for a in _actions(6, 1, 6, seed=3):
        obs, rew, _, trunc, _ = single.step(a[0])
        vobs, vrew, _, vtrunc, info = vec.step(a)
        assert rew == vrew[0] and trunc == vtrunc[0]
    assert trunc
    np.testing.assert_array_equal(obs, info["final_obs"][0])
    # the next episode starts where the vector env's autoreset put it
    np.testing.assert_array_equal(single.reset()[0], vobs[0])


def test_set_state_round_trip():
    env = RobolearnGymEnv("HalfCheetah", seed=0)
    obs0, _ = env.reset(seed=0)
    qpos, qvel = env.state
    for a in _actions(5, 1, 6):
        env.step(a[0])
    assert not np.array_equal(env.state[0], qpos)
    obs = env.set_state(qpos, qvel)
    np.testing.assert_array_equal(env.state[0], qpos)
    np.testing.assert_array_equal(env.state[1], qvel)
    np.testing.assert_array_equal(obs, obs0)
    np.testing.assert_array_equal(
        env.step(np.zeros(6, np.float32))[0],
        RobolearnGymEnv("HalfCheetah", seed=0).step(np.zeros(6, np.float32))[0],
    )


# -- learning ----------------------------------------------------------------------------------
def test_sb3_ppo_trains_through_vec_env():
    from stable_baselines3 import PPO

    vec = RobolearnSB3VecEnv("Pendulum-Swingup", 4, seed=0, episode_length=50)
    model = PPO("MlpPolicy", vec, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(2048)
    assert len(model.ep_info_buffer) > 0
    assert all(ep["l"] == 50 for ep in model.ep_info_buffer)
