"""Run directories never lose data, and the end of a run never throws its results away.

A new run refuses a directory holding another (or replaces it when asked); a lock refuses a
second writer and is released (a dead writer's lock is taken over); a resume that does not fit
changes no file; a damaged latest checkpoint falls back to an older one; settings used at the end
fail before the first step; the checkpoint and summary are written before the optional video;
divergence is counted and stops a run; RunnerConfig refuses bad numbers.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.algos import PPO, PPOConfig
from robolearn.runners import OnPolicyRunner, RunDirError, RunnerConfig, TrainingDiverged
from robolearn.utils.config import ConfigError

ITER = 4 * 8  # env steps of one iteration: 4 worlds x num_steps 8


def _runner(run_dir: Path, total: int = 2 * ITER, num_envs: int = 4, hidden: tuple[int, ...] = (16,),
            config: dict | None = None, task: str = "Cartpole-Balance", eval_env: bool = True,
            task_kw: dict | None = None, **runner_kw) -> OnPolicyRunner:
    torch.manual_seed(0)
    kw = {"episode_length": 20, **(task_kw or {})}
    env = robolearn.make(task, num_envs, seed=0, **kw)
    evaluation = robolearn.make(task, 2, seed=1, **kw) if eval_env else None
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig(num_steps=8, actor_hidden=hidden, critic_hidden=hidden))
    runner_kw = {"video": False, "console": False, "tensorboard": False, **runner_kw}
    cfg = RunnerConfig(total_env_steps=total * num_envs // 4, **runner_kw)
    if config is None:
        config = {"task": task, "num_envs": num_envs, "algo": {"name": "ppo", "actor_hidden": list(hidden)}}
    return OnPolicyRunner(env, agent, cfg, run_dir, eval_env=evaluation, config=config)


def _files(run: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of a run with its bytes and modification time (the lock excluded)."""
    return {str(p.relative_to(run)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}


def _steps(run: Path) -> list[int]:
    return [int(float(r["env_steps"])) for r in csv.DictReader((run / "metrics.csv").open())]


# -- a new run never writes over another -------------------------------------------------------
def test_a_new_run_refuses_a_directory_holding_another_run(tmp_path):
    run = tmp_path / "run"
    _runner(run).learn()
    before = _files(run)
    assert {"config.json", "metrics.csv", "summary.json", "policy_spec.json"} <= set(before)
    with pytest.raises(RunDirError, match=r"already holds a run .*config\.json.*resume=.*overwrite=true"):
        _runner(run, hidden=(8,), config={"task": "Cartpole-Balance", "other": 1}).learn()
    assert _files(run) == before, "the refused run changed the old one"
    assert not (run / ".lock").exists()


def test_overwrite_replaces_the_old_run_entirely(tmp_path):
    run = tmp_path / "run"
    _runner(run, total=4 * ITER, checkpoint_interval=1, keep_checkpoints=10).learn()
    assert len(list((run / "checkpoints").glob("ckpt_*.pt"))) == 4
    (run / "notes.txt").write_text("mine")  # not a run file: left alone
    summary = _runner(run, total=ITER, overwrite=True).learn()
    assert summary["env_steps"] == ITER
    assert sorted(p.name for p in (run / "checkpoints").glob("ckpt_*.pt")) == [f"ckpt_{ITER:06d}.pt"]
    assert _steps(run) == [ITER]  # no rows of the old run
    assert (run / "notes.txt").read_text() == "mine"


def test_a_failed_start_leaves_no_folder_behind(tmp_path):
    run = tmp_path / "a" / "b" / "run"
    with pytest.raises(RunDirError, match="config.json does not exist"):
        _runner(run).learn(resume=True)
    assert not (tmp_path / "a").exists()


# -- one writer at a time ----------------------------------------------------------------------
def test_a_second_writer_is_refused_and_a_dead_writers_lock_is_taken_over(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    lock = run / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(f"{socket.gethostname()} {holder.pid}\n")
        with pytest.raises(RunDirError, match=rf"being written by process {holder.pid}"):
            _runner(run).learn()
        assert lock.read_text() == f"{socket.gethostname()} {holder.pid}\n", "the refused writer removed the lock"
        assert not (run / "metrics.csv").exists() and not (run / "config.json").exists()
    finally:
        holder.kill()
        holder.wait()
    with caplog.at_level(logging.WARNING, logger="robolearn.runners.rundir"):
        _runner(run).learn()
    assert f"taking over the lock of process {holder.pid}" in caplog.text
    assert not lock.exists(), "the lock is released at the end"
    assert (run / "summary.json").is_file()


def test_the_lock_is_released_when_the_run_fails(tmp_path):
    runner = _runner(tmp_path / "run", max_bad_updates=1)
    real = runner.agent.update

    def poisoned():
        stats = real()
        return {**stats, "loss_value": torch.tensor(float("nan"))}

    runner.agent.update = poisoned
    with pytest.raises(TrainingDiverged):
        runner.learn()
    assert not (tmp_path / "run" / ".lock").exists()
    assert not (tmp_path / "run" / "summary.json").exists(), "a failed run has no summary"


# -- a resume checks everything before it writes anything -------------------------------------
@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"num_envs": 8}, "num_envs was 4 when the run started, now 8"),
        ({"hidden": (32,)}, "algo was"),
        ({"task": "Pendulum-Swingup"}, "task was 'Cartpole-Balance'"),
    ],
)
def test_a_resume_that_does_not_fit_changes_nothing(tmp_path, change, needle):
    run = tmp_path / "run"
    _runner(run, checkpoint_interval=1).learn()
    before = _files(run)
    with pytest.raises(RunDirError, match=needle):
        _runner(run, total=4 * ITER, **change).learn(resume=True)
    assert _files(run) == before
    assert not (run / ".lock").exists()


