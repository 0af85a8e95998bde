"""Camera images on ROS (robolearn.sim2real.ros.images): ``sensor_msgs/Image`` and ``CompressedImage``
to and from NumPy, with the real message classes: rosbags' (ROS 1 and ROS 2 definitions, always
installed), ROS 1's genpy classes (Debian's sensor_msgs, on the venv's path) through their own wire
serialisation, and ROS 2's rclpy classes through ``rclpy.serialization`` in the ROS 2 venv, run
inside ``unshare -n`` like every ROS 2 test (no DDS traffic is made, but no ROS 2 process ever runs
on the shared network).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from robolearn.sim2real.ros.common import MalformedMessage
from robolearn.sim2real.ros.images import compressed_to_numpy, fill_compressed, fill_image, image_to_numpy

REPO = Path(__file__).resolve().parents[1]
ROS2_PYTHON = Path(os.environ.get("ROBOLEARN_ROS2_PYTHON", REPO / ".venv-ros2" / "bin" / "python"))


def rgb_pattern(h: int = 6, w: int = 5) -> np.ndarray:
    """A colour image whose every pixel differs: ``[y, x] = (10 y + x, 100 + x, 200 - y)``."""
    y, x = np.mgrid[:h, :w]
    return np.stack([10 * y + x, 100 + x, 200 - y], axis=-1).astype(np.uint8)


def smooth_rgb(h: int = 48, w: int = 64) -> np.ndarray:
    """A smooth colour gradient (JPEG's favourite kind of image), mostly red on the left."""
    y, x = np.mgrid[:h, :w].astype(np.float64)
    return np.stack([230 - 2 * x, 20 + 3 * y, 30 + x], axis=-1).clip(0, 255).astype(np.uint8)


def _plain_image() -> Any:
    return SimpleNamespace(height=0, width=0, encoding="", is_bigendian=0, step=0, data=b"")


def _rosbags(kind: str, store: str) -> Any:
    """An empty rosbags message (``kind``: ``Image`` or ``CompressedImage``) of a typestore."""
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(getattr(Stores, store))
    header_t = ts.types["std_msgs/msg/Header"]
    time_t = ts.types["builtin_interfaces/msg/Time"]
    header = header_t(seq=0, stamp=time_t(sec=0, nanosec=0), frame_id="cam") if "ROS1" in store else \
        header_t(stamp=time_t(sec=0, nanosec=0), frame_id="cam")
    empty = np.zeros(0, dtype=np.uint8)
    if kind == "Image":
        return ts.types["sensor_msgs/msg/Image"](header=header, height=0, width=0, encoding="", is_bigendian=0,
                                                  step=0, data=empty)
    return ts.types["sensor_msgs/msg/CompressedImage"](header=header, format="", data=empty)


MAKERS = {
    "plain": lambda kind: _plain_image() if kind == "Image" else SimpleNamespace(format="", data=b""),
    "rosbags-ros1": lambda kind: _rosbags(kind, "ROS1_NOETIC"),
    "rosbags-ros2": lambda kind: _rosbags(kind, "ROS2_JAZZY"),
}


def test_a_known_rgb8_message_gives_the_known_pixels():
    # 2 rows x 3 columns, each row padded with 2 bytes (step 11): the padding must not leak in
    row0 = bytes([1, 2, 3, 4, 5, 6, 7, 8, 9]) + b"\xee\xee"
    row1 = bytes([10, 11, 12, 13, 14, 15, 16, 17, 18]) + b"\xee\xee"
    msg = SimpleNamespace(height=2, width=3, encoding="rgb8", is_bigendian=0, step=11, data=row0 + row1)
    img = image_to_numpy(msg)
    assert img.shape == (2, 3, 3) and img.dtype == np.uint8
    np.testing.assert_array_equal(img[1, 2], [16, 17, 18])
    np.testing.assert_array_equal(img[0, 1], [4, 5, 6])
    # a last row without its padding is accepted (some drivers send it so)
    msg.data = row0 + row1[:9]
    np.testing.assert_array_equal(image_to_numpy(msg)[1, 2], [16, 17, 18])
    # the same bytes as bgr8 are the same array: encodings carry the order, the converter keeps it
    msg.encoding = "bgr8"
    np.testing.assert_array_equal(image_to_numpy(msg)[1, 2], [16, 17, 18])


@pytest.mark.parametrize("maker", sorted(MAKERS))
@pytest.mark.parametrize(
    ("encoding", "array"),
    [
        ("rgb8", rgb_pattern()),
        ("bgr8", rgb_pattern()[..., ::-1].copy()),
        ("mono8", rgb_pattern()[..., :1].copy()),
        ("16UC1", (np.arange(30, dtype=np.uint16).reshape(6, 5, 1) * 2111)),  # depth in mm, both bytes used
        ("32FC1", np.array([[[0.5], [1.25], [np.nan]], [[3.0], [np.inf], [7.75]]], dtype=np.float32)),  # depth in m
    ],
)
def test_image_round_trips_exactly(maker, encoding, array):
    msg = fill_image(MAKERS[maker]("Image"), array, encoding)
    assert (msg.height, msg.width, msg.encoding) == (array.shape[0], array.shape[1], encoding)
    assert msg.step == array.shape[1] * array.shape[2] * array.dtype.itemsize
    back = image_to_numpy(msg)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_big_endian_depth_is_swapped_to_native():
    depth = np.array([[1, 256, 65535], [258, 0, 4660]], dtype=np.uint16)
    msg = SimpleNamespace(height=2, width=3, encoding="16UC1", is_bigendian=1, step=6, data=depth.astype(">u2").tobytes())
    np.testing.assert_array_equal(image_to_numpy(msg)[..., 0], depth)
    metres = np.array([[0.25, 2.5]], dtype=np.float32)
    msg = SimpleNamespace(height=1, width=2, encoding="32FC1", is_bigendian=1, step=8, data=metres.astype(">f4").tobytes())
    np.testing.assert_array_equal(image_to_numpy(msg)[..., 0], metres)


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_compressed_png_is_exact_and_jpeg_within_tolerance(maker):
    img = rgb_pattern()
    msg = fill_compressed(MAKERS[maker]("CompressedImage"), img, "rgb8", "png")
    assert msg.format == "rgb8; png compressed bgr8"
    np.testing.assert_array_equal(compressed_to_numpy(msg), img)  # the original encoding, from the format
    np.testing.assert_array_equal(compressed_to_numpy(msg, "bgr8"), img[..., ::-1])
    depth = (np.arange(30, dtype=np.uint16).reshape(6, 5, 1) * 2111)
    d = compressed_to_numpy(fill_compressed(MAKERS[maker]("CompressedImage"), depth, "16UC1", "png"))
    assert d.dtype == np.uint16
    np.testing.assert_array_equal(d, depth)
    mono = img[..., 1:2].copy()
    np.testing.assert_array_equal(compressed_to_numpy(fill_compressed(MAKERS[maker]("CompressedImage"), mono, "mono8")), mono)
    smooth = smooth_rgb()
    jpeg = fill_compressed(MAKERS[maker]("CompressedImage"), smooth, "rgb8", "jpeg", quality=90)
    assert jpeg.format == "rgb8; jpeg compressed bgr8"
    back = compressed_to_numpy(jpeg)
    assert back.shape == smooth.shape and back.dtype == np.uint8
    err = np.abs(back.astype(int) - smooth.astype(int))
    assert err.mean() < 2.0 and err.max() <= 16
    # channel order kept: the left edge is red in both
    assert back[:, :4, 0].mean() > 200 and back[:, :4, 2].mean() < 60


def test_bare_format_strings_decode_as_opencv_does():
    import cv2

    img = rgb_pattern()
    _, buf = cv2.imencode(".png", img[..., ::-1])  # a camera driver's own BGR png
    msg = SimpleNamespace(format="png", data=buf.tobytes())
    np.testing.assert_array_equal(compressed_to_numpy(msg), img[..., ::-1])  # bgr8, as decoded
    np.testing.assert_array_equal(compressed_to_numpy(msg, "rgb8"), img)


def test_ros1_genpy_messages_round_trip_through_their_wire_format():
    sensor_msgs = pytest.importorskip("sensor_msgs.msg", reason="ROS 1's sensor_msgs (Debian python3-sensor-msgs via scripts/setup.sh)")
    depth = (np.arange(30, dtype=np.uint16).reshape(6, 5, 1) * 2111)
    for encoding, array in (("rgb8", rgb_pattern()), ("16UC1", depth)):
        msg = fill_image(sensor_msgs.Image(), array, encoding)
        buf = io.BytesIO()
        msg.serialize(buf)
        wire = sensor_msgs.Image()
        wire.deserialize(buf.getvalue())
        np.testing.assert_array_equal(image_to_numpy(wire), array)
    msg = fill_compressed(sensor_msgs.CompressedImage(), rgb_pattern(), "rgb8", "png")
    buf = io.BytesIO()
    msg.serialize(buf)
    wire = sensor_msgs.CompressedImage()
    wire.deserialize(buf.getvalue())
    np.testing.assert_array_equal(compressed_to_numpy(wire), rgb_pattern())


ROS2_SCRIPT = textwrap.dedent(
    """
    import json
    import numpy as np
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import CompressedImage, Image
    from robolearn.sim2real.ros.images import compressed_to_numpy, fill_compressed, fill_image, image_to_numpy

    y, x = np.mgrid[:6, :5]
    rgb = np.stack([10 * y + x, 100 + x, 200 - y], axis=-1).astype(np.uint8)
    depth = (np.arange(30, dtype=np.uint16).reshape(6, 5, 1) * 2111)
    metres = np.linspace(0.1, 9.0, 30, dtype=np.float32).reshape(6, 5, 1)
    out = {}
    for enc, arr in (("rgb8", rgb), ("16UC1", depth), ("32FC1", metres)):
        wire = deserialize_message(serialize_message(fill_image(Image(), arr, enc)), Image)
        back = image_to_numpy(wire)
        out[enc] = bool(back.dtype == arr.dtype and np.array_equal(back, arr))
    wire = deserialize_message(serialize_message(fill_compressed(CompressedImage(), rgb, "rgb8", "png")), CompressedImage)
    out["png"] = bool(np.array_equal(compressed_to_numpy(wire), rgb))
    out["data_type"] = type(wire.data).__name__
    print(json.dumps(out))
    """
)


@pytest.mark.ros
def test_ros2_rclpy_messages_round_trip_through_their_serialisation():
    if not ROS2_PYTHON.exists() or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.importorskip("rclpy", reason=f"no ROS 2 interpreter at {ROS2_PYTHON} or no unshare/ip (scripts/setup.sh)")
    out = subprocess.run(["unshare", "-n", "sh", "-c", f'ip link set lo up && exec {ROS2_PYTHON} -c "$0"', ROS2_SCRIPT],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "ROS_LOCALHOST_ONLY": "1", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"rgb8": True, "16UC1": True, "32FC1": True, "png": True, "data_type": "array"}, got


@pytest.mark.parametrize(
    ("msg", "words"),
    [
        (SimpleNamespace(height=2, width=2, encoding="yuv422", is_bigendian=0, step=4, data=b"\0" * 8),
         ["cam.encoding", "'yuv422'", "rgb8"]),
        (SimpleNamespace(height=2, width=2, encoding="rgb8", is_bigendian=0, step=5, data=b"\0" * 12),
         ["cam.step", "5 bytes", "6 bytes"]),
        (SimpleNamespace(height=2, width=2, encoding="rgb8", is_bigendian=0, step=6, data=b"\0" * 10),
         ["cam.data", "10 bytes", "at least 12"]),
        (SimpleNamespace(height=0, width=2, encoding="rgb8", is_bigendian=0, step=6, data=b""),
         ["cam", "height 0"]),
    ],
)
def test_malformed_images_are_refused_naming_the_field(msg, words):
    with pytest.raises(MalformedMessage) as err:
        image_to_numpy(msg, topic="cam")
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_bad_compressed_messages_and_arrays_are_named():
    with pytest.raises(MalformedMessage, match=r"cam.format: 'tiff'.*\['jpeg', 'png'\]"):
        compressed_to_numpy(SimpleNamespace(format="tiff", data=b"xx"), topic="cam")
    with pytest.raises(MalformedMessage, match="cam.data: 4 bytes do not decode"):
        compressed_to_numpy(SimpleNamespace(format="png", data=b"junk"), topic="cam")
    with pytest.raises(MalformedMessage, match=r"cam.format: encoding 'yuv422'"):
        compressed_to_numpy(SimpleNamespace(format="yuv422; png compressed bgr8", data=b"xx"), topic="cam")
    with pytest.raises(MalformedMessage, match="jpeg holds 8-bit images, got 16UC1"):
        fill_compressed(SimpleNamespace(), np.zeros((2, 2, 1), np.uint16), "16UC1", "jpeg")
    with pytest.raises(MalformedMessage, match=r"rgb8 image needs an array \[H, W, 3\], got shape \(2, 2, 4\)"):
        fill_image(_plain_image(), np.zeros((2, 2, 4), np.uint8), "rgb8")
    with pytest.raises(MalformedMessage, match="16UC1 image needs dtype uint16, got float32"):
        fill_image(_plain_image(), np.zeros((2, 2, 1), np.float32), "16UC1")
    with pytest.raises(MalformedMessage, match="image.encoding: encoding 'rgb16'"):
        fill_image(_plain_image(), np.zeros((2, 2, 3), np.uint8), "rgb16")
