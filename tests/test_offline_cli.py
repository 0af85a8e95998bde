"""Offline training end to end: ``robolearn train algo=<offline> dataset=<file>`` writes the same run
directory as online runs, with normalised scores; it beats the behaviour policy on an easy task,
resumes exactly, exports, and refuses data that does not fit the task.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.cli.main import main
from robolearn.data import Dataset, DatasetMetadata
from robolearn.runners.collect import collect_episodes, noisy_policy
from tests.test_classic_tasks import make_lqr_policy

FAST = ["runner.video=false", "runner.console=false", "runner.tensorboard=false", "eval_num_envs=4"]


@pytest.fixture(scope="module")
def noisy_lqr(tmp_path_factory) -> tuple[Path, float]:
    """A dataset of an LQR controller with heavy action noise on Cartpole-Balance, and its mean return."""
    env = robolearn.make("Cartpole-Balance", 8, seed=0, nthread=1)
    lqr = make_lqr_policy()
    act = noisy_policy(
        lambda o: lqr(o["policy"].double()).float(), env.ctrl_low.double(), env.ctrl_high.double(), 1.0,
        torch.Generator().manual_seed(0),
    )
    episodes = collect_episodes(env, act, 16, seed=0, progress=False)
    behaviour = float(torch.stack([e["rewards"].sum() for e in episodes]).mean())
    meta = DatasetMetadata(task_id="Cartpole-Balance", collection="lqr-noise1.0", ref_random_return=0.0, ref_expert_return=1000.0)
    path = tmp_path_factory.mktemp("offline") / "cartpole_noisy_lqr.h5"
    Dataset.from_episodes(episodes, meta).save(path)
    return path, behaviour


def _train(run: Path, data: Path, algo: str, steps: int, *extra: str) -> dict:
    args = ["train", f"algo={algo}", "task=Cartpole-Balance", f"dataset={data}", f"total_grad_steps={steps}", f"run_dir={run}"]
    assert main([*args, *FAST, *extra]) == 0
    return json.loads((run / "summary.json").read_text())


def test_bc_beats_the_noisy_behaviour_policy(noisy_lqr, tmp_path):
    data, behaviour = noisy_lqr
    assert 500 < behaviour < 960, behaviour  # noisy enough to leave room above it
    summary = _train(tmp_path / "bc", data, "bc", 1500, "algo.actor_hidden=[64,64]", "runner.steps_per_iteration=500", "runner.eval_interval=3")
    print(f"behaviour {behaviour:.1f}, BC {summary['final_eval_return']:.1f}")
    assert summary["final_eval_return"] > behaviour + 30
    assert summary["normalized_score"] == pytest.approx(summary["final_eval_return"] / 10.0)
    assert summary["grad_steps"] == 1500 and summary["dataset_transitions"] == 16000
    for name in ("config.json", "policy_spec.json", "metrics.csv", "learning_curve.png"):
        assert (tmp_path / "bc" / name).is_file(), name
    assert main(["export", f"run={tmp_path / 'bc'}", "format=onnx"]) == 0


@pytest.mark.parametrize("algo", ["td3bc", "iql", "cql", "calql"])
def test_every_offline_learner_trains_evaluates_and_exports(noisy_lqr, tmp_path, algo):
    data, _ = noisy_lqr
    nets = ["algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"]
    if algo == "iql":
        nets.append("algo.value_hidden=[32,32]")
    summary = _train(tmp_path / algo, data, algo, 30, *nets, "runner.steps_per_iteration=10", "runner.eval_interval=3", "runner.eval_steps=50")
    assert summary["grad_steps"] == 30 and "normalized_score" in summary
    rows = list(csv.DictReader((tmp_path / algo / "metrics.csv").open()))
    assert rows and any(k.startswith("train/loss_") for k in rows[-1])
    assert main(["export", f"run={tmp_path / algo}", "format=torchscript"]) == 0
    policy = robolearn.load_policy(tmp_path / algo)
    obs = {"policy": torch.zeros(3, 5)}
    torch.testing.assert_close(policy.module()(obs["policy"]), policy.act(obs), rtol=1e-5, atol=1e-6)


def test_offline_run_resumes_exactly(noisy_lqr, tmp_path):
    data, _ = noisy_lqr
    common = ["algo.actor_hidden=[32,32]", "runner.steps_per_iteration=10", "runner.eval_interval=2", "runner.checkpoint_interval=2", "runner.eval_steps=20", "seed=3"]
    _train(tmp_path / "full", data, "bc", 40, *common)
    _train(tmp_path / "part", data, "bc", 20, *common)
    assert main(["train", f"resume={tmp_path / 'part'}", "total_grad_steps=40"]) == 0
    full = list(csv.DictReader((tmp_path / "full" / "metrics.csv").open()))
    part = list(csv.DictReader((tmp_path / "part" / "metrics.csv").open()))
    assert [r["train/loss_actor"] for r in part] == [r["train/loss_actor"] for r in full]
    assert [r["eval/return"] for r in part] == [r["eval/return"] for r in full]


def test_offline_data_must_fit_the_task(noisy_lqr, tmp_path, capsys):
    data, _ = noisy_lqr
    assert main(["train", "algo=bc", "task=HalfCheetah", f"dataset={data}", f"run_dir={tmp_path / 'x'}", *FAST]) == 2
    err = capsys.readouterr().err
    assert "dataset: metadata.task_id: the file was collected on task 'Cartpole-Balance'" in err and "'HalfCheetah'" in err
    anonymous = Dataset.load(data)
    anonymous.metadata.task_id = ""
    anonymous.save(tmp_path / "anon.h5")
    assert main(["train", "algo=bc", "task=HalfCheetah", f"dataset={tmp_path / 'anon.h5'}", f"run_dir={tmp_path / 'x'}", *FAST]) == 2
    err = capsys.readouterr().err
    assert "dataset:" in err and "17" in err and "5" in err, err
    assert main(["train", "algo=iql", "task=Cartpole-Balance", f"run_dir={tmp_path / 'y'}"]) == 2
    assert "dataset: algo=iql learns offline and needs dataset=<file or minari:id>" in capsys.readouterr().err
    assert main(["train", "algo=bc", "task=Cartpole-Balance", f"dataset={tmp_path / 'missing.h5'}", f"run_dir={tmp_path / 'z'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
