"""The off-policy runner: SAC end to end, and resume (replay buffer included) equal to a straight run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

import robolearn
from robolearn.algos import SAC, SACConfig
from robolearn.runners import OffPolicyRunner, RunnerConfig


def _runner(run_dir: Path, total: int) -> OffPolicyRunner:
    torch.manual_seed(0)
    env = robolearn.make("Cartpole-Balance", 4, seed=0, episode_length=30)
    eval_env = robolearn.make("Cartpole-Balance", 2, seed=7, episode_length=30)
    cfg = SACConfig(batch_size=32, learning_starts=40, actor_hidden=(32,), critic_hidden=(32,), buffer_size=10_000)
    agent = SAC(env.obs_dims, env.action_dim, cfg, action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)
    rcfg = RunnerConfig(
        total_env_steps=total, steps_per_iteration=10, eval_interval=2, checkpoint_interval=1,
        video=False, console=False, tensorboard=False,
    )
    return OffPolicyRunner(env, agent, rcfg, run_dir, eval_env=eval_env)


def _rows(path: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader(path.open())]


def test_sac_run_and_resume_equal_a_straight_run(tmp_path):
    straight = _runner(tmp_path / "a", total=4 * 10 * 6)
    summary = straight.learn()
    assert summary["env_steps"] == 240 and summary["updates"] == 6
    run = tmp_path / "a"
    assert {"summary.json", "metrics.csv", "policy_spec.json", "learning_curve.png"} <= {p.name for p in run.iterdir()}
    rows = _rows(run / "metrics.csv")
    assert rows[-1]["train/loss_critic"] and rows[-1]["eval/return"]
    assert straight.agent.replay.size == 240

    # stops where the straight run also evaluates, so the rows logged up to here are alike
    first = _runner(tmp_path / "b", total=4 * 10 * 4)
    first.learn()
    resumed = _runner(tmp_path / "b", total=4 * 10 * 6)
    resumed.learn(resume=True)
    assert resumed.agent.replay.size == 240  # the buffer came back with the checkpoint
    assert _rows(tmp_path / "b" / "metrics.csv") == rows
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert b["final_eval_return"] == summary["final_eval_return"]


def test_a_non_finite_action_stops_the_iteration_before_the_env_steps(tmp_path):
    # The actor breaks on the 13th call (the 3rd step of the second of three iterations): the
    # runner stops acting for that iteration, the env refuses the NaN before its physics sees it
    # (its step counter stays at the finite steps), the replay holds only finite transitions, and
    # the next iteration trains on.
    runner = _runner(tmp_path / "r", total=4 * 10 * 3)
    act, calls = runner.agent.act, [0]

    def breaking_act(obs):
        calls[0] += 1
        action = act(obs)
        return torch.full_like(action, float("nan")) if calls[0] == 13 else action

    runner.agent.act = breaking_act
    runner.learn()
    assert calls[0] == 10 + 3 + 10
    assert runner.env.common_step_counter == 10 + 2 + 10
    assert runner.agent.replay.size == 4 * 22
    assert torch.isfinite(runner.agent.replay.storage["action"][: runner.agent.replay.size]).all()
