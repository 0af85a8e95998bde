"""``robolearn export run=<dir>``: which exporter a trained run's policy goes through.

* a chunked generative learner (``sampler_module``): its sampler, the noise as an input
  (:func:`robolearn.export.export_generative`);
* a policy that reads an **image group** (a group of the run's policy spec shaped ``[H, W, C]``, one
  camera frame; DrQ-v2's actor reads ``image``) or whose module declares ``image_inputs``: the
  network with the camera's ``uint8`` bytes as inputs (:func:`robolearn.export.export_image_policy`,
  manifest version 5), each input declared from the encoder that reads it (its shape, layout and
  in-graph normalisation; its frames: the encoder's channels over one frame's, i.e. DrQ-v2's agent
  ``frame_stack`` or the env's ``history_length`` of a stacked group) and from the image term the
  run recorded (its colour order after the recorded preprocessing);
* any other policy: ``obs -> action`` (:func:`robolearn.export.export_policy`).

Each path runs its parity check and writes the manifest. What cannot be exported is refused
before anything is written, the field named: an image group from a depth or segmentation term (no
robot camera delivers metric depth or geom ids as bytes), an image policy with hidden state or a
sampler, several image groups without ``image_inputs`` to say which encoder reads which, an
encoder whose frames differ from the frames the env stacks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from robolearn.export import export_generative, export_image_policy, export_policy
from robolearn.export.exporter import image_groups
from robolearn.export.vision import image_input_of
from robolearn.nn.vision import CNNEncoder
from robolearn.runners.policy import LoadedPolicy
from robolearn.sim2real.deploy.images import UNUSABLE_SOURCES
from robolearn.spec import PolicySpec
from robolearn.spec.image_ops import ConvertColor, ImageOpError, ImagePipeline
from robolearn.spec.manifest import IMAGE_COLORS, ImageInputSpec
from robolearn.utils.config import ConfigError

CAMERA_COLORS = {3: "rgb", 1: "gray"}
"""The colour order a camera term renders one frame in, by its channels (``camera_rgb`` renders RGB)."""


def frame_color(spec: PolicySpec, group: str) -> str:
    """The colour order of one frame of image group ``group`` as the policy reads it: the rendered
    frame's (by its channels) after the colour conversions of the preprocessing its term recorded.

    Raises:
        ConfigError: the group comes from a depth or segmentation term, has a channel count that no
            colour order has, or records malformed preprocessing (the field named).
    """
    obs = spec.observations[group]
    where = f"policy_spec.observations.{group}"
    source = obs.terms[0].source
    if source.endswith(UNUSABLE_SOURCES):
        raise ConfigError(f"{where}.terms[0].source: {source} gives no camera bytes (float metres or geom ids); "
                          "an exported image input reads uint8 frames of an rgb or gray camera term")
    channels = obs.shape[-1]
    if channels not in CAMERA_COLORS:
        raise ConfigError(f"{where}.shape: one frame has {channels} channels; an image input's frame has "
                          f"{' or '.join(f'{c} ({n})' for c, n in CAMERA_COLORS.items())}")
    try:  # the deploy runtime reads the same parameter (sim2real.deploy.images.recorded_pipeline)
        steps = ImagePipeline.from_dict(obs.terms[0].params.get("preprocess") or []).steps
    except (ImageOpError, TypeError) as exc:
        raise ConfigError(f"{where}.terms[0].params.preprocess: {exc}") from None
    color = CAMERA_COLORS[channels]
    for step in steps:
        if isinstance(step, ConvertColor):
            color = step.conversion.split("2")[1]
    if IMAGE_COLORS[color] != channels:
        raise ConfigError(f"{where}.terms[0].params.preprocess: its colour conversions end in {color} "
                          f"({IMAGE_COLORS[color]} channels), but one frame of the group has {channels}")
    return color


def _encoders(module: nn.Module) -> list[CNNEncoder]:
    """The distinct CNN encoders inside ``module`` (a shared one once)."""
    seen: dict[int, CNNEncoder] = {}
    for m in module.modules():
        if isinstance(m, CNNEncoder):
            seen.setdefault(id(m), m)
    return list(seen.values())


def declare_images(module: nn.Module, spec: PolicySpec, groups: Sequence[str]) -> tuple[ImageInputSpec, ...]:
    """The image inputs of a policy ``module`` that reads ``groups`` (:func:`image_groups` of them
    are images): one per image group, named like it, declared from the module's one CNN encoder
    (shape, layout, frames, normalisation) and the group's colour order (:func:`frame_color`).

    Raises:
        ConfigError: no encoder, or several image groups (the module must declare ``image_inputs``),
            or frames that the env's stack (``history_length``) contradicts; the field named.
    """
    images = image_groups(spec, groups)
    if len(images) > 1:
        raise ConfigError(f"policy.image_inputs: the policy reads the image groups {list(images)}; a module that "
                          "reads several must declare image_inputs (which input reads which group)")
    group = images[0]
    encoders = _encoders(module)
    if len(encoders) != 1:
        raise ConfigError(f"policy.image_inputs: the policy reads image group {group!r} but its module holds "
                          f"{len(encoders)} CNN encoders, not one; declare image_inputs on the module")
    encoder = encoders[0]
    color = frame_color(spec, group)
    try:
        image = image_input_of(encoder, name=group, group=group, color=color)
    except ValueError as exc:
        raise ConfigError(f"policy_spec.observations.{group}.shape: one frame is {list(spec.observations[group].shape)} "
                          f"but the encoder reads {list(encoder.image_shape)} ({exc})") from None
    stacked = spec.observations[group].history_length
    if stacked > 1 and image.frames != stacked:
        raise ConfigError(
            f"policy_spec.observations.{group}.history_length: the env stacks {stacked} frames, but the policy's "
            f"encoder reads {image.frames} ({encoder.in_channels} channels of {color} frames): the agent stacks "
            "frames of its own on the env's stack (algo.frame_stack), which a deployed policy cannot reproduce"
        )
    return (image,)


def export_run(
    policy: LoadedPolicy,
    out: str | os.PathLike[str],
    formats: Sequence[str],
    *,
    sampler_steps: int | None = None,
    one_step: bool = False,
) -> dict[str, Any]:
    """Export a loaded run's policy through the exporter that fits it (module doc) into ``out``.

    Returns:
        The manifest written to ``out/manifest.json``.

    Raises:
        ConfigError: a setting that does not fit the policy, or a policy that cannot be exported
            (the field named); :class:`robolearn.export.ExportError`: export or parity failed.
    """
    out = Path(out)
    agent, spec_map = policy.agent, policy.spec
    generative = callable(getattr(agent, "sampler_module", None))
    if not generative and (sampler_steps is not None or one_step):
        raise ConfigError("sampler_steps/one_step: only a chunked generative policy (algo=flow|diffusion) has a sampler")
    spec = PolicySpec.from_dict(spec_map, "policy_spec.json")
    module = policy.module()
    declared = getattr(module, "image_inputs", None)
    reads_images = bool(declared) or bool(image_groups(spec, policy.obs_groups))
    if reads_images and (generative or getattr(module, "state_names", None)):
        what = "a sampler (sampler_module)" if generative else "hidden state (state_names)"
        raise ConfigError(f"policy: it reads images and has {what}; image policies export as feed-forward networks only")
    if generative:
        return export_generative(agent, spec_map, out, formats, sampler_steps=sampler_steps, one_step=one_step,
                                 obs_group=agent.actor_group)
    if not reads_images:
        return export_policy(module, spec_map, out, formats, obs_group=agent.actor_group)
    images = declared or declare_images(module, spec, policy.obs_groups)
    names = {i.group if isinstance(i, ImageInputSpec) else i.get("group", "image") for i in images}
    # The groups the policy reads that are not images make the obs row, in the policy's order.
    vectors = tuple(g for g in policy.obs_groups if g not in names)
    return export_image_policy(module, spec, out, formats, images=images, obs_groups=vectors)


__all__ = ["CAMERA_COLORS", "declare_images", "export_run", "frame_color"]
