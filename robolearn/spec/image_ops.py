"""Image preprocessing with OpenCV, the same code in the env's camera terms and the deploy runtime.

Images are batches ``[N, H, W, C]`` of ``uint8`` (``C`` 1 or 3; 4 where a step allows it), as
NumPy arrays or CPU torch tensors; a pipeline returns the same kind it was given, ``uint8``, with
``C`` kept as an axis (grayscale is ``[N, H, W, 1]``). Float conversion belongs inside the network
(issue 16: uint8 end to end), so nothing here scales or normalises.

The steps (each a frozen dataclass; :meth:`ImagePipeline.to_dict` / :meth:`from_dict` write and
read them as plain data for a task config or a manifest):

* :class:`Resize` to ``width x height``: ``area`` (averaging: the right filter for shrinking, no
  aliasing), ``linear`` or ``nearest``;
* :class:`ConvertColor`: ``rgb2bgr``/``bgr2rgb`` (a channel swap, exact), ``rgb2gray``/
  ``bgr2gray`` (OpenCV's ITU-R BT.601 weights), ``gray2rgb``;
* :class:`Crop` (a region by its top-left corner) and :class:`CenterCrop`;
* :class:`Undistort`: removes lens distortion given the camera's :class:`CameraIntrinsics`
  (pinhole ``fx, fy, cx, cy`` and Brown-Conrady ``k1, k2, p1, p2, k3`` in OpenCV's order), with
  the same camera matrix for the output, so a point's undistorted pixel is ``K @ (X/Z, Y/Z, 1)``.

:meth:`ImagePipeline.intrinsics` carries a camera's intrinsics through the steps (resize scales
them, a crop shifts the principal point, undistortion zeroes the distortion), so the projection of
a point into the processed image is known.

OpenCV is imported inside the functions that use it: ``import robolearn`` and the spec stay free
of it (tests/test_facade.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np
import torch

DISTORTION_NAMES = ("k1", "k2", "p1", "p2", "k3")
"""Distortion coefficients in OpenCV's order (Brown-Conrady: radial k1, k2, k3; tangential p1, p2)."""


class ImageOpError(ValueError):
    """A bad step parameter or input image (the field, the value and what was expected named)."""


def _positive_int(where: str, value: Any) -> int:
    """``value`` as an int > 0, or :class:`ImageOpError` naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ImageOpError(f"{where}: expected a positive integer, got {value!r}")
    return int(value)


def _finite(where: str, value: Any, positive: bool = False) -> float:
    """``value`` as a finite float (> 0 if ``positive``), or :class:`ImageOpError`."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ImageOpError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(v) or (positive and v <= 0):
        raise ImageOpError(f"{where}: expected a {'positive ' if positive else ''}finite number, got {value!r}")
    return v


