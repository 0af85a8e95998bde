"""Runner-level wiring on a real env: what the off-policy runner stores in SAC's replay, and what the
on-policy runner's rollout makes of PPO's values, for a world that terminates and worlds that time out.

The env is Cartpole-Balance (3 worlds, 4-step episodes) with one extra termination: world 0 ends
every second step. So at step 2 world 0 has terminated; at step 4 world 0 has terminated and worlds 1
and 2 have timed out. Every done world is reset inside ``step``, so the observation ``step`` returns
for it is a fresh episode's, and the one a learner must bootstrap from is ``info["final_obs"]``.
A recorder around the env keeps what each step returned, to compare with what the learner got.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

import robolearn
from robolearn.algos import PPO, SAC, PPOConfig, SACConfig
from robolearn.envs import BatchedEnv, TerminationTerm, task_cfg
from robolearn.runners import OffPolicyRunner, OnPolicyRunner, RunnerConfig

N, EPISODE, STEPS = 3, 4, 8
TERMINATED = torch.tensor([[t % 2 == 1, False, False] for t in range(STEPS)])
"""Expected ``terminated[t, world]``: world 0 at steps 2, 4, 6, 8 (0-based t = 1, 3, 5, 7)."""
TRUNCATED = torch.tensor([[False, t % 4 == 3, t % 4 == 3] for t in range(STEPS)])
"""Expected ``truncated[t, world]``: worlds 1 and 2 time out at steps 4 and 8."""
PPO_STEPS = 7
"""PPO's rollout stops one step short, so that its last step is not done in any world and
bootstraps from the observation after it."""


def _first_world_ends(env: Any, at: int) -> torch.Tensor:
    """Termination term: world 0 when its episode reaches ``at`` steps."""
    ids = torch.arange(env.num_envs, device=env.episode_length.device)
    return (env.episode_length == at) & (ids == 0)


class _Recorder:
    """The real env, plus a record of every step's inputs and outputs (cloned)."""

    def __init__(self, env: BatchedEnv) -> None:
        self._env = env
        self.steps: list[dict[str, Any]] = []

    def step(self, action: torch.Tensor):
        before = {k: v.clone() for k, v in self._env.obs.items()}
        obs, reward, terminated, truncated, info = self._env.step(action)
        self.steps.append(
            {
                "obs": before,
                "next_obs": {k: v.clone() for k, v in obs.items()},
                "final_obs": {k: v.clone() for k, v in info["final_obs"].items()},
                "reward": reward.clone(),
                "terminated": terminated.clone(),
                "truncated": truncated.clone(),
            }
        )
        return obs, reward, terminated, truncated, info

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def _env() -> _Recorder:
    assert "Cartpole-Balance" in robolearn.list_tasks()  # registers the task families (lazily loaded)
    cfg = task_cfg("Cartpole-Balance")
    cfg.episode_length = EPISODE
    cfg.terminations["first_world_ends"] = TerminationTerm(_first_world_ends, params={"at": 2})
    return _Recorder(BatchedEnv(cfg, N, seed=0, task_id="Cartpole-Balance"))


def _runner_cfg(steps: int, iteration_steps: int) -> RunnerConfig:
    return RunnerConfig(
        total_env_steps=N * steps,
        steps_per_iteration=iteration_steps,
        eval_interval=1,
        checkpoint_interval=1,
        video=False,
        console=False,
        tensorboard=False,
    )


def _stack(env: _Recorder, key: str) -> torch.Tensor:
    return torch.stack([s[key] for s in env.steps])


def _check_env_pattern(env: _Recorder, steps: int = STEPS) -> None:
    """The env did what the test relies on, and a done world's reset obs differs from its final obs."""
    assert len(env.steps) == steps
    assert torch.equal(_stack(env, "terminated"), TERMINATED[:steps])
    assert torch.equal(_stack(env, "truncated"), TRUNCATED[:steps])
    done = TERMINATED[:steps] | TRUNCATED[:steps]
    final, reset = (torch.stack([s[k]["policy"] for s in env.steps]) for k in ("final_obs", "next_obs"))
    assert torch.equal(final[~done], reset[~done])
    assert not torch.isclose(final[done], reset[done]).all(-1).any()


