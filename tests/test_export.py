"""Export parity (TorchScript, ONNX Runtime), manifest contents and tamper detection."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import robolearn
from robolearn.export import ExportError, export_policy, load_manifest
from robolearn.nn import MLP, EmpiricalNormalizer


class _Policy(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.norm = EmpiricalNormalizer(obs_dim)
        self.net = MLP(obs_dim, act_dim, hidden=(32, 32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(self.norm(obs)))


@pytest.fixture(scope="module")
def spec():
    return robolearn.make("HalfCheetah", 1, seed=0).policy_spec()


@pytest.fixture
def policy():
    torch.manual_seed(0)
    p = _Policy(17, 6)
    p.norm.update(torch.randn(500, 17) * 3 + 1)  # non-trivial statistics, folded into the export
    return p


def test_export_parity_and_manifest(tmp_path, spec, policy):
    manifest = export_policy(policy, spec, tmp_path)
    assert set(manifest["files"]) == {"onnx", "torchscript"}
    for entry in manifest["files"].values():
        assert entry["parity_max_abs_err"] <= 1e-4
    obs = torch.randn(5, 17)
    expected = policy(obs).detach()
    scripted = torch.jit.load(str(tmp_path / "policy.pt"))
    torch.testing.assert_close(scripted(obs), expected, rtol=0, atol=1e-5)
    import onnxruntime as ort

    out = ort.InferenceSession(str(tmp_path / "policy.onnx")).run(None, {"obs": obs.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), expected, rtol=0, atol=1e-5)
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == manifest
    (inp,) = manifest["inputs"]
    assert inp["shape"] == [-1, 17] and [t["name"] for t in inp["terms"]] == ["joint_pos", "joint_vel"]
    (out_spec,) = manifest["outputs"]
    assert out_spec["shape"] == [-1, 6] and out_spec["terms"][0]["actuators"][0] == "bthigh"
    assert manifest["control_rate_hz"] == pytest.approx(20.0) and manifest["joint_order"][0] == "bthigh"
    assert load_manifest(tmp_path)["content_hash"] == manifest["content_hash"]


def test_tampering_and_bad_input_are_caught(tmp_path, spec, policy):
    export_policy(policy, spec, tmp_path, formats=["torchscript"])
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["control_rate_hz"] = 50.0
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match="content_hash does not match"):
        load_manifest(tmp_path)
    export_policy(policy, spec, tmp_path, formats=["torchscript"])
    with open(tmp_path / "policy.pt", "ab") as fh:
        fh.write(b"junk")
    with pytest.raises(ExportError, match="torchscript artifact policy.pt is missing or modified"):
        load_manifest(tmp_path)
    with pytest.raises(ValueError, match="format: expected one or more of onnx, torchscript"):
        export_policy(policy, spec, tmp_path, formats=["tflite"])
    with pytest.raises(ValueError, match="no group 'history'"):
        export_policy(policy, spec, tmp_path, obs_group="history")
    with pytest.raises(ExportError, match=r"expected \[B, 6\] actions"):
        export_policy(_Policy(17, 4), spec, tmp_path)


def test_content_hash_follows_the_weights(tmp_path, spec, policy):
    a = export_policy(policy, spec, tmp_path / "a", formats=["torchscript"])
    with torch.no_grad():
        policy.net[0].weight.add_(0.01)
    b = export_policy(policy, spec, tmp_path / "b", formats=["torchscript"])
    assert a["content_hash"] != b["content_hash"]
