"""Camera images on ROS, with no ROS import: ``sensor_msgs/Image`` and ``sensor_msgs/CompressedImage``
to and from NumPy.

ROS 1 (rospy/genpy), ROS 2 (rclpy) and ``rosbags`` messages have the same field names, so the
converters read and write fields by name (duck typing): :func:`image_to_numpy` and
:func:`fill_image` for ``Image``, :func:`compressed_to_numpy` and :func:`fill_compressed` for
``CompressedImage``. A ``data`` field may be ``bytes`` (ROS 1), ``array.array('B')`` (ROS 2) or a
uint8 NumPy array (rosbags); all are read without a Python-level loop.

Arrays are ``[H, W, C]`` (``C`` kept for one channel, as in robolearn's ``image`` group):

==============  ============  ===  =======================================
encoding        dtype         C    use
==============  ============  ===  =======================================
``rgb8``        uint8         3    colour (robolearn's channel order)
``bgr8``        uint8         3    colour (OpenCV's order)
``rgba8``       uint8         4
``bgra8``       uint8         4
``mono8``       uint8         1    grayscale
``8UC1``        uint8         1
``8UC3``        uint8         3
``mono16``      uint16        1
``16UC1``       uint16        1    depth in millimetres (REP 118)
``32FC1``       float32       1    depth in metres (REP 118)
==============  ============  ===  =======================================

Rows may be padded (``step`` larger than ``width * C * itemsize``); the padding is dropped on read.
Multi-byte data in the other byte order (``is_bigendian``) is swapped to the machine's. A
``CompressedImage``'s ``format`` is image_transport's ``"<encoding>; <jpeg|png> compressed
<bgr8|mono8|...>"`` or a bare ``"jpeg"``/``"png"``; decoding gives the message's original encoding
where the format names it (else ``bgr8``/``mono8`` as OpenCV decodes), and :func:`compressed_to_numpy`
can convert to the encoding the caller wants. PNG is lossless (8 and 16 bit); JPEG is 8 bit and lossy.

Every malformed message is refused with :class:`MalformedMessage` naming the topic, the field, the
value and what was expected.

A robot's camera (:class:`~robolearn.sim2real.robots.base.CameraFeature`: size and ``rgb8`` or
``mono8``) takes a message through :func:`camera_image`: the message must have the declared size,
and an encoding of the declared kind (:data:`CAMERA_SOURCES`: any 8-bit colour order for ``rgb8``,
converted to RGB; 8-bit gray for ``mono8``). Colour to gray or gray to colour is refused rather than
converted: a camera that sends another kind of picture than its robot declares is misconfigured,
and the policy must not see a picture it was not trained on.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from robolearn.sim2real.robots.base import CameraFeature
from robolearn.sim2real.ros.common import MalformedMessage

ENCODINGS: dict[str, tuple[np.dtype, int]] = {
    "rgb8": (np.dtype(np.uint8), 3),
    "bgr8": (np.dtype(np.uint8), 3),
    "rgba8": (np.dtype(np.uint8), 4),
    "bgra8": (np.dtype(np.uint8), 4),
    "mono8": (np.dtype(np.uint8), 1),
    "8UC1": (np.dtype(np.uint8), 1),
    "8UC3": (np.dtype(np.uint8), 3),
    "mono16": (np.dtype(np.uint16), 1),
    "16UC1": (np.dtype(np.uint16), 1),
    "32FC1": (np.dtype(np.float32), 1),
}
"""Supported ``Image`` encodings: element dtype and channel count."""

COMPRESSED_FORMATS = ("jpeg", "png")
"""``CompressedImage`` formats."""

_LITTLE = sys.byteorder == "little"


def _data_bytes(data: Any) -> memoryview | np.ndarray:
    """A message's ``data`` as a buffer NumPy reads without copying element by element."""
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return memoryview(data)
    try:  # array.array('B') and other buffer objects
        return memoryview(data).cast("B")
    except TypeError:
        return np.asarray(list(data), dtype=np.uint8)  # a plain list of ints (slow, but correct)


