"""``robolearn export run=`` and ``robolearn deploy run=`` for a pixel-trained (DrQ-v2) run.

A tiny DrQ-v2 run on the 32x32 pixel cart-pole (3 stacked frames) is trained and exported through
the CLI once per module. The export goes through the image exporter: the manifest (version 5)
declares the camera bytes as the input (``[32, 32, 9]`` uint8 HWC rgb, 3 frames), ONNX and
TorchScript act as the run's loaded agent does on the env's frames, and ``deploy run=`` runs the
export on the simulated robot (the run's camera size from its task overrides). An env-stacked
image group (``history_length``) exports with the env's frames. What cannot be exported (a depth
image, frames the env's stack contradicts, an image group on the state path) is refused, the field
named.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.algos.drqv2 import DrQV2, DrQV2Config
from robolearn.cli.export import declare_images, export_run, frame_color
from robolearn.cli.main import main
from robolearn.data import Dataset
from robolearn.export import export_policy, load_manifest
from robolearn.export.vision import image_policy_runner
from robolearn.runners.policy import LoadedPolicy
from robolearn.spec import PolicySpec
from robolearn.utils.config import ConfigError

TASK = "Cartpole-Swingup-Pixels"
SIZE = 32
K = 3
SMALL = {"observations__image__terms__rgb__params__width": SIZE,
         "observations__image__terms__rgb__params__height": SIZE}  # fmt: skip
TRAIN = [
    "algo=drqv2", f"task={TASK}", "num_envs=1", "eval_num_envs=1", "total_env_steps=40",
    f"task_overrides.observations.image.terms.rgb.params.width={SIZE}",
    f"task_overrides.observations.image.terms.rgb.params.height={SIZE}",
    "task_overrides.episode_length=20", "algo.batch_size=16", "algo.buffer_size=200", "algo.feature_dim=8",
    "algo.hidden_dim=16", "algo.cnn_channels=4", "algo.learning_starts=0", f"algo.frame_stack={K}",
    "runner.steps_per_iteration=20", "runner.video=false", "runner.console=false", "runner.tensorboard=false",
]  # fmt: skip
TINY = {"batch_size": 16, "buffer_size": 200, "feature_dim": 8, "hidden_dim": 16, "cnn_channels": 4}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny DrQ-v2 run trained (40 env steps, with gradient steps) and exported through the CLI."""
    run = tmp_path_factory.mktemp("drq") / "run"
    assert main(["train", *TRAIN, f"run_dir={run}"]) == 0
    assert main(["export", f"run={run}"]) == 0
    return run


def test_export_declares_the_stacked_camera_bytes(run: Path) -> None:
    manifest = load_manifest(run / "export")  # hashes and the version-5 sections verified
    assert manifest["manifest_version"] == 5
    image = manifest["images"][0]
    assert image["name"] == "image" and image["group"] == "image"
    assert image["shape"] == [SIZE, SIZE, 3 * K] and image["frames"] == K
    assert (image["dtype"], image["layout"], image["color"]) == ("uint8", "HWC", "rgb")
    assert image["scale"] == pytest.approx(1 / 255) and image["offset"] == -0.5
    assert [i["name"] for i in manifest["inputs"]] == ["image"]  # pixels only: no obs row
    assert manifest["inputs"][0]["shape"] == [-1, SIZE, SIZE, 3 * K]
    assert sorted(manifest["files"]) == ["onnx", "torchscript"]
    assert all(0 <= f["parity_max_abs_err"] <= 1e-4 for f in manifest["files"].values())


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_exported_network_acts_as_the_runs_agent_on_the_envs_frames(run: Path, fmt: str) -> None:
    """The loaded agent stacks the env's frames itself (act_inference); the exported network is fed
    the same frames stacked oldest first, an episode start filling every slot with its first frame."""
    policy = robolearn.load_policy(run)
    network = image_policy_runner(fmt, run / "export" / ("policy.onnx" if fmt == "onnx" else "policy.pt"), ["image"])
    env = robolearn.make(TASK, 2, seed=5, **SMALL)
    obs = env.reset()[0]
    frames = [obs["image"]] * K
    gen = torch.Generator().manual_seed(0)
    actions = []
    for _ in range(5):
        stacked = torch.cat(frames[-K:], dim=-1)  # [2, H, W, K*3], oldest first
        want = policy.act(obs)
        torch.testing.assert_close(network(stacked), want, rtol=0, atol=1e-6)
        actions.append(want)
        obs = env.step(torch.rand(2, 1, generator=gen) * 2 - 1)[0]
        frames.append(obs["image"])
    # The actions move with the frames far beyond the tolerance: a wrong stack would have shown.
    spread = torch.stack(actions)
    assert float(spread.max() - spread.min()) > 1e-4
    reversed_stack = torch.cat(frames[-1 - K:-1][::-1], dim=-1)
    assert float((network(reversed_stack) - network(torch.cat(frames[-1 - K:-1], dim=-1))).abs().max()) > 1e-6


