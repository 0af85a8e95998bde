"""Policy export: ONNX and TorchScript artifacts plus a manifest of what every number means.

The exported network maps one flat observation vector (the ``policy`` group, normalisation folded
in) to the action vector the robot's action terms expect. The manifest (:class:`ExportManifest`)
carries the run's typed policy spec (:class:`robolearn.spec.PolicySpec`); the deploy runtime
refuses a policy whose manifest does not match its robot (:meth:`ExportManifest.check_compatible`).
Parity with the eager policy is measured at export time and recorded in the manifest.

A **recurrent** policy (a module with ``state_names``, ``state_shapes`` and ``initial_state(batch)``;
``forward(obs, *states) -> (action, *new_states)``, one control step) exports with its hidden
state as explicit graph inputs and outputs: ``obs``, ``h_in`` (, ``c_in``) in and ``action``,
``h_out`` (, ``c_out``) out, every one with the batch as its dynamic first axis. The caller carries
the state: it feeds each ``*_out`` back as the next step's ``*_in``, starting from zeros and
starting over at every episode start. The manifest says so (version 3, ``recurrent.states``: a
:class:`robolearn.spec.manifest.StateSpec` per state), and the parity check steps a sequence of
observations through the eager module and the exported graph, each carrying its own state.

A policy whose input spans **several observation groups** (a module with ``obs_groups``, e.g.
PPO's history encoder: ``("policy", "history")``) reads one row, the groups' observations
concatenated in that order (one normaliser over the row). The exporter sizes ``obs`` as the sum
of their widths and refuses a privileged group among them; the manifest's ``obs`` input lists the
groups with their columns (``inputs[0].groups``: group, start, dim, ...) and the deploy runtime
builds each group from the robot's readings and concatenates them in that order.

A **chunked generative policy** (``robolearn.nn.generative``: a flow or diffusion model over action
chunks, run through ``robolearn.spec.chunking.ChunkExecutor``) exports its *sampler* with a fixed
number of steps and the sampler's noise as an explicit input: ``obs`` ``[B, obs_history * D]``
(the stacked frames, oldest first) and ``noise`` ``[B, H, A]`` (standard normal) in, ``chunk``
``[B, H, A]`` (env units) out, a deterministic function of both (:func:`export_chunk_policy`,
:func:`export_generative` for a learner with ``sampler_module(steps, one_step)``). The caller runs
the chunk execution and draws the noise; the manifest (version 4) says how (``chunking``: the
``ChunkSpec``; ``sampler``: model kind, steps, one-step head, the noise input's name, shape and
distribution), and the parity check compares torch and the exported graph over several non-zero
noise draws.

A policy with **image inputs** (``robolearn.export.vision.export_image_policy``) takes the
camera's ``uint8`` bytes, normalised inside the graph, as one input per image (``image`` ``[B, H,
W, C]`` or ``[B, C, H, W]``, frames stacked along the channels), then optionally ``obs`` (the
vector groups, as above); the manifest (version 5) declares each image input (``images``:
:class:`robolearn.spec.manifest.ImageInputSpec`: name, group, shape, dtype, layout, colour order,
frames, the in-graph normalisation).

Manifest versions: a policy with neither hidden state nor several input groups is written as
version 2 (the layout it needs, so a runtime that predates recurrent policies still loads it);
a recurrent or multi-group one as version 3, which such a runtime refuses rather than run the
network without its state or with only part of its input; a chunked one as version 4, which a
runtime without chunk execution refuses rather than play a chunk as one action; one with image
inputs as version 5, which a runtime without cameras refuses rather than feed it a vector.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import inspect
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
from robolearn.spec.manifest import (
    ChunkPolicySpec,
    ImageInputSpec,
    SpecError,
    StateSpec,
    load_images,
    load_states,
)
from robolearn.types import assert_reads
from robolearn.utils.config import ConfigError, read_json_object
from robolearn.utils.version import VERSION

log = logging.getLogger(__name__)

MANIFEST_VERSION = 5
"""The newest manifest layout; 2 adds ``policy_spec`` (the typed spec, validated on load), 3 adds
``recurrent`` (the hidden states a recurrent network reads and returns) and ``inputs[0].groups``
(the observation groups a multi-group input concatenates), 4 adds ``chunking`` and ``sampler`` (a
chunked generative policy), 5 adds ``images`` (a network's uint8 image inputs). Each policy is
written in the oldest layout that holds it: single-group feed-forward policies still as version 2
(:data:`FEEDFORWARD_MANIFEST_VERSION`), recurrent and multi-group ones as version 3
(:data:`STATEFUL_MANIFEST_VERSION`), only chunked ones as 4, only image ones as 5."""
FEEDFORWARD_MANIFEST_VERSION = 2
"""The layout a single-group policy without hidden state is written in (the oldest one with a typed spec)."""
STATEFUL_MANIFEST_VERSION = 3
"""The layout of a recurrent or multi-group policy."""
CHUNKED_MANIFEST_VERSION = 4
"""The layout of a chunked generative policy (``chunking`` and ``sampler`` sections)."""
IMAGE_MANIFEST_VERSION = 5
"""The layout of a policy with image inputs (``images`` section; the images first among ``inputs``)."""
IMAGE_NORMALIZATION = "inside the network: float(x) * scale + offset"
"""What an image input entry of ``inputs`` says about its normalisation (the caller feeds bytes)."""
INPUT_GROUP_FIELDS = ("group", "start", "dim", "shape", "history_length", "terms")
"""Fields of one entry of a multi-group input's ``inputs[0].groups`` (manifest version 3)."""
READABLE_MANIFESTS = (1, 2, 3, 4, 5)
"""Manifest versions :func:`load_manifest` reads (1: hashes verified, no typed spec)."""
TYPED_MANIFESTS = (2, 3, 4, 5)
"""Manifest versions with a typed policy spec (:class:`ExportManifest` reads them)."""
PARITY_STEPS = 50
"""Control steps of the recurrent parity sequence (the state carried through all of them)."""
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


def _export_onnx(
    policy: nn.Module,
    example: torch.Tensor,
    path: Path,
    states: tuple[StateSpec, ...] = (),
    example_states: tuple[torch.Tensor, ...] = (),
) -> None:
    batch = torch.export.Dim("batch", min=1, max=65536)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter warns about optional packages (torchvision)
        program = torch.onnx.export(
            policy,
            (example, *example_states),
            input_names=["obs", *(s.input for s in states)],
            output_names=["action", *(s.output for s in states)],
            dynamic_shapes=_batch_axes(policy, 1 + len(states), batch),
            dynamo=True,
            verbose=False,
        )
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / path.name
        program.save(str(staged))
        _atomic_write_bytes(path, staged.read_bytes())


def _batch_axes(policy: nn.Module, n_inputs: int, batch: Any) -> tuple[Any, ...]:
    """``dynamic_shapes`` giving each of ``n_inputs`` tensors its first axis as ``batch``, shaped like
    ``forward``'s parameters: torch.export matches them per parameter, so a ``*states`` parameter
    takes a tuple of the remaining tensors' axes.
    """
    axes: list[Any] = []
    left = n_inputs
    for param in inspect.signature(policy.forward).parameters.values():
        if left == 0:
            break
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            axes.append(tuple({0: batch} for _ in range(left)))
            left = 0
        elif param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            axes.append({0: batch})
            left -= 1
    return tuple(axes)


def _export_torchscript(
    policy: nn.Module,
    example: torch.Tensor,
    path: Path,
    states: tuple[StateSpec, ...] = (),
    example_states: tuple[torch.Tensor, ...] = (),
) -> None:
    traced = torch.jit.trace(policy, (example, *example_states), check_trace=False)
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


def recurrent_states(policy: nn.Module) -> tuple[StateSpec, ...]:
    """The hidden states a policy module declares (``state_names``, ``state_shapes``), as the
    manifest lists them; empty for a feed-forward module (no ``state_names``).

    Raises:
        ExportError: the declaration is inconsistent (names and shapes of different lengths, a
            shape that is not a tuple of positive sizes, names that collide).
    """
    names = getattr(policy, "state_names", None)
    if names is None:
        return ()
    shapes = getattr(policy, "state_shapes", None)
    if not callable(getattr(policy, "initial_state", None)):
        raise ExportError("recurrent policy: it has state_names but no initial_state(batch)")
    if shapes is None or len(tuple(shapes)) != len(tuple(names)):
        raise ExportError(f"recurrent policy: state_shapes {shapes!r} do not give one shape per state name {tuple(names)!r}")
    entries = [
        {"name": str(n), "input": f"{n}_in", "output": f"{n}_out", "shape": [int(d) for d in shape]}
        for n, shape in zip(names, shapes, strict=True)
    ]
    try:
        return load_states(entries, "policy.state_names/state_shapes")
    except SpecError as exc:
        raise ExportError(f"recurrent policy: {exc}") from None


def _step_sequence(step: Any, obs: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``obs[T, B, D]`` through ``step(obs, *state) -> (action, *new_state)`` from ``state``, each
    new state fed back; return the actions ``[T, B, A]`` and the states after every step, flattened
    and concatenated ``[T, B, S]``.
    """
    actions, states = [], []
    for t in range(obs.shape[0]):
        action, *new = step(obs[t], *state)
        state = tuple(new)
        actions.append(action)
        states.append(torch.cat([s.reshape(s.shape[0], -1) for s in state], dim=1))
    return torch.stack(actions), torch.stack(states)


def exported_stepper(fmt: str, path: str | os.PathLike[str], states: Sequence[StateSpec]) -> Any:
    """A callable ``(obs, *states) -> (action, *new_states)`` (torch tensors) running the exported
    recurrent network at ``path`` in format ``fmt``: ONNX Runtime or TorchScript.
    """
    if fmt == "torchscript":
        module = torch.jit.load(str(path))

        def run_ts(obs: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with torch.no_grad():
                return tuple(module(obs, *state))

        return run_ts
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = ["obs", *(s.input for s in states)]
    outputs = ["action", *(s.output for s in states)]

    def run_onnx(obs: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feed = {name: x.numpy() for name, x in zip(inputs, (obs, *state), strict=True)}
        return tuple(torch.from_numpy(y) for y in session.run(outputs, feed))

    return run_onnx


def _check_recurrent(policy: nn.Module, states: tuple[StateSpec, ...], obs_dim: int, action_dim: int) -> None:
    """The module's initial state is zeros of the declared shapes and one step returns an action
    ``[B, A]`` and states of the same shapes (what the manifest will promise).
    """
    initial = tuple(policy.initial_state(2))
    if len(initial) != len(states):
        raise ExportError(f"recurrent policy: initial_state gives {len(initial)} tensors for {len(states)} states")
    for spec, tensor in zip(states, initial, strict=True):
        if tuple(tensor.shape) != (2, *spec.shape):
            raise ExportError(
                f"recurrent policy: initial_state(2) gives {spec.name} of shape {list(tensor.shape)}, "
                f"expected [2, {', '.join(map(str, spec.shape))}] (state_shapes)"
            )
        if tensor.dtype != torch.float32:
            raise ExportError(f"recurrent policy: state {spec.name} is {tensor.dtype}, expected torch.float32")
        if bool(tensor.any()):
            raise ExportError(f"recurrent policy: initial state {spec.name} is not zeros (the manifest promises zeros)")
    try:
        with torch.no_grad():
            out = policy(torch.zeros(2, obs_dim), *initial)
    except Exception as exc:  # a width mismatch surfaces as a matmul error: say what was fed
        raise ExportError(f"recurrent policy: forward(obs [2, {obs_dim}], *initial_state(2)) failed: {exc}") from exc
    if not isinstance(out, tuple) or len(out) != 1 + len(states):
        raise ExportError(f"recurrent policy: forward must return (action, {', '.join(s.name for s in states)})")
    if tuple(out[0].shape) != (2, action_dim):
        raise ExportError(f"policy maps obs [B, {obs_dim}] to {tuple(out[0].shape[1:])}, expected [B, {action_dim}] actions")
    for spec, tensor in zip(states, out[1:], strict=True):
        if tuple(tensor.shape) != (2, *spec.shape):
            raise ExportError(f"recurrent policy: forward returns {spec.name} of shape {list(tensor.shape)}, expected [B, {', '.join(map(str, spec.shape))}]")


def export_policy(
    policy: nn.Module,
    spec: PolicySpec | Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    formats: Sequence[str] = FORMATS,
    *,
    obs_group: str | None = None,
    parity_samples: int = 256,
    parity_steps: int = PARITY_STEPS,
    atol: float = 1e-4,
    seed: int = 0,
) -> dict[str, Any]:
    """Export ``policy`` (``obs[B, D] -> action[B, A]``, normalisation folded in; or a recurrent
    module, see the module doc) and write the manifest.

    Args:
        policy: eager module in eval mode; deterministic (the mean action).
        spec: the run's policy spec: a :class:`~robolearn.spec.PolicySpec` or its JSON mapping
            (``policy_spec.json``, any readable version; validated, the bad field named).
        out_dir: folder for ``policy.onnx`` / ``policy.pt`` / ``manifest.json``.
        formats: any of ``onnx``, ``torchscript``.
        obs_group: the observation group the policy reads (default: ``policy``). A module with
            ``obs_groups`` reads those groups, concatenated in that order; ``obs_group``, if
            given, must be the first of them.
        parity_samples: random observations the parity check compares (a recurrent policy: the
            number of sequences, each ``parity_steps`` long).
        parity_steps: steps of each recurrent parity sequence, the state carried through them.
        atol: largest accepted absolute difference between exported and eager actions (and, for a
            recurrent policy, states).
        seed: seed of the parity observations.

    Returns:
        The manifest (:meth:`ExportManifest.to_dict`), also written to ``out_dir/manifest.json``.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"format: expected one or more of {', '.join(FORMATS)}, got {list(formats)}")
    groups = input_groups(policy, obs_group)
    # What goes to the robot reads what the robot has: never the critic's or privileged state.
    assert_reads("exported policy", groups)
    if not isinstance(spec, PolicySpec):
        spec = PolicySpec.from_dict(spec, "policy spec")
    field_name = "obs_group" if len(groups) == 1 else "obs_groups"
    for group in groups:
        if group not in spec.observations:
            raise ValueError(f"{field_name}: the spec has no group {group!r}; groups: {', '.join(spec.observations)}")
    pixels = image_groups(spec, groups)
    if pixels:
        # A flat obs row would feed camera bytes as floats, without the declared stacking and layout.
        g = pixels[0]
        raise ValueError(
            f"{field_name}: {g!r} is an image group (policy_spec.observations.{g}.shape "
            f"{list(spec.observations[g].shape)}, one camera frame); export the policy with "
            "robolearn.export.export_image_policy (`robolearn export run=` chooses it)"
        )
    obs_dim = sum(math.prod(spec.observations[g].shape) for g in groups)
    out = Path(out_dir)
    policy = policy.eval()
    states = recurrent_states(policy)
    if states:
        if parity_steps < 2:
            raise ValueError(f"parity_steps: expected >= 2 (the state must be carried), got {parity_steps}")
        return _export_recurrent(policy, spec, states, out, formats, groups, obs_dim,
                                 parity_samples, parity_steps, atol, seed)
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(parity_samples, obs_dim, generator=gen) * 2.0
    with torch.no_grad():
        eager = policy(obs)
    if eager.shape != (parity_samples, spec.action_dim):
        raise ExportError(
            f"policy maps obs [B, {obs_dim}] to {tuple(eager.shape[1:])}, expected [B, {spec.action_dim}] actions"
        )
    # A multi-group network (a history encoder reshapes its frames) is traced at batch 2: torch.export
    # turns a size-1 axis into a constant there. A single-group one keeps batch 1, so its files
    # (and the version-2 manifest hashing them) stay byte for byte what they were.
    example = obs[:2] if len(groups) > 1 else obs[:1]
    files: dict[str, Artifact] = {}
    for fmt in formats:
        path = out / FILENAMES[fmt]
        try:
            (_export_onnx if fmt == "onnx" else _export_torchscript)(policy, example, path)
        except Exception as exc:
            raise ExportError(f"{fmt} export failed: {exc}") from exc
        exported = _run_exported(fmt, path, obs)
        err = float((exported - eager).abs().max())
        if not err <= atol:
            raise ExportError(f"{fmt} parity: max |exported - eager| = {err:.3g} exceeds atol {atol:g}")
        files[fmt] = Artifact(path.name, sha256_file(path), err)
        log.info("exported %s to %s (parity max abs err %.3g)", fmt, path, err)
    manifest = ExportManifest(spec, groups[0], files, parity_samples, obs_groups=groups).to_dict()
    _atomic_write_bytes(out / "manifest.json", json.dumps(manifest, indent=2).encode())
    return manifest


def image_groups(spec: PolicySpec, groups: Sequence[str]) -> tuple[str, ...]:
    """The image groups among ``groups`` (in order): those of ``spec`` shaped like one camera frame
    ``[H, W, C]`` rather than a flat vector; a policy reading one exports with its bytes as an input
    (:func:`robolearn.export.export_image_policy`). A group ``spec`` lacks is no image group.
    """
    return tuple(g for g in groups if g in spec.observations and len(spec.observations[g].shape) == 3)


def input_groups(policy: nn.Module, obs_group: str | None = None) -> tuple[str, ...]:
    """The observation groups ``policy``'s input row concatenates, in order: the module's
    ``obs_groups`` when it has them (PPO's deployable module does), else ``(obs_group,)``
    (default ``policy``).

    Raises:
        ValueError: ``obs_groups`` is empty, repeats a group or does not start with ``obs_group``.
    """
    declared = getattr(policy, "obs_groups", None)
    if declared is None:
        return (obs_group or "policy",)
    groups = tuple(str(g) for g in declared)
    if not groups or len(set(groups)) != len(groups):
        raise ValueError(f"policy.obs_groups: expected distinct group names, got {list(groups)}")
    if obs_group is not None and obs_group != groups[0]:
        raise ValueError(
            f"obs_group: {obs_group!r} was given, but the module's input row reads {list(groups)} "
            f"(policy.obs_groups), which starts with {groups[0]!r}"
        )
    return groups


def _export_recurrent(
    policy: nn.Module,
    spec: PolicySpec,
    states: tuple[StateSpec, ...],
    out: Path,
    formats: Sequence[str],
    groups: tuple[str, ...],
    obs_dim: int,
    samples: int,
    steps: int,
    atol: float,
    seed: int,
) -> dict[str, Any]:
    """:func:`export_policy` of a recurrent module: state inputs and outputs, sequence parity."""
    _check_recurrent(policy, states, obs_dim, spec.action_dim)
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(steps, samples, obs_dim, generator=gen) * 2.0
    with torch.no_grad():
        eager_actions, eager_states = _step_sequence(policy, obs, tuple(policy.initial_state(samples)))
    # A batch of 2 to trace: torch.export specialises a size-1 axis to a constant, and the
    # dynamic batch axis must stay dynamic on every input and output.
    example_states = tuple(policy.initial_state(2))
    files: dict[str, Artifact] = {}
    for fmt in formats:
        path = out / FILENAMES[fmt]
        try:
            (_export_onnx if fmt == "onnx" else _export_torchscript)(policy, obs[0, :2], path, states, example_states)
        except Exception as exc:
            raise ExportError(f"{fmt} export failed: {exc}") from exc
        # The exported graph carries its own state from zeros: an error anywhere compounds
        # through the sequence, as it would on the robot.
        zeros = tuple(torch.zeros(samples, *s.shape) for s in states)
        actions, carried = _step_sequence(exported_stepper(fmt, path, states), obs, zeros)
        err = max(float((actions - eager_actions).abs().max()), float((carried - eager_states).abs().max()))
        if not err <= atol:
            raise ExportError(
                f"{fmt} parity: max |exported - eager| over {steps} steps with the state carried = {err:.3g} "
                f"exceeds atol {atol:g}"
            )
        files[fmt] = Artifact(path.name, sha256_file(path), err)
        log.info("exported recurrent %s to %s (%d-step parity max abs err %.3g)", fmt, path, steps, err)
    manifest = ExportManifest(spec, groups[0], files, samples, states=states, parity_steps=steps,
                              obs_groups=groups).to_dict()
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
    """The manifest of an exported policy: the typed policy spec, the group(s) the network reads, the
    files and their parity, and a recurrent network's hidden states. ``to_dict`` writes
    ``manifest.json`` with a content hash over everything but the date; ``inputs``/``outputs``
    repeat the network's side of the spec for readers that know only those.
    """

    spec: PolicySpec
    """The run's policy spec: observation groups, actions, rates and joints."""
    obs_group: str
    """The observation group the network's input is (a deployable one); with several input groups,
    the first of :attr:`obs_groups`."""
    files: dict[str, Artifact]
    """Exported files by format (``onnx``, ``torchscript``)."""
    parity_samples: int = 0
    """Random observations the parity check compared (recurrent: sequences)."""
    created: str = ""
    """UTC time of the export (ISO 8601); not hashed. Empty: now, when written."""
    robolearn_version: str = VERSION
    """The robolearn that exported it."""
    states: tuple[StateSpec, ...] = ()
    """A recurrent network's hidden states, in input order after ``obs`` (empty: feed-forward).
    Written under ``recurrent.states`` (manifest version 3)."""
    parity_steps: int = 0
    """Steps of each recurrent parity sequence (0: feed-forward)."""
    obs_groups: tuple[str, ...] = ()
    """The observation groups the network's input row concatenates, in order (empty: ``obs_group``
    alone; normalised to ``(obs_group,)``). Several are written under ``inputs[0].groups``
    (manifest version 3)."""
    chunk: ChunkPolicySpec | None = None
    """A chunked generative policy's chunk execution and sampler (``None``: the network maps one
    observation to one action). Written as ``chunking`` and ``sampler`` (manifest version 4)."""
    images: tuple[ImageInputSpec, ...] = ()
    """The network's image inputs, in input order before ``obs`` (empty: none). Written under
    ``images`` and first among ``inputs`` (manifest version 5). An image policy without a vector
    input has ``obs_group`` empty and no :attr:`obs_groups`."""

    def __post_init__(self) -> None:
        """Normalise :attr:`obs_groups` (it starts with :attr:`obs_group`)."""
        if self.images and (self.chunk is not None or self.states):
            raise ValueError("images: an image policy is feed-forward and not chunked (a recurrent or chunked one is not supported)")
        if not self.obs_group:
            if not self.images or self.obs_groups:
                raise ValueError(f"obs_group: expected a group name (only an image policy may have no vector input), got {self.obs_group!r}")
            object.__setattr__(self, "obs_groups", ())
            return
        groups = tuple(self.obs_groups) or (self.obs_group,)
        if groups[0] != self.obs_group:
            raise ValueError(f"obs_groups: expected the input groups to start with obs_group {self.obs_group!r}, got {list(groups)}")
        object.__setattr__(self, "obs_groups", groups)
        if self.chunk is not None and (self.states or len(groups) > 1):
            raise ValueError("chunk: a chunked policy has one input group and no recurrent state")

    @property
    def recurrent(self) -> bool:
        """Whether the network has hidden state the caller must carry between steps."""
        return bool(self.states)

    @property
    def multi_group(self) -> bool:
        """Whether the network's input concatenates several observation groups."""
        return len(self.obs_groups) > 1

    @property
    def chunked(self) -> bool:
        """Whether the network is a chunk sampler (``obs``, ``noise`` in; a chunk of actions out)."""
        return self.chunk is not None

    @property
    def frame_dim(self) -> int:
        """Width of one observation frame the robot's readings give: the input groups' widths summed."""
        return sum(math.prod(self.spec.observations[g].shape) for g in self.obs_groups)

    @property
    def obs_dim(self) -> int:
        """Width of the network's ``obs`` input: :attr:`frame_dim`, times the chunk's observation
        history for a chunked policy (its frames stacked, oldest first).
        """
        return self.frame_dim * (self.chunk.chunking.obs_history if self.chunk is not None else 1)

    @property
    def has_images(self) -> bool:
        """Whether the network takes image inputs (manifest version 5)."""
        return bool(self.images)

    @property
    def input_groups(self) -> tuple[str, ...]:
        """Every observation group the network reads: the vector input's, then the images'."""
        return tuple(dict.fromkeys([*self.obs_groups, *(i.group for i in self.images)]))

    @property
    def version(self) -> int:
        """The layout this manifest is written in: 5 with image inputs, 4 when chunked, 3 with
        hidden states or several input groups, else 2.
        """
        if self.images:
            return IMAGE_MANIFEST_VERSION
        if self.chunk is not None:
            return CHUNKED_MANIFEST_VERSION
        return STATEFUL_MANIFEST_VERSION if self.states or self.multi_group else FEEDFORWARD_MANIFEST_VERSION

    def group_columns(self) -> dict[str, tuple[int, int]]:
        """Each input group's columns ``(start, stop)`` in the network's ``obs`` row, in order."""
        out: dict[str, tuple[int, int]] = {}
        start = 0
        for g in self.obs_groups:
            width = math.prod(self.spec.observations[g].shape)
            out[g] = (start, start + width)
            start += width
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``manifest.json`` mapping, ``content_hash`` included."""
        spec = self.spec.to_dict()
        inputs: list[dict[str, Any]] = [self._image_input(i) for i in self.images]
        if self.multi_group:
            inputs.append(self._multi_group_input(spec))
        elif self.obs_groups:
            group = spec["observations"][self.obs_group]
            inputs.append(
                {
                    "name": "obs",
                    "group": self.obs_group,
                    "shape": [-1, *group["shape"]],
                    "dtype": "float32",
                    "history_length": group["history_length"],
                    "normalization": "folded into the network",
                    "terms": group["terms"],
                }
            )
        outputs: list[dict[str, Any]] = [
            {"name": "action", "shape": [-1, self.spec.action_dim], "dtype": "float32", "terms": spec["actions"]}
        ]
        if self.chunk is not None:
            inputs, outputs = self._chunked_io(inputs[0], spec)
        for state in self.states:
            inputs.append({"name": state.input, "state": state.name, "shape": [-1, *state.shape], "dtype": state.dtype})
            outputs.append({"name": state.output, "state": state.name, "shape": [-1, *state.shape], "dtype": state.dtype})
        manifest: dict[str, Any] = {
            "manifest_version": self.version,
            "robolearn_version": self.robolearn_version,
            "created": self.created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "task_id": self.spec.task_id,
            "inputs": inputs,
            "outputs": outputs,
            "control_rate_hz": self.spec.control_rate_hz,
            "joint_order": spec["joint_order"],
            "files": {fmt: dataclasses.asdict(a) for fmt, a in self.files.items()},
            "parity_samples": self.parity_samples,
            "policy_spec": spec,
        }
        if self.states:
            # Version 3 only: a feed-forward manifest stays byte-for-byte the version-2 layout.
            manifest["recurrent"] = {
                "states": [s.to_dict() for s in self.states],
                "parity_steps": self.parity_steps,
            }
        if self.chunk is not None:
            # Version 4 only: how to run the sampler (ChunkExecutor) and draw its noise.
            manifest.update(self.chunk.to_dict())
        if self.images:
            # Version 5 only: the typed image inputs (the inputs entries repeat them with the batch axis).
            manifest["images"] = [i.to_dict() for i in self.images]
        manifest["content_hash"] = _content_hash(manifest)
        return manifest

    @staticmethod
    def _image_input(image: ImageInputSpec) -> dict[str, Any]:
        """The ``inputs`` entry of one image input: the caller's bytes, batch first."""
        return {"name": image.name, "group": image.group, "shape": [-1, *image.shape], "dtype": image.dtype,
                "layout": image.layout, "color": image.color, "frames": image.frames,
                "normalization": IMAGE_NORMALIZATION, "scale": image.scale, "offset": image.offset}

    def _chunked_io(self, obs: dict[str, Any], spec: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The ``inputs`` (``obs``: the stacked frames; the noise) and ``outputs`` (the chunk) of a
        chunked policy's network, from the single-group ``obs`` entry.
        """
        assert self.chunk is not None
        sampler, chunking = self.chunk.sampler, self.chunk.chunking
        shape = [-1, *sampler.noise_shape]
        stacked = {**obs, "shape": [-1, self.obs_dim], "chunk_history": chunking.obs_history,
                   "stacking": "the last chunking.obs_history frames, oldest first"}
        noise = {"name": sampler.noise_input, "shape": shape, "dtype": "float32",
                 "distribution": sampler.noise_distribution}
        chunk = {"name": sampler.output, "shape": shape, "dtype": "float32", "units": "env actions (the chunk's steps in order)",
                 "terms": spec["actions"]}
        return [stacked, noise], [chunk]

    def _multi_group_input(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The ``obs`` input entry of a multi-group network: each group with its columns in the row.
        It has ``groups`` where a single-group entry has ``group``, so a reader that knows only one
        group per input fails on it instead of feeding the network part of its input.
        """
        entries = []
        for g, (start, stop) in self.group_columns().items():
            group = spec["observations"][g]
            entries.append({"group": g, "start": start, "dim": stop - start, "shape": group["shape"],
                            "history_length": group["history_length"], "terms": group["terms"]})
        return {"name": "obs", "groups": entries, "shape": [-1, self.obs_dim], "dtype": "float32",
                "normalization": "folded into the network"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "manifest") -> ExportManifest:
        """Read a version-2 or -3 manifest mapping, validating its policy spec and (version 3) its
        recurrent states; the bad field is named.
        """
        version = data.get("manifest_version")
        if version not in TYPED_MANIFESTS:
            raise ExportError(
                f"{where}: manifest_version {version!r} has no typed policy spec (versions "
                f"{', '.join(map(str, TYPED_MANIFESTS))} have); export the run again"
            )
        spec = PolicySpec.from_dict(data.get("policy_spec"), f"{where}.policy_spec")
        chunk = _read_chunk(data, version, spec, where)  # first: a relabelled chunked manifest is named as such
        if version == IMAGE_MANIFEST_VERSION:
            return cls._from_image_dict(data, spec, where)
        if "images" in data:
            raise ExportError(f"{where}.images: a version-{version} manifest has no images section (version 5 has)")
        groups = _read_input_groups(data, version, spec, where)
        states, steps = _read_recurrent(data, version, where, multi_group=len(groups) > 1)
        try:
            inp = data["inputs"][0]
            if inp["name"] != "obs":
                raise ValueError(f"inputs[0].name is {inp['name']!r}, expected 'obs'")
            files = {
                str(fmt): Artifact(str(e["path"]), str(e["sha256"]), float(e["parity_max_abs_err"]))
                for fmt, e in data["files"].items()
            }
            names = [str(e["name"]) for e in data["inputs"]], [str(e["name"]) for e in data["outputs"]]
            manifest = cls(spec, groups[0], files, int(data["parity_samples"]), str(data["created"]),
                           str(data["robolearn_version"]), states=states, parity_steps=steps, obs_groups=groups,
                           chunk=chunk)._check_names(names, where)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ExportError(f"{where}: malformed ({type(exc).__name__}: {exc})") from None
        if chunk is not None and inp.get("shape") != [-1, manifest.obs_dim]:
            raise SpecError(
                f"{where}.inputs[0].shape: expected [-1, {manifest.obs_dim}] (chunking.obs_history "
                f"{chunk.chunking.obs_history} frames of {manifest.frame_dim}), got {inp.get('shape')!r}"
            )
        return manifest

    @classmethod
    def _from_image_dict(cls, data: Mapping[str, Any], spec: PolicySpec, where: str) -> ExportManifest:
        """A version-5 manifest: its ``images`` (validated against the spec), the matching entries
        first among ``inputs``, then an optional ``obs`` entry (one group or several), ``action`` out.
        """
        images = load_images(data.get("images"), f"{where}.images", spec)
        if data.get("recurrent") is not None:
            raise ExportError(f"{where}.recurrent: an image policy (version 5) has no recurrent section")
        inputs = data.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(e, Mapping) for e in inputs):
            raise SpecError(f"{where}.inputs: expected a list of objects, got {inputs!r}")
        names = [e.get("name") for e in inputs]
        n = len(images)
        if names[:n] != [i.name for i in images] or names[n:] not in ([], ["obs"]):
            raise ExportError(f"{where}.inputs: expected the tensors {[i.name for i in images]} (images), then optionally 'obs'; got {names}")
        for k, image in enumerate(images):
            want = cls._image_input(image)
            for key in sorted(set(want) | set(inputs[k])):
                if inputs[k].get(key) != want.get(key):
                    raise SpecError(f"{where}.inputs[{k}].{key}: expected {want.get(key)!r} (images[{k}]), got {inputs[k].get(key)!r}")
        groups: tuple[str, ...] = ()
        if len(inputs) > n:
            groups = _read_input_groups(data, IMAGE_MANIFEST_VERSION, spec, where, index=n)
            for g in groups:
                if g not in spec.observations:
                    raise SpecError(f"{where}.inputs[{n}].group: the policy spec has no group {g!r}")
                if g in (i.group for i in images):
                    raise SpecError(f"{where}.inputs[{n}].group: {g!r} is an image input's group")
        try:
            outputs = [str(e["name"]) for e in data["outputs"]]
            if outputs != ["action"]:
                raise ValueError(f"outputs are {outputs}, expected ['action']")
            files = {
                str(fmt): Artifact(str(e["path"]), str(e["sha256"]), float(e["parity_max_abs_err"]))
                for fmt, e in data["files"].items()
            }
            return cls(spec, groups[0] if groups else "", files, int(data["parity_samples"]), str(data["created"]),
                       str(data["robolearn_version"]), obs_groups=groups, images=images)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ExportError(f"{where}: malformed ({type(exc).__name__}: {exc})") from None

    def _check_names(self, names: tuple[list[str], list[str]], where: str) -> ExportManifest:
        """``self`` when the listed inputs and outputs are the network's (``obs`` and the state
        inputs; ``action`` and the state outputs), else :class:`ExportError` naming the list.
        """
        if self.chunk is not None:
            sampler = self.chunk.sampler
            want, source = (["obs", sampler.noise_input], [sampler.output]), "sampler"
        else:
            want, source = (["obs", *(s.input for s in self.states)], ["action", *(s.output for s in self.states)]), "recurrent.states"
        for key, got, expected in zip(("inputs", "outputs"), names, want, strict=True):
            if got != expected:
                raise ExportError(f"{where}.{key}: expected the tensors {expected} ({source}), got {got}")
        return self

    def check_compatible(self, robot: PolicySpec) -> None:
        """Refuse (:class:`~robolearn.spec.SpecMismatch`, the first difference named) a robot whose
        declared spec does not give this policy its input groups, actions, joints and control rate.
        """
        self.spec.check_compatible(robot, groups=list(self.input_groups))


def _read_input_groups(data: Mapping[str, Any], version: int, spec: PolicySpec, where: str, index: int = 0) -> tuple[str, ...]:
    """The observation groups of a manifest's ``obs`` input (``inputs[index]``: 0, or after the
    images in version 5), in order: its ``group``, or (version 3 or 5) the entries of its ``groups``,
    each checked against the policy spec (a deployable group of the spec, at the columns the groups
    before it leave, its width) and the row's total width.
    """
    try:
        inp = data["inputs"][index]
        listed = inp.get("groups") if isinstance(inp, Mapping) else None
        if listed is None:
            return (str(inp["group"]),)
    except (KeyError, TypeError, IndexError) as exc:
        raise ExportError(f"{where}: malformed ({type(exc).__name__}: {exc})") from None
    w = f"{where}.inputs[{index}].groups"
    if version not in (STATEFUL_MANIFEST_VERSION, IMAGE_MANIFEST_VERSION):
        raise ExportError(f"{w}: a version-{version} manifest has one input group (versions 3 and 5 list several)")
    if not isinstance(listed, list) or len(listed) < 2:
        raise SpecError(f"{w}: expected a list of two or more groups (one group is written as inputs[0].group), got {listed!r}")
    groups: list[str] = []
    start = 0
    for i, entry in enumerate(listed):
        e = f"{w}[{i}]"
        if not isinstance(entry, Mapping):
            raise SpecError(f"{e}: expected an object with {', '.join(INPUT_GROUP_FIELDS)}, got {entry!r}")
        unknown = sorted(set(entry) - set(INPUT_GROUP_FIELDS))
        if unknown:
            raise SpecError(f"{e}.{unknown[0]}: not a field of an input group; fields: {', '.join(INPUT_GROUP_FIELDS)}")
        name = entry.get("group")
        if name not in spec.observations:
            raise SpecError(f"{e}.group: expected a group of policy_spec.observations ({', '.join(spec.observations)}), got {name!r}")
        if name in groups:
            raise SpecError(f"{e}.group: {name!r} repeats")
        try:
            assert_reads("exported policy", [name])
        except ValueError as exc:
            raise SpecError(f"{e}.group: {exc}") from None
        width = math.prod(spec.observations[name].shape)
        for key, want in (("start", start), ("dim", width)):
            got = entry.get(key)
            if isinstance(got, bool) or got != want:
                what = "the previous groups' width" if key == "start" else f"policy_spec.observations.{name}'s width"
                raise SpecError(f"{e}.{key}: expected {want} ({what}), got {got!r}")
        groups.append(name)
        start += width
    shape = inp.get("shape")
    if shape != [-1, start]:
        raise SpecError(f"{where}.inputs[{index}].shape: expected [-1, {start}] (the groups' widths summed), got {shape!r}")
    return tuple(groups)


def _read_recurrent(data: Mapping[str, Any], version: int, where: str,
                    multi_group: bool = False) -> tuple[tuple[StateSpec, ...], int]:
    """The states and parity steps of a manifest's ``recurrent`` section (none before version 3; a
    version-3 manifest without one is a feed-forward multi-group network's).
    """
    section = data.get("recurrent")
    if version != STATEFUL_MANIFEST_VERSION:
        if section is not None:
            raise ExportError(f"{where}.recurrent: a version-{version} manifest has no recurrent section (version 3 has)")
        return (), 0
    if section is None and multi_group:
        return (), 0
    w = f"{where}.recurrent"
    if not isinstance(section, Mapping):
        raise SpecError(
            f"{w}: expected an object with states and parity_steps, got {section!r} "
            "(a version-3 manifest is recurrent, or lists several groups under inputs[0].groups)"
        )
    unknown = sorted(set(section) - {"states", "parity_steps"})
    if unknown:
        raise SpecError(f"{w}.{unknown[0]}: not a field of the recurrent section; fields: states, parity_steps")
    states = load_states(section.get("states"), f"{w}.states")
    steps = section.get("parity_steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise SpecError(f"{w}.parity_steps: expected an integer >= 0, got {steps!r}")
    return states, steps


def _read_chunk(data: Mapping[str, Any], version: int, spec: PolicySpec, where: str) -> ChunkPolicySpec | None:
    """A version-4 manifest's ``chunking`` and ``sampler`` sections, validated (the noise shape is
    ``[horizon, action_dim]``); none before version 4, where either section is refused.
    """
    if version != CHUNKED_MANIFEST_VERSION:
        for key in ("chunking", "sampler"):
            if key in data:
                raise ExportError(f"{where}.{key}: a version-{version} manifest has no {key} section (version 4 has)")
        return None
    return ChunkPolicySpec.from_dict(data, where, action_dim=spec.action_dim)


def _content_hash(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of a manifest without its date and hash: the networks and what gives their numbers meaning."""
    hashed = {k: v for k, v in manifest.items() if k not in ("created", "content_hash")}
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()


def build_manifest(
    spec: PolicySpec | Mapping[str, Any],
    files: Mapping[str, Any],
    *,
    obs_group: str = "policy",
    parity_samples: int = 0,
    states: Sequence[StateSpec] = (),
    parity_steps: int = 0,
    obs_groups: Sequence[str] = (),
) -> dict[str, Any]:
    """The manifest mapping of ``spec`` and exported ``files`` (``{fmt: Artifact or its mapping}``);
    ``states``: a recurrent network's hidden states, ``obs_groups``: the groups a multi-group input
    concatenates, starting with ``obs_group`` (either makes it version 3).
    """
    typed = spec if isinstance(spec, PolicySpec) else PolicySpec.from_dict(spec, "policy spec")
    artifacts = {k: v if isinstance(v, Artifact) else Artifact(**v) for k, v in files.items()}
    return ExportManifest(typed, obs_group, artifacts, parity_samples, states=tuple(states), parity_steps=parity_steps,
                          obs_groups=tuple(obs_groups)).to_dict()


def load_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a manifest (versions 1 to 5) and verify its content hash and every artifact's SHA-256;
    a typed manifest's policy spec (and version 3's recurrent states, version 4's chunk sections,
    version 5's image inputs) are validated too.
    Raise :class:`ExportError` on any mismatch (:class:`~robolearn.spec.SpecError` for a bad field).
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
    if manifest["manifest_version"] in TYPED_MANIFESTS:
        ExportManifest.from_dict(manifest, f"manifest {manifest_file}")
    for fmt, entry in manifest["files"].items():
        artifact = manifest_file.parent / entry["path"]
        if not artifact.is_file() or sha256_file(artifact) != entry["sha256"]:
            raise ExportError(f"manifest {manifest_file}: {fmt} artifact {artifact.name} is missing or modified")
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> ExportManifest:
    """:func:`load_manifest` (hashes verified) as the typed :class:`ExportManifest` (versions 2 to 5)."""
    manifest = load_manifest(path)
    return ExportManifest.from_dict(manifest, f"manifest {path}")