def test_off_policy_runner_stores_final_obs_and_keeps_time_outs_apart(tmp_path):
    env = _env()
    cfg = SACConfig(batch_size=8, learning_starts=6, actor_hidden=(16,), critic_hidden=(16,), buffer_size=100)
    agent = SAC(env.obs_dims, env.action_dim, cfg, action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)
    OffPolicyRunner(env, agent, _runner_cfg(STEPS, STEPS // 2), tmp_path / "run").learn()
    _check_env_pattern(env)
    assert len(agent.replay) == N * STEPS and agent.num_updates > 0
    stored = agent.replay.gather(torch.arange(N * STEPS))  # written in step order, N worlds at a time

    def rows(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(STEPS, N, *x.shape[1:])

    assert torch.equal(rows(stored.obs["policy"]), torch.stack([s["obs"]["policy"] for s in env.steps]))
    # Every world bootstraps from the observation its step ended in: for done worlds the final
    # (pre-reset) one, not the reset observation the env returned.
    assert torch.equal(rows(stored.next_obs["policy"]), torch.stack([s["final_obs"]["policy"] for s in env.steps]))
    assert torch.equal(rows(stored.reward), _stack(env, "reward"))
    # Time-outs are not terminals: only world 0's terminations stop bootstrapping.
    assert torch.equal(rows(stored.terminated), TERMINATED)
    assert torch.equal(rows(stored.truncated), TRUNCATED)


def test_on_policy_runner_bootstraps_time_outs_from_final_obs_and_gae_by_hand(tmp_path):
    env = _env()
    gamma, lam = 0.9, 0.8
    cfg = PPOConfig(
        num_steps=PPO_STEPS, num_minibatches=2, actor_hidden=(16,), critic_hidden=(16,), gamma=gamma, lam=lam,
        normalize_obs=False, seed=0,
    )  # fmt: skip
    agent = PPO(env.obs_dims, env.action_dim, cfg)
    seen: dict[str, Any] = {}
    real_update = agent.update

    def update_spy(*args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        # What the rollout holds when the update starts, and the critic that filled it.
        st = agent.storage
        seen.update({k: getattr(st, k).clone() for k in ("values", "returns", "timeout_values", "terminated", "truncated")})
        seen["critic"] = copy.deepcopy(agent.critic)
        return real_update(*args, **kwargs)

    agent.update = update_spy
    OnPolicyRunner(env, agent, _runner_cfg(PPO_STEPS, PPO_STEPS), tmp_path / "run").learn()
    _check_env_pattern(env, PPO_STEPS)
    terminated, truncated = TERMINATED[:PPO_STEPS], TRUNCATED[:PPO_STEPS]
    assert torch.equal(seen["terminated"], terminated) and torch.equal(seen["truncated"], truncated)

    with torch.no_grad():

        def v(key: str) -> torch.Tensor:
            return seen["critic"](torch.stack([s[key]["policy"] for s in env.steps])).squeeze(-1)  # [T, N]

        values, v_final, v_next = v("obs"), v("final_obs"), v("next_obs")
    torch.testing.assert_close(seen["values"], values)
    timeout = truncated & ~terminated
    torch.testing.assert_close(seen["timeout_values"][timeout], v_final[timeout])
    assert not torch.allclose(v_final[timeout], v_next[timeout], atol=1e-4)  # the reset obs would differ

    # GAE by hand. A terminal ends with its reward; a time-out adds gamma * V(final obs) and also
    # ends the recursion (the next stored step is a new episode); the last step bootstraps from
    # V(the observation after it), which is next_obs of the last step.
    reward = _stack(env, "reward")
    returns = torch.zeros(PPO_STEPS, N)
    for i in range(N):
        advantage = 0.0
        for t in reversed(range(PPO_STEPS)):
            if terminated[t, i]:
                delta, advantage = float(reward[t, i] - values[t, i]), 0.0
            elif truncated[t, i]:
                delta, advantage = float(reward[t, i] + gamma * v_final[t, i] - values[t, i]), 0.0
            else:
                after = values[t + 1, i] if t + 1 < PPO_STEPS else v_next[t, i]
                delta = float(reward[t, i] + gamma * after - values[t, i])
            advantage = delta + gamma * lam * advantage
            returns[t, i] = advantage + float(values[t, i])
    torch.testing.assert_close(seen["returns"], returns)
