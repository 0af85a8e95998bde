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
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robolearn.sim2real.ros.common import MalformedMessage
from robolearn.sim2real.ros.images import (
    ENCODINGS,
    compressed_to_numpy,
    fill_compressed,
    fill_image,
    image_to_numpy,
)

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
    from robolearn.sim2real.ros.images import ENCODINGS, compressed_to_numpy, fill_compressed, fill_image, image_to_numpy

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


# --- camera topics in bag import -------------------------------------------------------------------

CAM_T0 = 0.005
"""The camera's first frame, after the first joint state (relative to the log's start)."""
CAM_DT = 0.033
"""The camera's period (about 30 Hz against the 100 Hz control ticks)."""
DT = 0.01
"""Cartpole-Balance's control period."""


def camera_frame(j: int, h: int = 12, w: int = 16) -> np.ndarray:
    """Frame ``j``: red channel ``j`` (mod 256), green ``255 - j``, blue a gradient across columns."""
    frame = np.empty((h, w, 3), dtype=np.uint8)
    frame[..., 0] = j % 256
    frame[..., 1] = 255 - j % 256
    frame[..., 2] = (np.arange(w) * 15)[None, :]
    return frame


def write_camera_bag(path: Path, log: dict[str, np.ndarray], *, compressed: bool, t0: float = 500.0,
                     pause: tuple[float, float] | None = None, corrupt: int | None = None) -> Path:
    """A cart-pole log (JointState every 10 ms, Float64MultiArray 2 ms after each) with a camera:
    frame ``j`` stamped ``t0 + CAM_T0 + j * CAM_DT`` (``pause``: no frames in that window of log
    time), as rgb8 ``Image`` or png ``CompressedImage``. ROS 1 ``.bag`` or ROS 2 ``.mcap`` by suffix.
    """
    from rosbags.typesys import Stores, get_typestore

    ros1 = path.suffix == ".bag"
    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_JAZZY)
    types = store.types
    Time, Header = types["builtin_interfaces/msg/Time"], types["std_msgs/msg/Header"]
    JointState, F64 = types["sensor_msgs/msg/JointState"], types["std_msgs/msg/Float64MultiArray"]
    Layout = types["std_msgs/msg/MultiArrayLayout"]
    cam_type = "sensor_msgs/msg/CompressedImage" if compressed else "sensor_msgs/msg/Image"

    def header(t: float) -> object:
        ns = round(t * 1e9)
        stamp = Time(sec=ns // 10**9, nanosec=ns % 10**9)
        return Header(seq=0, stamp=stamp, frame_id="cam") if ros1 else Header(stamp=stamp, frame_id="cam")

    def serialize(msg: object, kind: str) -> bytes:
        return store.serialize_ros1(msg, kind) if ros1 else store.serialize_cdr(msg, kind)

    events: list[tuple[float, str, object]] = []
    steps = len(log["cmd"])
    for k in range(steps + 1):
        t = t0 + k * DT
        events.append((t, "js", JointState(header=header(t), name=["slider", "hinge"], position=log["pos"][k].copy(),
                                           velocity=log["vel"][k].copy(), effort=np.zeros(0))))
        if k < steps:
            events.append((t + 0.002, "cmd", F64(layout=Layout(dim=[], data_offset=0), data=log["cmd"][k].copy())))
    j = 0
    while CAM_T0 + j * CAM_DT <= steps * DT:
        rel = CAM_T0 + j * CAM_DT
        if pause is None or not pause[0] <= rel < pause[1]:
            t = t0 + rel
            if compressed:
                msg = fill_compressed(types[cam_type](header=header(t), format="", data=np.zeros(0, np.uint8)),
                                      camera_frame(j), "rgb8", "png")
                if corrupt == j:
                    msg.data = msg.data[: len(msg.data) // 3]  # a truncated png
            else:
                msg = fill_image(types[cam_type](header=header(t), height=0, width=0, encoding="", is_bigendian=0,
                                                 step=0, data=np.zeros(0, np.uint8)), camera_frame(j), "rgb8")
            events.append((t, "cam", msg))
        j += 1
    if ros1:
        from rosbags.rosbag1 import Writer

        writer = Writer(path)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
    kinds = {"js": JointState.__msgtype__, "cmd": F64.__msgtype__, "cam": cam_type}
    with writer:
        conns = {name: writer.add_connection(topic, kinds[name], typestore=store)
                 for name, topic in (("js", "/js"), ("cmd", "/cmd"), ("cam", "/cam"))}
        for t, name, msg in sorted(events, key=lambda e: e[0]):
            writer.write(conns[name], round(t * 1e9), serialize(msg, kinds[name]))
    return path


CAM_MAPPING = {"task": "Cartpole-Balance", "joint_states": {"topic": "/js"}, "commands": {"topic": "/cmd"},
               "image": {"topic": "/cam"}}


@pytest.fixture(scope="module")
def cart_log() -> dict[str, np.ndarray]:
    from tests.test_bag_import import rollout

    return rollout(120)


@pytest.mark.parametrize(("suffix", "compressed"), [(".bag", False), (".mcap", True)])
def test_bag_import_holds_the_latest_camera_frame_at_each_tick(tmp_path: Path, cart_log: dict, suffix: str,
                                                               compressed: bool) -> None:
    import torch

    from robolearn.cli.bag_import import import_bag

    bag = write_camera_bag(tmp_path / f"cam{suffix}", cart_log, compressed=compressed)
    data = import_bag(bag, CAM_MAPPING)
    # the tick at 0 s comes before the first frame (5 ms): dropped, so 119 of the 120 steps remain
    assert len(data) == 119 and data.episode_lengths.tolist() == [119]
    np.testing.assert_allclose(data.rewards.numpy(), cart_log["reward"][1:], atol=1e-6)
    images = data.observations["image"]
    assert images.dtype == torch.uint8 and tuple(images.shape) == (119, 12, 16, 3)
    # transition i starts at tick i + 1 (time 0.01 (i + 1)): the frame taken last by then
    ticks = DT * np.arange(1, 121)
    held = np.floor((ticks - CAM_T0) / CAM_DT + 1e-9).astype(int)
    expected = np.stack([camera_frame(j) for j in held])
    np.testing.assert_array_equal(images.numpy(), expected[:119])
    np.testing.assert_array_equal(data.final_observations["image"][0].numpy(), expected[119])
    record = data.metadata.extra["image"]
    assert record["frame_shape"] == [12, 16, 3] and record["frames_read"] == len(np.arange(0, 1.2 - CAM_T0, CAM_DT))
    oldest = float(np.max(ticks - (CAM_T0 + held * CAM_DT)))
    assert oldest < CAM_DT and record["max_age_s"] == pytest.approx(oldest, abs=1e-6)


def test_bag_import_preprocesses_frames_and_refuses_bad_camera_topics(tmp_path: Path, cart_log: dict) -> None:
    from robolearn.cli.bag_import import import_bag
    from robolearn.data.rosbag_io import BagError
    from robolearn.utils.config import ConfigError

    bag = write_camera_bag(tmp_path / "cam.mcap", cart_log, compressed=True)
    gray = {**CAM_MAPPING, "image": {"topic": "/cam", "encoding": "rgb8", "max_age_s": 0.04,
                                     "steps": [{"op": "resize", "width": 8, "height": 6},
                                               {"op": "convert_color", "conversion": "rgb2gray"}]}}
    data = import_bag(bag, gray)
    frames = data.observations["image"].numpy()
    assert frames.shape == (119, 6, 8, 1)
    # a uniform red j / green 255 - j frame with a blue gradient: gray = .299 j + .587 (255 - j) + .114 blue
    j = int(np.floor((DT - CAM_T0) / CAM_DT))
    blue = camera_frame(j)[..., 2].reshape(6, 2, 8, 2).mean(axis=(1, 3))
    np.testing.assert_allclose(frames[0, ..., 0], 0.299 * j + 0.587 * (255 - j) + 0.114 * blue, atol=1.0)
    # a stalled camera (no frames for 0.3 s) is refused at the first tick whose frame is too old
    stalled = write_camera_bag(tmp_path / "stalled.mcap", cart_log, compressed=True, pause=(0.5, 0.8))
    with pytest.raises(BagError, match=r"/cam: at the tick t=500\.\d+ the latest image is 0\.\d+ s old \(max_age_s 0\.04"):
        import_bag(stalled, gray)
    broken = write_camera_bag(tmp_path / "broken.mcap", cart_log, compressed=True, corrupt=5)
    with pytest.raises(BagError, match=r"/cam\[5\] \(t=500\.170000\)\.data: \d+ bytes do not decode"):
        import_bag(broken, CAM_MAPPING)
    with pytest.raises(BagError, match=r"topic '/js' has type sensor_msgs/msg/JointState, expected sensor_msgs/msg/Image"):
        import_bag(bag, {**CAM_MAPPING, "image": {"topic": "/js"}})
    with pytest.raises(BagError, match=r"topic '/cam' has type sensor_msgs/msg/CompressedImage, the mapping says sensor_msgs/Image"):
        import_bag(bag, {**CAM_MAPPING, "image": {"topic": "/cam", "type": "sensor_msgs/Image"}})
    with pytest.raises(ConfigError, match=r"mapping.image.steps: steps\[0\].op: expected one of"):
        import_bag(bag, {**CAM_MAPPING, "image": {"topic": "/cam", "steps": [{"op": "sharpen"}]}})
    # without a camera topic the import records what it always did
    plain = import_bag(bag, {k: v for k, v in CAM_MAPPING.items() if k != "image"})
    assert "image" not in plain.observations and "image" not in plain.metadata.extra
    assert "image" not in plain.metadata.extra["mapping"] and len(plain) == 120


def test_any_size_encoding_padding_and_byte_order_reads_back_exactly():
    """Property: an image of any size and supported encoding, written with any row padding in
    either byte order, reads back exactly; and png keeps it exactly where png can hold it."""
    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(st.sampled_from(sorted(ENCODINGS)), st.integers(1, 9), st.integers(1, 9), st.integers(0, 7),
           st.booleans(), st.integers(0, 2**32 - 1))
    def check(encoding: str, h: int, w: int, pad: int, big: bool, seed: int) -> None:
        dtype, c = ENCODINGS[encoding]
        rng = np.random.default_rng(seed)
        if dtype == np.float32:
            arr = rng.normal(0, 100, (h, w, c)).astype(np.float32)
        else:
            arr = rng.integers(0, np.iinfo(dtype).max + 1, (h, w, c), dtype=np.uint64).astype(dtype)
        row = arr[0].astype(arr.dtype.newbyteorder(">" if big else "<")).tobytes()
        rows = [arr[i].astype(arr.dtype.newbyteorder(">" if big else "<")).tobytes() + b"\x5a" * pad for i in range(h)]
        msg = SimpleNamespace(height=h, width=w, encoding=encoding, is_bigendian=int(big), step=len(row) + pad,
                              data=b"".join(rows))
        np.testing.assert_array_equal(image_to_numpy(msg), arr)
        if dtype != np.float32:
            back = compressed_to_numpy(fill_compressed(SimpleNamespace(), arr, encoding, "png"))
            assert back.dtype == arr.dtype
            np.testing.assert_array_equal(back, arr)

    check()


# -- a robot's cameras (robolearn.sim2real.ros.images.camera_image, Topics' image settings) -------
def _compressed() -> Any:
    return SimpleNamespace(format="", data=b"")


def test_camera_image_converts_to_the_declared_encoding_and_refuses_other_kinds() -> None:
    """A declared ``rgb8`` camera takes any 8-bit colour order (converted exactly to RGB), a
    ``mono8`` camera 8-bit gray; another size, colour for gray, gray for colour, 16 bit: refused,
    naming the field, the value and the declaration."""
    from robolearn.sim2real.robots.base import CameraFeature
    from robolearn.sim2real.ros.images import camera_image

    rgb = rgb_pattern(6, 5)
    colour, gray = CameraFeature(6, 5, "rgb8"), CameraFeature(6, 5, "mono8")
    alpha = np.concatenate([rgb, np.full((6, 5, 1), 7, np.uint8)], axis=-1)
    for encoding, array in (("rgb8", rgb), ("bgr8", rgb[:, :, ::-1]), ("8UC3", rgb[:, :, ::-1]),
                            ("rgba8", alpha), ("bgra8", alpha[:, :, [2, 1, 0, 3]])):
        got = camera_image(fill_image(_plain_image(), np.ascontiguousarray(array), encoding), colour)
        assert got.dtype == np.uint8 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, rgb, err_msg=encoding)
    png = camera_image(fill_compressed(_compressed(), rgb, "rgb8", "png"), colour, compressed=True)
    np.testing.assert_array_equal(png, rgb)
    mono = rgb[:, :, :1].copy()
    for encoding in ("mono8", "8UC1"):
        np.testing.assert_array_equal(camera_image(fill_image(_plain_image(), mono, encoding), gray), mono)
    np.testing.assert_array_equal(camera_image(fill_compressed(_compressed(), mono, "mono8", "png"), gray, True), mono)
    refusals = [
        (fill_image(_plain_image(), rgb[:5], "rgb8"), colour, False,
         "cam.height: 5 (expected 6: the camera declares 5x6 rgb8)"),
        (fill_image(_plain_image(), mono, "mono8"), colour, False, "cam.encoding: 'mono8' (expected one of ['rgb8'"),
        (fill_image(_plain_image(), rgb, "rgb8"), gray, False, "cam.encoding: 'rgb8' (expected one of ['mono8', '8UC1']"),
        (fill_image(_plain_image(), mono.astype(np.uint16), "mono16"), gray, False, "cam.encoding: 'mono16'"),
        (fill_compressed(_compressed(), rgb[:, :4].copy(), "rgb8", "png"), colour, True,
         "cam.data: the png image is 4x6 (width x height; the camera declares 5x6 rgb8)"),
        (fill_compressed(_compressed(), mono, "mono8", "png"), colour, True, "cam.format: 'mono8; png compressed mono8'"),
        (fill_compressed(_compressed(), mono.astype(np.uint16), "16UC1", "png"), gray, True, "decodes to 16UC1"),
    ]
    for msg, camera, compressed, text in refusals:
        with pytest.raises(MalformedMessage) as err:
            camera_image(msg, camera, compressed, topic="cam")
        assert text in str(err.value), (text, str(err.value))


def test_camera_image_of_a_bare_compressed_format_is_opencvs_bgr_made_rgb() -> None:
    """A driver that names no original encoding (``format="png"``/``"jpeg"``): OpenCV decodes three
    channels as BGR, which ``camera_image`` turns into the declared RGB exactly (png) or within the
    codec's error (jpeg), never with red and blue swapped."""
    from robolearn.sim2real.robots.base import CameraFeature
    from robolearn.sim2real.ros.images import camera_image

    y, x = np.mgrid[:6, :5]
    rgb = np.stack([10 * y + x, 100 + x, 200 - y], axis=-1).astype(np.uint8)  # red, green, blue all apart
    for fmt in ("png", "jpeg"):
        msg = fill_compressed(_compressed(), rgb, "rgb8", fmt, quality=100)
        msg.format = fmt
        got = camera_image(msg, CameraFeature(6, 5, "rgb8"), compressed=True)
        if fmt == "png":
            np.testing.assert_array_equal(got, rgb)
        else:  # red and blue differ by >= 140 everywhere: a swap is far outside the codec's error
            assert np.abs(got.astype(int) - rgb).max() < 20


@pytest.mark.parametrize("ros", [1, 2])
def test_image_topics_default_to_image_transport_names_and_travel_in_parameter_files(tmp_path: Path, ros: int) -> None:
    """``<ns>/<camera>/image_raw`` (``/compressed`` for a compressed camera) unless ``Topics.images``
    names another; the settings survive a parameter file of either ROS; a bad transport is named."""
    from robolearn.sim2real.robots.base import CameraFeature, RobotFeatures
    from robolearn.sim2real.ros.common import Topics, node_parameters, read_parameters, write_parameters

    topics = Topics(namespace="/r", images={"wrist": "/arm/wrist_cam/image"}, image_transport={"front": "compressed"})
    names = {c: topics.image_topic(c) for c in ("front", "wrist", "top")}
    assert names == {"front": "/r/front/image_raw/compressed", "wrist": "/arm/wrist_cam/image", "top": "/r/top/image_raw"}
    assert [topics.transport(c) for c in ("front", "wrist")] == ["compressed", "raw"]
    features = RobotFeatures(name="cam", joints=("a",), command_joints=("a",), command_kind="torque", rate_hz=50.0,
                             position_limits=((-1.0, 1.0),), velocity_limits=(1.0,), effort_limits=(1.0,),
                             default_pose=(0.0,), cameras={"front": CameraFeature(48, 64)})
    path = write_parameters(tmp_path / "p.yaml", "policy", node_parameters(features, topics, policy="x"), ros)
    back = read_parameters(path, "policy")
    again = Topics(**back["topics"])
    assert {c: again.image_topic(c) for c in names} == names
    assert RobotFeatures.from_dict(back["robot"]).cameras == features.cameras
    with pytest.raises(ValueError, match=r"image_transport.front: expected one of \['raw', 'compressed'\], got 'jpeg'"):
        Topics(image_transport={"front": "jpeg"})


def test_policy_node_flags_set_camera_topics_transports_and_input_cameras(tmp_path: Path) -> None:
    """``--image-topic``, ``--image-transport`` and ``--camera`` override the parameter file's
    ``topics.images``, ``topics.image_transport`` and ``cameras``; malformed ones are named."""
    import argparse

    from robolearn.sim2real.ros.common import write_parameters
    from robolearn.sim2real.ros.node_common import add_policy_arguments, policy_settings

    params = {"policy": "p", "topics": {"namespace": "/n", "image_transport": {"front": "compressed", "top": "compressed"}},
              "cameras": {"image": "top"}}
    path = write_parameters(tmp_path / "p.yaml", "policy", params, 2)
    parser = add_policy_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--params", str(path), "--image-transport", "front=raw", "--image-topic", "top=/cams/top",
                              "--camera", "wrist_image=wrist"])
    merged = policy_settings(args, "policy")
    t = merged.topics
    assert (t.image_topic("front"), t.transport("front")) == ("/n/front/image_raw", "raw")
    assert (t.image_topic("top"), t.transport("top")) == ("/cams/top", "compressed")
    assert merged.cameras == {"image": "top", "wrist_image": "wrist"}
    for flags, text in ((["--image-transport", "front=jpeg"], "--image-transport: expected raw or compressed, got 'jpeg'"),
                        (["--camera", "image"], "--camera: expected CAMERA=VALUE, got 'image'")):
        with pytest.raises(SystemExit, match=re.escape(text)):
            policy_settings(parser.parse_args(["--policy", "p", *flags]), "policy")


def test_policy_status_reports_a_stale_camera_apart_from_stale_joint_states() -> None:
    """``policy_status``: ``stale`` is the joint states' (or a lost robot), ``stale_camera`` is true
    while the policy is held, or not yet started, for a camera frame that is not fresh or never came."""
    import logging

    from robolearn.sim2real.ros.node_common import ThrottledLog, policy_status

    def status(word: str) -> dict:
        rt = SimpleNamespace(status=word, stats=SimpleNamespace(ticks=[0.0], sent=1, missed=0),
                             safety=SimpleNamespace(counts={}, state="run"))
        return json.loads(policy_status(rt, 0, ThrottledLog(logging.getLogger("t"), "x"), 1))

    got = {word: (status(word)["stale"], status(word)["stale_camera"])
           for word in ("run", "stale", "lost", "stale_camera", "no_camera", "hold")}
    assert got == {"run": (False, False), "stale": (True, False), "lost": (True, False),
                   "stale_camera": (False, True), "no_camera": (False, True), "hold": (False, False)}
