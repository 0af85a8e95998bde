"""The command line around a chunked generative policy: export options and deploy noise settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from robolearn.cli.deploy import DeployConfig
from robolearn.cli.main import main
from robolearn.data import Dataset
from robolearn.data.dataset import DatasetMetadata


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few gradient steps of algo=flow with a one-step head on a tiny Cartpole dataset."""
    tmp = tmp_path_factory.mktemp("gen_cli")
    g = torch.Generator().manual_seed(0)
    n = 200
    ends = torch.zeros(n, dtype=torch.bool)
    ends[99::100] = True
    obs = torch.randn(n, 5, generator=g)
    ds = Dataset({"policy": obs}, torch.rand(n, 1, generator=g) * 2 - 1, torch.rand(n, generator=g),
                 torch.zeros(n, dtype=torch.bool), ends, final_observations={"policy": obs[99::100]},
                 metadata=DatasetMetadata(task_id="Cartpole-Balance", collection="random"))
    ds.save(tmp / "tiny.h5")
    run = tmp / "run"
    args = ["train", "algo=flow", "task=Cartpole-Balance", f"dataset={tmp / 'tiny.h5'}", "total_grad_steps=4",
            f"run_dir={run}", "runner.steps_per_iteration=2", "runner.eval_interval=2", "runner.eval_steps=10",
            "runner.video=false", "runner.console=false", "runner.tensorboard=false", "eval_num_envs=2",
            "algo.hidden=[32,32]", "algo.horizon=4", "algo.execute=2", "algo.batch_size=32", "algo.sample_steps=3",
            "algo.one_step_head=true"]
    assert main(args) == 0
    return run


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_export_bakes_the_chosen_step_count_and_the_one_step_head(flow_run: Path, tmp_path: Path) -> None:
    assert main(["export", f"run={flow_run}", "format=onnx", f"out={tmp_path / 'default'}"]) == 0
    assert _manifest(tmp_path / "default")["sampler"]["steps"] == 3  # the learner's sample_steps
    assert main(["export", f"run={flow_run}", "format=onnx", "sampler_steps=5", f"out={tmp_path / 'five'}"]) == 0
    five = _manifest(tmp_path / "five")
    assert five["sampler"]["steps"] == 5 and five["sampler"]["one_step"] is False
    assert five["chunking"]["horizon"] == 4 and five["chunking"]["execute"] == 2
    assert main(["export", f"run={flow_run}", "format=onnx", "one_step=true", f"out={tmp_path / 'one'}"]) == 0
    one = _manifest(tmp_path / "one")
    assert one["sampler"]["steps"] == 1 and one["sampler"]["one_step"] is True


@pytest.mark.parametrize(("override", "message"), [
    ("sampler_steps=0", "sampler_steps: expected a number of steps >= 1"),
    ("sampler_steps=4 one_step=true", "the one-step head takes 1 step"),
])
def test_export_refuses_bad_sampler_options_naming_the_field(flow_run: Path, tmp_path: Path, override: str,
                                                             message: str, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "bad"
    assert main(["export", f"run={flow_run}", *override.split(), f"out={out}"]) != 0
    assert message in capsys.readouterr().err
    assert not out.exists()  # refused before anything was written


def test_deploy_config_checks_the_sampler_noise_mode() -> None:
    assert DeployConfig(policy="x", sampler_noise="zero", sampler_seed=3).sampler_seed == 3
    with pytest.raises(Exception, match="sampler_noise: expected normal or zero, got 'uniform'"):
        DeployConfig(policy="x", sampler_noise="uniform")
