"""Export of policies with image inputs: the camera's bytes in, normalisation inside the graph.

A pixel policy (a DrQ-v2 actor: ``robolearn.nn.vision.MultiModalEncoder`` and a head) is exported
as a network whose inputs are the images exactly as a camera delivers them, then, optionally, the
proprioception row::

    image [B, H, W, frames * C]  uint8     (or [B, frames * C, H, W]; frames stacked, oldest first)
    obs   [B, D]                 float32   the vector groups concatenated, normalisation folded in
    ->
    action [B, A]                float32

The conversion ``float(x) * scale + offset`` (``x / 255 - 0.5``) is the graph's first operation, so
a deploy runtime feeds bytes and does no arithmetic on pixels. Each image input is declared in the
manifest (version 5, ``images``: :class:`robolearn.spec.manifest.ImageInputSpec`: input name,
observation group, shape, dtype ``uint8``, layout, colour order, frames, normalisation) and checked
against the policy spec's image group (one frame ``[H, W, C]``). The batch axis is dynamic.

**Parity**: ``parity_samples`` uniformly random ``uint8`` images (every byte value, not a smooth
image on which a wrong scale could hide) and random observations go through the eager module,
ONNX Runtime and TorchScript; the largest ``|exported - eager|`` is recorded and must be within
``atol``.

A learner declares its images from its network with :func:`image_input_of` (the encoder's shape,
layout, frames and normalisation), so the manifest cannot promise a normalisation the graph lacks.

The ONNX graph comes from ``torch.export`` (``dynamo=True``) as for the other feed-forward policies.
"""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robolearn.export.exporter import (
    FILENAMES,
    FORMATS,
    Artifact,
    ExportError,
    ExportManifest,
    _atomic_write_bytes,
    _batch_axes,
    sha256_file,
)
from robolearn.nn.vision import PIXEL_OFFSET, PIXEL_SCALE, CNNEncoder
from robolearn.spec import PolicySpec
from robolearn.spec.manifest import IMAGE_COLORS, ImageInputSpec, load_images
from robolearn.types import assert_reads

log = logging.getLogger(__name__)