def _set_data(msg: Any, raw: bytes) -> None:
    """Set ``msg.data`` to ``raw`` in the form the message keeps: a uint8 array for rosbags
    messages (whose serialiser needs one), ``bytes`` otherwise (ROS 1 keeps them; ROS 2 copies them
    into its ``array.array`` in one go).
    """
    if isinstance(getattr(msg, "data", None), np.ndarray):
        msg.data = np.frombuffer(raw, dtype=np.uint8).copy()
    else:
        msg.data = raw


def _check_encoding(encoding: str, where: str) -> tuple[np.dtype, int]:
    """The dtype and channels of ``encoding`` or :class:`MalformedMessage`."""
    if encoding not in ENCODINGS:
        raise MalformedMessage(f"{where}: encoding {encoding!r} is not supported (expected one of {list(ENCODINGS)})")
    return ENCODINGS[encoding]


def image_to_numpy(msg: Any, encoding: str | None = None, topic: str = "image") -> np.ndarray:
    """The ``[H, W, C]`` array of a ``sensor_msgs/Image`` (a copy owning its memory; row padding
    dropped, byte order made native), converted to ``encoding`` if given (:func:`convert_encoding`),
    or :class:`MalformedMessage` naming the field.
    """
    source = str(msg.encoding)
    dtype, channels = _check_encoding(source, f"{topic}.encoding")
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise MalformedMessage(f"{topic}: height {height} and width {width} must be positive")
    row = width * channels * dtype.itemsize
    if step < row:
        raise MalformedMessage(f"{topic}.step: {step} bytes is less than a row of {width} {source} pixels ({row} bytes)")
    buf = _data_bytes(msg.data)
    size = len(buf) if not isinstance(buf, np.ndarray) else buf.size
    # the last row need not carry its padding
    needed = step * (height - 1) + row
    if size < needed:
        raise MalformedMessage(f"{topic}.data: {size} bytes, expected at least {needed} "
                               f"(height {height} x step {step} for {width}x{height} {source})")
    raw = np.frombuffer(buf, dtype=np.uint8, count=min(size, step * height))
    if raw.size < step * height:  # unpadded last row: pad so that the rows reshape
        raw = np.concatenate([raw, np.zeros(step * height - raw.size, dtype=np.uint8)])
    rows = raw.reshape(height, step)[:, :row]
    big = bool(msg.is_bigendian)
    order = ">" if big else "<"
    pixels = np.ascontiguousarray(rows).view(dtype.newbyteorder(order) if dtype.itemsize > 1 else dtype)
    array = pixels.reshape(height, width, channels).astype(dtype, copy=True)
    return array if encoding is None else np.ascontiguousarray(convert_encoding(array, source, encoding, topic))


def fill_image(msg: Any, array: np.ndarray, encoding: str, topic: str = "image") -> Any:
    """Write ``array`` (``[H, W, C]`` or ``[H, W]`` for one channel) into ``msg`` (a ``sensor_msgs/Image``
    of either ROS version) as ``encoding``, unpadded, in the machine's byte order; returns ``msg``.
    The header is the caller's.
    """
    dtype, channels = _check_encoding(encoding, f"{topic}.encoding")
    arr = np.asarray(array)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] != channels:
        raise MalformedMessage(f"{topic}: a {encoding} image needs an array [H, W, {channels}], got shape {tuple(np.shape(array))}")
    if arr.dtype != dtype:
        raise MalformedMessage(f"{topic}: a {encoding} image needs dtype {dtype}, got {arr.dtype}")
    height, width = arr.shape[:2]
    msg.height = int(height)
    msg.width = int(width)
    msg.encoding = encoding
    msg.is_bigendian = 0 if _LITTLE or dtype.itemsize == 1 else 1
    msg.step = int(width * channels * dtype.itemsize)
    _set_data(msg, np.ascontiguousarray(arr).tobytes())
    return msg