@dataclass(frozen=True)
class CameraIntrinsics:
    """A pinhole camera with lens distortion, for images of ``width x height`` pixels.

    Pixel ``(u, v)`` of a point ``(X, Y, Z)`` in the camera frame (OpenCV's: x right, y down, z
    forward) is ``u = fx * x_d + cx``, ``v = fy * y_d + cy`` where ``(x_d, y_d)`` is ``(X/Z, Y/Z)``
    distorted by ``distortion`` (``k1, k2, p1, p2, k3``; all zero: no distortion).
    """

    fx: float
    """Focal length in pixels along x."""
    fy: float
    """Focal length in pixels along y."""
    cx: float
    """Principal point x in pixels (pixel centres at integers: the image centre is ``(W - 1) / 2``)."""
    cy: float
    """Principal point y in pixels."""
    width: int
    """Image width the intrinsics belong to."""
    height: int
    """Image height the intrinsics belong to."""
    distortion: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)
    """``(k1, k2, p1, p2, k3)``."""

    def __post_init__(self) -> None:
        """Refuse non-positive focal lengths or sizes, non-finite values and a wrong distortion length."""
        for name in ("fx", "fy"):
            object.__setattr__(self, name, _finite(f"intrinsics.{name}", getattr(self, name), positive=True))
        for name in ("cx", "cy"):
            object.__setattr__(self, name, _finite(f"intrinsics.{name}", getattr(self, name)))
        for name in ("width", "height"):
            object.__setattr__(self, name, _positive_int(f"intrinsics.{name}", getattr(self, name)))
        dist = self.distortion
        if isinstance(dist, Mapping):  # {"k1": ..., ...}: missing ones are zero
            unknown = sorted(set(dist) - set(DISTORTION_NAMES))
            if unknown:
                raise ImageOpError(f"intrinsics.distortion: unknown coefficients {unknown} (expected {list(DISTORTION_NAMES)})")
            dist = [dist.get(n, 0.0) for n in DISTORTION_NAMES]
        dist = list(dist)
        if len(dist) != len(DISTORTION_NAMES):
            raise ImageOpError(f"intrinsics.distortion: expected 5 coefficients {list(DISTORTION_NAMES)}, got {len(dist)}: {dist}")
        object.__setattr__(self, "distortion",
                           tuple(_finite(f"intrinsics.distortion.{n}", v) for n, v in zip(DISTORTION_NAMES, dist, strict=True)))

    @classmethod
    def from_fovy(cls, fovy_deg: float, width: int, height: int) -> CameraIntrinsics:
        """An undistorted camera of vertical field of view ``fovy_deg`` (MuJoCo's camera ``fovy``):
        square pixels, ``fy = height / (2 tan(fovy / 2))``, principal point at the image centre.
        """
        fovy = _finite("fovy_deg", fovy_deg, positive=True)
        if fovy >= 180.0:
            raise ImageOpError(f"fovy_deg: expected a field of view below 180 degrees, got {fovy_deg!r}")
        f = 0.5 * _positive_int("height", height) / math.tan(math.radians(fovy) / 2)
        return cls(f, f, (width - 1) / 2, (height - 1) / 2, width, height)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CameraIntrinsics:
        """From a mapping of the fields (a task or manifest entry); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ImageOpError(f"intrinsics: unknown fields {unknown} (expected {sorted(known)})")
        missing = sorted(n for n in ("fx", "fy", "cx", "cy", "width", "height") if n not in data)
        if missing:
            raise ImageOpError(f"intrinsics: missing fields {missing}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (``distortion`` a list)."""
        out = asdict(self)
        out["distortion"] = list(self.distortion)
        return out

    def matrix(self) -> np.ndarray:
        """The camera matrix ``K`` ``[3, 3]`` float64."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def distorted(self) -> bool:
        """Whether any distortion coefficient is non-zero."""
        return any(self.distortion)

    def project(self, points: np.ndarray) -> np.ndarray:
        """Pixels ``[M, 2]`` of camera-frame points ``[M, 3]`` (``Z > 0``), distortion included."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        if (p[:, 2] <= 0).any():
            raise ImageOpError(f"points: expected Z > 0 (in front of the camera), got Z {p[:, 2].tolist()}")
        x, y = p[:, 0] / p[:, 2], p[:, 1] / p[:, 2]
        k1, k2, p1, p2, k3 = self.distortion
        r2 = x * x + y * y
        radial = 1 + k1 * r2 + k2 * r2 * r2 + k3 * r2 ** 3
        xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
        yd = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
        return np.stack([self.fx * xd + self.cx, self.fy * yd + self.cy], axis=1)


ImageBatch = np.ndarray | torch.Tensor
"""``[N, H, W, C]`` uint8, NumPy or a CPU torch tensor."""


def _as_numpy(images: ImageBatch) -> tuple[np.ndarray, bool]:
    """The batch as a NumPy array (no copy for a CPU tensor) and whether it came as torch; checked."""
    is_torch = isinstance(images, torch.Tensor)
    if is_torch:
        if images.device.type != "cpu":
            raise ImageOpError(f"images: expected a CPU tensor (OpenCV runs on the CPU), got one on {images.device}")
        arr = images.detach().numpy()
    elif isinstance(images, np.ndarray):
        arr = images
    else:
        raise ImageOpError(f"images: expected a NumPy array or torch tensor [N, H, W, C], got {type(images).__name__}")
    if arr.dtype != np.uint8:
        raise ImageOpError(f"images: expected dtype uint8, got {arr.dtype}")
    if arr.ndim != 4:
        raise ImageOpError(f"images: expected shape [N, H, W, C], got {tuple(arr.shape)}")
    if arr.shape[3] not in (1, 3, 4):
        raise ImageOpError(f"images: expected 1, 3 or 4 channels (last axis), got shape {tuple(arr.shape)}")
    return arr, is_torch


