"""The on-policy runner end to end: run directory, NaN guard, and SIGKILL-then-resume equality."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import robolearn
from robolearn.algos import PPO, PPOConfig
from robolearn.runners import OnPolicyRunner, RunnerConfig, TrainingDiverged

TRAIN = textwrap.dedent(
    """
    import sys, torch, robolearn
    from robolearn.algos import PPO, PPOConfig
    from robolearn.runners import OnPolicyRunner, RunnerConfig
    torch.set_num_threads(1)
    torch.manual_seed(0)
    run_dir, resume, pause, lr_schedule = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3]), sys.argv[4]
    env = robolearn.make("Cartpole-Balance", 8, seed=0, episode_length=40)
    eval_env = robolearn.make("Cartpole-Balance", 4, seed=100, episode_length=40)
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig(num_steps=16, actor_hidden=(32,), critic_hidden=(32,), seed=0,
                                                        schedule=lr_schedule))
    cfg = RunnerConfig(total_env_steps=8 * 16 * 8, eval_interval=2, checkpoint_interval=1, video=False,
                       console=False, tensorboard=False)
    runner = OnPolicyRunner(env, agent, cfg, run_dir, eval_env=eval_env)
    if pause:  # slow each update down so the parent can kill the run in the middle
        orig = agent.update
        def slow_update():
            import time; time.sleep(pause); return orig()
        agent.update = slow_update
    runner.learn(resume=resume)
    """
)


def _train(run_dir: Path, resume: bool = False, pause: float = 0.0, lr_schedule: str = "adaptive") -> subprocess.Popen:
    script = run_dir.parent / "train_script.py"
    script.write_text(TRAIN)
    return subprocess.Popen([sys.executable, str(script), str(run_dir), "1" if resume else "0", str(pause), lr_schedule])


def _deterministic_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _small_run(tmp_path: Path, **runner_kw) -> tuple[OnPolicyRunner, dict]:
    torch.manual_seed(0)
    env = robolearn.make("Cartpole-Balance", 8, seed=0, episode_length=40)
    eval_env = robolearn.make("Cartpole-Balance", 2, seed=1, episode_length=20)
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig(num_steps=16, actor_hidden=(32,), critic_hidden=(32,)))
    cfg = RunnerConfig(total_env_steps=8 * 16 * 4, eval_interval=2, console=False, video_camera="fixed", **runner_kw)
    runner = OnPolicyRunner(env, agent, cfg, tmp_path / "run", eval_env=eval_env, config={"task": "Cartpole-Balance"})
    return runner, runner.learn()


def test_run_directory_contents(tmp_path):
    runner, summary = _small_run(tmp_path)
    run = tmp_path / "run"
    for name in ("config.json", "policy_spec.json", "metrics.csv", "summary.json", "learning_curve.png", "eval.mp4"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name
    assert any((run / "tb").iterdir())
    assert summary == json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 512 and summary["updates"] == 4
    expected_keys = {"final_eval_return", "best_eval_return", "env_steps", "train_time_s", "wall_time_s", "env_steps_per_s"}
    assert set(summary) >= expected_keys
    assert json.loads((run / "policy_spec.json").read_text())["task_id"] == "Cartpole-Balance"
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(float(r["env_steps"])) for r in rows] == [128, 256, 384, 512]
    assert rows[-1]["eval/return"] and rows[-1]["train/loss_policy"]
    # the summary reports what the evaluations logged: the last one and the best one
    evals = [float(r["eval/return"]) for r in rows if r["eval/return"]]
    assert len(evals) == 2  # eval_interval 2 over 4 updates
    assert summary["final_eval_return"] == pytest.approx(evals[-1])
    assert summary["best_eval_return"] == pytest.approx(max(evals))
    # two eval worlds, one episode each: a success rate is a count over two
    assert float(rows[-1]["eval/success_rate"]) in (0.0, 0.5, 1.0)
    assert len(runner.checkpoints.checkpoints()) == 1  # checkpoint_interval 20 > 4 updates: only the final one
    # training seconds so far on every row (the benchmark's wall-clock axis): growing, ending at the summary's
    seconds = [float(r["time/train_s"]) for r in rows]
    assert seconds[0] > 0 and bool(np.all(np.diff(seconds) > 0)), seconds
    assert seconds[-1] == pytest.approx(summary["train_time_s"])


def test_non_finite_updates_are_skipped_then_stop_the_run(tmp_path):
    runner, _ = _small_run(tmp_path, checkpoint_interval=1)
    good = runner.checkpoints.latest()
    agent = runner.agent
    weights = {k: v.clone() for k, v in agent.actor.state_dict().items()}

    real_update = agent.update

    def poisoned() -> dict[str, torch.Tensor]:
        stats = real_update()  # a real update whose result is then corrupted, as an exploding one
        with torch.no_grad():
            agent.actor[0].weight.fill_(float("nan"))
        return stats

    agent.update = poisoned
    runner.cfg.total_env_steps *= 3
    runner.cfg.max_bad_updates = 3
    with pytest.raises(TrainingDiverged, match="3 consecutive updates produced NaN/inf"):
        runner.learn()
    assert runner.skipped_updates == 3
    for k, v in agent.actor.state_dict().items():
        assert torch.equal(v, weights[k]), "the bad update was rolled back"
    assert runner.checkpoints.latest() == good  # the last good checkpoint is intact
    saved = runner.checkpoints.load_latest()["agent"]["actor"]
    assert all(torch.isfinite(v).all() for v in saved.values())


@pytest.mark.parametrize("lr_schedule", ["adaptive", "linear"])
def test_sigkill_and_resume_match_an_uninterrupted_run(tmp_path, lr_schedule):
    """Rows after the resume equal the uninterrupted run's, the learning rate included: the adaptive
    one comes back from the checkpoint, the linear one from the run's progress (8 updates:
    ``learning_rate * (1 - k / 8)``)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full = _train(tmp_path / "a" / "run", lr_schedule=lr_schedule)
    assert full.wait(timeout=300) == 0
    if lr_schedule == "linear":
        with (tmp_path / "a" / "run" / "metrics.csv").open() as fh:
            rates = [float(r["train/learning_rate"]) for r in csv.DictReader(fh)]
        assert rates == pytest.approx([PPOConfig.learning_rate * (1 - k / 8) for k in range(8)], rel=1e-6)
    victim = _train(tmp_path / "b" / "run", pause=0.3, lr_schedule=lr_schedule)
    ckpts = tmp_path / "b" / "run" / "checkpoints"
    deadline = time.time() + 240
    while time.time() < deadline and len(list(ckpts.glob("ckpt_*.pt"))) < 3:
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    assert not (tmp_path / "b" / "run" / "summary.json").exists(), "the run was killed before it finished"
    resumed = _train(tmp_path / "b" / "run", resume=True, lr_schedule=lr_schedule)
    assert resumed.wait(timeout=300) == 0
    expected = _deterministic_rows(tmp_path / "a" / "run" / "metrics.csv")
    got = _deterministic_rows(tmp_path / "b" / "run" / "metrics.csv")
    assert len(expected) == 8 and got == expected
    a = json.loads((tmp_path / "a" / "run" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "run" / "summary.json").read_text())
    assert a["final_eval_return"] == b["final_eval_return"] and a["env_steps"] == b["env_steps"]
    # the training seconds carry over the resume: no row after it restarts from zero
    with (tmp_path / "b" / "run" / "metrics.csv").open() as fh:
        seconds = [float(r["time/train_s"]) for r in csv.DictReader(fh)]
    assert bool(np.all(np.diff(seconds) > 0)), seconds
    assert seconds[-1] == pytest.approx(b["train_time_s"])
