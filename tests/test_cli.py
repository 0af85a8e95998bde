"""The ``robolearn train | eval | export`` commands end to end, on tiny budgets."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.algos import PPOConfig
from robolearn.cli.config import ConfigError, to_dataclass, train_config_from_dict
from robolearn.cli.main import main
from robolearn.export import load_manifest

# Tiny nets, short episodes, no video/progress bar/TensorBoard: each run takes about a second.
TINY = [
    "task=Cartpole-Balance",
    "num_envs=8",
    "eval_num_envs=2",
    "task_overrides.episode_length=50",
    "algo.num_steps=16",
    "algo.actor_hidden=[32]",
    "algo.critic_hidden=[32]",
    "runner.video=false",
    "runner.console=false",
    "runner.tensorboard=false",
]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("robolearn")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "robolearn.cli.main"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> Path:
    """A finished tiny PPO run, trained through the console script."""
    root = tmp_path_factory.mktemp("cli")
    run = root / "ppo"
    proc = _cli("train", "algo=ppo", "total_env_steps=2048", f"run_dir={run}", *TINY, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in root.iterdir()) == ["ppo"], "hydra or the CLI littered the cwd"
    return run


def test_train_writes_the_run_directory(ppo_run):
    for name in ("config.json", "policy_spec.json", "metrics.csv", "summary.json"):
        assert (ppo_run / name).is_file(), name
    assert any((ppo_run / "checkpoints").glob("ckpt_*.pt"))
    summary = json.loads((ppo_run / "summary.json").read_text())
    assert summary["env_steps"] == 2048 and math.isfinite(summary["final_eval_return"])
    config = json.loads((ppo_run / "config.json").read_text())
    assert config["algo"]["name"] == "ppo" and config["algo"]["actor_hidden"] == [32]
    assert config["total_env_steps"] == 2048 and config["task_overrides"] == {"episode_length": 50}
    cfg = train_config_from_dict(config)  # the saved config converts back to the same dataclasses
    assert isinstance(cfg.algo, PPOConfig) and cfg.algo.actor_hidden == (32,)
    assert cfg.runner.total_env_steps == 2048 and cfg.algo.seed == cfg.seed == 0


def test_eval_prints_the_mean_return(ppo_run, capsys):
    assert main(["eval", f"run={ppo_run}", "episodes=4", "num_envs=2"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"mean return\s+(-?[\d.]+)", out)
    assert match, out
    assert 0.0 <= float(match.group(1)) <= 50.0
    assert re.search(r"episodes\s+4\b", out)
    # the same seed evaluates the same episodes: the number is the policy's, not noise
    assert main(["eval", f"run={ppo_run}", "episodes=4", "num_envs=2"]) == 0
    again = re.search(r"mean return\s+(-?[\d.]+)", capsys.readouterr().out)
    assert again and again.group(1) == match.group(1)
    assert main(["eval", f"run={ppo_run}", "episodes=4", "num_envs=2", "seed=7"]) == 0


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_writes_policy_and_manifest(ppo_run, tmp_path, capsys, fmt):
    out = tmp_path / fmt
    assert main(["export", f"run={ppo_run}", f"format={fmt}", f"out={out}"]) == 0
    printed = capsys.readouterr().out
    manifest = load_manifest(out)  # verifies the hashes
    assert list(manifest["files"]) == [fmt]
    assert manifest["task_id"] == "Cartpole-Balance"
    assert str(out / manifest["files"][fmt]["path"]) in printed and "manifest.json" in printed


def test_load_policy_acts_in_process(ppo_run):
    policy = robolearn.load_policy(ppo_run)
    env = robolearn.make("Cartpole-Balance", 3, seed=7)
    actions = policy.act(env.obs)
    assert actions.shape == (3, env.action_dim) and torch.isfinite(actions).all()
    assert torch.equal(actions, policy.act(env.obs))  # deterministic
    assert policy.spec["task_id"] == "Cartpole-Balance"
    module = policy.module()
    assert torch.allclose(module(env.obs["policy"]), actions)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["algo.clip_parm=0.1"], ["clip_parm", "PPOConfig", "did you mean 'clip_param'", "valid fields", "gamma"]),
        (["task=Cartpol"], ["Cartpol", "Cartpole-Balance", "HalfCheetah"]),
        (["algo=foo"], ["algo/foo", "ppo", "sac"]),
        (["sead=1"], ["sead", "did you mean 'seed'", "valid fields"]),
        (["num_envs=abc"], ["num_envs", "expected int"]),
        (["runner.vidoe=false"], ["vidoe", "RunnerConfig", "did you mean 'video'"]),
        (["runner.total_env_steps=5"], ["top-level total_env_steps"]),
    ],
)
def test_bad_train_overrides_name_the_field_and_the_choices(tmp_path, monkeypatch, capsys, args, needles):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *args, "total_env_steps=64", "runner.video=false"]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert not list(tmp_path.iterdir()), "a failed command left files behind"


def test_bad_export_and_eval_arguments(ppo_run, capsys):
    assert main(["export", f"run={ppo_run}", "format=tflite"]) == 2
    assert "onnx, torchscript, all" in capsys.readouterr().err
    assert main(["eval"]) == 2
    assert "run=" in capsys.readouterr().err
    assert main(["eval", f"run={ppo_run}", "episodz=3"]) == 2
    assert "did you mean 'episodes'" in capsys.readouterr().err


def test_multirun_sweeps_seeds_into_separate_run_dirs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    assert main(["train", "-m", "seed=0,1", "total_env_steps=256", f"run_dir={sweep}", *TINY]) == 0
    runs = sorted(p.name for p in sweep.iterdir())
    assert runs == ["seed=0", "seed=1"]
    seeds = [json.loads((sweep / r / "config.json").read_text())["seed"] for r in runs]
    assert seeds == [0, 1]
    assert all((sweep / r / "summary.json").is_file() for r in runs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]


def test_resume_continues_from_the_checkpoint(ppo_run, tmp_path):
    run = tmp_path / "resumed"
    shutil.copytree(ppo_run, run)
    assert main(["train", f"resume={run}", "total_env_steps=2560"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 2560 and summary["updates"] == 20
    steps = [int(float(r["env_steps"])) for r in csv.DictReader((run / "metrics.csv").open())]
    assert steps == list(range(128, 2561, 128))
    config = json.loads((run / "config.json").read_text())
    assert config["total_env_steps"] == 2560 and config["algo"]["actor_hidden"] == [32]


def test_sac_trains_evaluates_and_exports(tmp_path, capsys):
    run = tmp_path / "sac"
    args = [
        "train", "algo=sac", "task=Pendulum-Swingup", "total_env_steps=200", "num_envs=4", "eval_num_envs=2",
        f"run_dir={run}", "task_overrides.episode_length=25", "runner.steps_per_iteration=25",
        "runner.video=false", "runner.console=false", "runner.tensorboard=false",
        "algo.learning_starts=100", "algo.batch_size=32", "algo.buffer_size=1000",
        "algo.actor_hidden=[32]", "algo.critic_hidden=[32]",
    ]  # fmt: skip
    assert main(args) == 0
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 200
    assert json.loads((run / "config.json").read_text())["algo"]["name"] == "sac"
    policy = robolearn.load_policy(run)
    env = robolearn.make("Pendulum-Swingup", 2, seed=3)
    actions = policy.act(env.obs)
    assert actions.shape == (2, env.action_dim) and bool((actions.abs() <= 1).all())
    assert main(["export", f"run={run}", "format=torchscript"]) == 0
    assert (run / "export" / "policy.pt").is_file()


def test_sim2sim_gate_prints_the_table_writes_the_report_and_sets_the_status(ppo_run, tmp_path, capsys):
    base = [f"run={ppo_run}", "episodes=2", "num_envs=2", "only=[heavy,latency_1]"]
    # Thresholds that cannot fail and cannot pass pin the exit status whatever the tiny policy does.
    assert main(["sim2sim", *base, "perturbations.heavy.min_return=-1e9", "perturbations.latency_1.min_return=-1e9"]) == 0
    out = capsys.readouterr().out
    assert "condition" in out and "heavy" in out and "mass x1.3" in out and "PASS" in out
    report = json.loads((ppo_run / "sim2sim.json").read_text())
    assert report["passed"] and [c["name"] for c in report["conditions"]] == ["nominal", "heavy", "latency_1"]
    out_file = tmp_path / "gate.json"
    assert main(["sim2sim", *base, "perturbations.heavy.min_return=1e9", f"out={out_file}"]) == 1
    assert "FAIL (heavy)" in capsys.readouterr().out
    assert not json.loads(out_file.read_text())["passed"]
    assert main(["sim2sim", f"run={ppo_run}", "only=[hevy]"]) == 2
    assert "only: unknown perturbation(s) ['hevy']" in capsys.readouterr().err


def test_help_lists_the_choices(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "algo: bc, calql, cql, diffusion, distill, dppo, drqv2, flow, fql, iql, ppo, reinflow, sac, td3bc" in out
    experiments = next(line for line in out.splitlines() if line.startswith("experiment: "))
    assert {"cartpole_ppo", "quadrotor_hover", "quadruped_flat"} <= set(experiments[len("experiment: "):].split(", "))
    assert "Cartpole-Balance" in out


def test_to_dataclass_converts_and_rejects():
    cfg = to_dataclass(PPOConfig, {"actor_hidden": [64, 64], "gamma": 1}, "algo")
    assert cfg.actor_hidden == (64, 64) and isinstance(cfg.gamma, float)
    with pytest.raises(ConfigError, match=r"algo\.actor_hidden\[1\]: expected int"):
        to_dataclass(PPOConfig, {"actor_hidden": [64, "x"]}, "algo")
    with pytest.raises(ConfigError, match="algo: schedule: unknown 'cosine'"):
        to_dataclass(PPOConfig, {"schedule": "cosine"}, "algo")
    with pytest.raises(ConfigError, match="valid choices: ppo, sac"):
        train_config_from_dict({"task": "Cartpole-Balance", "algo": {"name": "td3"}})


@pytest.mark.parametrize(
    ("yaml_name", "config_cls"),
    [("runner/default.yaml", "robolearn.runners.base:RunnerConfig"),
     ("sim2sim.yaml", "robolearn.cli.config:Sim2SimConfig"), ("collect.yaml", "robolearn.cli.config:CollectConfig"),
     ("recipe.yaml", "robolearn.cli.config:RecipeConfig")],
)
def test_config_yaml_lists_every_dataclass_field(yaml_name, config_cls):
    import dataclasses
    import importlib
    from pathlib import Path

    import yaml

    module, name = config_cls.split(":")
    cls = getattr(importlib.import_module(module), name)
    keys = set(yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / yaml_name).read_text())) - {"name"}
    # total_env_steps comes from the top-level key (configs/algo/*.yaml hold only what differs from
    # the dataclass defaults: tests/test_algorithm_registry.py checks those)
    injected = {"seed", "total_env_steps"} if "/" in yaml_name else set()
    fields = {f.name for f in dataclasses.fields(cls)} - injected
    assert keys == fields, f"{yaml_name}: missing {sorted(fields - keys)}, unknown {sorted(keys - fields)}"


def test_train_refuses_a_distillation_student_and_names_the_command(capsys, tmp_path):
    # A student needs its teacher run: `robolearn train` points to `robolearn distill` before writing anything.
    run_dir = tmp_path / "student"
    assert main(["train", "task=Cartpole-Balance", "algo=distill", f"run_dir={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert "robolearn distill teacher=" in err and "algo=distill" in err
    assert not run_dir.exists()
