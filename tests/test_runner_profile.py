"""The profile of training seconds (``time/update_s``): the runners time the agent's updates, and
the split carries over a resume. A fake clock that only the env's steps and the agent's updates
advance makes every figure exact."""

from __future__ import annotations

import csv
import json
import math
import types
from pathlib import Path

import pytest
import torch

import robolearn
import robolearn.runners.base as runner_base
from robolearn.algos import PPO, SAC, PPOConfig, SACConfig
from robolearn.runners import OffPolicyRunner, OnPolicyRunner, RunnerConfig

STEP_S = 1.0
"""Fake seconds one ``env.step`` of the training env takes."""
UPDATE_S = 10.0
"""Fake seconds one ``agent.update`` takes."""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The runners' ``time.perf_counter``, frozen except where :func:`_ticking` advances it."""
    now = [0.0]
    monkeypatch.setattr(runner_base, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def _ticking(obj: object, name: str, now: list[float], seconds: float) -> None:
    """Make ``obj.<name>`` advance the fake clock by ``seconds`` per call."""
    original = getattr(obj, name)

    def call(*args, **kwargs):
        now[0] += seconds
        return original(*args, **kwargs)

    setattr(obj, name, call)


def _ppo_runner(run_dir: Path, total: int, now: list[float]) -> OnPolicyRunner:
    torch.manual_seed(0)
    env = robolearn.make("Cartpole-Balance", 8, seed=0, episode_length=40)
    eval_env = robolearn.make("Cartpole-Balance", 2, seed=1, episode_length=20)
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig(num_steps=16, actor_hidden=(32,), critic_hidden=(32,)))
    _ticking(env, "step", now, STEP_S)
    _ticking(agent, "update", now, UPDATE_S)
    cfg = RunnerConfig(total_env_steps=total, eval_interval=2, checkpoint_interval=1, video=False,
                       console=False, tensorboard=False)
    return OnPolicyRunner(env, agent, cfg, run_dir, eval_env=eval_env)


def _column(run_dir: Path, name: str) -> list[float]:
    return [float(r[name]) for r in csv.DictReader((run_dir / "metrics.csv").open())]


def test_ppo_times_its_update_apart_from_collection(tmp_path, clock):
    # 4 iterations of 16 steps (16 fake seconds) and one update (10): the update is 10 of every 26.
    summary = _ppo_runner(tmp_path / "run", 8 * 16 * 4, clock).learn()
    assert _column(tmp_path / "run", "time/update_s") == [10.0, 20.0, 30.0, 40.0]
    assert _column(tmp_path / "run", "time/train_s") == [26.0, 52.0, 78.0, 104.0]
    assert summary["update_time_s"] == 40.0 and summary["train_time_s"] == 104.0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["update_time_s"] == 40.0


def test_the_split_carries_over_a_resume(tmp_path, clock):
    _ppo_runner(tmp_path / "run", 8 * 16 * 2, clock).learn()
    # The budget raised, the run resumed by new objects: the counter comes from the checkpoint, so
    # the last row holds all four updates (20 of them would mean it restarted from zero).
    summary = _ppo_runner(tmp_path / "run", 8 * 16 * 4, clock).learn(resume=True)
    assert _column(tmp_path / "run", "time/update_s")[-1] == 40.0
    assert summary["update_time_s"] == 40.0 and summary["train_time_s"] == 104.0


def test_sac_times_each_update_call(tmp_path, clock):
    torch.manual_seed(0)
    env = robolearn.make("Cartpole-Balance", 4, seed=0, episode_length=30)
    eval_env = robolearn.make("Cartpole-Balance", 2, seed=7, episode_length=30)
    cfg = SACConfig(batch_size=32, learning_starts=40, actor_hidden=(32,), critic_hidden=(32,), buffer_size=10_000)
    agent = SAC(env.obs_dims, env.action_dim, cfg, action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)
    _ticking(env, "step", clock, STEP_S)
    _ticking(agent, "update", clock, UPDATE_S)
    rcfg = RunnerConfig(total_env_steps=4 * 10 * 3, steps_per_iteration=10, eval_interval=2, video=False,
                        console=False, tensorboard=False)
    summary = OffPolicyRunner(env, agent, rcfg, tmp_path / "run", eval_env=eval_env).learn()
    # Each of the 10 steps an iteration is followed by one update call (before learning_starts too).
    assert _column(tmp_path / "run", "time/update_s") == [100.0, 200.0, 300.0]
    assert _column(tmp_path / "run", "time/train_s") == [110.0, 220.0, 330.0]
    assert summary["update_time_s"] == 300.0


def test_a_checkpoint_without_the_split_leaves_it_unknown(tmp_path, clock):
    """A checkpoint of an earlier version has no ``update_time``: resumed from it, the update seconds
    before are unknown (``nan``), not zero, so no split mixes an uncounted past into the total."""
    runner = _ppo_runner(tmp_path / "run", 8 * 16, clock)
    runner.learn()
    state = runner.state_dict()
    del state["counters"]["update_time"]
    fresh = _ppo_runner(tmp_path / "other", 8 * 16, clock)
    fresh._load_state(state)
    assert math.isnan(fresh.update_time) and fresh.train_time == 26.0
