"""Camera inputs of an image policy: a robot's newest frames to the network's image inputs, as in training.

An image policy's manifest (version 5) declares each image input
(:class:`robolearn.spec.manifest.ImageInputSpec`: name, shape, layout, colour order, frames). The
:class:`ImageAdapter` feeds each input from one robot camera (:attr:`RobotFeatures.cameras`,
:attr:`Reading.images`):

* **Which camera.** An explicit mapping ``{input name: robot camera}`` given to the runtime
  (``DeployRuntime(cameras=...)``; CLI ``camera.<input>=<camera>``) wins. Without one, an input
  reads the camera its image group was rendered from in training: the image term's recorded
  ``camera`` parameter when it is a name (an MJCF camera, such as Cartpole's ``fixed``), else the
  term's own name (a free camera, which has no name: ``rgb``). The simulated robot names the
  cameras it declares by the same rule, so a sim deployment needs no mapping.
* **Preprocessing.** The same code as the env: an :class:`robolearn.spec.image_ops.ImagePipeline`
  of the steps the image term records as its ``preprocess`` parameter (``ImagePipeline.to_dict``'s
  form), then the colour conversion from the camera's encoding to the input's colour order
  (``rgb8`` to ``bgr``: a channel swap; to ``gray``: OpenCV's BT.601 weights; ``mono8`` feeds
  ``gray`` inputs only). Today's camera terms render at the input's size and record no
  ``preprocess``: their pipeline is the identity. :meth:`ImageAdapter.mismatches` refuses, before
  anything moves, a camera the robot lacks and a camera whose declared frame the pipeline cannot
  turn into the input's frame ``[H, W, C]`` (a 640x480 camera for an 84x84 input needs a recorded
  resize).
* **Stacking.** The shared layout: ``[H, W, k*C]`` (``CHW``: ``[k*C, H, W]``), frames oldest first,
  frame ``t`` at channels ``t*C .. (t+1)*C - 1``. Every policy step pushes the camera's newest frame,
  even one the camera already delivered (a camera slower than the loop holds its frame, as the env
  holds a frame with ``render_every``). After :meth:`ImageAdapter.reset` (the runtime's
  discontinuities) the next frame fills all ``k`` slots, exactly as DrQ-v2's agent ``FrameStack``
  starts an episode in training.

OpenCV is imported only by the pipeline steps that use it, when they run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from robolearn.sim2real.robots.base import CAMERA_ENCODINGS, CameraFeature, Reading, RobotFeatures
from robolearn.spec import PolicySpec
from robolearn.spec.image_ops import COLOR_CONVERSIONS, ConvertColor, ImageOpError, ImagePipeline
from robolearn.spec.manifest import ImageInputSpec

ENCODING_COLORS = {"rgb8": "rgb", "mono8": "gray"}
"""The colour order of each camera encoding (``robolearn.sim2real.robots.base.CAMERA_ENCODINGS``)."""
UNUSABLE_SOURCES = ("camera_depth", "camera_segmentation")
"""Camera terms whose values no robot camera encoding delivers (metric depth, geom ids)."""


def default_camera(spec: PolicySpec, image: ImageInputSpec) -> str:
    """The robot camera image input ``image`` reads without a mapping (module doc): the image term's
    recorded ``camera`` parameter when it is a name, else the term's name.
    """
    term = spec.observations[image.group].terms[0]
    camera = term.params.get("camera")
    return camera if isinstance(camera, str) and camera else term.name


def recorded_pipeline(spec: PolicySpec, image: ImageInputSpec) -> ImagePipeline:
    """The preprocessing the image term recorded (its ``preprocess`` parameter; none: identity).

    Raises:
        ImageOpError: the recorded steps are malformed (named).
    """
    steps = spec.observations[image.group].terms[0].params.get("preprocess") or []
    if not isinstance(steps, list):
        raise ImageOpError(f"preprocess: expected a list of steps, got {steps!r}")
    return ImagePipeline.from_dict(steps)


def _color_after(pipeline: ImagePipeline, start: str) -> str:
    """The colour order a pipeline leaves frames of colour ``start`` in (its colour conversions followed)."""
    color = start
    for step in pipeline.steps:
        if isinstance(step, ConvertColor):
            color = step.conversion.split("2")[1]
    return color


def build_pipeline(spec: PolicySpec, image: ImageInputSpec, camera: CameraFeature) -> ImagePipeline:
    """The recorded pipeline plus the colour conversion from ``camera``'s encoding to the input's colour.

    Raises:
        ImageOpError: malformed recorded steps, or a colour input fed from a ``mono8`` camera.
    """
    pipeline = recorded_pipeline(spec, image)
    have = _color_after(pipeline, ENCODING_COLORS[camera.encoding])
    if have == image.color:
        return pipeline
    code = f"{have}2{image.color}"
    if code not in COLOR_CONVERSIONS or have == "gray":
        raise ImageOpError(f"the input reads {image.color} frames; the camera's {camera.encoding} frames "
                           f"(after the recorded pipeline: {have}) cannot become {image.color}")
    return ImagePipeline([*pipeline.steps, ConvertColor(code)])


@dataclass
class _ImageInput:
    """One image input: its camera, pipeline and stack."""

    spec: ImageInputSpec
    camera: str
    feature: CameraFeature | None
    pipeline: ImagePipeline
    stack: np.ndarray
    """``[1, *spec.shape]`` uint8: the network's input, updated in place each step."""
    channels: int
    """Channels of one frame."""
    restart: bool = True
    """Whether the next frame fills every slot."""