def _parse_format(fmt: str, topic: str) -> tuple[str, str | None]:
    """The compression (``jpeg``/``png``) and the original encoding (or ``None``) of a format string."""
    text = str(fmt).strip().lower()
    original: str | None = None
    body = text
    if ";" in text:  # image_transport: "<encoding>; <fmt> compressed <encoding>"
        head, _, body = text.partition(";")
        original = next((e for e in ENCODINGS if e.lower() == head.strip()), None)
        if original is None:
            raise MalformedMessage(f"{topic}.format: encoding {head.strip()!r} in {fmt!r} is not supported "
                                   f"(expected one of {list(ENCODINGS)})")
    words = body.replace(",", " ").split()
    kind = "jpeg" if ("jpeg" in words or "jpg" in words) else "png" if "png" in words else None
    if kind is None:
        raise MalformedMessage(f"{topic}.format: {fmt!r} names no supported compression (expected {list(COMPRESSED_FORMATS)})")
    return kind, original


def convert_encoding(array: np.ndarray, src: str, dst: str, where: str = "image") -> np.ndarray:
    """``array`` ``[H, W, C]`` from encoding ``src`` to ``dst`` of the same dtype (channel orders,
    gray), or :class:`MalformedMessage` naming ``where`` when no such conversion exists.
    """
    import cv2

    if src == dst:
        return array
    d_src, _ = _check_encoding(src, f"{where} (source encoding)")
    d_dst, c_dst = _check_encoding(dst, f"{where} (requested encoding)")
    if d_src != d_dst:
        raise MalformedMessage(f"{where}: cannot convert {src} ({d_src}) to {dst} ({d_dst})")
    order = {"rgb8": "RGB", "bgr8": "BGR", "8UC3": "BGR", "rgba8": "RGBA", "bgra8": "BGRA",
             "mono8": "GRAY", "8UC1": "GRAY", "mono16": "GRAY", "16UC1": "GRAY"}
    a, b = order.get(src), order.get(dst)
    if a is None or b is None:
        raise MalformedMessage(f"{where}: cannot convert {src} to {dst}")
    if a == b:
        return array
    code = getattr(cv2, f"COLOR_{a}2{b}", None)
    if code is None:
        raise MalformedMessage(f"{where}: cannot convert {src} to {dst}")
    out = cv2.cvtColor(np.ascontiguousarray(array), code)
    return out.reshape(*out.shape[:2], c_dst)


def compressed_to_numpy(msg: Any, encoding: str | None = None, topic: str = "image") -> np.ndarray:
    """Decode a ``sensor_msgs/CompressedImage`` to ``[H, W, C]``: in ``encoding`` if given, else
    the original encoding its ``format`` names, else as decoded (``bgr8`` colour, ``mono8``/``mono16``
    gray); or :class:`MalformedMessage`.
    """
    import cv2

    _kind, original = _parse_format(str(msg.format), topic)
    buf = np.frombuffer(_data_bytes(msg.data), dtype=np.uint8)
    if buf.size == 0:
        raise MalformedMessage(f"{topic}.data: empty (a {_kind} image was expected)")
    img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if img is None:
        raise MalformedMessage(f"{topic}.data: {buf.size} bytes do not decode as an image (format {msg.format!r})")
    if img.ndim == 2:
        img = img[:, :, None]
    channels = img.shape[2]
    if img.dtype == np.uint16:
        decoded = "16UC1" if original == "16UC1" else "mono16"
    elif channels == 1:
        decoded = "8UC1" if original == "8UC1" else "mono8"
    elif channels == 3:
        decoded = "bgr8"
    elif channels == 4:
        decoded = "bgra8"
    else:
        raise MalformedMessage(f"{topic}.data: decoded {img.dtype} image with {channels} channels is not supported")
    want = encoding or original or decoded
    _check_encoding(want, f"{topic} (requested encoding)")
    return np.ascontiguousarray(convert_encoding(img, decoded, want, topic))


