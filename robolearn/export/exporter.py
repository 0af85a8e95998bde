"""Policy export: ONNX and TorchScript artifacts plus a manifest of what every number means.

The exported network maps one flat observation vector (the ``policy`` group, normalisation folded
in) to the action vector the robot's action terms expect. The manifest is built from the run's
``policy_spec.json``; the deploy runtime refuses a policy whose manifest does not match its robot.
Parity with the eager policy is measured at export time and recorded in the manifest.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robolearn.types import assert_reads
from robolearn.utils.version import VERSION

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
"""Bumped when the manifest layout changes incompatibly."""
FORMATS = ("onnx", "torchscript")
"""Export formats ``export_policy`` accepts."""
FILENAMES = {"onnx": "policy.onnx", "torchscript": "policy.pt"}
"""Artifact file name per format."""


class ExportError(RuntimeError):
    """Export failed, or the exported policy does not reproduce the eager one."""


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _export_onnx(policy: nn.Module, example: torch.Tensor, path: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=65536)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter warns about optional packages (torchvision)
        program = torch.onnx.export(
            policy,
            (example,),
            input_names=["obs"],
            output_names=["action"],
            dynamic_shapes=({0: batch},),
            dynamo=True,
            verbose=False,
        )
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / path.name
        program.save(str(staged))
        _atomic_write_bytes(path, staged.read_bytes())


def _export_torchscript(policy: nn.Module, example: torch.Tensor, path: Path) -> None:
    traced = torch.jit.trace(policy, (example,), check_trace=False)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / path.name
        traced.save(str(staged))
        _atomic_write_bytes(path, staged.read_bytes())


def _run_exported(fmt: str, path: Path, obs: torch.Tensor) -> torch.Tensor:
    if fmt == "torchscript":
        module = torch.jit.load(str(path))
        with torch.no_grad():
            return module(obs)
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {"obs": obs.numpy()})[0])


def export_policy(
    policy: nn.Module,
    spec: dict[str, Any],
    out_dir: str | os.PathLike[str],
    formats: Sequence[str] = FORMATS,
    *,
    obs_group: str = "policy",
    parity_samples: int = 256,
    atol: float = 1e-4,
    seed: int = 0,
) -> dict[str, Any]:
    """Export ``policy`` (``obs[B, D] -> action[B, A]``, normalisation folded in) and write the manifest.

    Args:
        policy: eager module in eval mode; deterministic (the mean action).
        spec: the run's policy spec (``BatchedEnv.policy_spec()``).
        out_dir: folder for ``policy.onnx`` / ``policy.pt`` / ``manifest.json``.
        formats: any of ``onnx``, ``torchscript``.
        obs_group: the observation group the policy reads.
        parity_samples: random observations the parity check compares.
        atol: largest accepted absolute difference between exported and eager actions.
        seed: seed of the parity observations.

    Returns:
        The manifest, also written to ``out_dir/manifest.json``.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"format: expected one or more of {', '.join(FORMATS)}, got {list(formats)}")
    # What goes to the robot reads what the robot has: never the critic's or privileged state.
    assert_reads("exported policy", [obs_group])
    groups = spec.get("observations", {})
    if obs_group not in groups:
        raise ValueError(f"obs_group: the spec has no group {obs_group!r}; groups: {', '.join(groups)}")
    obs_dim = int(torch.Size(groups[obs_group]["shape"]).numel())
    out = Path(out_dir)
    policy = policy.eval()
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(parity_samples, obs_dim, generator=gen) * 2.0
    with torch.no_grad():
        eager = policy(obs)
    if eager.shape != (parity_samples, spec["action_dim"]):
        raise ExportError(
            f"policy maps obs [B, {obs_dim}] to {tuple(eager.shape[1:])}, expected [B, {spec['action_dim']}] actions"
        )
    files: dict[str, Any] = {}
    for fmt in formats:
        path = out / FILENAMES[fmt]
        try:
            (_export_onnx if fmt == "onnx" else _export_torchscript)(policy, obs[:1], path)
        except Exception as exc:
            raise ExportError(f"{fmt} export failed: {exc}") from exc
        exported = _run_exported(fmt, path, obs)
        err = float((exported - eager).abs().max())
        if not err <= atol:
            raise ExportError(f"{fmt} parity: max |exported - eager| = {err:.3g} exceeds atol {atol:g}")
        files[fmt] = {"path": path.name, "sha256": sha256_file(path), "parity_max_abs_err": err}
        log.info("exported %s to %s (parity max abs err %.3g)", fmt, path, err)
    manifest = build_manifest(spec, files, obs_group=obs_group, parity_samples=parity_samples)
    _atomic_write_bytes(out / "manifest.json", json.dumps(manifest, indent=2).encode())
    return manifest


def build_manifest(
    spec: dict[str, Any], files: dict[str, Any], *, obs_group: str = "policy", parity_samples: int = 0
) -> dict[str, Any]:
    """The manifest: inputs and outputs with their meaning, rates, joints, files and a content hash."""
    group = spec["observations"][obs_group]
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "robolearn_version": VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "task_id": spec.get("task_id", ""),
        "inputs": [
            {
                "name": "obs",
                "group": obs_group,
                "shape": [-1, *group["shape"]],
                "dtype": "float32",
                "history_length": group["history_length"],
                "normalization": "folded into the network",
                "terms": group["terms"],
            }
        ],
        "outputs": [{"name": "action", "shape": [-1, spec["action_dim"]], "dtype": "float32", "terms": spec["actions"]}],
        "control_rate_hz": spec["control_rate_hz"],
        "joint_order": spec["joint_order"],
        "files": files,
        "parity_samples": parity_samples,
    }
    # The hash covers the networks and everything that gives their numbers meaning, not the date.
    hashed = {k: v for k, v in manifest.items() if k not in ("created", "content_hash")}
    manifest["content_hash"] = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()
    return manifest


def load_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a manifest and verify its content hash and every artifact's SHA-256; raise on any mismatch."""
    path = Path(path)
    manifest_file = path / "manifest.json" if path.is_dir() else path
    try:
        manifest = json.loads(manifest_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ExportError(f"manifest {manifest_file}: cannot read it: {exc}") from exc
    for key in ("manifest_version", "inputs", "outputs", "files", "content_hash", "control_rate_hz", "joint_order"):
        if key not in manifest:
            raise ExportError(f"manifest {manifest_file}: field {key!r} is missing")
    if manifest["manifest_version"] != MANIFEST_VERSION:
        raise ExportError(
            f"manifest {manifest_file}: manifest_version {manifest['manifest_version']}, expected {MANIFEST_VERSION}"
        )
    hashed = {k: v for k, v in manifest.items() if k not in ("created", "content_hash")}
    if hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest() != manifest["content_hash"]:
        raise ExportError(f"manifest {manifest_file}: content_hash does not match its contents (edited?)")
    for fmt, entry in manifest["files"].items():
        artifact = manifest_file.parent / entry["path"]
        if not artifact.is_file() or sha256_file(artifact) != entry["sha256"]:
            raise ExportError(f"manifest {manifest_file}: {fmt} artifact {artifact.name} is missing or modified")
    return manifest
