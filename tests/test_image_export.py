"""Export of policies with uint8 image inputs (robolearn.export.vision): ONNX Runtime and TorchScript
parity on random bytes, the version-5 manifest's image declarations (schema-valid, checked against
the policy spec), refusals naming the field, older layouts untouched, and the deploy runtime feeding
an image + proprioception policy from a camera and the joints."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import robolearn
from robolearn.export import (
    Artifact,
    ExportError,
    ExportManifest,
    build_manifest,
    load_manifest,
    read_manifest,
)
from robolearn.export.vision import export_image_policy, image_input_of, image_policy_runner
from robolearn.nn.vision import CNNEncoder, MultiModalEncoder, stack_frames
from robolearn.spec import PolicySpec
from robolearn.spec.manifest import ImageInputSpec, SpecError, StateSpec
from robolearn.spec.schema import schema_errors

H = W = 16
PROPRIO = 5  # Cartpole-Balance's policy group
FRAMES = 2


def _with_image_group(spec: dict, h: int = H, w: int = W, c: int = 3) -> dict:
    """A copy of ``spec`` with a camera frame ``[h, w, c]`` as its ``image`` group (one shaped term)."""
    spec = copy.deepcopy(spec)
    spec["observations"]["image"] = {
        "shape": [h, w, c], "frame_dim": h * w * c, "history_length": 0,
        "terms": [{"name": "camera", "start": 0, "dim": h * w * c, "source": "robolearn.envs.camera.rgb"}],
    }
    return spec


class _PixelPolicy(nn.Module):
    """A DrQ-v2-style actor: shared CNN, trunk, proprioception, tanh head."""

    def __init__(self, image_shape: tuple[int, int, int], layout: str, proprio: int, act: int) -> None:
        super().__init__()
        self.front = MultiModalEncoder(CNNEncoder(image_shape, layout=layout, channels=8), proprio_dim=proprio, feature_dim=16)
        self.head = nn.Linear(self.front.out_dim, act)

    def forward(self, image: torch.Tensor, obs: torch.Tensor | None = None) -> torch.Tensor:
        return torch.tanh(self.head(self.front(image, obs)))


@pytest.fixture(scope="module")
def spec() -> dict:
    return _with_image_group(robolearn.make("Cartpole-Balance", 1, seed=0).policy_spec())


@pytest.fixture(scope="module")
def exported(spec: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[_PixelPolicy, Path, dict]:
    """An image (HWC, 2 stacked RGB frames) + proprioception policy exported in both formats."""
    torch.manual_seed(0)
    policy = _PixelPolicy((H, W, 3 * FRAMES), "HWC", PROPRIO, 1)
    out = tmp_path_factory.mktemp("pixels")
    image = image_input_of(policy.front.encoder)  # declared from the network: 2 RGB frames, HWC, x / 255 - 0.5
    return policy, out, export_image_policy(policy, spec, out, images=[image], obs_groups=("policy",))


def test_onnx_and_torchscript_match_eager_on_random_uint8_images(exported: tuple) -> None:
    policy, out, manifest = exported
    gen = torch.Generator().manual_seed(11)
    image = torch.randint(0, 256, (7, H, W, 3 * FRAMES), dtype=torch.uint8, generator=gen)
    obs = torch.randn(7, PROPRIO, generator=gen)
    with torch.no_grad():
        eager = policy(image, obs)
    import onnxruntime as ort

    session = ort.InferenceSession(str(out / "policy.onnx"), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in session.get_inputs()] == [("image", "tensor(uint8)"), ("obs", "tensor(float)")]
    onnx = torch.from_numpy(session.run(["action"], {"image": image.numpy(), "obs": obs.numpy()})[0])
    torch.testing.assert_close(onnx, eager, rtol=0, atol=1e-5)
    scripted = image_policy_runner("torchscript", out / "policy.pt", ["image", "obs"])(image, obs)
    torch.testing.assert_close(scripted, eager, rtol=0, atol=1e-5)
    # The pixels matter (a graph that dropped or mis-scaled its image would not see this change).
    assert not torch.allclose(torch.from_numpy(session.run(["action"], {"image": (255 - image).numpy(), "obs": obs.numpy()})[0]), onnx)
    for entry in manifest["files"].values():
        assert entry["parity_max_abs_err"] <= 1e-4


def test_manifest_declares_the_image_input_schema_valid(exported: tuple, spec: dict) -> None:
    _, out, manifest = exported
    assert manifest["manifest_version"] == 5
    assert json.loads((out / "manifest.json").read_text()) == manifest
    image, obs = manifest["inputs"]
    assert image == {
        "name": "image", "group": "image", "shape": [-1, H, W, 6], "dtype": "uint8", "layout": "HWC", "color": "rgb",
        "frames": 2, "normalization": "inside the network: float(x) * scale + offset", "scale": 1 / 255, "offset": -0.5,
    }
    assert obs["name"] == "obs" and obs["group"] == "policy" and obs["shape"] == [-1, PROPRIO] and obs["dtype"] == "float32"
    assert [o["name"] for o in manifest["outputs"]] == ["action"]
    (declared,) = manifest["images"]
    assert declared == {"name": "image", "shape": [H, W, 6], "layout": "HWC", "group": "image", "dtype": "uint8",
                        "color": "rgb", "frames": 2, "normalization": "in_graph", "scale": 1 / 255, "offset": -0.5}
    assert schema_errors(declared, ImageInputSpec.json_schema()) == []
    assert schema_errors(manifest["policy_spec"], PolicySpec.json_schema()) == []
    # The schema refuses what the reader refuses.
    assert schema_errors({**declared, "dtype": "float32"}, ImageInputSpec.json_schema())
    assert schema_errors({**declared, "shape": [H, W]}, ImageInputSpec.json_schema())
    assert schema_errors({**declared, "offset": "inf"}, ImageInputSpec.json_schema())
    assert schema_errors({**declared, "scale": 0}, ImageInputSpec.json_schema())
    assert schema_errors({**declared, "unknown": 1}, ImageInputSpec.json_schema())
    # Read back: hashes verified, the typed manifest carries the image inputs and writes the same JSON.
    assert load_manifest(out)["content_hash"] == manifest["content_hash"]
    typed = read_manifest(out)
    assert typed.has_images and typed.version == 5 and typed.obs_groups == ("policy",)
    assert typed.images == (ImageInputSpec("image", (H, W, 6), "HWC", frames=2),)
    assert typed.input_groups == ("policy", "image")
    assert typed.to_dict() == manifest
    typed.check_compatible(PolicySpec.from_dict(spec))
    smaller = PolicySpec.from_dict(_with_image_group(spec, 8, 8))
    with pytest.raises(ValueError, match=r"cannot run here: observations\.image\.camera\.dim: expected 768, got 192 \(and 1 more\)"):
        typed.check_compatible(smaller)


def test_pixels_only_chw_policy_exports_without_an_obs_input(spec: dict, tmp_path: Path) -> None:
    torch.manual_seed(1)
    policy = _PixelPolicy((3, H, W), "CHW", 0, 1)
    image = ImageInputSpec("pixels", (3, H, W), "CHW")
    manifest = export_image_policy(policy, spec, tmp_path, formats=["onnx"], images=[image])
    assert [i["name"] for i in manifest["inputs"]] == ["pixels"] and manifest["inputs"][0]["shape"] == [-1, 3, H, W]
    typed = read_manifest(tmp_path)
    assert typed.obs_groups == () and typed.obs_group == "" and typed.input_groups == ("image",)
    x = torch.randint(0, 256, (3, 3, H, W), dtype=torch.uint8)
    with torch.no_grad():
        torch.testing.assert_close(image_policy_runner("onnx", tmp_path / "policy.onnx", ["pixels"])(x), policy(x), rtol=0, atol=1e-5)


def _edited(manifest: dict, edit: Any) -> dict:
    m = copy.deepcopy(manifest)
    edit(m)
    return m


@pytest.mark.parametrize(
    "edit,error,match",
    [
        (lambda m: m.update(manifest_version=2), ExportError, r"manifest\.images: a version-2 manifest has no images section"),
        (lambda m: m["inputs"][0].update(scale=1.0), SpecError, r"manifest\.inputs\[0\]\.scale: expected 0\.0039.* \(images\[0\]\), got 1\.0"),
        (lambda m: m["images"][0].update(dtype="float32"), SpecError, r"manifest\.images\[0\]\.dtype: expected one of 'uint8', got 'float32'"),
        (lambda m: m["images"][0].update(frames=3), SpecError, r"manifest\.images\[0\]\.shape: the last axis \(HWC\) holds 6 channels, expected frames x rgb channels = 3 x 3 = 9"),
        (lambda m: m["images"][0].update(layout="CHW"), SpecError, r"manifest\.images\[0\]\.shape: the first axis \(CHW\) holds 16 channels"),
        (lambda m: m["images"][0].update(offset="inf"), SpecError, r"manifest\.images\[0\]\.offset: expected a finite number, got 'inf'"),
        (lambda m: m["images"][0].update(scale=0.0), SpecError, r"manifest\.images\[0\]\.scale: expected a value > 0\.0, got 0\.0"),
        (lambda m: m["images"][0].update(name="obs"), SpecError, r"manifest\.images\[0\]\.name: expected an identifier other than 'obs'"),
        (lambda m: m["inputs"].reverse(), ExportError, r"manifest\.inputs: expected the tensors \['image'\] \(images\), then optionally 'obs'"),
        (lambda m: m.update(recurrent={"states": [], "parity_steps": 2}), ExportError, r"manifest\.recurrent: an image policy"),
    ],
)
def test_a_bad_image_manifest_is_refused_naming_the_field(exported: tuple, edit: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ExportManifest.from_dict(_edited(exported[2], edit))


def test_image_inputs_must_fit_the_policy_spec(spec: dict, tmp_path: Path) -> None:
    policy = _PixelPolicy((H, W, 3), "HWC", PROPRIO, 1)
    with pytest.raises(SpecError, match=r"images\[0\]\.shape: one frame of it is \[16, 16, 1\] \[H, W, C\], but policy_spec\.observations\.image\.shape is \[16, 16, 3\]"):
        export_image_policy(policy, spec, tmp_path, images=[ImageInputSpec("image", (H, W, 3), "HWC", color="gray", frames=3)],
                            obs_groups=("policy",))
    with pytest.raises(SpecError, match=r"images\[0\]\.group: the policy spec has no group 'history'"):
        export_image_policy(policy, spec, tmp_path, images=[ImageInputSpec("image", (H, W, 3), "HWC", group="history")],
                            obs_groups=("policy",))
    with pytest.raises(ValueError, match="privileged"):
        export_image_policy(policy, {**spec, "observations": {**spec["observations"], "privileged": spec["observations"]["policy"]}},
                            tmp_path, images=[ImageInputSpec("image", (H, W, 3), "HWC")], obs_groups=("privileged",))
    with pytest.raises(ValueError, match="images: expected one or more image inputs"):
        export_image_policy(policy, spec, tmp_path, obs_groups=("policy",))
    # The module is fed what the manifest declares: a layout mismatch fails at export, named.
    with pytest.raises(ExportError, match=r"forward\(image \[2, 3, 16, 16\] uint8, obs \[2, 5\] float32\) failed"):
        export_image_policy(policy, spec, tmp_path, images=[ImageInputSpec("image", (3, H, W), "CHW")], obs_groups=("policy",),
                            parity_samples=2)
    assert not (tmp_path / "manifest.json").exists()


def test_image_input_of_reads_the_encoder() -> None:
    enc = CNNEncoder((9, 20, 20), layout="CHW")
    assert image_input_of(enc, "cam") == ImageInputSpec("cam", (9, 20, 20), "CHW", frames=3, scale=1 / 255, offset=-0.5)
    assert image_input_of(enc, color="gray").frames == 9
    with pytest.raises(ValueError, match="color: the encoder's 8 channels are not whole rgb frames of 3"):
        image_input_of(CNNEncoder((20, 20, 8), layout="HWC"))


def test_an_image_policy_with_several_vector_groups_round_trips(spec: dict) -> None:
    """Images, then one ``obs`` row over two groups (``inputs[1].groups``), written and read back."""
    two = copy.deepcopy(spec)
    two["observations"]["history"] = copy.deepcopy(two["observations"]["policy"])
    typed = PolicySpec.from_dict(two)
    files = {"onnx": Artifact("policy.onnx", "0" * 64, 0.0)}
    manifest = ExportManifest(typed, "policy", files, 4, obs_groups=("policy", "history"),
                              images=(ImageInputSpec("image", (3, H, W), "CHW"),)).to_dict()
    assert manifest["manifest_version"] == 5
    assert [i["name"] for i in manifest["inputs"]] == ["image", "obs"]
    assert [g["group"] for g in manifest["inputs"][1]["groups"]] == ["policy", "history"]
    assert manifest["inputs"][1]["shape"] == [-1, 2 * PROPRIO]
    back = ExportManifest.from_dict(manifest)
    assert back.obs_groups == ("policy", "history") and back.input_groups == ("policy", "history", "image")
    assert back.to_dict() == manifest
    with pytest.raises(SpecError, match=r"manifest\.inputs\[1\]\.shape: expected \[-1, 10\]"):
        ExportManifest.from_dict(_edited(manifest, lambda m: m["inputs"][1].update(shape=[-1, 5])))


def test_policies_without_images_keep_their_layouts(spec: dict) -> None:
    files = {"onnx": {"path": "policy.onnx", "sha256": "0" * 64, "parity_max_abs_err": 0.0}}
    v2 = build_manifest(spec, files, parity_samples=4)
    v3 = build_manifest(spec, files, parity_samples=4, states=[StateSpec("h", "h_in", "h_out", (1, 8))], parity_steps=2)
    assert (v2["manifest_version"], v3["manifest_version"]) == (2, 3)
    assert "images" not in v2 and "images" not in v3
    assert [i["name"] for i in v2["inputs"]] == ["obs"] and v2["inputs"][0]["dtype"] == "float32"
    with pytest.raises(ValueError, match="obs_group: expected a group name"):
        ExportManifest(PolicySpec.from_dict(spec), "", {})


def test_a_pixel_actor_on_cartpole_swingup_pixels_exports_and_runs_rendered_frames(tmp_path: Path) -> None:
    """Wiring with the camera task: its policy spec's image group (one 84x84 RGB frame) declares the
    input, and three rendered frames stacked along the channels give the eager action through ONNX."""
    env = robolearn.make("Cartpole-Swingup-Pixels", 1, seed=0)
    spec = env.policy_spec()
    frames = [env.reset()[0]["image"]]
    for _ in range(2):
        frames.append(env.step(torch.ones(1, 1))[0]["image"])
    assert frames[0].dtype == torch.uint8 and frames[0].shape == (1, 84, 84, 3)
    image = stack_frames(torch.stack(frames, dim=1), "HWC")  # [1, 84, 84, 9], oldest first
    torch.manual_seed(3)
    actor = _PixelPolicy((84, 84, 9), "HWC", 0, 1)
    manifest = export_image_policy(actor, spec, tmp_path, formats=["onnx"], images=[image_input_of(actor.front.encoder)],
                                   parity_samples=4)
    assert manifest["images"][0]["frames"] == 3 and manifest["inputs"][0]["shape"] == [-1, 84, 84, 9]
    with torch.no_grad():
        eager = actor(image)
    onnx = image_policy_runner("onnx", tmp_path / "policy.onnx", ["image"])(image)
    torch.testing.assert_close(onnx, eager, rtol=0, atol=1e-5)
    read_manifest(tmp_path).check_compatible(PolicySpec.from_dict(spec))


def test_the_deploy_runtime_runs_an_image_and_proprioception_policy(exported: tuple) -> None:
    """Multi-modal in the deploy runtime: the camera's frames stacked (2, oldest first) and the
    proprioception row from the joints, fed to the exported network as the eager module takes them.
    """
    import dataclasses

    from robolearn.sim2real.deploy import DeployRuntime, SafetyConfig, load_exported
    from robolearn.sim2real.robots.base import CameraFeature, CameraFrame, Reading, Robot
    from robolearn.sim2real.robots.sim_robot import SimulatedRobot

    policy, out, _ = exported
    # The image term of this spec records no camera: the input reads the camera named like the term.
    features = dataclasses.replace(SimulatedRobot("Cartpole-Balance").features, cameras={"camera": CameraFeature(H, W)})
    rng = np.random.default_rng(3)

    class Bench(Robot):
        """A robot whose next reading (random joints and camera frame) the test draws before each step."""

        def __init__(self) -> None:
            self.features, self.t = features, 0.0
            self.draw()

        def draw(self) -> Reading:
            frame = CameraFrame(rng.integers(0, 256, (H, W, 3), dtype=np.uint8), self.t)
            pos, vel = rng.uniform(-0.5, 0.5, 2), rng.uniform(-1, 1, 2)
            self.reading = Reading(self.t, pos, vel, received=self.t, images={"camera": frame})
            return self.reading

        def connect(self) -> None: ...
        def disconnect(self) -> None: ...
        @property
        def is_connected(self) -> bool:
            return True

        def read(self) -> Reading:
            return self.reading

        def send(self, command: np.ndarray) -> np.ndarray:
            self.t += 0.01
            return command

    for fmt in ("onnx", "torchscript"):
        robot = Bench()
        runtime = DeployRuntime(load_exported(out, fmt), robot, SafetyConfig(ramp_s=0.0), clock=lambda r=robot: r.t)
        frames, rows = [], []
        for _ in range(3):
            reading = robot.draw()
            frames.append(torch.from_numpy(reading.images["camera"].image))
            q, v = reading.joint_pos, reading.joint_vel
            rows.append(torch.tensor([[q[0], math.cos(q[1]), math.sin(q[1]), v[0], v[1]]], dtype=torch.float32))
            assert runtime.step() == 0
        stacks = [torch.cat([frames[0], frames[0]], -1), torch.cat([frames[0], frames[1]], -1), torch.cat([frames[1], frames[2]], -1)]
        with torch.no_grad():
            want = torch.cat([policy(s[None], o) for s, o in zip(stacks, rows, strict=True)]).numpy()
        np.testing.assert_allclose(np.stack(runtime.telemetry.actions), want, rtol=0, atol=1e-5)