class ImageStep:
    """One preprocessing step: :meth:`apply` on a checked uint8 batch, :meth:`intrinsics` of its output."""

    op: ClassVar[str] = ""
    """The step's name in :meth:`ImagePipeline.to_dict`."""

    def apply(self, images: np.ndarray) -> np.ndarray:
        """The processed batch ``[N, H', W', C']`` uint8."""
        raise NotImplementedError

    def intrinsics(self, camera: CameraIntrinsics) -> CameraIntrinsics:
        """The intrinsics of the output images given the input's (unchanged by default)."""
        return camera


INTERPOLATIONS = ("area", "linear", "nearest")
"""Resize filters."""


@dataclass(frozen=True)
class Resize(ImageStep):
    """Resize to ``width x height`` (``area``: average over each output pixel's footprint)."""

    op: ClassVar[str] = "resize"
    width: int
    """Output width."""
    height: int
    """Output height."""
    interpolation: str = "area"
    """``area``, ``linear`` or ``nearest``."""

    def __post_init__(self) -> None:
        """Refuse non-positive sizes and unknown filters."""
        _positive_int("resize.width", self.width)
        _positive_int("resize.height", self.height)
        if self.interpolation not in INTERPOLATIONS:
            raise ImageOpError(f"resize.interpolation: expected one of {list(INTERPOLATIONS)}, got {self.interpolation!r}")

    def apply(self, images: np.ndarray) -> np.ndarray:
        """Each image resized with OpenCV (``cv2.resize`` takes one image at a time)."""
        import cv2

        n, h, w, c = images.shape
        if (h, w) == (self.height, self.width):
            return images
        flag = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}[self.interpolation]
        out = np.empty((n, self.height, self.width, c), dtype=np.uint8)
        for i in range(n):
            # cv2 drops a single channel axis; the view restores it
            out[i] = cv2.resize(images[i], (self.width, self.height), interpolation=flag).reshape(self.height, self.width, c)
        return out

    def intrinsics(self, camera: CameraIntrinsics) -> CameraIntrinsics:
        """Focal lengths scaled by the size ratio; the principal point mapped with pixel centres at
        ``i + 0.5`` (as OpenCV's resize samples).
        """
        sx, sy = self.width / camera.width, self.height / camera.height
        return replace(camera, fx=camera.fx * sx, fy=camera.fy * sy, cx=(camera.cx + 0.5) * sx - 0.5,
                       cy=(camera.cy + 0.5) * sy - 0.5, width=self.width, height=self.height)


COLOR_CONVERSIONS = {"rgb2bgr": (3, 3), "bgr2rgb": (3, 3), "rgb2gray": (3, 1), "bgr2gray": (3, 1), "gray2rgb": (1, 3)}
"""Colour conversions: input and output channel counts."""


@dataclass(frozen=True)
class ConvertColor(ImageStep):
    """A colour conversion (:data:`COLOR_CONVERSIONS`)."""

    op: ClassVar[str] = "convert_color"
    conversion: str
    """``rgb2bgr``, ``bgr2rgb``, ``rgb2gray``, ``bgr2gray`` or ``gray2rgb``."""

    def __post_init__(self) -> None:
        """Refuse unknown conversions."""
        if self.conversion not in COLOR_CONVERSIONS:
            raise ImageOpError(f"convert_color.conversion: expected one of {list(COLOR_CONVERSIONS)}, got {self.conversion!r}")

    def apply(self, images: np.ndarray) -> np.ndarray:
        """The converted batch (one OpenCV call: the conversions are per pixel, so the batch is one
        tall image).
        """
        import cv2

        n, h, w, c = images.shape
        c_in, c_out = COLOR_CONVERSIONS[self.conversion]
        if c != c_in:
            raise ImageOpError(f"convert_color {self.conversion}: expected {c_in} input channel(s), got {c} (shape {tuple(images.shape)})")
        # the swap too goes through OpenCV: ~40x faster than NumPy's strided copy of [..., ::-1]
        code = {"rgb2bgr": cv2.COLOR_RGB2BGR, "bgr2rgb": cv2.COLOR_BGR2RGB, "rgb2gray": cv2.COLOR_RGB2GRAY,
                "bgr2gray": cv2.COLOR_BGR2GRAY, "gray2rgb": cv2.COLOR_GRAY2RGB}[self.conversion]
        tall = np.ascontiguousarray(images).reshape(n * h, w, c)
        return cv2.cvtColor(tall, code).reshape(n, h, w, c_out)


