"""The training hot path never leaves the device (issue 15, "device-resident training path").

One PPO iteration (``num_steps`` of act/step/process, ``compute_returns``, ``update``) and one SAC
iteration (act/step/process/update per step, replay sampling inside) are driven as
``robolearn/runners/on_policy.py`` and ``off_policy.py`` drive them, under
``robolearn.utils.hostsync.forbid_host_syncs``. Allowed: the env's documented sync points
(``robolearn.envs.sync``: which worlds reset, the action's finiteness check) and the backend, and
``torch.optim``: on the CPU, Adam reads its step counter and a tensor learning rate as Python
numbers; on CUDA PPO's Adam is ``capturable`` and SAC's keeps its step counters on the host, so
neither syncs there (tests/test_gpu.py checks that with ``torch.cuda.set_sync_debug_mode``).

The guard must catch what it is for: an ``.item()`` in the PPO update and a boolean-mask index in
replay sampling are injected and must be named.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
import torch

import robolearn
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.algos.sac import SAC, SACConfig
from robolearn.data.replay import ReplayBuffer
from robolearn.envs.batched_env import BatchedEnv
from robolearn.types import Batch, Transition
from robolearn.utils.hostsync import (
    ENV_SYNC_POINTS,
    TRANSPARENT,
    HostSync,
    _attributed_sync_warnings,
    count_host_syncs,
    forbid_host_syncs,
)

ALLOWED = (*ENV_SYNC_POINTS, "torch.optim")
"""What may leave the device during a training iteration on the CPU (see the module docstring)."""

Obs = dict[str, torch.Tensor]


def ppo_iteration(env: BatchedEnv, agent: PPO, obs: Mapping[str, torch.Tensor]) -> tuple[Obs, dict[str, torch.Tensor]]:
    """One on-policy iteration as OnPolicyRunner._iterate runs it, without the runner's bookkeeping."""
    for _ in range(agent.cfg.num_steps):
        action = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
    agent.compute_returns(obs)
    return dict(obs), agent.update()


def sac_iteration(
    env: BatchedEnv, agent: SAC, obs: Mapping[str, torch.Tensor], steps: int
) -> tuple[Obs, dict[str, torch.Tensor]]:
    """``steps`` off-policy steps as OffPolicyRunner._iterate runs them: act, step, store, update."""
    stats: dict[str, torch.Tensor] = {}
    for _ in range(steps):
        action = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
        stats = agent.update() or stats
    return dict(obs), stats


def small_ppo(env: BatchedEnv, device: str = "cpu", **overrides: Any) -> PPO:
    """A PPO with small networks and a short rollout (the same code path as the defaults)."""
    cfg = dict(num_steps=6, num_epochs=2, num_minibatches=2, actor_hidden=(32, 32), critic_hidden=(32, 32))
    return PPO(env.obs_dims, env.action_dim, PPOConfig(**{**cfg, **overrides}), device=device)


def small_sac(env: BatchedEnv, device: str = "cpu", **overrides: Any) -> SAC:
    """A SAC that learns from its 8th transition on, with small networks and a small ring buffer."""
    cfg = dict(learning_starts=8, batch_size=16, buffer_size=40, actor_hidden=(32, 32), critic_hidden=(32, 32))
    return SAC(
        env.obs_dims, env.action_dim, SACConfig(**{**cfg, **overrides}),
        action_low=env.ctrl_low, action_high=env.ctrl_high, device=device,
    )


def _env(task: str = "Cartpole-Balance", num_envs: int = 4) -> BatchedEnv:
    # Short episodes with staggered ends: partial resets happen inside every iteration.
    env = robolearn.make(task, num_envs, seed=3, nthread=1, episode_length=5)
    env.reset(seed=3)
    env.episode_length.copy_(torch.arange(num_envs) % 5)
    return env


@pytest.mark.parametrize(
    ("task", "overrides"),
    [
        ("Cartpole-Balance", {}),
        # Asymmetric critic, the randomised task (interval events, noise, latency), fixed schedule.
        ("Cartpole-Balance-DR", {"critic_obs_group": "critic", "schedule": "fixed"}),
        # Recurrent PPO: hidden states stored at chunk starts, truncated BPTT over chunks.
        ("Cartpole-Balance", {"memory": "gru", "memory_hidden": 16, "bptt_length": 4}),
    ],
)
def test_a_ppo_iteration_leaves_the_device_only_at_the_env_sync_points(task: str, overrides: dict[str, Any]) -> None:
    env = _env(task)
    agent = small_ppo(env, **overrides)
    obs, _ = ppo_iteration(env, agent, env.obs)  # the first allocates the rollout storage
    before = [p.detach().clone() for p in agent.parameters()]
    with forbid_host_syncs(allowed=ALLOWED) as profile:
        obs, stats = ppo_iteration(env, agent, obs)
    assert all(torch.isfinite(v).all() for v in stats.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.parameters(), strict=True)), "the update ran"
    # The env's documented syncs were seen (so the guard was live over the steps): at least the
    # reset decision and the action check of every step.
    env_syncs = [s for s in profile.records if s.module == "robolearn.envs.sync"]
    assert len(env_syncs) >= 2 * agent.cfg.num_steps