class ImageAdapter:
    """Robot camera frames to the image inputs of an exported policy (module doc)."""

    def __init__(self, spec: PolicySpec, images: Sequence[ImageInputSpec], features: RobotFeatures,
                 cameras: Mapping[str, str] | None = None) -> None:
        """Resolve each input's camera and pipeline; :meth:`mismatches` lists what cannot work.
        ``cameras``: ``{input name: robot camera name}`` for inputs that do not read their default.
        """
        self.spec = spec
        self.features = features
        self.problems: list[str] = []
        """Why an input cannot be fed from this robot (empty: every one can)."""
        mapping = dict(cameras or {})
        names = [i.name for i in images]
        unknown = sorted(set(mapping) - set(names))
        if unknown:
            self.problems.append(f"cameras: {unknown} name no image input of the policy (its image inputs: {names})")
        self.inputs = [self._input(image, mapping.get(image.name)) for image in images]

    def _input(self, image: ImageInputSpec, mapped: str | None) -> _ImageInput:
        """The feed of one input (problems appended)."""
        camera = mapped if mapped is not None else default_camera(self.spec, image)
        where = f"images.{image.name}"
        stack = np.zeros((1, *image.shape), dtype=np.uint8)
        per_frame = image.frame_shape[2]
        feature = self.features.cameras.get(camera)
        pipeline = ImagePipeline()
        source = self.spec.observations[image.group].terms[0].source
        if source.endswith(UNUSABLE_SOURCES):
            self.problems.append(f"{where}: its group {image.group!r} comes from {source}, which no robot camera "
                                 f"encoding ({', '.join(CAMERA_ENCODINGS)}) delivers")
        elif feature is None:
            how = "the camera given for it" if mapped is not None else "the camera its image term was rendered from"
            self.problems.append(
                f"{where}: reads camera {camera!r} ({how}), which robot {self.features.name!r} does not have "
                f"(robot.cameras: {sorted(self.features.cameras) or 'none'}); map another with "
                f"cameras={{'{image.name}': '<camera>'}} (CLI: camera.{image.name}=<camera>)"
            )
        else:
            try:
                pipeline = build_pipeline(self.spec, image, feature)
                got = pipeline.output_shape(*feature.shape)
            except (ImageOpError, ImportError) as exc:
                self.problems.append(f"{where}: camera {camera!r} (robot.cameras.{camera}: {feature.width}x{feature.height} "
                                     f"{feature.encoding}): {exc}")
            else:
                if tuple(got) != image.frame_shape:
                    self.problems.append(
                        f"{where}: camera {camera!r} delivers {list(feature.shape)} {feature.encoding} frames "
                        f"(robot.cameras.{camera}); the manifest's preprocessing {pipeline.to_dict() or '(none)'} makes "
                        f"them {list(got)}, the input's frame is {list(image.frame_shape)} [H, W, C]; record the resize "
                        f"or crop that makes this camera's frames as the image term's preprocess steps"
                    )
        return _ImageInput(image, camera, feature, pipeline, stack, per_frame)

    def mismatches(self) -> list[str]:
        """Every reason an input cannot be fed (camera missing, frame not convertible)."""
        return list(self.problems)

    @property
    def cameras(self) -> tuple[str, ...]:
        """The robot cameras the inputs read, each once, in input order."""
        return tuple(dict.fromkeys(i.camera for i in self.inputs))

    def reset(self) -> None:
        """Start over (a discontinuity): the next frame of each input fills all its slots."""
        for inp in self.inputs:
            inp.restart = True

    def frame(self, index: int, reading: Reading) -> np.ndarray:
        """Input ``index``'s preprocessed frame ``[H, W, C]`` uint8 from ``reading``'s newest image.

        Raises:
            ValueError: the camera has no frame in ``reading``, or one not of its declared shape and dtype.
        """
        inp = self.inputs[index]
        got = reading.images.get(inp.camera)
        if got is None:
            raise ValueError(f"images.{inp.spec.name}: the reading holds no frame of camera {inp.camera!r}")
        image = got.image
        want = inp.feature.shape if inp.feature is not None else None
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != want:
            shape = getattr(image, "shape", None)
            raise ValueError(f"camera {inp.camera!r}: a frame of shape {shape} and dtype {getattr(image, 'dtype', None)}; "
                             f"the robot declares {list(want or ())} uint8")
        return inp.pipeline(image[None])[0] if inp.pipeline.steps else image

    def __call__(self, reading: Reading) -> list[np.ndarray]:
        """Push each input's newest frame; the inputs ``[1, *shape]`` uint8, in manifest order.
        The arrays are the adapter's own buffers, overwritten by the next call.
        """
        for k, inp in enumerate(self.inputs):
            self._push(inp, self.frame(k, reading))
        return [inp.stack for inp in self.inputs]

    @staticmethod
    def _push(inp: _ImageInput, frame: np.ndarray) -> None:
        """Append ``frame`` ``[H, W, C]`` to ``inp``'s stack (oldest first), or fill it after a restart."""
        c = inp.channels
        chw = inp.spec.layout == "CHW"
        if chw:
            frame = frame.transpose(2, 0, 1)  # [C, H, W]
        stack = inp.stack[0]
        if inp.restart:
            stack[...] = np.tile(frame, (inp.spec.frames, 1, 1) if chw else (1, 1, inp.spec.frames))
            inp.restart = False
        elif chw:
            stack[:-c] = stack[c:]  # whole channel planes, contiguous (NumPy copies overlapping ranges safely)
            stack[-c:] = frame
        else:
            # One contiguous move of the whole buffer by C bytes shifts every pixel's frames one slot
            # older (3x faster than a strided copy per pixel); each pixel's last C bytes, which now hold
            # the next pixel's oldest frame, are then overwritten by the new frame.
            flat = inp.stack.reshape(-1)
            flat[:-c] = flat[c:]
            stack[..., -c:] = frame

    def state(self) -> list[tuple[np.ndarray, bool]]:
        """Copies of every stack and restart flag, for :meth:`restore` (an observation taken without advancing)."""
        return [(inp.stack.copy(), inp.restart) for inp in self.inputs]

    def restore(self, state: list[tuple[np.ndarray, bool]]) -> None:
        """Put back what :meth:`state` returned."""
        for inp, (stack, restart) in zip(self.inputs, state, strict=True):
            inp.stack[...] = stack
            inp.restart = restart
