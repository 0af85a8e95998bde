"""The device-resident training path on a GPU (issue 15): runs where CUDA exists, skipped with the
reason elsewhere (tests/conftest.py skips ``gpu``-marked tests without CUDA).

With ``device=cuda`` the env (the Warp backend where ``robolearn.sim.warp_backend`` imports, else
the env core on CUDA above the CPU backend), observation processing, randomisation, the rollout
storage, the replay buffer and the learners stay on the GPU. A PPO and a SAC training iteration
run under ``torch.cuda.set_sync_debug_mode``:

* the learners' own verbs (``act``, ``process``, ``compute_returns``, ``update``, replay sampling)
  in plain ``"error"`` mode: any synchronising CUDA call raises;
* the whole iteration, env steps included, in ``"warn"`` mode with each sync attributed to its
  caller (``robolearn.utils.hostsync.cuda_sync_guard``): only the env's documented sync points
  (``robolearn.envs.sync``: which worlds reset, the action check) and the backend may sync.

Parameters, buffers and optimiser state stay on CUDA throughout.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Any

import numpy as np
import pytest
import torch

import robolearn
from robolearn.envs.batched_env import BatchedEnv
from robolearn.types import Transition
from robolearn.utils.hostsync import ENV_SYNC_POINTS, cuda_sync_guard
from tests.test_hot_path_syncs import ppo_iteration, sac_iteration, small_ppo, small_sac

pytestmark = pytest.mark.gpu

TASK = "Cartpole-Balance-DR"
"""Randomised task: interval events, observation noise and latency run on the device too."""


def _backend() -> str:
    """``warp`` where the Warp backend imports and runs the task (MuJoCo Warp on CUDA), else the
    CPU backend below an env core on CUDA.
    """
    try:
        warp_backend = importlib.import_module("robolearn.sim.warp_backend")
    except ImportError:
        return "mujoco"
    return "mujoco" if TASK in getattr(warp_backend, "UNSUPPORTED_TASKS", {}) else "warp"


def _env(num_envs: int = 64) -> BatchedEnv:
    kwargs: dict[str, Any] = {"seed": 0, "episode_length": 20, "device": "cuda"}
    backend = _backend()
    if backend != "mujoco":
        kwargs["backend"] = backend
    env = robolearn.make(TASK, num_envs, **kwargs)
    env.reset(seed=0)
    env.episode_length.copy_(torch.arange(num_envs, device=env.device) % 20)  # staggered partial resets
    return env


def _on_cuda(tensors: Any) -> bool:
    return all(t.device.type == "cuda" for t in tensors)


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def test_a_ppo_iteration_on_cuda_does_not_sync_outside_the_env() -> None:
    env = _env()
    agent = small_ppo(env, device="cuda", critic_obs_group="critic")
    obs, _ = ppo_iteration(env, agent, env.obs)  # allocates storage and optimiser state
    torch.cuda.synchronize()
    # The learner's verbs alone, in plain "error" mode (env steps outside the guard).
    for _ in range(agent.cfg.num_steps):
        with cuda_sync_guard():
            action = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        with cuda_sync_guard():
            agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
    with cuda_sync_guard():
        agent.compute_returns(obs)
        stats = agent.update()
    # The whole iteration, env included: only the env's documented sync points and the backend.
    with cuda_sync_guard(allowed=ENV_SYNC_POINTS) as profile:
        obs, stats = ppo_iteration(env, agent, obs)
    assert profile.records, "warn mode saw the env's documented syncs (the guard was live)"
    assert all(torch.isfinite(v).all() for v in stats.values())
    assert _on_cuda(agent.parameters()) and _on_cuda(_optimizer_tensors(agent.optimizer))
    assert agent.storage is not None and agent.storage.values.device.type == "cuda"


def test_a_sac_iteration_on_cuda_does_not_sync_outside_the_env() -> None:
    env = _env()
    agent = small_sac(env, device="cuda", learning_starts=64, batch_size=64, buffer_size=4096)
    obs, _ = sac_iteration(env, agent, env.obs, steps=2)  # past learning_starts
    torch.cuda.synchronize()
    for _ in range(4):
        with cuda_sync_guard():
            action = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        with cuda_sync_guard():
            agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
            stats = agent.update()
        obs = next_obs
    with cuda_sync_guard(allowed=ENV_SYNC_POINTS) as profile:
        obs, stats = sac_iteration(env, agent, obs, steps=4)
    assert profile.records
    assert stats and all(torch.isfinite(v).all() for v in stats.values())
    assert _on_cuda(agent.parameters()) and agent.replay.storage["action"].device.type == "cuda"


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_compiled_updates_with_cuda_graphs_run_without_syncs(algo: str) -> None:
    # compile_mode=reduce-overhead: the gradient step is compiled and replayed as CUDA graphs.
    env = _env(32)
    if algo == "ppo":
        agent: Any = small_ppo(env, device="cuda", compile=True, compile_mode="reduce-overhead")
        obs, _ = ppo_iteration(env, agent, env.obs)
        obs, _ = ppo_iteration(env, agent, obs)  # compiles, records the graphs
        for _ in range(agent.cfg.num_steps):
            action = agent.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action)
            agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
            obs = next_obs
        torch.cuda.synchronize()
        with cuda_sync_guard():
            agent.compute_returns(obs)
            stats = agent.update()
    else:
        agent = small_sac(env, device="cuda", learning_starts=32, batch_size=64, compile=True,
                          compile_mode="reduce-overhead")
        obs, _ = sac_iteration(env, agent, env.obs, steps=4)  # compiles, records the graphs
        torch.cuda.synchronize()
        with cuda_sync_guard():
            for _ in range(3):
                stats = agent.update()
    assert stats and all(torch.isfinite(v).all() for v in stats.values())
    assert _on_cuda(agent.parameters())


@pytest.mark.skipif(importlib.util.find_spec("mujoco_warp") is None, reason="needs mujoco-warp: pip install 'robolearn[gpu]'")
def test_warp_graph_replay_matches_the_uncaptured_step_also_from_a_side_stream() -> None:
    # The CUDA-graph path of the Warp backend (its default on CUDA) against the uncaptured launches:
    # the replays advance the state, honour new controls, partial resets and a field written after
    # the recording, and reset a world that diverges only in a replay. Every other step runs on a
    # non-default torch stream: the backend must order Warp's stream after it and it after Warp's.
    from robolearn.sim.warp_backend import WarpBackend

    model = robolearn.make("Cartpole-Balance", 2).model  # a CPU env, only for its compiled model
    n = 8
    sims = [WarpBackend(model, n, decimation=4, device="cuda", graph_capture=c) for c in (False, True)]
    damping = np.tile(model.dof_damping, (n, 1))
    damping[3] = -1e6  # world 3 blows up once this is written
    gen = torch.Generator(device="cuda").manual_seed(0)
    side = torch.cuda.Stream()
    masks: list[list[torch.Tensor]] = [[], []]
    for t in range(12):
        u = torch.rand((n, model.nu), generator=gen, device="cuda") * 2 - 1
        for sim, mask in zip(sims, masks, strict=True):
            on_side = t % 2 == 1
            if on_side:
                side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side) if on_side else contextlib.nullcontext():
                if t == 5:
                    sim.reset(torch.tensor([1, 6], device="cuda"))
                if t == 8:
                    sim.set_model_field("damping", torch.from_numpy(damping))
                mask.append(sim.step(u))
                state = torch.cat([sim.qpos, sim.qvel, sim.time[:, None]], dim=1).clone()
            if on_side:
                torch.cuda.current_stream().wait_stream(side)
            mask.append(state)
        torch.testing.assert_close(masks[1][-1], masks[0][-1], rtol=0, atol=1e-5, msg=f"state at step {t}")
        assert torch.equal(masks[1][-2], masks[0][-2]), f"divergence mask at step {t}"
    assert set(sims[1]._graphs) == {"step", "reset", "forward"} and not sims[0]._graphs
    flagged = torch.stack(masks[1][0::2]).any(dim=0)
    assert flagged.tolist() == [i == 3 for i in range(n)], "world 3 diverged in a replay and was reset"
    assert torch.isfinite(sims[1].qpos).all() and (sims[1].time[[0, 2]] > 0).all()