def image_input_of(encoder: CNNEncoder, name: str = "image", group: str = "image", color: str = "rgb") -> ImageInputSpec:
    """The :class:`ImageInputSpec` of what ``encoder`` reads: its shape and layout, its frames (its
    channels over ``color``'s), the normalisation it applies (:data:`robolearn.nn.vision.PIXEL_SCALE`,
    :data:`~robolearn.nn.vision.PIXEL_OFFSET`) -- so a learner declares its images from its network.

    Raises:
        ValueError: ``color`` is unknown or the encoder's channels are not a whole number of frames.
    """
    if color not in IMAGE_COLORS:
        raise ValueError(f"color: expected one of {', '.join(IMAGE_COLORS)}, got {color!r}")
    per_frame = IMAGE_COLORS[color]
    if encoder.in_channels % per_frame:
        raise ValueError(f"color: the encoder's {encoder.in_channels} channels are not whole {color} frames of {per_frame}")
    return ImageInputSpec(name, encoder.image_shape, encoder.layout, group=group, color=color,  # type: ignore[arg-type]
                          frames=encoder.in_channels // per_frame, scale=PIXEL_SCALE, offset=PIXEL_OFFSET)


def _as_specs(images: Sequence[ImageInputSpec | Mapping[str, Any]], spec: PolicySpec) -> tuple[ImageInputSpec, ...]:
    """``images`` as validated :class:`ImageInputSpec` (against ``spec``); names distinct."""
    entries = [i.to_dict() if isinstance(i, ImageInputSpec) else dict(i) for i in images]
    return load_images(entries, "images", spec)


def input_names(images: Sequence[ImageInputSpec], obs_dim: int) -> list[str]:
    """The network's input names in order: the images, then ``obs`` when there is a vector input."""
    return [i.name for i in images] + (["obs"] if obs_dim > 0 else [])


def _export_onnx(policy: nn.Module, example: tuple[torch.Tensor, ...], names: list[str], path: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=65536)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter warns about optional packages (torchvision)
        program = torch.onnx.export(
            policy,
            example,
            input_names=names,
            output_names=["action"],
            dynamic_shapes=_batch_axes(policy, len(example), batch),
            dynamo=True,
            verbose=False,
        )
    staged = path.with_name(f".{path.name}.staged")
    try:
        program.save(str(staged))
        _atomic_write_bytes(path, staged.read_bytes())
    finally:
        staged.unlink(missing_ok=True)


def _export_torchscript(policy: nn.Module, example: tuple[torch.Tensor, ...], path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings: the shape checks become constants (shapes are fixed)
        traced = torch.jit.trace(policy, example, check_trace=False)
    staged = path.with_name(f".{path.name}.staged")
    try:
        traced.save(str(staged))
        _atomic_write_bytes(path, staged.read_bytes())
    finally:
        staged.unlink(missing_ok=True)


def image_policy_runner(fmt: str, path: str | os.PathLike[str], names: Sequence[str]) -> Callable[..., torch.Tensor]:
    """A callable ``(*inputs) -> action`` (torch tensors, in the order of ``names``: images then
    ``obs``) running the exported network at ``path`` in format ``fmt`` (ONNX Runtime or TorchScript).

    Raises:
        ExportError: the ONNX graph's inputs are not ``names`` (one the exporter dropped as unused:
            the network ignores it), or not uint8 for the images.
    """
    if fmt == "torchscript":
        module = torch.jit.load(str(path))

        def run_ts(*inputs: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return module(*inputs)

        return run_ts
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = [i.name for i in session.get_inputs()]
    if got != list(names):
        raise ExportError(f"onnx: the graph's inputs are {got}, expected {list(names)} (does the network read every input?)")
    for i in session.get_inputs():
        if i.name != "obs" and i.type != "tensor(uint8)":
            raise ExportError(f"onnx: image input {i.name!r} is {i.type}, expected tensor(uint8)")

    def run_onnx(*inputs: torch.Tensor) -> torch.Tensor:
        feed = {name: x.numpy() for name, x in zip(names, inputs, strict=True)}
        return torch.from_numpy(session.run(["action"], feed)[0])

    return run_onnx


def export_image_policy(
    policy: nn.Module,
    spec: PolicySpec | Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    formats: Sequence[str] = FORMATS,
    *,
    images: Sequence[ImageInputSpec | Mapping[str, Any]] | None = None,
    obs_groups: Sequence[str] | None = None,
    parity_samples: int = 32,
    atol: float = 1e-4,
    seed: int = 0,
) -> dict[str, Any]:
    """Export ``policy`` (``forward(*images, obs) -> action[B, A]``, or ``forward(*images)`` without
    a vector input; module doc) and write the version-5 manifest.

    Args:
        policy: eager module (put in eval mode); deterministic (the mean action); converts its uint8
            images to float itself, as each image's ``scale`` and ``offset`` declare.
        spec: the run's policy spec (:class:`~robolearn.spec.PolicySpec` or its JSON mapping); each
            image's ``group`` must be one of its groups, shaped ``[H, W, C]`` (one frame).
        out_dir: folder for ``policy.onnx`` / ``policy.pt`` / ``manifest.json``.
        formats: any of ``onnx``, ``torchscript``.
        images: the image inputs in ``forward``'s order (default: the module's ``image_inputs``).
        obs_groups: the groups of the ``obs`` row after the images, concatenated in order (default:
            the module's ``obs_groups``, else none: a pixels-only policy).
        parity_samples: random images (and observations) the parity check compares (>= 2).
        atol: largest accepted ``|exported - eager|``.
        seed: seed of the parity inputs.

    Returns:
        The manifest (:meth:`ExportManifest.to_dict`), also written to ``out_dir/manifest.json``.

    Raises:
        ValueError: a bad argument (named); :class:`~robolearn.spec.SpecError`: an image input that
            does not fit the spec; :class:`ExportError`: export failed or parity is not within ``atol``.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"format: expected one or more of {', '.join(FORMATS)}, got {list(formats)}")
    if parity_samples < 2:
        raise ValueError(f"parity_samples: expected >= 2, got {parity_samples}")
    if not isinstance(spec, PolicySpec):
        spec = PolicySpec.from_dict(spec, "policy spec")
    declared = images if images is not None else getattr(policy, "image_inputs", None)
    if not declared:
        raise ValueError("images: expected one or more image inputs (ImageInputSpec), or a module with image_inputs; got none")
    image_specs = _as_specs(declared, spec)
    groups = tuple(str(g) for g in (obs_groups if obs_groups is not None else getattr(policy, "obs_groups", ())))
    if len(set(groups)) != len(groups):
        raise ValueError(f"obs_groups: expected distinct group names, got {list(groups)}")
    for g in groups:
        if g not in spec.observations:
            raise ValueError(f"obs_groups: the spec has no group {g!r}; groups: {', '.join(spec.observations)}")
        if g in (i.group for i in image_specs):
            raise ValueError(f"obs_groups: {g!r} is an image input's group; the obs row holds vector groups only")
    # What goes to the robot reads what the robot has: never the critic's or privileged state.
    assert_reads("exported policy", [*groups, *(i.group for i in image_specs)])
    obs_dim = sum(math.prod(spec.observations[g].shape) for g in groups)
    names = input_names(image_specs, obs_dim)
    policy = policy.eval()

    gen = torch.Generator().manual_seed(seed)
    inputs: list[torch.Tensor] = [
        torch.randint(0, 256, (parity_samples, *i.shape), dtype=torch.uint8, generator=gen) for i in image_specs
    ]
    if obs_dim:
        inputs.append(torch.randn(parity_samples, obs_dim, generator=gen) * 2.0)
    try:
        with torch.no_grad():
            eager = policy(*inputs)
    except Exception as exc:  # a layout or width mismatch: say what was fed
        fed = ", ".join(f"{n} {list(x.shape)} {str(x.dtype).removeprefix('torch.')}" for n, x in zip(names, inputs, strict=True))
        raise ExportError(f"image policy: forward({fed}) failed: {exc}") from exc
    if not isinstance(eager, torch.Tensor) or eager.shape != (parity_samples, spec.action_dim):
        got = tuple(eager.shape[1:]) if isinstance(eager, torch.Tensor) else type(eager).__name__
        raise ExportError(f"image policy maps its inputs to {got}, expected [B, {spec.action_dim}] actions")
    # Traced at batch 2: torch.export turns a size-1 axis into a constant.
    example = tuple(x[:2] for x in inputs)
    out = Path(out_dir)
    files: dict[str, Artifact] = {}
    for fmt in formats:
        path = out / FILENAMES[fmt]
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if fmt == "onnx":
                _export_onnx(policy, example, names, path)
            else:
                _export_torchscript(policy, example, path)
        except Exception as exc:
            raise ExportError(f"{fmt} export failed: {exc}") from exc
        exported = image_policy_runner(fmt, path, names)(*inputs)
        err = float((exported - eager).abs().max())
        if not err <= atol:
            raise ExportError(f"{fmt} parity: max |exported - eager| over {parity_samples} random uint8 images = {err:.3g} exceeds atol {atol:g}")
        files[fmt] = Artifact(path.name, sha256_file(path), err)
        log.info("exported image policy %s to %s (parity max abs err %.3g)", fmt, path, err)
    manifest = ExportManifest(spec, groups[0] if groups else "", files, parity_samples, obs_groups=groups,
                              images=image_specs).to_dict()
    _atomic_write_bytes(out / "manifest.json", json.dumps(manifest, indent=2).encode())
    return manifest


__all__ = ["export_image_policy", "image_input_of", "image_policy_runner", "input_names"]