@dataclass(frozen=True)
class Crop(ImageStep):
    """The region ``[y, y + height) x [x, x + width)`` (must lie inside the image)."""

    op: ClassVar[str] = "crop"
    x: int
    """Left column."""
    y: int
    """Top row."""
    width: int
    """Region width."""
    height: int
    """Region height."""

    def __post_init__(self) -> None:
        """Refuse negative corners and non-positive sizes."""
        for name in ("x", "y"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ImageOpError(f"crop.{name}: expected an integer >= 0, got {v!r}")
        _positive_int("crop.width", self.width)
        _positive_int("crop.height", self.height)

    def _check(self, h: int, w: int) -> None:
        if self.x + self.width > w or self.y + self.height > h:
            raise ImageOpError(f"crop: region x={self.x}, y={self.y}, width={self.width}, height={self.height} "
                               f"exceeds the {w}x{h} (width x height) image")

    def apply(self, images: np.ndarray) -> np.ndarray:
        """The region of every image (a contiguous copy)."""
        self._check(images.shape[1], images.shape[2])
        return np.ascontiguousarray(images[:, self.y : self.y + self.height, self.x : self.x + self.width])

    def intrinsics(self, camera: CameraIntrinsics) -> CameraIntrinsics:
        """The principal point moved by the corner."""
        self._check(camera.height, camera.width)
        return replace(camera, cx=camera.cx - self.x, cy=camera.cy - self.y, width=self.width, height=self.height)


@dataclass(frozen=True)
class CenterCrop(ImageStep):
    """The centred ``width x height`` region (an odd margin leaves the extra pixel at the right/bottom)."""

    op: ClassVar[str] = "center_crop"
    width: int
    """Region width."""
    height: int
    """Region height."""

    def __post_init__(self) -> None:
        """Refuse non-positive sizes."""
        _positive_int("center_crop.width", self.width)
        _positive_int("center_crop.height", self.height)

    def _crop(self, h: int, w: int) -> Crop:
        if self.width > w or self.height > h:
            raise ImageOpError(f"center_crop: {self.width}x{self.height} (width x height) exceeds the {w}x{h} image")
        return Crop((w - self.width) // 2, (h - self.height) // 2, self.width, self.height)

    def apply(self, images: np.ndarray) -> np.ndarray:
        """The centred region of every image."""
        return self._crop(images.shape[1], images.shape[2]).apply(images)

    def intrinsics(self, camera: CameraIntrinsics) -> CameraIntrinsics:
        """As the equivalent :class:`Crop`."""
        return self._crop(camera.height, camera.width).intrinsics(camera)


@dataclass(frozen=True)
class Undistort(ImageStep):
    """Remove the lens distortion of ``camera`` (images must be ``camera.width x camera.height``).

    The remap tables are computed once per step (``cv2.initUndistortRectifyMap``, the output camera
    matrix the input's) and applied with bilinear interpolation; pixels that map outside the input
    are black.
    """

    op: ClassVar[str] = "undistort"
    camera: CameraIntrinsics
    """The intrinsics of the distorted input images."""
    _maps: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Accept the intrinsics as a mapping (from a config)."""
        if isinstance(self.camera, Mapping):
            object.__setattr__(self, "camera", CameraIntrinsics.from_dict(self.camera))
        if not isinstance(self.camera, CameraIntrinsics):
            raise ImageOpError(f"undistort.camera: expected CameraIntrinsics or a mapping, got {type(self.camera).__name__}")

    def maps(self) -> tuple[np.ndarray, np.ndarray]:
        """The remap tables (fixed-point, as ``cv2.remap`` reads fastest), computed on first use."""
        import cv2

        if "maps" not in self._maps:
            k = self.camera.matrix()
            size = (self.camera.width, self.camera.height)
            self._maps["maps"] = cv2.initUndistortRectifyMap(k, np.array(self.camera.distortion), None, k, size, cv2.CV_16SC2)
        return self._maps["maps"]

    def apply(self, images: np.ndarray) -> np.ndarray:
        """Each image remapped."""
        import cv2

        n, h, w, c = images.shape
        if (w, h) != (self.camera.width, self.camera.height):
            raise ImageOpError(f"undistort: images are {w}x{h} (width x height), the intrinsics are for "
                               f"{self.camera.width}x{self.camera.height}")
        if not self.camera.distorted:
            return images
        m1, m2 = self.maps()
        out = np.empty_like(images)
        for i in range(n):
            out[i] = cv2.remap(images[i], m1, m2, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT).reshape(h, w, c)
        return out

    def intrinsics(self, camera: CameraIntrinsics) -> CameraIntrinsics:
        """The step's camera matrix without distortion (the input must be that camera's size: an
        undistortion placed after a resize or crop needs the intrinsics of the resized or cropped images).
        """
        if (camera.width, camera.height) != (self.camera.width, self.camera.height):
            raise ImageOpError(f"undistort: the images reaching it are {camera.width}x{camera.height} (width x height), "
                               f"its intrinsics are for {self.camera.width}x{self.camera.height}")
        return replace(self.camera, distortion=(0.0,) * 5)


STEPS: dict[str, type[ImageStep]] = {s.op: s for s in (Resize, ConvertColor, Crop, CenterCrop, Undistort)}
"""Step classes by their ``op`` name."""


class ImagePipeline:
    """Steps applied in order to ``[N, H, W, C]`` uint8 batches (NumPy in: NumPy out; torch in: torch out)."""

    def __init__(self, steps: Sequence[ImageStep] = ()) -> None:
        """The pipeline of ``steps`` (empty: the identity)."""
        for i, s in enumerate(steps):
            if not isinstance(s, ImageStep):
                raise ImageOpError(f"steps[{i}]: expected an image step ({sorted(STEPS)}), got {type(s).__name__}")
        self.steps = tuple(steps)

    def __call__(self, images: ImageBatch) -> ImageBatch:
        """The processed batch, of the input's kind."""
        arr, is_torch = _as_numpy(images)
        for s in self.steps:
            arr = s.apply(arr)
        if is_torch:
            return torch.from_numpy(np.ascontiguousarray(arr))
        return arr

    def output_shape(self, height: int, width: int, channels: int) -> tuple[int, int, int]:
        """``(H, W, C)`` of the output for inputs of that shape (run on one black image: exact)."""
        return tuple(self(np.zeros((1, height, width, channels), dtype=np.uint8)).shape[1:])  # type: ignore[return-value]

    def intrinsics(self, camera: CameraIntrinsics) -> CameraIntrinsics:
        """The intrinsics of the output images given the input camera's."""
        for s in self.steps:
            camera = s.intrinsics(camera)
        return camera

    def to_dict(self) -> list[dict[str, Any]]:
        """The steps as plain data: ``[{"op": "resize", "width": 84, ...}, ...]``."""
        out = []
        for s in self.steps:
            entry: dict[str, Any] = {"op": s.op}
            for f in fields(s):  # type: ignore[arg-type]
                if f.init:
                    v = getattr(s, f.name)
                    entry[f.name] = v.to_dict() if isinstance(v, CameraIntrinsics) else v
            out.append(entry)
        return out

    @classmethod
    def from_dict(cls, steps: Sequence[Mapping[str, Any]]) -> ImagePipeline:
        """The pipeline written by :meth:`to_dict` (unknown ops and fields refused, named)."""
        built: list[ImageStep] = []
        for i, entry in enumerate(steps):
            if not isinstance(entry, Mapping) or "op" not in entry:
                raise ImageOpError(f"steps[{i}]: expected a mapping with an 'op' ({sorted(STEPS)}), got {entry!r}")
            op = entry["op"]
            if op not in STEPS:
                raise ImageOpError(f"steps[{i}].op: expected one of {sorted(STEPS)}, got {op!r}")
            step_cls = STEPS[op]
            known = {f.name for f in fields(step_cls) if f.init}  # type: ignore[arg-type]
            args = {k: v for k, v in entry.items() if k != "op"}
            unknown = sorted(set(args) - known)
            if unknown:
                raise ImageOpError(f"steps[{i}] ({op}): unknown fields {unknown} (expected {sorted(known)})")
            try:
                built.append(step_cls(**args))
            except TypeError as exc:
                raise ImageOpError(f"steps[{i}] ({op}): {exc}") from None
        return cls(built)

    def __repr__(self) -> str:
        """The steps."""
        return f"ImagePipeline({list(self.steps)!r})"
