"""An exported policy loaded for deployment: ONNX Runtime (or TorchScript) at batch 1, no simulator.

:func:`load_exported` reads ``manifest.json`` (hashes verified: an edited network or manifest is
refused), opens the network with one intra-op thread (a control loop must not compete with itself
for cores), and checks that the network's input width is the manifest's observation group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.export import ExportManifest, read_manifest


class PolicyLoadError(RuntimeError):
    """An exported policy that cannot be loaded (missing files, a bad manifest, no runtime)."""


@dataclass
class ExportedPolicy:
    """One exported network and its manifest; call it with ``[1, D]`` float32 observations."""

    manifest: ExportManifest
    """The typed manifest (policy spec, observation group, files)."""
    path: Path
    """The folder holding ``manifest.json`` and the network."""
    fmt: str
    """``onnx`` or ``torchscript``."""
    _run: Any = None

    @property
    def obs_dim(self) -> int:
        """Width of the network's input."""
        return int(np.prod(self.manifest.spec.observations[self.manifest.obs_group].shape))

    @property
    def action_dim(self) -> int:
        """Width of the network's output."""
        return self.manifest.spec.action_dim

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """The action ``[1, A]`` float32 for observation ``[1, D]`` float32."""
        return self._run(obs)


def load_exported(path: str | os.PathLike[str], fmt: str = "onnx") -> ExportedPolicy:
    """Load the exported policy in folder ``path`` (or its ``manifest.json``) in format ``fmt``."""
    folder = Path(path)
    folder = folder.parent if folder.name == "manifest.json" else folder
    try:
        manifest = read_manifest(folder)
    except Exception as exc:  # ExportError, a malformed spec: one message, the path named
        raise PolicyLoadError(f"policy={folder}: {exc}") from None
    if fmt not in manifest.files:
        raise PolicyLoadError(f"policy={folder}: format {fmt!r} was not exported (it has {sorted(manifest.files)})")
    network = folder / manifest.files[fmt].path
    policy = ExportedPolicy(manifest, folder, fmt)
    if fmt == "onnx":
        try:
            import onnxruntime as ort
        except ImportError:
            raise PolicyLoadError("onnxruntime is not installed: pip install 'robolearn[export]'") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session = ort.InferenceSession(str(network), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        output = session.get_outputs()[0].name
        # run_with_ort_values is not needed: at batch 1 the plain run is a few microseconds.
        policy._run = lambda obs: session.run([output], {name: obs})[0]
    else:
        import torch

        module = torch.jit.load(str(network), map_location="cpu")
        module.eval()

        def run(obs: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return module(torch.from_numpy(obs)).numpy()

        policy._run = run
    probe = policy(np.zeros((1, policy.obs_dim), dtype=np.float32))
    if probe.shape != (1, policy.action_dim):
        raise PolicyLoadError(f"policy={folder}: the network returns shape {list(probe.shape)}, the manifest says [1, {policy.action_dim}]")
    return policy