def test_the_env_sync_budget_is_two_per_step_plus_one_where_a_world_ended() -> None:
    # Cartpole-Balance has no interval events or commands: the action check, the reset decision
    # and, on steps where some world ended, the count of diverged worlds; nothing else.
    env = _env("Cartpole-Balance", num_envs=3)
    agent = small_ppo(env)
    obs, _ = ppo_iteration(env, agent, env.obs)
    with count_host_syncs(allowed=ALLOWED) as profile:
        for _ in range(10):
            action = agent.act(obs)
            obs, _, terminated, truncated, _ = env.step(action)
            agent.process(Transition(obs, action, torch.zeros(3), obs, terminated, truncated))
            if agent.storage is not None and agent.storage.full:
                agent.storage.clear()
    functions = [s.function for s in profile.records if s.module == "robolearn.envs.sync"]
    assert functions.count("check_finite") == 10
    assert functions.count("host_nonzero") == 10
    # episode_length=5 with staggered ends: some world ends on 8 of these 10 steps... at least 6.
    assert 6 <= functions.count("host_count") <= 10
    assert len(functions) == 20 + functions.count("host_count")
    assert not profile.forbidden()


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        # REDQ-style: a random target subset (randperm on the device), several gradient steps per
        # env step, a delayed actor, the ring buffer wrapping around.
        {"num_critics": 5, "num_target_subset": 2, "utd_ratio": 3, "policy_delay": 2, "actor_q_reduction": "mean"},
    ],
)
def test_a_sac_iteration_leaves_the_device_only_at_the_env_sync_points(overrides: dict[str, Any]) -> None:
    env = _env("Cartpole-Balance-DR")
    agent = small_sac(env, **overrides)
    obs, _ = sac_iteration(env, agent, env.obs, steps=3)  # past learning_starts (4 worlds x 3 steps)
    updates = agent.num_updates
    with forbid_host_syncs(allowed=ALLOWED):
        obs, stats = sac_iteration(env, agent, obs, steps=8)
    assert agent.num_updates == updates + 8 * agent.cfg.utd_ratio
    assert len(agent.replay) == agent.replay.capacity  # it wrapped around inside the guarded block
    assert stats and all(torch.isfinite(v).all() for v in stats.values())


