"""HalfCheetah reproduces Gymnasium's HalfCheetah-v5 step for step (float64, relative 1e-6)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

import robolearn

N = 3
STEPS = 1500  # crosses the 1000-step time limit: the time-out and the re-sync are covered too


def test_halfcheetah_matches_gymnasium_v5():
    env = robolearn.make("HalfCheetah", N, seed=0, dtype=torch.float64)
    gyms = [gym.make("HalfCheetah-v5") for _ in range(N)]
    for i, g in enumerate(gyms):
        g.reset(seed=100 + i)
    env.set_state(
        torch.from_numpy(np.stack([g.unwrapped.data.qpos for g in gyms])),
        torch.from_numpy(np.stack([g.unwrapped.data.qvel for g in gyms])),
    )
    rng = np.random.default_rng(0)
    truncations = 0
    for t in range(STEPS):
        actions = rng.uniform(-1.0, 1.0, (N, 6))
        obs, reward, terminated, truncated, info = env.step(torch.from_numpy(actions))
        final = info["final_obs"]["policy"].numpy()
        for i, g in enumerate(gyms):
            g_obs, g_rew, g_term, g_trunc, g_info = g.step(actions[i])
            np.testing.assert_allclose(final[i], g_obs, rtol=1e-6, atol=1e-9, err_msg=f"obs world {i} step {t}")
            np.testing.assert_allclose(reward[i].item(), g_rew, rtol=1e-6, atol=1e-9, err_msg=f"reward {i} step {t}")
            assert bool(terminated[i]) == g_term
            assert bool(truncated[i]) == g_trunc, f"time-out mismatch world {i} step {t}"
            # the per-term rewards are Gymnasium's reward components
            terms = info["reward_terms"][i]
            np.testing.assert_allclose(terms[0].item(), g_info["reward_forward"], rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(terms[1].item(), g_info["reward_ctrl"], rtol=1e-6, atol=1e-9)
            if g_trunc:
                truncations += 1
                g.reset(seed=1000 + t + i)
                env.set_state(
                    torch.from_numpy(g.unwrapped.data.qpos.copy()),
                    torch.from_numpy(g.unwrapped.data.qvel.copy()),
                    torch.tensor([i]),
                )
                np.testing.assert_allclose(env.obs["policy"][i].numpy(), g.unwrapped._get_obs(), rtol=1e-12)
    assert truncations == N


def test_halfcheetah_spaces_and_reset_distribution():
    env = robolearn.make("HalfCheetah", 256, seed=1, dtype=torch.float64)
    g = gym.make("HalfCheetah-v5")
    assert env.obs_dims["policy"] == g.observation_space.shape[0] == 17
    assert env.action_dim == g.action_space.shape[0] == 6
    np.testing.assert_array_equal(env.ctrl_low.numpy(), g.action_space.low)
    np.testing.assert_array_equal(env.ctrl_high.numpy(), g.action_space.high)
    assert env.dt == g.unwrapped.dt == 0.05
    qpos0 = torch.from_numpy(env.model.qpos0.copy())
    dq = env.sim.qpos - qpos0
    assert dq.abs().max() <= 0.1 and dq.abs().max() > 0.09  # U(-0.1, 0.1)
    assert abs(env.sim.qvel.std().item() - 0.1) < 0.01  # 0.1 * N(0, 1)
