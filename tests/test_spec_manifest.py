"""The typed, versioned policy spec (robolearn.spec.manifest): what every registered task writes
matches the JSON schema and reads back equal; bad fields are named with their value; version-1
files still load; compatibility checks name the first mismatch; the exported manifest carries it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.export import ExportError, ExportManifest, export_policy, load_manifest, read_manifest
from robolearn.runners.policy import agent_spaces
from robolearn.spec import PolicySpec, SpecError, SpecMismatch
from robolearn.spec.schema import schema_errors

V1_FILE = Path(__file__).parent / "data" / "policy_spec_v1_cartpole_dr.json"
"""``policy_spec.json`` of Cartpole-Balance-DR as written before the spec was typed (version 1)."""


@pytest.fixture(scope="module")
def cheetah() -> dict:
    return robolearn.make("HalfCheetah", 1, seed=0).policy_spec()


def test_every_task_writes_a_spec_that_matches_the_schema_and_reads_back_equal():
    schema = PolicySpec.json_schema()
    for task in robolearn.list_tasks():
        written = json.loads(json.dumps(robolearn.make(task, 1, seed=0).policy_spec()))  # as on disk
        assert schema_errors(written, schema) == [], task
        spec = PolicySpec.from_dict(written)
        assert spec.to_dict() == written, task
        assert PolicySpec.from_json(spec.to_json()) == spec, task


def test_schema_catches_what_the_loader_catches(cheetah):
    schema = PolicySpec.json_schema()
    bad = copy.deepcopy(cheetah)
    bad["observations"]["policy"]["terms"][0]["dim"] = "8"
    bad["actions"][0]["kind"] = "muscle"
    bad["surprise"] = 1
    errors = schema_errors(bad, schema)
    assert any(e.startswith("$.observations.policy.terms[0].dim") for e in errors), errors
    assert any(e.startswith("$.actions[0].kind") for e in errors), errors
    assert any(e.startswith("$.surprise") for e in errors), errors


def _set(data: dict, path: str, value) -> dict:
    """A copy of ``data`` with the dotted ``path`` (``[i]`` for list items) set to ``value``."""
    data = copy.deepcopy(data)
    keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    node = data
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("observations.policy.terms[0].dim", 0, r"observations\.policy\.terms\[0\]\.dim: expected a value >= 1, got 0"),
        ("observations.policy.terms[0].dim", True, r"observations\.policy\.terms\[0\]\.dim: expected an integer, got True"),
        ("observations.policy.terms[1].start", 7, r"observations\.policy\.terms\[1\]\.start: expected 8 .*got 7"),
        ("observations.policy.shape", [18], r"observations\.policy\.shape: expected \[17\] .*got \[18\]"),
        ("observations.policy.terms[1].noise", {"kind": "laplace", "scale": 0.1},
         r"terms\[1\]\.noise\.kind: expected one of 'uniform', 'gaussian', got 'laplace'"),
        ("observations.policy.terms[1].noise", {"kind": "gaussian", "scale": -0.1},
         r"terms\[1\]\.noise\.scale: expected a value >= 0.0, got -0.1"),
        ("observations.policy.terms[0].clip", [1.0, -1.0], r"terms\[0\]\.clip: low 1.0 is above high -1.0"),
        ("observations.secret", {"shape": [1], "frame_dim": 1, "terms": [{"name": "x", "start": 0, "dim": 1}]},
         r"observations\.secret: unknown group 'secret'"),
        ("action_dim", 7, r"action_dim: the action terms give 6 columns, got 7"),
        ("actions[0].low", [-1.0] * 5, r"actions\[0\]\.low: expected 6 values \(dim\), got 5"),
        ("actions[0].high[2]", "nan", r"actions\[0\]\.high\[2\]: expected a number .*got 'nan'"),
        ("control_rate_hz", "fast", r"control_rate_hz: expected a number .*got 'fast'"),
        ("control_rate_hz", 50.0, r"control_rate_hz: expected 1 / dt = 20, got 50"),
        ("decimation", 0, r"decimation: expected a value >= 1, got 0"),
        ("joint_order[0]", "hip", r"joint_order: expected the action terms' joints"),
        ("spec_version", 4, r"spec_version: expected one of 1, 2, 3, got 4"),
        ("spare", 1, r"policy_spec\.spare: not a field of PolicySpec"),
    ],
)
def test_load_names_the_field_and_the_value(cheetah, path, value, message):
    with pytest.raises(SpecError, match=message):
        PolicySpec.from_dict(_set(cheetah, path, value))


def test_missing_field_and_non_object_are_named(cheetah):
    bad = copy.deepcopy(cheetah)
    del bad["actions"][0]["joints"]
    with pytest.raises(SpecError, match=r"policy_spec\.actions\[0\]\.joints: missing"):
        PolicySpec.from_dict(bad)
    with pytest.raises(SpecError, match="run/policy_spec.json: expected a JSON object, got list"):
        PolicySpec.from_dict([], "run/policy_spec.json")
    with pytest.raises(SpecError, match="not valid JSON"):
        PolicySpec.from_json("{")


def test_version_1_files_still_load_and_describe_the_same_layout():
    old = json.loads(V1_FILE.read_text())
    assert old["spec_version"] == 1 and "source" not in old["observations"]["policy"]["terms"][0]
    spec = PolicySpec.from_dict(old)
    assert spec.spec_version == 3  # upgraded in memory
    assert spec.observations["policy"].delay.lag_range == (0, 1)  # version 1 wrote [0.0, 1.0]
    assert spec.observations["policy"].terms[0].source == "" and spec.dtype == "float32"
    now = PolicySpec.from_dict(robolearn.make("Cartpole-Balance-DR", 2, seed=0).policy_spec())
    assert spec.mismatches(now, groups=list(now.observations)) == []
    # what load_policy reads to rebuild an agent without the simulator is the same in both
    a, b = agent_spaces(old), agent_spaces(now.to_dict())
    assert a["obs_dims"] == b["obs_dims"] and a["action_dim"] == b["action_dim"]
    assert torch.equal(a["action_low"], b["action_low"]) and torch.equal(a["action_high"], b["action_high"])
    # the fields that layout readers address keep their place and meaning
    written = now.to_dict()
    assert written["observations"]["policy"]["shape"] == old["observations"]["policy"]["shape"]
    assert (written["task_id"], written["action_dim"]) == (old["task_id"], old["action_dim"])
    assert [(t["low"], t["high"], t["dim"]) for t in written["actions"]] == [(t["low"], t["high"], t["dim"]) for t in old["actions"]]


@pytest.mark.parametrize(
    ("path", "value", "first"),
    [
        ("observations.policy.terms", "swap", r"observations\.policy\.terms: expected \['joint_pos', 'joint_vel'\] in this order"),
        ("observations.policy.terms[1].unit", "deg/s", r"observations\.policy\.joint_vel\.unit: expected 'm/s\|rad/s', got 'deg/s'"),
        ("actions[0].joints[0]", "hip", r"joint_order: expected \['bthigh'"),
        ("control_rate_hz", 50.0, r"control_rate_hz: expected 20, got 50"),
    ],
)
def test_check_compatible_names_the_first_mismatch(cheetah, path, value, first):
    policy = PolicySpec.from_dict(cheetah)
    policy.check_compatible(PolicySpec.from_dict(cheetah))  # the same layout: no error
    robot = _robot(cheetah, path, value)
    with pytest.raises(SpecMismatch, match=first):
        policy.check_compatible(robot)


def _robot(spec: dict, path: str, value) -> PolicySpec:
    """A validated spec that differs from ``spec`` at ``path`` (consistently, as a robot would declare it)."""
    data = copy.deepcopy(spec)
    if value == "swap":
        terms = data["observations"]["policy"]["terms"]
        terms.reverse()
        terms[0]["start"], terms[1]["start"] = 0, terms[0]["dim"]
    elif path == "actions[0].joints[0]":
        data["actions"][0]["joints"][0] = value
        data["joint_order"][0] = value
    elif path == "control_rate_hz":
        data["control_rate_hz"], data["dt"] = value, 1.0 / value
    else:
        data = _set(data, path, value)
    return PolicySpec.from_dict(data)


def test_compatibility_ignores_processing_and_counts_mismatches(cheetah):
    policy = PolicySpec.from_dict(cheetah)
    noisy = _set(cheetah, "observations.policy.terms[0].noise", {"kind": "gaussian", "scale": 0.3})
    policy.check_compatible(PolicySpec.from_dict(noisy))  # noise is the policy's training, not the robot's layout
    robot = _robot(cheetah, "control_rate_hz", 50.0)
    robot = PolicySpec.from_dict(_set(robot.to_dict(), "observations.policy.terms[0].unit", "deg"))
    assert len(policy.mismatches(robot)) == 2
    with pytest.raises(SpecMismatch, match=r"\(and 1 more\)"):
        policy.check_compatible(robot)


def test_exported_manifest_carries_the_typed_spec(tmp_path, cheetah):
    policy = torch.nn.Sequential(torch.nn.Linear(17, 6), torch.nn.Tanh())
    manifest = export_policy(policy, cheetah, tmp_path, formats=["torchscript"])
    assert manifest["manifest_version"] == 2
    typed = read_manifest(tmp_path)
    assert isinstance(typed, ExportManifest) and typed.spec == PolicySpec.from_dict(cheetah)
    assert typed.obs_group == "policy" and typed.files["torchscript"].path == "policy.pt"
    typed.check_compatible(PolicySpec.from_dict(cheetah))
    with pytest.raises(SpecMismatch, match="joint_order"):
        typed.check_compatible(_robot(cheetah, "actions[0].joints[0]", "hip"))
    # a manifest whose spec is edited and re-hashed still fails on load, naming the field
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["policy_spec"]["observations"]["policy"]["terms"][0]["dim"] = -1
    from robolearn.export.exporter import _content_hash

    data["content_hash"] = _content_hash(data)
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"policy_spec\.observations\.policy\.terms\[0\]\.dim: expected a value >= 1, got -1"):
        load_manifest(tmp_path)


def test_version_1_manifest_still_loads(tmp_path, cheetah):
    from robolearn.export.exporter import _content_hash

    policy = torch.nn.Sequential(torch.nn.Linear(17, 6))
    manifest = export_policy(policy, cheetah, tmp_path, formats=["torchscript"])
    old = {k: v for k, v in manifest.items() if k not in ("policy_spec", "content_hash")}
    old["manifest_version"] = 1
    old["content_hash"] = _content_hash(old)
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    assert load_manifest(tmp_path)["manifest_version"] == 1  # hashes verified
    with pytest.raises(ExportError, match="manifest_version 1 has no typed policy spec"):
        read_manifest(tmp_path)


def test_exporter_refuses_a_non_deployable_group_before_reading_the_spec(tmp_path, cheetah):
    with pytest.raises(ValueError, match=r"reads observation group\(s\) \['critic'\]"):
        export_policy(torch.nn.Linear(3, 1), {"not": "a spec"}, tmp_path, obs_group="critic")
    with pytest.raises(SpecError, match="spec_version"):
        export_policy(torch.nn.Linear(17, 6), {"not": "a spec"}, tmp_path)
    assert not any(tmp_path.iterdir())  # nothing written
