"""An exported policy loaded for deployment: ONNX Runtime (or TorchScript) at batch 1, no simulator.

:func:`load_exported` reads ``manifest.json`` (hashes verified: an edited network or manifest is
refused), opens the network with one intra-op thread (a control loop must not compete with itself
for cores), and checks that the network's input width is the manifest's observation group (or,
for a multi-group input, the groups' widths summed: ``ExportManifest.obs_groups``).

A recurrent policy (manifest version 3, ``recurrent.states``) carries its hidden state between
calls: each call feeds the state the previous one returned (``h_in`` <- ``h_out``) and keeps the new
one; :meth:`ExportedPolicy.reset` starts it over from zeros, which the deploy runtime does at every
discontinuity (start, restart, hold, lost robot). A feed-forward policy's call is the plain
network call, unchanged; its ``reset`` does nothing.

A chunked generative policy (manifest version 4, ``chunking`` and ``sampler``) is a sampler:
``policy(obs, noise)`` maps the stacked frames ``[1, obs_history * D]`` and a noise chunk
``[1, H, A]`` to an action chunk ``[1, H, A]``; the deploy runtime runs its chunk execution
(``robolearn.spec.chunking.ChunkExecutor``) and draws its noise.

An image policy (manifest version 5, ``images``) takes its stacked camera frames as uint8 inputs,
then its ``obs`` row when it has one: ``policy(obs, images=[stack, ...])``. At load, an ONNX graph's
inputs are checked against the manifest by name and order, dtype (uint8 images) and shape (and the
``obs`` width); a TorchScript module declares no input names, dtypes or shapes, so it is only probed:
one call on zero inputs of the manifest's shapes must run and return ``[1, action_dim]``. The runtime
builds the stacks (:class:`robolearn.sim2real.deploy.images.ImageAdapter`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.export import ExportManifest, read_manifest
from robolearn.export.vision import input_names


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
    _state: list[np.ndarray] | None = None
    """The carried hidden state (``[1, *shape]`` float32 per state), ``None`` when feed-forward."""

    @property
    def obs_dim(self) -> int:
        """Width of the network's input (every input group's width, summed)."""
        return self.manifest.obs_dim

    @property
    def frame_dim(self) -> int:
        """Width of one observation frame from the robot (:attr:`obs_dim` unless chunked, whose
        network reads ``obs_history`` stacked frames).
        """
        return self.manifest.frame_dim

    @property
    def chunked(self) -> bool:
        """Whether the network is a chunk sampler (``policy(obs, noise) -> chunk``)."""
        return self.manifest.chunked

    @property
    def action_dim(self) -> int:
        """Width of the network's output."""
        return self.manifest.spec.action_dim

    @property
    def recurrent(self) -> bool:
        """Whether the network has hidden state, carried from call to call."""
        return self._state is not None

    @property
    def state(self) -> tuple[np.ndarray, ...]:
        """A copy of the carried hidden state (``[1, *shape]`` per state; empty when feed-forward)."""
        return tuple(s.copy() for s in self._state or ())

    @state.setter
    def state(self, value: tuple[np.ndarray, ...]) -> None:
        """Set the carried state (copies of ``value``, one array per state of the manifest's shape)."""
        if self._state is None:
            raise ValueError("state: a feed-forward policy has no hidden state")
        new = [np.array(v, dtype=np.float32) for v in value]
        want = [(1, *s.shape) for s in self.manifest.states]
        if [v.shape for v in new] != want:
            raise ValueError(f"state: expected arrays of shapes {want}, got {[v.shape for v in new]}")
        self._state = new

    def reset(self) -> None:
        """Start the hidden state over from zeros (the manifest's initial value); nothing when
        feed-forward.
        """
        if self._state is not None:
            self._state = [np.zeros((1, *s.shape), np.float32) for s in self.manifest.states]

    @property
    def has_images(self) -> bool:
        """Whether the network takes image inputs (``manifest.images``) before its ``obs`` row."""
        return self.manifest.has_images

    def __call__(self, obs: np.ndarray, noise: np.ndarray | None = None,
                 images: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """The action ``[1, A]`` float32 for observation ``[1, D]`` float32 (a recurrent policy also
        advances its state); a chunked policy's chunk ``[1, H, A]`` for the stacked frames and
        ``noise`` ``[1, H, A]`` float32; an image policy's action for its stacked ``images`` (one
        ``[1, *shape]`` uint8 array per ``manifest.images`` entry, in order) and ``obs`` (``[1, 0]``
        for a pixels-only policy).
        """
        if self.manifest.has_images:
            if images is None or len(images) != len(self.manifest.images):
                raise ValueError(f"images: the policy takes {len(self.manifest.images)} image input(s) "
                                 f"{[i.name for i in self.manifest.images]}, got {0 if images is None else len(images)}")
            return self._run(images, obs)
        if self.manifest.chunked:
            if noise is None:
                raise ValueError("noise: a chunked policy's sampler takes its noise [1, H, A] as input")
            return self._run(obs, noise)
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
    if manifest.has_images:
        return _load_image_policy(policy, network, folder)
    if fmt == "onnx":
        session = _onnx_session(network)
        _check_onnx_width(session, policy, folder)
        if manifest.chunked:
            policy._run = _onnx_sampler(session, manifest, folder)
        elif manifest.recurrent:
            _check_onnx_io(session, manifest, folder)
            policy._run = _onnx_recurrent(session, policy)
        else:
            name = session.get_inputs()[0].name
            output = session.get_outputs()[0].name
            # run_with_ort_values is not needed: at batch 1 the plain run is a few microseconds.
            policy._run = lambda obs: session.run([output], {name: obs})[0]
    else:
        import torch

        module = torch.jit.load(str(network), map_location="cpu")
        module.eval()

        if manifest.chunked:

            def run_sampler(obs: np.ndarray, noise: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return module(torch.from_numpy(obs), torch.from_numpy(noise)).numpy()

            policy._run = run_sampler
        elif manifest.recurrent:

            def run_recurrent(obs: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    action, *state = module(torch.from_numpy(obs), *(torch.from_numpy(s) for s in policy._state))
                policy._state = [s.numpy() for s in state]
                return action.numpy()

            policy._run = run_recurrent
        else:

            def run(obs: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return module(torch.from_numpy(obs)).numpy()

            policy._run = run
    if manifest.recurrent:
        policy._state = []
        policy.reset()
    if manifest.chunk is not None:
        shape = (1, *manifest.chunk.sampler.noise_shape)
        probe = policy(np.zeros((1, policy.obs_dim), dtype=np.float32), np.zeros(shape, np.float32))
        if probe.shape != shape:
            raise PolicyLoadError(f"policy={folder}: the sampler returns shape {list(probe.shape)}, the manifest says {list(shape)}")
        return policy
    probe = policy(np.zeros((1, policy.obs_dim), dtype=np.float32))
    if probe.shape != (1, policy.action_dim):
        raise PolicyLoadError(f"policy={folder}: the network returns shape {list(probe.shape)}, the manifest says [1, {policy.action_dim}]")
    if policy._state is not None:
        shapes = [list(s.shape) for s in policy._state]
        want = [[1, *s.shape] for s in manifest.states]
        if shapes != want:
            raise PolicyLoadError(f"policy={folder}: the network returns states of shapes {shapes}, the manifest says {want}")
        policy.reset()  # the probe advanced the state: the first real step starts from zeros
    return policy


def _check_onnx_width(session: Any, policy: ExportedPolicy, folder: Path) -> None:
    """The ONNX graph's ``obs`` input is as wide as the manifest's input groups together."""
    inputs = {i.name: i.shape for i in session.get_inputs()}
    shape = inputs.get("obs", session.get_inputs()[0].shape)
    width = shape[-1] if shape else None
    if isinstance(width, int) and width != policy.obs_dim:
        groups = " + ".join(policy.manifest.obs_groups)
        raise PolicyLoadError(
            f"policy={folder}: the network's obs input is {width} wide, the manifest's input groups ({groups}) "
            f"give {policy.obs_dim}"
        )


def _check_onnx_io(session: Any, manifest: ExportManifest, folder: Path) -> None:
    """The ONNX graph's inputs and outputs are the manifest's, by name, and each state input has the
    manifest's per-world shape (state tensors included).
    """
    want_in = ["obs", *(s.input for s in manifest.states)]
    want_out = ["action", *(s.output for s in manifest.states)]
    got = {i.name: i.shape for i in session.get_inputs()}
    got_out = [o.name for o in session.get_outputs()]
    if sorted(got) != sorted(want_in) or not set(want_out) <= set(got_out):
        raise PolicyLoadError(
            f"policy={folder}: the network's inputs {list(got)} and outputs {got_out} are not the manifest's "
            f"{want_in} -> {want_out} (recurrent.states)"
        )
    for state in manifest.states:
        shape = list(got[state.input][1:])  # past the batch axis: fixed sizes
        if shape != list(state.shape):
            raise PolicyLoadError(
                f"policy={folder}: the network's input {state.input} is [batch, {', '.join(map(str, shape))}], "
                f"the manifest's recurrent state {state.name} has shape {list(state.shape)}"
            )


def _onnx_sampler(session: Any, manifest: ExportManifest, folder: Path) -> Any:
    """The call of a chunk sampler's ONNX graph at batch 1, its inputs checked against the manifest."""
    assert manifest.chunk is not None
    sampler = manifest.chunk.sampler
    got = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if got != ["obs", sampler.noise_input] or sampler.output not in outputs:
        raise PolicyLoadError(
            f"policy={folder}: the network's inputs {got} and outputs {outputs} are not the manifest's "
            f"['obs', '{sampler.noise_input}'] -> ['{sampler.output}'] (sampler)"
        )
    names = [sampler.output]
    feed: dict[str, np.ndarray] = {}

    def run(obs: np.ndarray, noise: np.ndarray) -> np.ndarray:
        feed["obs"] = obs
        feed[sampler.noise_input] = noise
        return session.run(names, feed)[0]

    return run


def _onnx_recurrent(session: Any, policy: ExportedPolicy) -> Any:
    """The call of a recurrent ONNX network at batch 1: the carried state in, the new state kept."""
    states = policy.manifest.states
    inputs = [s.input for s in states]
    outputs = ["action", *(s.output for s in states)]
    feed: dict[str, np.ndarray] = {}  # one dict reused: no allocation per step

    def run(obs: np.ndarray) -> np.ndarray:
        feed["obs"] = obs
        for name, value in zip(inputs, policy._state, strict=True):
            feed[name] = value
        action, *policy._state = session.run(outputs, feed)
        return action

    return run


def _onnx_session(network: Path) -> Any:
    """An ONNX Runtime session on ``network``: CPU, one thread, sequential (a deployed step must not
    compete with the control loop for cores).
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise PolicyLoadError("onnxruntime is not installed: pip install 'robolearn[export]'") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(network), options, providers=["CPUExecutionProvider"])


def _load_image_policy(policy: ExportedPolicy, network: Path, folder: Path) -> ExportedPolicy:
    """Open an image policy's network (ONNX Runtime, one thread; or TorchScript), an ONNX graph's
    inputs checked against the manifest (names, uint8 images of the declared shapes, the obs width),
    and probe it once (a TorchScript module's only check: module doc).
    """
    manifest = policy.manifest
    names = input_names(manifest.images, manifest.obs_dim)
    has_obs = manifest.obs_dim > 0
    if policy.fmt == "onnx":
        session = _onnx_session(network)
        got = {i.name: i for i in session.get_inputs()}
        if list(got) != names:
            raise PolicyLoadError(f"policy={folder}: the network's inputs are {list(got)}, the manifest's {names} "
                                  "(images, then obs)")
        for image in manifest.images:
            arg = got[image.name]
            if arg.type != "tensor(uint8)" or list(arg.shape[1:]) != list(image.shape):
                raise PolicyLoadError(f"policy={folder}: the network's input {image.name} is {arg.type} "
                                      f"[batch, {', '.join(map(str, arg.shape[1:]))}], the manifest's image is uint8 "
                                      f"{list(image.shape)} ({image.layout})")
        if has_obs:
            width = got["obs"].shape[-1]
            if isinstance(width, int) and width != manifest.obs_dim:
                raise PolicyLoadError(f"policy={folder}: the network's obs input is {width} wide, the manifest's "
                                      f"input groups ({' + '.join(manifest.obs_groups)}) give {manifest.obs_dim}")
        outputs = ["action"]
        feed: dict[str, np.ndarray] = {}  # one dict reused: no allocation per step
        image_names = names[: len(manifest.images)]

        def run_onnx(images: Sequence[np.ndarray], obs: np.ndarray) -> np.ndarray:
            for name, x in zip(image_names, images, strict=True):
                feed[name] = x
            if has_obs:
                feed["obs"] = obs
            return session.run(outputs, feed)[0]

        policy._run = run_onnx
    else:
        import torch

        module = torch.jit.load(str(network), map_location="cpu")
        module.eval()

        def run_ts(images: Sequence[np.ndarray], obs: np.ndarray) -> np.ndarray:
            inputs = [torch.from_numpy(x) for x in images]
            if has_obs:
                inputs.append(torch.from_numpy(obs))
            with torch.inference_mode():
                return module(*inputs).numpy()

        policy._run = run_ts
    probe = policy(np.zeros((1, manifest.obs_dim), np.float32),
                   images=[np.zeros((1, *i.shape), np.uint8) for i in manifest.images])
    if probe.shape != (1, policy.action_dim):
        raise PolicyLoadError(f"policy={folder}: the network returns shape {list(probe.shape)}, the manifest says [1, {policy.action_dim}]")
    return policy
