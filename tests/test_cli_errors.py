"""User errors get one clear line and a non-zero exit, never a traceback: a run directory already
in use, unreadable run files, an unwritable output folder, a full disk, a dataset that is not
HDF5, a diverging run; Ctrl-C stops after a checkpoint and the run resumes; ``torch_threads`` is
applied and recorded."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from robolearn.cli.main import main
from robolearn.runners import CheckpointManager

TINY = [
    "task=Cartpole-Balance", "num_envs=4", "eval_num_envs=2", "task_overrides.episode_length=20", "algo.num_steps=8",
    "algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "runner.video=false", "runner.console=false",
    "runner.tensorboard=false",
]


def _train(run: Path, *extra: str) -> int:
    return main(["train", "total_env_steps=64", f"run_dir={run}", *TINY, *extra])


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("cli_errors") / "run"
    assert _train(run) == 0
    return run


def test_training_into_a_used_run_dir_is_refused_unless_overwritten(finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(run) == 0
    config = (run / "config.json").read_bytes()
    capsys.readouterr()
    assert _train(run, "seed=5") == 2
    line = _error(capsys)
    assert f"{run} already holds a run" in line and "runner.overwrite=true" in line
    assert (run / "config.json").read_bytes() == config
    assert _train(run, "seed=5", "runner.overwrite=true") == 0
    assert json.loads((run / "config.json").read_text())["seed"] == 5


@pytest.mark.parametrize("name", ["config.json", "policy_spec.json"])
def test_a_corrupt_run_file_is_named(finished_run, tmp_path, capsys, name):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / name).write_text('{"task": "Cartpole-Bal')  # torn by a crash
    assert main(["eval", f"run={run}", "episodes=1", "num_envs=1"]) == 2
    assert str(run / name) in _error(capsys)
    if name == "config.json":
        assert main(["train", f"resume={run}"]) == 2
        assert str(run / name) in _error(capsys)


def test_an_unwritable_run_dir_is_named(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert _train(blocker / "run") == 2
    assert str(blocker) in _error(capsys)


def test_a_full_disk_is_a_clear_error_and_releases_the_lock(tmp_path, capsys, monkeypatch):
    def full(self, state, step):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path_for(step)))

    monkeypatch.setattr(CheckpointManager, "save", full)  # the disk fills as the checkpoint is written
    run = tmp_path / "run"
    assert _train(run) == 2
    line = _error(capsys)
    assert "no space left on the device writing" in line and "ckpt_000064.pt" in line
    assert not (run / ".lock").exists()


def test_a_dataset_that_is_not_hdf5_is_named(tmp_path, capsys):
    data = tmp_path / "data.h5"
    data.write_text("episode,return\n1,2\n")
    assert main(["train", "algo=bc", "task=Cartpole-Balance", f"dataset={data}", f"run_dir={tmp_path / 'run'}",
                 "total_grad_steps=10", "runner.video=false", "runner.console=false"]) == 2
    assert str(data) in _error(capsys)


def test_a_diverging_run_exits_non_zero(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", "task=Hopper", "task_overrides.timestep=1.0", "num_envs=4", "eval_num_envs=0",
                 "algo.num_steps=8", "total_env_steps=640", "runner.divergence_patience=5", f"run_dir={run}",
                 "runner.video=false", "runner.console=false", "runner.tensorboard=false"])
    assert code == 1
    assert "training stopped: the physics diverged" in _error(capsys)
    assert not (run / "summary.json").exists()


def test_torch_threads_is_applied_and_recorded(tmp_path):
    before = torch.get_num_threads()
    try:
        assert _train(tmp_path / "run", "torch_threads=2") == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["torch_threads"] == 2


def test_sim_threads_sets_the_physics_threads_of_both_envs(tmp_path, capsys):
    from robolearn.cli.build import build_env
    from robolearn.cli.commands import compose_config, job_train_config

    cfg = job_train_config(compose_config("train", ["task=Hopper", "sim_threads=1"]), ["sim_threads=1"])
    assert build_env(cfg, 4, 0).sim.nthread == 1
    assert build_env(cfg, 4, 0, evaluation=True).sim.nthread == 1
    default = job_train_config(compose_config("train", ["task=Hopper"]), [])
    assert default.sim_threads is None and build_env(default, 4, 0).sim.nthread == min(os.cpu_count() or 1, 4)
    assert _train(tmp_path / "run", "sim_threads=0") == 2
    assert "sim_threads: expected an integer >= 1 (or null for every core), got 0" in _error(capsys)
    assert not (tmp_path / "run").exists()  # refused before anything was written


SLOW_TRAIN = """
import sys, time
from robolearn.algos import PPO
real = PPO.update
def slow(self):
    time.sleep(0.2)
    return real(self)
PPO.update = slow
from robolearn.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_saves_a_checkpoint_releases_the_lock_and_the_run_resumes(tmp_path):
    run = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(SLOW_TRAIN)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["train", "total_env_steps=3200", f"run_dir={run}", "runner.checkpoint_interval=1000", *TINY]
    proc = subprocess.Popen([sys.executable, str(script), *args], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "metrics.csv").exists():
        time.sleep(0.05)
    time.sleep(0.5)  # a few iterations in, none of them at a checkpoint interval
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted; the last checkpoint is" in err
    assert not (run / ".lock").exists() and not (run / "summary.json").exists()
    saved = CheckpointManager(run).checkpoints()
    assert len(saved) == 1 and 0 < int(saved[0].stem.split("_")[1]) < 320  # an iteration boundary, not the end
    done = subprocess.run([sys.executable, "-m", "robolearn.cli.main", "train", f"resume={run}",
                           "total_env_steps=320"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 320


def test_an_unknown_backend_option_is_named_before_anything_is_written(tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(run, "sim_options.bogus=1") == 2
    line = _error(capsys)
    assert "sim_options:" in line and "'bogus'" in line and "backend 'mujoco'" in line, line
    assert not run.exists()
