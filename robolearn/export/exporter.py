"""Policy export: ONNX and TorchScript artifacts plus a manifest of what every number means.

The exported network maps one flat observation vector (the ``policy`` group, normalisation folded
in) to the action vector the robot's action terms expect. The manifest (:class:`ExportManifest`)
carries the run's typed policy spec (:class:`robolearn.spec.PolicySpec`); the deploy runtime
refuses a policy whose manifest does not match its robot (:meth:`ExportManifest.check_compatible`).
Parity with the eager policy is measured at export time and recorded in the manifest.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import math
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robolearn.spec import PolicySpec
from robolearn.types import assert_reads
from robolearn.utils.config import ConfigError, read_json_object
from robolearn.utils.version import VERSION

log = logging.getLogger(__name__)

MANIFEST_VERSION = 2
"""Bumped when the manifest layout changes; 2 adds ``policy_spec`` (the typed spec, validated on load)."""
READABLE_MANIFESTS = (1, 2)
"""Manifest versions :func:`load_manifest` reads (1: hashes verified, no typed spec)."""
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
    spec: PolicySpec | Mapping[str, Any],
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
        spec: the run's policy spec: a :class:`~robolearn.spec.PolicySpec` or its JSON mapping
            (``policy_spec.json``, any readable version; validated, the bad field named).
        out_dir: folder for ``policy.onnx`` / ``policy.pt`` / ``manifest.json``.
        formats: any of ``onnx``, ``torchscript``.
        obs_group: the observation group the policy reads.
        parity_samples: random observations the parity check compares.
        atol: largest accepted absolute difference between exported and eager actions.
        seed: seed of the parity observations.

    Returns:
        The manifest (:meth:`ExportManifest.to_dict`), also written to ``out_dir/manifest.json``.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"format: expected one or more of {', '.join(FORMATS)}, got {list(formats)}")
    # What goes to the robot reads what the robot has: never the critic's or privileged state.
    assert_reads("exported policy", [obs_group])
    if not isinstance(spec, PolicySpec):
        spec = PolicySpec.from_dict(spec, "policy spec")
    if obs_group not in spec.observations:
        raise ValueError(f"obs_group: the spec has no group {obs_group!r}; groups: {', '.join(spec.observations)}")
    obs_dim = math.prod(spec.observations[obs_group].shape)
    out = Path(out_dir)
    policy = policy.eval()
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(parity_samples, obs_dim, generator=gen) * 2.0
    with torch.no_grad():
        eager = policy(obs)
    if eager.shape != (parity_samples, spec.action_dim):
        raise ExportError(
            f"policy maps obs [B, {obs_dim}] to {tuple(eager.shape[1:])}, expected [B, {spec.action_dim}] actions"
        )
    files: dict[str, Artifact] = {}
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
        files[fmt] = Artifact(path.name, sha256_file(path), err)
        log.info("exported %s to %s (parity max abs err %.3g)", fmt, path, err)
    manifest = ExportManifest(spec, obs_group, files, parity_samples).to_dict()
    _atomic_write_bytes(out / "manifest.json", json.dumps(manifest, indent=2).encode())
    return manifest


@dataclass(frozen=True)
class Artifact:
    """One exported file of the policy."""

    path: str
    """File name, beside ``manifest.json``."""
    sha256: str
    """Hex SHA-256 of its bytes (``load_manifest`` verifies it)."""
    parity_max_abs_err: float
    """Largest ``|exported - eager|`` action difference measured at export time."""


@dataclass(frozen=True)
class ExportManifest:
    """The manifest of an exported policy: the typed policy spec, the group the network reads, the
    files and their parity. ``to_dict`` writes ``manifest.json`` with a content hash over
    everything but the date; ``inputs``/``outputs`` repeat the network's side of the spec for
    readers that know only those.
    """

    spec: PolicySpec
    """The run's policy spec: observation groups, actions, rates and joints."""
    obs_group: str
    """The observation group the network's input is (a deployable one)."""
    files: dict[str, Artifact]
    """Exported files by format (``onnx``, ``torchscript``)."""
    parity_samples: int = 0
    """Random observations the parity check compared."""
    created: str = ""
    """UTC time of the export (ISO 8601); not hashed. Empty: now, when written."""
    robolearn_version: str = VERSION
    """The robolearn that exported it."""

    def to_dict(self) -> dict[str, Any]:
        """The ``manifest.json`` mapping, ``content_hash`` included."""
        spec = self.spec.to_dict()
        group = spec["observations"][self.obs_group]
        manifest: dict[str, Any] = {
            "manifest_version": MANIFEST_VERSION,
            "robolearn_version": self.robolearn_version,
            "created": self.created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "task_id": self.spec.task_id,
            "inputs": [
                {
                    "name": "obs",
                    "group": self.obs_group,
                    "shape": [-1, *group["shape"]],
                    "dtype": "float32",
                    "history_length": group["history_length"],
                    "normalization": "folded into the network",
                    "terms": group["terms"],
                }
            ],
            "outputs": [{"name": "action", "shape": [-1, self.spec.action_dim], "dtype": "float32", "terms": spec["actions"]}],
            "control_rate_hz": self.spec.control_rate_hz,
            "joint_order": spec["joint_order"],
            "files": {fmt: dataclasses.asdict(a) for fmt, a in self.files.items()},
            "parity_samples": self.parity_samples,
            "policy_spec": spec,
        }
        manifest["content_hash"] = _content_hash(manifest)
        return manifest

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "manifest") -> ExportManifest:
        """Read a version-2 manifest mapping, validating its policy spec (the bad field named)."""
        version = data.get("manifest_version")
        if version != MANIFEST_VERSION:
            raise ExportError(
                f"{where}: manifest_version {version!r} has no typed policy spec (version {MANIFEST_VERSION} "
                "has); export the run again"
            )
        spec = PolicySpec.from_dict(data.get("policy_spec"), f"{where}.policy_spec")
        try:
            (inp,) = data["inputs"]
            group = str(inp["group"])
            files = {
                str(fmt): Artifact(str(e["path"]), str(e["sha256"]), float(e["parity_max_abs_err"]))
                for fmt, e in data["files"].items()
            }
            return cls(spec, group, files, int(data["parity_samples"]), str(data["created"]), str(data["robolearn_version"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ExportError(f"{where}: malformed ({type(exc).__name__}: {exc})") from None

    def check_compatible(self, robot: PolicySpec) -> None:
        """Refuse (:class:`~robolearn.spec.SpecMismatch`, the first difference named) a robot whose
        declared spec does not give this policy its input group, actions, joints and control rate.
        """
        self.spec.check_compatible(robot, groups=[self.obs_group])


def _content_hash(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of a manifest without its date and hash: the networks and what gives their numbers meaning."""
    hashed = {k: v for k, v in manifest.items() if k not in ("created", "content_hash")}
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()


def build_manifest(
    spec: PolicySpec | Mapping[str, Any], files: Mapping[str, Any], *, obs_group: str = "policy", parity_samples: int = 0
) -> dict[str, Any]:
    """The manifest mapping of ``spec`` and exported ``files`` (``{fmt: Artifact or its mapping}``)."""
    typed = spec if isinstance(spec, PolicySpec) else PolicySpec.from_dict(spec, "policy spec")
    artifacts = {k: v if isinstance(v, Artifact) else Artifact(**v) for k, v in files.items()}
    return ExportManifest(typed, obs_group, artifacts, parity_samples).to_dict()


def load_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a manifest (version 1 or 2) and verify its content hash and every artifact's SHA-256;
    a version-2 manifest's policy spec is validated too. Raise :class:`ExportError` on any mismatch.
    """
    path = Path(path)
    manifest_file = path / "manifest.json" if path.is_dir() else path
    try:
        manifest = read_json_object(manifest_file)
    except (FileNotFoundError, ConfigError) as exc:
        raise ExportError(f"manifest: {exc}") from None
    for key in ("manifest_version", "inputs", "outputs", "files", "content_hash", "control_rate_hz", "joint_order"):
        if key not in manifest:
            raise ExportError(f"manifest {manifest_file}: field {key!r} is missing")
    if manifest["manifest_version"] not in READABLE_MANIFESTS:
        raise ExportError(
            f"manifest {manifest_file}: manifest_version {manifest['manifest_version']!r}, expected one of "
            f"{', '.join(map(str, READABLE_MANIFESTS))}"
        )
    if _content_hash(manifest) != manifest["content_hash"]:
        raise ExportError(f"manifest {manifest_file}: content_hash does not match its contents (edited?)")
    if manifest["manifest_version"] == MANIFEST_VERSION:
        ExportManifest.from_dict(manifest, f"manifest {manifest_file}")
    for fmt, entry in manifest["files"].items():
        artifact = manifest_file.parent / entry["path"]
        if not artifact.is_file() or sha256_file(artifact) != entry["sha256"]:
            raise ExportError(f"manifest {manifest_file}: {fmt} artifact {artifact.name} is missing or modified")
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> ExportManifest:
    """:func:`load_manifest` (hashes verified) as the typed :class:`ExportManifest` (version 2 only)."""
    manifest = load_manifest(path)
    return ExportManifest.from_dict(manifest, f"manifest {path}")
