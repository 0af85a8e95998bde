"""The offline runner is the shared loop counting gradient steps: the step column, the summary, the
checkpoint counters and the progress all say ``grad_steps``; a resume continues exactly; a
checkpoint of another step unit is refused before anything is written."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.algos.registry import ALGORITHMS
from robolearn.data import Dataset
from robolearn.runners import OfflineRunner, OnPolicyRunner, RunDirError, RunnerConfig, load_checkpoint
from robolearn.runners.collect import collect_episodes, uniform_policy
from robolearn.runners.offline import ReferenceReturns


@pytest.fixture(scope="module")
def data() -> Dataset:
    env = robolearn.make("Cartpole-Balance", 4, seed=0, episode_length=20)
    act = uniform_policy(env.ctrl_low.double(), env.ctrl_high.double(), torch.Generator().manual_seed(0))
    return Dataset.from_episodes(collect_episodes(env, act, 8, seed=0, progress=False))


def _runner(run: Path, data: Dataset, total: int) -> OfflineRunner:
    spec = ALGORITHMS["bc"]
    env = robolearn.make("Cartpole-Balance", 2, seed=1, episode_length=20)
    agent = spec.build(spec.config(actor_hidden=(16,), batch_size=32), env.obs_dims, env.action_dim,
                       action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)
    cfg = RunnerConfig(steps_per_iteration=5, eval_interval=2, checkpoint_interval=1, video=False, console=False,
                       tensorboard=False, total_env_steps=10**9)  # an online budget an offline run must not read
    return OfflineRunner(data, agent, cfg, run, eval_env=env, total_grad_steps=total,
                         reference=ReferenceReturns(0.0, 20.0), config={"algo": {"name": "bc"}})


def _rows(run: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader((run / "metrics.csv").open())]


def test_gradient_steps_name_the_counter_everywhere(tmp_path, data):
    run = tmp_path / "run"
    summary = _runner(run, data, 20).learn()
    rows = _rows(run)
    assert [int(float(r["grad_steps"])) for r in rows] == [5, 10, 15, 20]
    assert "env_steps" not in rows[0] and "time/grad_steps_per_s" in (run / "metrics.csv").read_text()
    assert summary["grad_steps"] == 20 and summary["updates"] == 4 and "env_steps" not in summary
    assert summary["grad_steps_per_s"] == pytest.approx(20 / summary["train_time_s"])
    assert summary["normalized_score"] == pytest.approx(5.0 * summary["final_eval_return"])
    assert summary["dataset_transitions"] == len(data) and json.loads((run / "summary.json").read_text()) == summary
    assert rows[1]["eval/normalized_score"] and not rows[0]["eval/return"]  # evaluated every 2nd iteration
    counters = load_checkpoint(run / "checkpoints" / "ckpt_000020.pt")["counters"]
    assert counters["unit"] == "grad_steps" and counters["steps"] == 20
    assert (run / "learning_curve.png").is_file()


def test_resume_continues_exactly(tmp_path, data):
    _runner(tmp_path / "full", data, 20).learn()
    _runner(tmp_path / "part", data, 10).learn()
    resumed = _runner(tmp_path / "part", data, 20)
    resumed.learn(resume=True)
    assert _rows(tmp_path / "part") == _rows(tmp_path / "full")
    assert resumed.steps == 20 and resumed.update_idx == 4


def test_a_checkpoint_of_another_step_unit_is_refused(tmp_path, data):
    run = tmp_path / "run"
    _runner(run, data, 10).learn()
    before = (run / "metrics.csv").read_bytes()
    env = robolearn.make("Cartpole-Balance", 4, seed=0, episode_length=20)
    agent = ALGORITHMS["ppo"].build(ALGORITHMS["ppo"].config(num_steps=8), env.obs_dims, env.action_dim)
    online = OnPolicyRunner(env, agent, RunnerConfig(video=False, console=False, tensorboard=False), run)
    with pytest.raises(RunDirError, match="its steps count grad_steps, this runner's count env_steps"):
        online.learn(resume=True)
    assert (run / "metrics.csv").read_bytes() == before