def test_the_guard_names_an_item_in_the_ppo_update(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env()
    agent = small_ppo(env)
    obs, _ = ppo_iteration(env, agent, env.obs)
    import robolearn.algos.ppo.agent as ppo_agent

    real = ppo_agent.ppo_loss

    def logged_loss(*args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        losses = real(*args, **kwargs)
        losses["loss_policy"].item()  # what a per-minibatch log line would do
        return losses

    monkeypatch.setattr(ppo_agent, "ppo_loss", logged_loss)
    with pytest.raises(HostSync, match=r"Tensor\.item from tests\.test_hot_path_syncs\.logged_loss"):
        with forbid_host_syncs(allowed=ALLOWED):
            ppo_iteration(env, agent, obs)


def test_the_guard_names_a_boolean_mask_in_replay_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env()
    agent = small_sac(env)
    obs, _ = sac_iteration(env, agent, env.obs, steps=3)
    real = ReplayBuffer.gather

    def gather_finite(self: ReplayBuffer, idx: torch.Tensor) -> Batch:
        batch = real(self, idx)
        keep = torch.isfinite(batch.reward)  # dropping rows by a mask: the size is data-dependent
        return Batch(
            obs={k: v[keep] for k, v in batch.obs.items()}, action=batch.action[keep], reward=batch.reward[keep],
            next_obs={k: v[keep] for k, v in batch.next_obs.items()}, terminated=batch.terminated[keep],
            truncated=batch.truncated[keep], extras={},
        )

    monkeypatch.setattr(ReplayBuffer, "gather", gather_finite)
    with pytest.raises(HostSync, match=r"aten\.index with a boolean mask from tests\.test_hot_path_syncs\."):
        with forbid_host_syncs(allowed=ALLOWED):
            sac_iteration(env, agent, obs, steps=2)


def test_allowed_modules_do_not_hide_an_asker_outside_them() -> None:
    # torch.optim is allowed only when it is on the stack; a sync written next to optimizer.step()
    # is the caller's. And the profile lists each site with its count.
    x = torch.ones(3)
    with count_host_syncs(allowed=ALLOWED) as profile:
        for _ in range(3):
            float(x.sum())
        bool(x.any())
    assert [(s.what, s.function, n) for s, n in profile.by_site()] == [
        ("Tensor.__float__", "test_allowed_modules_do_not_hide_an_asker_outside_them", 3),
        ("Tensor.__bool__", "test_allowed_modules_do_not_hide_an_asker_outside_them", 1),
    ]
    assert len(profile.forbidden()) == 4
    with pytest.raises(HostSync, match=r"aten\.nonzero from tests\.test_hot_path_syncs"), forbid_host_syncs(ALLOWED):
        torch.nonzero(x)


# -- compiled updates: the sync-free step runs under torch.compile with the eager numerics -------


def _same_rollout(env: BatchedEnv, eager: PPO, compiled: PPO, obs: Mapping[str, torch.Tensor]) -> Obs:
    """Collect one rollout with ``eager`` and hand ``compiled`` the identical storage."""
    for _ in range(eager.cfg.num_steps):
        action = eager.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        eager.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
    eager.compute_returns(obs)
    compiled.storage = copy.deepcopy(eager.storage)
    return dict(obs)


@pytest.mark.slow
def test_a_compiled_ppo_update_matches_the_eager_one() -> None:
    # Compiling takes tens of seconds on a loaded CPU (inductor's C++ kernels): slow-marked. The
    # compiled step is the whole step (torch.func.grad, the clip and Adam on tensor lists).
    env = _env("Cartpole-Balance", num_envs=8)
    eager = small_ppo(env, num_steps=8, schedule="fixed")
    compiled = small_ppo(env, num_steps=8, schedule="fixed", compile=True)
    compiled.load_state_dict(eager.state_dict())
    obs = env.obs
    for _ in range(3):
        obs = _same_rollout(env, eager, compiled, obs)
        a, b = eager.update(), compiled.update()
        for key in ("loss_policy", "loss_value", "loss_entropy", "kl", "action_std"):
            assert torch.allclose(a[key], b[key], rtol=1e-4, atol=1e-5), key
    assert compiled._compiled_step is not None  # the compiled path ran
    # The trained tensors (the normalisers only moved in the eager agent, which acted).
    for p, q in zip(eager._trained, compiled._trained, strict=True):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-5)
    assert any(not torch.equal(p, q) for p, q in zip(eager._trained, compiled._trained, strict=True)), (
        "the compiled step is a different program (fused kernels): bitwise equality would mean it did not run"
    )


@pytest.mark.slow
def test_the_compiled_ppo_step_writes_the_adaptive_step_size() -> None:
    # The adaptive schedule writes the step size inside the compiled step, before Adam reads it.
    # Compared with the eager step it cannot be to the bit: the first minibatch's KL is ~0 (the
    # rollout's own policy), and rsl_rl's rule raises the rate only for a KL > 0, so rounding
    # decides. What must hold: the write reaches the agent's rate, which Adam then used.
    env = _env("Cartpole-Balance", num_envs=8)
    agent = small_ppo(env, num_steps=8, schedule="adaptive", compile=True, desired_kl=1e-9)
    start = float(agent.learning_rate)
    _, stats = ppo_iteration(env, agent, env.obs)
    assert agent._compiled_step is not None
    # A KL far above 2 x 1e-9 after the first steps: the rate went down, by 1.5 per minibatch.
    assert float(agent.learning_rate) < start / 1.4 and float(stats["learning_rate"]) == float(agent.learning_rate)
    assert agent.optimizer.param_groups[0]["lr"] is agent.learning_rate


@pytest.mark.slow
def test_a_compiled_sac_step_matches_the_eager_one() -> None:
    # REDQ subset and a delayed actor: both step graphs (critic only, full) are compiled.
    env = _env("Cartpole-Balance", num_envs=4)
    kw = {"num_critics": 4, "num_target_subset": 2, "policy_delay": 2}
    eager, compiled = small_sac(env, **kw), small_sac(env, compile=True, **kw)
    sac_iteration(env, eager, env.obs, steps=4)
    # A deep copy: Optimizer.load_state_dict keeps the given state tensors (shared steps otherwise).
    compiled.load_state_dict(copy.deepcopy(eager.state_dict()))  # networks, generator, counter, replay
    for _ in range(4):
        batch = eager.replay.sample(16, torch.Generator().manual_seed(len(eager.replay)))
        a, b = eager.update(batch), compiled.update(batch)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.allclose(a[key], b[key], rtol=1e-4, atol=1e-5), key
    assert compiled.generator.get_state().equal(eager.generator.get_state())  # the same draws, outside the graph
    for p, q in zip(eager.parameters(), compiled.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-5)


def test_compile_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="compile: supported for the feed-forward PPO only"):
        PPOConfig(compile=True, memory="gru")
    with pytest.raises(ValueError, match="compile_mode: unknown 'fast'"):
        PPOConfig(compile=True, compile_mode="fast")
    with pytest.raises(ValueError, match="compile_mode: unknown 'fast'"):
        SACConfig(compile=True, compile_mode="fast")


