"""Camera images over ROS 2, run and measured: ``tests/test_ros2_camera.py`` runs it.

    unshare -n -p -f --kill-child sh -c 'ip link set lo up && exec .venv-ros2/bin/python
        -m robolearn.sim2real.ros.ros2_camera_probe --workdir <dir> [--phases pl]'

Like :mod:`robolearn.sim2real.ros.ros2_probe` (whose reasons it shares: the test process cannot
import rclpy, and DDS runs in a network namespace with loopback only), it prints one JSON object of
measurements as its last line; the assertions are the test's.

Phases:

p. ``/rl_cam``: :class:`~robolearn.sim2real.ros.ros2.Ros2Robot` in this process with two cameras,
   ``front`` (``sensor_msgs/Image`` on ``front/image_raw``) and ``wrist`` (PNG
   ``sensor_msgs/CompressedImage`` on ``wrist/image_raw/compressed``), fed by publishers of this
   node at about 30 Hz with known frames (:func:`camera_pixels`, stamp ``k`` seconds): whether each
   reading's frame is the published one exactly, a ``bgr8`` message converted, messages of another
   width or encoding refused (counted, named) with the last good frame kept, and frames that age
   (receipt time kept) once the cameras stop while joint states go on.
l. ``/rl_px``: the simulated robot node on ``Cartpole-Swingup-Pixels`` with ``--images`` and a
   ``Ros2Robot`` reading it, pushing the cart with constant commands: the frames' shapes, how many
   came, and how much the picture changed as the cart moved.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROBOT = "robolearn.sim2real.ros.ros2_robot_node"


def camera_pixels(k: int, shape: tuple[int, int, int]) -> np.ndarray:
    """The ``k``-th frame of a test camera: seeded noise, different for every ``k`` (the ROS 1
    test's frames).
    """
    return np.random.default_rng(k).integers(0, 256, shape, dtype=np.uint8)


def _wait(predicate: Callable[[], Any], timeout_s: float, every_s: float = 0.01) -> Any:
    """Poll ``predicate`` until true (returned) or ``timeout_s`` passed (``None``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return None


def _stamp(msg: Any, k: float) -> Any:
    """Set ``msg.header.stamp`` to ``k`` seconds; return ``msg``."""
    ns = int(round(k * 1e9))
    msg.header.stamp.sec, msg.header.stamp.nanosec = ns // 1_000_000_000, ns % 1_000_000_000
    return msg


def phase_pieces(node: Any, out: dict[str, Any]) -> None:
    """Phase p (module doc)."""
    from sensor_msgs.msg import CompressedImage, Image, JointState

    from robolearn.sim2real.robots.base import CameraFeature, RobotFeatures
    from robolearn.sim2real.ros import images
    from robolearn.sim2real.ros.common import Topics
    from robolearn.sim2real.ros.ros2 import CONTROL_QOS, IMAGE_QOS, Ros2Robot

    arm = RobotFeatures(name="arm", joints=("shoulder", "elbow", "wrist"), command_joints=("shoulder", "elbow"),
                        command_kind="joint_pos", rate_hz=50.0, position_limits=((-1.0, 1.0), (-2.0, 2.0)),
                        velocity_limits=(1.0, 1.0), effort_limits=(5.0, 5.0), default_pose=(0.0, 0.5),
                        cameras={"front": CameraFeature(48, 64, "rgb8", 30.0), "wrist": CameraFeature(24, 32, "rgb8")})
    topics = Topics(namespace="/rl_cam", image_transport={"wrist": "compressed"})
    shapes = {"front": (48, 64, 3), "wrist": (24, 32, 3)}
    robot = Ros2Robot(arm, node, topics)
    res: dict[str, Any] = {"topics": {c: topics.image_topic(c) for c in shapes}}
    out["pieces"] = res
    robot.connect()
    pubs = {"front": node.create_publisher(Image, topics.image_topic("front"), IMAGE_QOS),
            "wrist": node.create_publisher(CompressedImage, topics.image_topic("wrist"), IMAGE_QOS)}
    states = node.create_publisher(JointState, topics.name(topics.joint_states), CONTROL_QOS)

    def message(camera: str, k: float, array: np.ndarray | None = None, encoding: str = "rgb8") -> Any:
        pixels = camera_pixels(int(k), shapes[camera]) if array is None else array
        if camera == "wrist":
            return _stamp(images.fill_compressed(CompressedImage(), pixels, encoding, "png"), k)
        return _stamp(images.fill_image(Image(), pixels, encoding), k)

    def state() -> None:
        msg = JointState(name=list(arm.joints), position=[0.0] * 3, velocity=[0.0] * 3)
        states.publish(_stamp(msg, time.time()))

    try:
        # about 30 Hz from both cameras until both frames are in a reading (discovery first)
        k = 0
        while k < 300:
            k += 1
            state()
            for camera in shapes:
                pubs[camera].publish(message(camera, k))
            time.sleep(0.03)
            r = robot.read()
            if r is not None and len(r.images) == 2 and k >= 10:
                break
        reading = robot.read()
        res["published"] = k
        res["frames"] = {}
        for camera, shape in shapes.items():
            frame = None if reading is None else reading.images.get(camera)
            if frame is None:
                res["frames"][camera] = None
                continue
            j = int(round(frame.stamp))
            res["frames"][camera] = {"stamp": frame.stamp, "shape": list(frame.image.shape),
                                     "dtype": str(frame.image.dtype),
                                     "exact": bool(np.array_equal(frame.image, camera_pixels(j, shape))),
                                     "received_before_now": frame.received <= time.monotonic()}
        # a bgr8 message of known pixels is converted to the declared RGB
        bgr = camera_pixels(10_000, shapes["front"])[:, :, ::-1].copy()
        pubs["front"].publish(message("front", 10_000, bgr, "bgr8"))
        frame = _wait(lambda: (f := robot.read().images["front"]).stamp == 10_000.0 and f, 5)
        res["bgr8_converted"] = frame is not None and bool(np.array_equal(frame.image, camera_pixels(10_000, shapes["front"])))
        errors = []
        for n, msg in enumerate([message("front", 20_001, camera_pixels(1, (48, 63, 3))),
                                 message("front", 20_002, camera_pixels(1, (48, 64, 1)), "mono8"),
                                 message("wrist", 20_003, camera_pixels(1, (24, 30, 3)))], 1):
            (pubs["wrist"] if n == 3 else pubs["front"]).publish(msg)
            _wait(lambda n=n: robot.rejected_images.count >= n, 5)
            errors.append(robot.rejected_images.last_error)
        res["refused"] = robot.rejected_images.count
        res["errors"] = errors
        res["joint_state_rejections"] = robot.rejected.count
        kept = robot.read().images
        res["kept_front_stamp"] = kept["front"].stamp
        # the cameras stopped: their frames keep their receipt times while joint states go on
        held = {c: f.received for c, f in kept.items()}
        time.sleep(0.3)
        before = robot.read().received
        _wait(lambda: state() or robot.read().received > before, 5, 0.02)
        now = robot.read()
        res["stale"] = {"receipt_kept": {c: f.received for c, f in now.images.items()} == held,
                        "joint_state_fresher": now.received > before,
                        "front_age_s": now.received - held["front"]}
        res["images_received"] = dict(robot.images_received)
    finally:
        robot.disconnect()
        for pub in (*pubs.values(), states):
            node.destroy_publisher(pub)


def phase_loop(node: Any, work: Path, out: dict[str, Any]) -> None:
    """Phase l (module doc)."""
    from robolearn.sim2real.robots.base import RobotFeatures
    from robolearn.sim2real.ros.common import Topics
    from robolearn.sim2real.ros.ros2 import Ros2Robot

    res: dict[str, Any] = {}
    out["loop"] = res
    features_file = work / "pixels.json"
    log = open(work / "robot_px.log", "w")  # noqa: SIM115 - the child owns it until it ends
    proc = subprocess.Popen([sys.executable, "-m", ROBOT, "--task", "Cartpole-Swingup-Pixels", "--namespace",
                             "/rl_px", "--images", "--features-out", str(features_file), "--duration", "60"],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    robot = None
    try:
        if not _wait(features_file.exists, 60, 0.1):
            res["error"] = "no features file from the robot node"
            return
        features = RobotFeatures.from_dict(json.loads(features_file.read_text()))
        res["cameras"] = {k: c.to_dict() for k, c in features.cameras.items()}
        robot = Ros2Robot(features, node, Topics(namespace="/rl_px"))
        robot.connect()
        first = _wait(lambda: (r := robot.read()) is not None and r.images and r, 30)
        if not first:
            res["error"] = "no reading with images"
            return
        camera = next(iter(first.images))
        res["camera"] = camera
        res["shape"] = list(first.images[camera].image.shape)
        image0, pos0 = first.images[camera].image.astype(np.int16), float(first.joint_pos[0])
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:  # push the cart: it moves and the picture with it
            robot.send(np.array([1.0]))
            time.sleep(0.01)
        last = robot.read()
        res["cart_moved_m"] = abs(float(last.joint_pos[0]) - pos0)
        res["changed_pixels"] = float(np.mean(np.any(last.images[camera].image.astype(np.int16) != image0, axis=-1)))
        res["frames"] = robot.images_received[camera]
        res["frame_after_state"] = last.images[camera].stamp > first.images[camera].stamp  # a newer frame came
    finally:
        if robot is not None:
            robot.disconnect()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        res["robot_exit"] = proc.returncode
        log.close()
        res["log"] = (work / "robot_px.log").read_text()[-1500:]


def main(argv: list[str] | None = None) -> int:
    """Run the phases; print the measurements as one JSON line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--phases", default="pl")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    from robolearn.sim2real.ros.ros2 import Spinner

    spinner = Spinner("camera_probe", "/")
    out: dict[str, Any] = {}
    try:
        for key in args.phases:
            t0 = time.monotonic()
            try:
                {"p": lambda: phase_pieces(spinner.node, out), "l": lambda: phase_loop(spinner.node, work, out)}[key]()
            except Exception as exc:  # reported to the test, which names it
                out[f"error_{key}"] = f"{type(exc).__name__}: {exc}"
            out[f"phase_{key}_s"] = time.monotonic() - t0
    finally:
        spinner.shutdown()
    # The result is this program's output (its one stdout line), read by tests/test_ros2_camera.py.
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