def test_a_checkpoint_that_does_not_fit_the_agent_changes_nothing(tmp_path):
    run = tmp_path / "run"
    _runner(run, config={}).learn()  # no config to compare: the checkpoint itself must be checked
    before = _files(run)
    with pytest.raises(RunDirError, match=r"checkpoint .*ckpt_000064\.pt does not fit this run"):
        _runner(run, total=4 * ITER, hidden=(32,), config={}).learn(resume=True)
    assert _files(run) == before


def test_a_resume_falls_back_past_a_truncated_latest_checkpoint(tmp_path, caplog):
    run = tmp_path / "run"
    _runner(run, total=3 * ITER, checkpoint_interval=1).learn()
    latest = run / "checkpoints" / f"ckpt_{3 * ITER:06d}.pt"
    latest.write_bytes(latest.read_bytes()[:1000])
    (run / "summary.json").unlink()
    with caplog.at_level(logging.WARNING):
        summary = _runner(run, total=4 * ITER, checkpoint_interval=1).learn(resume=True)
    assert "corrupt or truncated" in caplog.text and f"ckpt_{2 * ITER:06d}.pt" in caplog.text
    assert summary["env_steps"] == 4 * ITER and summary["updates"] == 4
    assert _steps(run) == [ITER, 2 * ITER, 3 * ITER, 4 * ITER]  # the rows after the fallback point logged again


# -- late settings fail early; the end writes what matters first ------------------------------
def test_a_bad_video_camera_fails_before_anything_is_written(tmp_path):
    run = tmp_path / "run"
    runner = _runner(run, video=True, video_camera="no_such_camera")
    with pytest.raises(ConfigError, match="runner.video_camera.*no_such_camera"):
        runner.learn()
    assert not run.exists()
    assert runner.update_idx == 0


def test_checkpoint_and_summary_come_before_a_failing_video(tmp_path, monkeypatch, caplog):
    import robolearn.runners.base as base

    def broken_encoder(*args, **kwargs):
        raise OSError("ffmpeg: encoder died")

    monkeypatch.setattr(base, "write_mp4", broken_encoder)
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        summary = _runner(run, video=True).learn()
    assert "no eval.mp4: ffmpeg: encoder died" in caplog.text
    assert json.loads((run / "summary.json").read_text()) == summary
    assert (run / "checkpoints" / f"ckpt_{2 * ITER:06d}.pt").is_file()
    assert (run / "learning_curve.png").is_file() and not (run / "eval.mp4").exists()


def test_summary_reports_training_and_total_time_and_plots_without_train_returns(tmp_path):
    run = tmp_path / "run"
    # Episodes of 1000 steps never end in 2 x 8 steps: no train/return column, only eval returns.
    summary = _runner(run, task_kw={"episode_length": 1000}, eval_steps=5).learn()
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "train/return" not in header and "eval/return" in header
    assert (run / "learning_curve.png").stat().st_size > 0
    training, total = summary["train_time_s"], summary["wall_time_s"]
    assert 0 < training < total  # evaluation and checkpoints count in the total, not in training
    assert summary["env_steps_per_s"] == pytest.approx(summary["env_steps"] / summary["train_time_s"])


# -- divergence is visible and never success ---------------------------------------------------
def test_physics_diverging_in_most_worlds_stops_the_run(tmp_path):
    run = tmp_path / "run"
    # A 1 s timestep: Hopper blows up in most worlds at nearly every step.
    runner = _runner(run, task="Hopper", task_kw={"timestep": 1.0}, total=20 * ITER, divergence_patience=5,
                     eval_env=False)
    with pytest.raises(TrainingDiverged, match=r"diverged in more than 50% of the worlds for \d+ consecutive"):
        runner.learn()
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert len(rows) == 1 and float(rows[0]["train/diverged"]) >= 5 * 2
    assert float(rows[0]["train/num_diverged"]) == float(rows[0]["train/diverged"])
    assert not (run / "summary.json").exists()


def test_divergence_counts_reach_metrics_and_summary(tmp_path):
    run = tmp_path / "run"
    summary = _runner(run, task="Hopper", task_kw={"timestep": 1.0}, divergence_patience=10_000,
                      eval_env=False).learn()
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    per_iteration = [float(r["train/diverged"]) for r in rows]
    assert all(n > ITER / 2 for n in per_iteration)
    assert summary["num_diverged"] == sum(per_iteration) == float(rows[-1]["train/num_diverged"])


# -- numbers are checked when the config is made ----------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("eval_interval", 0), ("eval_interval", 2.5), ("checkpoint_interval", True), ("keep_checkpoints", 0),
        ("steps_per_iteration", -1), ("max_bad_updates", 0), ("divergence_patience", 0), ("total_env_steps", 0),
        ("eval_steps", 0), ("eval_steps", False), ("video_size", (0, 240)), ("video_size", (320,)),
        ("video_size", "320x240"), ("video_camera", True), ("video_camera", -2), ("video_camera", ""),
        ("divergence_fraction", 1.0), ("divergence_fraction", -0.1), ("divergence_fraction", math.nan),
        ("divergence_fraction", True), ("console", 1), ("overwrite", "yes"),
    ],
)
def test_runner_config_refuses_bad_values_naming_them(field, value):
    with pytest.raises(ConfigError, match=rf"runner\.{field}.*expected.*got"):
        RunnerConfig(**{field: value})


def test_runner_config_accepts_its_defaults_and_lists():
    cfg = RunnerConfig(video_size=[64, 48], eval_steps=None, divergence_fraction=0)
    assert cfg.video_size == (64, 48)