def test_compile_without_a_cpp_compiler_is_refused_when_the_learner_is_built(monkeypatch) -> None:
    # inductor writes CPU kernels in C++: without a compiler the first update (after the warm-up)
    # would fail deep inside torch; the learner says so when it is built, naming the setting.
    env = _env("Cartpole-Balance", num_envs=2)
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(ValueError, match=r"algo.compile=true: torch.compile on the CPU needs a C\+\+ compiler"):
        small_sac(env, compile=True)
    with pytest.raises(ValueError, match="or set algo.compile=false"):
        small_ppo(env, compile=True)
    small_sac(env, compile=False)  # eager needs none
    monkeypatch.delenv("CXX")
    small_sac(env, compile=True)  # g++ here: built (nothing compiles before the first update)


def test_sac_draws_its_noise_before_the_step_in_the_eager_order() -> None:
    # The step's draws moved out of the losses (so a compiled step has no generator inside): the
    # stream must be consumed exactly as before, subset, then the next action's noise, then the
    # actor's, so a run with compile=False is bit-for-bit what it was.
    env = _env("Cartpole-Balance", num_envs=4)
    agent = small_sac(env, num_critics=4, num_target_subset=2)
    sac_iteration(env, agent, env.obs, steps=4)
    batch = agent.replay.sample(16, torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(7)
    agent.generator.set_state(gen.get_state())
    perm = torch.randperm(4, generator=gen)
    next_noise = torch.randn(16, env.action_dim, generator=gen)
    noise = torch.randn(16, env.action_dim, generator=gen)
    reference = copy.deepcopy(agent)
    out = agent.update_step(batch)
    ref = reference._gradient_step(batch, perm[:2], next_noise, noise)
    for key in out:
        assert torch.equal(out[key], ref[key]), key
    assert agent.generator.get_state().equal(gen.get_state())


def test_the_cuda_guard_attributes_each_sync_warning_to_its_caller() -> None:
    # On a GPU, set_sync_debug_mode("warn") makes torch warn at every synchronising call; the guard
    # attributes each warning to its caller. Emulated here with the same warning raised from code
    # that runs as robolearn.envs.sync (allowed) and as an agent module (not allowed).
    def as_module(name: str) -> Any:
        namespace: dict[str, Any] = {"__name__": name, "warnings": warnings}
        exec("def sync():\n    warnings.warn('called a synchronizing CUDA operation')\n", namespace)
        return namespace["sync"]

    env_sync, agent_sync = as_module("robolearn.envs.sync"), as_module("robolearn.algos.fake")
    with warnings.catch_warnings(record=True) as shown, _attributed_sync_warnings(ALLOWED, TRANSPARENT) as profile:
        env_sync()
        agent_sync()
        agent_sync()
        warnings.warn("unrelated", UserWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["unrelated"]  # other warnings pass through, syncs do not
    assert [(s.module, s.allowed, n) for s, n in profile.by_site()] == [
        ("robolearn.algos.fake", False, 2),
        ("robolearn.envs.sync", True, 1),
    ]


@pytest.mark.slow
def test_on_the_warp_backend_an_iteration_leaves_the_device_only_at_the_env_and_backend() -> None:
    # MuJoCo Warp on its CPU device (the first step compiles Warp's kernels: ~20 s cold, cached in
    # ~/.cache/warp). On CUDA the backend's own divergence test is skipped (a masked reset instead);
    # on the CPU it is a free host read inside robolearn.sim, which the guard allows.
    env = robolearn.make("Cartpole-Balance", 4, seed=3, backend="warp", episode_length=5)
    env.reset(seed=3)
    ppo, sac = small_ppo(env), small_sac(env)
    obs, _ = ppo_iteration(env, ppo, env.obs)
    with forbid_host_syncs(allowed=ALLOWED) as profile:
        obs, _ = ppo_iteration(env, ppo, obs)
    assert any(s.module.startswith("robolearn.envs.sync") for s in profile.records)
    obs, _ = sac_iteration(env, sac, obs, steps=3)
    with forbid_host_syncs(allowed=ALLOWED):
        obs, stats = sac_iteration(env, sac, obs, steps=4)
    assert stats and all(torch.isfinite(v).all() for v in stats.values())
