"""Image preprocessing and ROS image conversion times (issue 16), one OpenCV thread by default.

* :mod:`robolearn.spec.image_ops` pipelines on a batch of ``--big-batch`` random 640x480 RGB frames:
  resize to 84x84 (``area`` and ``linear``), undistortion (a camera with ``fx = fy = 500`` and
  distortion ``(-0.3, 0.1, 0.001, -0.001, -0.02)``) and undistort + centre crop 480x480 + resize 84 +
  gray, in ms per frame; channel swap, gray conversion and a centre crop 84 -> 76 on a batch of
  ``--small-batch`` 84x84 frames, in us per frame;
* :mod:`robolearn.sim2real.ros.images` on one 640x480 ``rgb8`` frame (a smooth pattern, as a camera
  sees, so the PNG size means something): ``fill_image`` / ``image_to_numpy`` of a
  ``sensor_msgs/Image`` and ``fill_compressed`` / ``compressed_to_numpy`` of a
  ``sensor_msgs/CompressedImage`` in PNG and JPEG (quality 95), in ms, and the compressed bytes.

Each figure is the median of ``--repeats`` timed calls (3 for the 640x480 pipelines) after one
warm-up call. Messages are plain namespaces with the ROS field names (the converters duck-type).

    OMP_NUM_THREADS=1 python benchmarks/image_ops.py
    OMP_NUM_THREADS=1 python benchmarks/image_ops.py --quick
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import call_times, machine_line  # noqa: E402  (benchmarks/ is not a package)

from robolearn.sim2real.ros.images import compressed_to_numpy, fill_compressed, fill_image, image_to_numpy
from robolearn.spec.image_ops import (
    CameraIntrinsics,
    CenterCrop,
    ConvertColor,
    ImagePipeline,
    Resize,
    Undistort,
)


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after one untimed warm-up call."""
    return float(np.median(call_times(fn, repeats)))


def pipelines(big_batch: int, small_batch: int, repeats: int) -> list[tuple[str, str, float]]:
    """(step, unit, time per frame) of each preprocessing pipeline (module doc)."""
    rng = np.random.default_rng(0)
    cam = CameraIntrinsics(500.0, 500.0, 319.5, 239.5, 640, 480, (-0.3, 0.1, 0.001, -0.001, -0.02))
    big = rng.integers(0, 256, (big_batch, 480, 640, 3), dtype=np.uint8)
    rows = []
    for name, pipe in {
        "resize 640x480 -> 84x84, area": ImagePipeline([Resize(84, 84, "area")]),
        "resize 640x480 -> 84x84, linear": ImagePipeline([Resize(84, 84, "linear")]),
        "undistort 640x480": ImagePipeline([Undistort(cam)]),
        "undistort + centre crop 480 + resize 84 + gray": ImagePipeline(
            [Undistort(cam), CenterCrop(480, 480), Resize(84, 84), ConvertColor("rgb2gray")]
        ),
    }.items():
        # 3 repeats: a 640x480 batch takes up to ~0.5 s, and the per-frame figure averages over the batch anyway.
        rows.append((name, "ms/frame", 1e3 * median_time(lambda p=pipe: p(big), min(3, repeats)) / big_batch))
    small = rng.integers(0, 256, (small_batch, 84, 84, 3), dtype=np.uint8)
    for name, pipe in {
        "rgb2bgr 84x84": ImagePipeline([ConvertColor("rgb2bgr")]),
        "rgb2gray 84x84": ImagePipeline([ConvertColor("rgb2gray")]),
        "centre crop 84 -> 76": ImagePipeline([CenterCrop(76, 76)]),
    }.items():
        rows.append((name, "us/frame", 1e6 * median_time(lambda p=pipe: p(small), repeats) / small_batch))
    return rows


def ros_images(repeats: int) -> tuple[list[tuple[str, str, float]], dict[str, int]]:
    """(conversion, unit, ms) of each ROS image conversion (module doc), and the compressed sizes."""
    y, x = np.mgrid[:480, :640]
    frame = np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8)
    msg = SimpleNamespace(height=0, width=0, encoding="", is_bigendian=0, step=0, data=b"")
    rows = [("Image: fill_image 640x480 rgb8", "ms", 1e3 * median_time(lambda: fill_image(msg, frame, "rgb8"), repeats))]
    fill_image(msg, frame, "rgb8")
    rows.append(("Image: image_to_numpy 640x480 rgb8", "ms", 1e3 * median_time(lambda: image_to_numpy(msg), repeats)))
    sizes = {}
    comp = SimpleNamespace(format="", data=b"")
    for fmt in ("png", "jpeg"):
        rows.append((f"CompressedImage: {fmt} encode 640x480", "ms",
                     1e3 * median_time(lambda f=fmt: fill_compressed(comp, frame, "rgb8", f), repeats)))
        fill_compressed(comp, frame, "rgb8", fmt)
        sizes[fmt] = len(comp.data)
        rows.append((f"CompressedImage: {fmt} decode 640x480", "ms", 1e3 * median_time(lambda: compressed_to_numpy(comp), repeats)))
    return rows, sizes


def machine() -> str:
    """One line: processor, cores, load, versions, commit, threads."""
    return machine_line({"OpenCV": f"{cv2.__version__} ({cv2.getNumThreads()} thread(s))", "numpy": np.__version__})


def main() -> None:
    """Time the pipelines and conversions, print a markdown table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-batch", type=int, default=64, help="640x480 frames per pipeline call (default 64)")
    parser.add_argument("--small-batch", type=int, default=256, help="84x84 frames per pipeline call (default 256)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per figure, median (default 7)")
    parser.add_argument("--cv2-threads", type=int, default=1, help="cv2.setNumThreads (default 1)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="smoke: 8 640x480 frames, 64 84x84 frames, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.big_batch, args.small_batch, args.repeats = 8, 64, 3
    torch.set_num_threads(1)
    cv2.setNumThreads(args.cv2_threads)
    rows = pipelines(args.big_batch, args.small_batch, args.repeats)
    ros_rows, sizes = ros_images(args.repeats)
    info = machine()
    print(info)
    print(f"\nmedian of {args.repeats} calls (3 for the 640x480 pipelines, batch {args.big_batch}; 84x84 batch "
          f"{args.small_batch}); PNG {sizes['png']} bytes, JPEG {sizes['jpeg']} bytes for the 640x480 frame\n")
    print("| step | time | unit |")
    print("|---|---:|---|")
    for name, unit, value in rows + ros_rows:
        print(f"| {name} | {value:.3g} | {unit} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": info, "args": vars(args) | {"json": str(args.json)},
                                         "rows": [{"step": n, "unit": u, "value": v} for n, u, v in rows + ros_rows],
                                         "compressed_bytes": sizes}, indent=1))


if __name__ == "__main__":
    main()
