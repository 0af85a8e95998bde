"""``robolearn deploy``: a policy on the simulated robot from the command line, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from robolearn.cli.main import main
from robolearn.data import Dataset
from tests.deploy_support import export_cartpole_lqr


@pytest.fixture(scope="module")
def lqr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_cartpole_lqr(tmp_path_factory.mktemp("lqr") / "export")


def test_deploy_on_the_simulated_robot_writes_telemetry_and_summary(lqr: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "deployment"
    assert main(["deploy", f"policy={lqr}", "robot=sim", "realtime=false", "duration=3", f"out={out}",
                 "safety.max_delta=0.2", "safety.ramp_s=0.1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 300 and summary["return"] > 290.0 and summary["resets"] == 0
    assert summary["final_status"] == "stopped"
    data = Dataset.load(out / "telemetry.h5")
    assert len(data) == 299
    sent = data.infos["sent"][:, 0]
    assert float((sent[1:] - sent[:-1]).abs().max()) <= 0.2 + 1e-9  # the change limit held throughout
    ramp = data.infos["interventions"] & 128
    assert bool(ramp[:5].all()) and not bool(ramp[20:].any())  # the 0.1 s soft start: 10 steps
    assert not bool(data.infos["policy_active"][:5].any()) and bool(data.infos["policy_active"][20:].all())
    assert "telemetry and summary in" in capsys.readouterr().out


def test_each_deployment_gets_its_own_folder(lqr: Path) -> None:
    for _ in range(2):
        assert main(["deploy", f"policy={lqr}", "realtime=false", "duration=0.05"]) == 0
    folders = sorted((lqr / "deploy").iterdir())
    assert len(folders) == 2 and all((f / "summary.json").is_file() for f in folders)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["robot=sim"], "run/policy: give exactly one of run=<run dir> or policy=<exported folder>"),
        (["policy={lqr}", "robot=ros3"], "robot: expected one of sim, ros1, ros2, got 'ros3'"),
        (["policy={lqr}", "rate=-5"], "rate: expected a positive number of Hz, got -5"),
        (["policy={lqr}", "safety.smoothing=1.5"], r"safety.smoothing: expected a weight in [0, 1), got 1.5"),
        (["policy={lqr}", "safety.brakes=on"], "safety.brakes: field 'brakes' is not in SafetySettings"),
        (["policy={lqr}", "robot=ros1"], "features: robot=ros1 needs features=<robot description .json/.yaml>"),
        (["policy={lqr}", "command_type=twist"], "command_type: expected float64_multi_array or joint_trajectory, got 'twist'"),
        (["policy={lqr}", "rate=50", "realtime=false"], "rate: 50 Hz was asked for, the policy was trained at 100 Hz"),
        (["policy={lqr}", "task=Pendulum-Swingup", "realtime=false"], "command joint names: the policy commands ['slider']"),
        (["policy=/nonexistent"], "policy: /nonexistent has no manifest.json"),
    ],
)
def test_bad_settings_and_mismatches_are_refused_before_anything_moves(lqr: Path, tmp_path: Path, capsys, args: list[str],
                                                                         message: str) -> None:
    out = tmp_path / "never"
    assert main(["deploy", *[a.format(lqr=lqr) for a in args], f"out={out}"]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not out.exists()


def test_an_existing_output_folder_is_refused(lqr: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "summary.json").write_text("{}")
    assert main(["deploy", f"policy={lqr}", "realtime=false", f"out={tmp_path / 'old'}"]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (tmp_path / "old" / "summary.json").read_text() == "{}"


def test_the_telemetry_trains_a_policy_of_the_same_interface(lqr: Path, tmp_path: Path) -> None:
    """A deployment's log is a dataset the offline learners take as is (rewards unlabelled)."""
    out = tmp_path / "log"
    assert main(["deploy", f"policy={lqr}", "realtime=false", "duration=1", f"out={out}"]) == 0
    data = Dataset.load(out / "telemetry.h5")
    assert data.observations["policy"].shape == (99, 5) and data.actions.shape == (99, 1)
    assert torch.equal(data.rewards, torch.zeros(99)) and data.metadata.extra["rewards"] == "unlabelled"