def fill_compressed(msg: Any, array: np.ndarray, encoding: str, fmt: str = "png", quality: int = 95,
                    topic: str = "image") -> Any:
    """Compress ``array`` (``[H, W, C]`` in ``encoding``) into ``msg`` (a ``sensor_msgs/CompressedImage``)
    as ``fmt`` (``png``: lossless, 8 or 16 bit; ``jpeg``: 8 bit, ``quality`` 1-100), with
    image_transport's format string; returns ``msg``.
    """
    import cv2

    if fmt not in COMPRESSED_FORMATS:
        raise MalformedMessage(f"{topic}.format: expected one of {list(COMPRESSED_FORMATS)}, got {fmt!r}")
    dtype, channels = _check_encoding(encoding, f"{topic}.encoding")
    if dtype == np.float32:
        raise MalformedMessage(f"{topic}.encoding: {encoding} (float) cannot be compressed as {fmt}; use 16UC1 millimetres")
    if fmt == "jpeg" and dtype != np.uint8:
        raise MalformedMessage(f"{topic}.encoding: jpeg holds 8-bit images, got {encoding}; use png")
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise MalformedMessage(f"{topic}: jpeg quality expected an integer in [1, 100], got {quality!r}")
    arr = np.asarray(array)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] != channels or arr.dtype != dtype:
        raise MalformedMessage(f"{topic}: a {encoding} image needs an array [H, W, {channels}] of {dtype}, "
                               f"got shape {tuple(np.shape(array))} {arr.dtype}")
    # OpenCV encodes colour as BGR(A): convert, and name both encodings as image_transport does
    stored = {3: "bgr8", 4: "bgra8"}.get(channels, encoding)
    coded = convert_encoding(arr, encoding, stored, topic) if channels > 1 else arr
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if fmt == "jpeg" else [cv2.IMWRITE_PNG_COMPRESSION, 3]
    ok, buf = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", np.ascontiguousarray(coded), params)
    if not ok:
        raise MalformedMessage(f"{topic}: OpenCV could not encode a {encoding} image as {fmt}")
    msg.format = f"{encoding}; {fmt} compressed {stored}"
    _set_data(msg, buf.tobytes())
    return msg


CAMERA_SOURCES: dict[str, tuple[str, ...]] = {
    "rgb8": ("rgb8", "bgr8", "8UC3", "rgba8", "bgra8"),
    "mono8": ("mono8", "8UC1"),
}
"""Message encodings a camera of each declared encoding takes (converted to the declared one)."""


def camera_image(msg: Any, camera: CameraFeature, compressed: bool = False, topic: str = "image") -> np.ndarray:
    """A camera's frame ``uint8 [H, W, C]`` in ``camera.encoding`` (RGB order for colour) from a
    ``sensor_msgs/Image`` (``compressed``: a ``CompressedImage``) of either ROS version, or
    :class:`MalformedMessage` naming the field when its size or encoding is not the declared one
    (module doc; ``topic`` names the message in the error).
    """
    want = camera.encoding
    accepted = CAMERA_SOURCES[want]
    declared = f"the camera declares {camera.width}x{camera.height} {want}"
    if compressed:
        array = compressed_to_numpy(msg, topic=topic)  # the original encoding where the format names it
        kind, original = _parse_format(str(msg.format), topic)
        source = original or {1: "mono8", 3: "bgr8", 4: "bgra8"}.get(array.shape[2], "")
        if array.dtype != np.uint8 or source not in accepted:
            raise MalformedMessage(f"{topic}.format: {msg.format!r} decodes to {source or array.dtype} "
                                   f"(expected one of {list(accepted)}: {declared})")
        if array.shape[:2] != (camera.height, camera.width):
            raise MalformedMessage(f"{topic}.data: the {kind} image is {array.shape[1]}x{array.shape[0]} "
                                   f"(width x height; {declared})")
    else:
        source = str(msg.encoding)
        if source not in accepted:
            raise MalformedMessage(f"{topic}.encoding: {source!r} (expected one of {list(accepted)}: {declared})")
        for name, expected in (("width", camera.width), ("height", camera.height)):
            value = int(getattr(msg, name))
            if value != expected:
                raise MalformedMessage(f"{topic}.{name}: {value} (expected {expected}: {declared})")
        array = image_to_numpy(msg, topic=topic)
    return np.ascontiguousarray(convert_encoding(array, source, want, topic))