def test_deploy_run_runs_the_export_on_the_simulated_robot(run: Path) -> None:
    """``deploy run=`` finds ``<run>/export`` and gives the simulated robot the run's 32x32 camera
    (its task overrides): without them the robot's 84x84 frames would be refused."""
    dest = run.parent / "deployment"
    assert main(["deploy", f"run={run}", "robot=sim", "realtime=false", "duration=0.1", f"out={dest}"]) == 0
    summary = json.loads((dest / "summary.json").read_text())
    assert summary["steps"] == 10 and summary["final_status"] == "stopped"
    assert summary["interventions"]["stale_camera"] == 0
    data = Dataset.load(dest / "telemetry.h5")
    assert len(data) == 9 and bool(data.infos["policy_active"].all()) and bool(data.infos["sent"].all())
    command = data.infos["command"]
    assert bool(torch.isfinite(command).all()) and float(command.abs().max()) > 0
    torch.testing.assert_close(command.float(), data.actions, rtol=0, atol=1e-6)  # no clip, no ramp: the action is sent


def test_an_env_stacked_image_group_exports_with_the_envs_frames(run: Path, tmp_path: Path) -> None:
    """The env stacks 3 frames (``history_length``); the agent reads that stack as it comes
    (frame_stack=1, 9 channels): the input is the env's observation, 3 frames."""
    env = robolearn.make(TASK, 2, seed=0, observations__image__history_length=K, **SMALL)
    spec = env.policy_spec()
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(**TINY, frame_stack=1, image_channels=3 * K),
                  action_low=env.ctrl_low, action_high=env.ctrl_high, seed=2)  # fmt: skip
    loaded = LoadedPolicy(agent, robolearn.load_policy(run).cfg, spec, run)
    manifest = export_run(loaded, tmp_path, ["onnx"])
    assert manifest["images"][0]["frames"] == K and manifest["images"][0]["shape"] == [SIZE, SIZE, 3 * K]
    assert spec["observations"]["image"]["history_length"] == K
    obs = env.reset()[0]
    obs = env.step(torch.full((2, 1), 0.7))[0]
    assert obs["image"].shape == (2, SIZE, SIZE, 3 * K)
    onnx = image_policy_runner("onnx", tmp_path / "policy.onnx", ["image"])
    torch.testing.assert_close(onnx(obs["image"]), agent.act_inference(obs), rtol=0, atol=1e-6)


def test_a_run_whose_env_stacks_the_frames_loads_and_exports_through_the_cli(tmp_path: Path) -> None:
    """A run trained on an env-stacked image group (``history_length=3``, agent ``frame_stack=1``):
    ``load_policy`` sizes the agent from the spec's stacked group (one frame's shape x 3), and the
    CLI exports the env's 3 frames."""
    run = tmp_path / "stacked"
    args = [a for a in TRAIN if not a.startswith("algo.frame_stack")]
    args += ["algo.frame_stack=1", f"algo.image_channels={3 * K}", f"task_overrides.observations.image.history_length={K}"]
    assert main(["train", *args, f"run_dir={run}"]) == 0
    policy = robolearn.load_policy(run)
    assert policy.agent.frame_shape == (SIZE, SIZE, 3 * K)
    assert main(["export", f"run={run}"]) == 0
    manifest = load_manifest(run / "export")
    assert manifest["images"][0]["frames"] == K and manifest["images"][0]["shape"] == [SIZE, SIZE, 3 * K]


def test_frames_the_envs_stack_contradicts_are_refused_naming_the_field(run: Path) -> None:
    """An agent stacking 3 frames of the env's 3-frame stack reads 9 frames: no deploy runtime
    reproduces that, and the export says which field."""
    env = robolearn.make(TASK, 1, seed=0, observations__image__history_length=K, **SMALL)
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(**TINY, frame_stack=K, image_channels=3 * K),
                  action_low=env.ctrl_low, action_high=env.ctrl_high)  # fmt: skip
    spec = PolicySpec.from_dict(env.policy_spec())
    with pytest.raises(ConfigError, match=r"policy_spec\.observations\.image\.history_length: the env stacks 3 frames, "
                                          r"but the policy's encoder reads 9"):
        declare_images(agent.policy_module(), spec, ["image"])


def test_a_depth_image_is_refused_naming_the_term_source(run: Path, tmp_path: Path, capsys) -> None:
    """A run whose image group comes from a depth term: the CLI refuses (exit 2, one line) before
    writing anything, naming the field."""
    depth = tmp_path / "depth_run"
    shutil.copytree(run, depth, ignore=shutil.ignore_patterns("export", "deployment"))
    spec = json.loads((depth / "policy_spec.json").read_text())
    spec["observations"]["image"]["terms"][0]["source"] = "robolearn.envs.camera.camera_depth"
    (depth / "policy_spec.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match="camera_depth gives no camera bytes"):
        frame_color(PolicySpec.from_dict(spec), "image")
    capsys.readouterr()
    assert main(["export", f"run={depth}"]) == 2
    err = capsys.readouterr().err
    assert "robolearn export: error: policy_spec.observations.image.terms[0].source" in err
    assert "Traceback" not in err and not (depth / "export").exists()


def test_the_state_exporter_refuses_an_image_group_naming_it(run: Path, tmp_path: Path) -> None:
    policy = robolearn.load_policy(run)
    with pytest.raises(ValueError, match=r"obs_group: 'image' is an image group \(policy_spec\.observations\.image\.shape "
                                         r"\[32, 32, 3\], one camera frame\)"):
        export_policy(policy.module(), policy.spec, tmp_path, ["onnx"], obs_group="image")
    assert not any(tmp_path.iterdir())
