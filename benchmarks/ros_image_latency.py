"""Camera frame latency through the ROS bridges: image message published -> frame in ``Reading.images``.

    .venv/bin/python benchmarks/ros_image_latency.py [--ros 1 2] [--count 300]

For each case (84x84 and 480x640 ``rgb8`` as ``sensor_msgs/Image``, 84x84 as a PNG
``CompressedImage``) a publisher process sends ``--count`` frames at the case's rate, each stamped
with the wall clock just before ``publish``; this process holds a ``Ros1Robot`` / ``Ros2Robot``
declaring that camera, and records, as each frame becomes the robot's newest (after conversion and
checks, what ``read()`` returns from then on), the wall clock minus the stamp. Both processes are on
one machine, so the wall clocks are the same clock.

ROS 1: a private rosmaster on a free loopback port. ROS 2: the script runs itself again with the ROS 2
venv's interpreter inside ``unshare -n`` (loopback only), Fast DDS, the bridge's image QoS (best
effort, depth 1), once in the ROS 2 tests' environment (``ROS_LOCALHOST_ONLY=1``,
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``) and once with ``ROS_LOCALHOST_ONLY=1`` only and larger
Fast DDS socket buffers (``common.FASTDDS_SOCKET_BUFFERS_XML``). Prints one line per case: median, p90, p99 and max latency in ms, and frames lost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ROS2_PYTHON = REPO / ".venv-ros2" / "bin" / "python"
CASES = [("84x84 rgb8 Image", 84, 84, "raw", 100.0), ("480x640 rgb8 Image", 480, 640, "raw", 30.0),
         ("84x84 rgb8 PNG CompressedImage", 84, 84, "compressed", 100.0)]
"""(label, height, width, transport, publish rate in Hz)."""


def _features(height: int, width: int) -> Any:
    from robolearn.sim2real.robots.base import CameraFeature, RobotFeatures

    return RobotFeatures(name="cam", joints=("a",), command_joints=("a",), command_kind="torque", rate_hz=100.0,
                         position_limits=((-1.0, 1.0),), velocity_limits=(1.0,), effort_limits=(1.0,),
                         default_pose=(0.0,), cameras={"cam": CameraFeature(height, width, "rgb8")})


def publish(args: argparse.Namespace) -> int:
    """The publisher process: ``--count`` frames (plus a few discovery frames) at ``--rate``."""
    from robolearn.sim2real.ros import images

    frame = np.random.default_rng(0).integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
    compressed = args.transport == "compressed"
    if args.ros[0] == 1:
        import rospy
        from sensor_msgs.msg import CompressedImage, Image

        rospy.init_node("image_publisher", anonymous=True, disable_signals=True, argv=[])
        pub = rospy.Publisher(args.topic, CompressedImage if compressed else Image, queue_size=1, tcp_nodelay=True)
        deadline = time.monotonic() + 20
        while pub.get_num_connections() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)

        def stamp(msg: Any) -> None:
            msg.header.stamp = rospy.Time.from_sec(time.time())
    else:
        from sensor_msgs.msg import CompressedImage, Image

        from robolearn.sim2real.ros.ros2 import IMAGE_QOS, Spinner

        spinner = Spinner("image_publisher", "/")
        pub = spinner.node.create_publisher(CompressedImage if compressed else Image, args.topic, IMAGE_QOS)
        deadline = time.monotonic() + 20
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)

        def stamp(msg: Any) -> None:
            ns = time.time_ns()
            msg.header.stamp.sec, msg.header.stamp.nanosec = ns // 1_000_000_000, ns % 1_000_000_000
    time.sleep(0.5)  # the connection settles (ROS 1: the subscriber's TCP link; ROS 2: matching)
    msg = CompressedImage() if compressed else Image()
    if compressed:
        images.fill_compressed(msg, frame, "rgb8", "png")
    else:
        images.fill_image(msg, frame, "rgb8")
    period = 1.0 / args.rate
    start = time.monotonic()
    for k in range(args.count):
        stamp(msg)
        pub.publish(msg)
        delay = start + (k + 1) * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    time.sleep(0.5)
    if args.ros[0] == 2:
        spinner.shutdown()
    return 0


def measure(ros: int, label: str, height: int, width: int, transport: str, rate: float, count: int,
            env: dict[str, str]) -> dict[str, Any]:
    """One case: start the publisher, record each frame's latency, summarise."""
    from robolearn.sim2real.ros.common import Topics

    topics = Topics(namespace="/bench", image_transport={"cam": transport})
    lat: list[float] = []
    if ros == 1:
        from robolearn.sim2real.ros.ros1 import Ros1Robot as Base
        extra: tuple = ()
    else:
        from robolearn.sim2real.ros.ros2 import Ros2Robot as Base
        extra = (SPINNER.node,)

    class Robot(Base):  # type: ignore[misc, valid-type]
        def _accept_image(self, camera: str, msg: Any, compressed: bool, stamp: float) -> None:
            super()._accept_image(camera, msg, compressed, stamp)
            lat.append(time.time() - stamp)  # the frame is the robot's newest from here on

    robot = Robot(_features(height, width), *extra, topics) if ros == 2 else Robot(_features(height, width), topics)
    robot.connect()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", "publish", "--ros", str(ros), "--topic",
           topics.image_topic("cam"), "--height", str(height), "--width", str(width), "--transport", transport,
           "--rate", str(rate), "--count", str(count)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=count / rate + 60)
    robot.disconnect()
    if proc.returncode != 0:
        return {"case": label, "error": proc.stderr[-1500:]}
    ms = np.asarray(lat) * 1e3
    return {"ros": ros, "case": label, "rate_hz": rate, "sent": count, "received": len(ms),
            "median_ms": float(np.median(ms)) if len(ms) else None,
            "p90_ms": float(np.percentile(ms, 90)) if len(ms) else None,
            "p99_ms": float(np.percentile(ms, 99)) if len(ms) else None,
            "max_ms": float(ms.max()) if len(ms) else None}


SPINNER: Any = None


def run_ros1(count: int) -> list[dict[str, Any]]:
    """The ROS 1 cases against a private rosmaster."""
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(tempfile.mkdtemp(prefix="ros1_bench_"))
    (root / "logging.yaml").write_text("version: 1\nincremental: true\n")
    ros_env = {"ROS_MASTER_URI": f"http://127.0.0.1:{port}", "ROS_IP": "127.0.0.1", "ROS_HOSTNAME": "127.0.0.1",
               "ROS_HOME": str(root / "home"), "ROS_LOG_DIR": str(root / "log"),
               "ROS_PYTHON_LOG_CONFIG_FILE": str(root / "logging.yaml")}
    os.environ.update(ros_env)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    master = subprocess.Popen([shutil.which("rosmaster") or "/usr/bin/rosmaster", "--core", "-p", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import rosgraph
        import rospy

        deadline = time.monotonic() + 20
        while True:
            try:
                rosgraph.Master("/probe", master_uri=ros_env["ROS_MASTER_URI"]).getPid()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        rospy.init_node("image_latency", anonymous=True, disable_signals=True, argv=[])
        return [measure(1, *case, count, env) for case in CASES]
    finally:
        master.terminate()
        master.wait(10)


def run_ros2_inner(count: int) -> list[dict[str, Any]]:
    """The ROS 2 cases (already inside the network namespace, in the ROS 2 interpreter)."""
    global SPINNER
    from robolearn.sim2real.ros.ros2 import Spinner

    SPINNER = Spinner("image_latency", "/")
    try:
        return [measure(2, *case, count, dict(os.environ)) for case in CASES]
    finally:
        SPINNER.shutdown()


def run_ros2(count: int, buffers: int = 0) -> list[dict[str, Any]]:
    """Run this script with ``--inner`` in ``unshare -n`` with the ROS 2 venv's interpreter;
    ``buffers`` > 0: Fast DDS socket buffers of that many bytes (``FASTDDS_SOCKET_BUFFERS_XML``)."""
    import tempfile

    from robolearn.sim2real.ros.common import FASTDDS_SOCKET_BUFFERS_XML

    env = {**os.environ, "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp", "ROS_DOMAIN_ID": "43", "ROS_LOCALHOST_ONLY": "1",
           "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if buffers > 0:
        # The discovery range LOCALHOST makes rmw_fastrtps set up its own transport, which ignores
        # the profile's buffers (1 of 60 640x480 frames arrived with it, 60 of 60 without it).
        env.pop("ROS_AUTOMATIC_DISCOVERY_RANGE")
        profile = Path(tempfile.mkdtemp(prefix="fastdds_")) / "buffers.xml"
        profile.write_text(FASTDDS_SOCKET_BUFFERS_XML.format(size=buffers))
        # Fast DDS 3 reads FASTDDS_DEFAULT_PROFILES_FILE, Fast DDS 2 (ROS 2 Humble/Jazzy) FASTRTPS_...
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = env["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(profile)
    inner = f"ip link set lo up && exec {ROS2_PYTHON} {Path(__file__).resolve()} --ros 2 --inner --count {count}"
    out = subprocess.run(["unshare", "-n", "-p", "-f", "--kill-child", "sh", "-c", inner], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return [{"ros": 2, "error": out.stderr[-2000:]}]
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    """Parse the flags and run (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ros", type=int, nargs="+", default=[1, 2])
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--fastdds-buffers", type=int, default=4 << 20,
                   help="ROS 2 is run again with Fast DDS socket buffers of this many bytes")
    p.add_argument("--json", default=None, help="also write the results here (JSON)")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--role", default="measure", choices=["measure", "publish"], help=argparse.SUPPRESS)
    for name, kind in (("topic", str), ("height", int), ("width", int), ("transport", str), ("rate", float)):
        p.add_argument(f"--{name}", type=kind, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "publish":
        return publish(args)
    if args.inner:
        print(json.dumps(run_ros2_inner(args.count)))
        return 0
    results: list[dict[str, Any]] = []
    if 1 in args.ros:
        results += run_ros1(args.count)
    if 2 in args.ros:
        results += run_ros2(args.count)
        for r in run_ros2(args.count, buffers=args.fastdds_buffers):
            r["case"] = f"{r.get('case', '')}, {args.fastdds_buffers >> 20} MiB buffers"
            results.append(r)
    for r in results:
        if "error" in r:
            print(f"ROS {r.get('ros')} {r.get('case', '')}: error\n{r['error']}")
            continue
        if not r["received"]:
            print(f"ROS {r['ros']}  {r['case']:52s} at {r['rate_hz']:5.0f} Hz: no frame arrived (0/{r['sent']})")
            continue
        print(f"ROS {r['ros']}  {r['case']:52s} at {r['rate_hz']:5.0f} Hz: median {r['median_ms']:6.2f} ms  "
              f"p90 {r['p90_ms']:6.2f}  p99 {r['p99_ms']:6.2f}  max {r['max_ms']:6.2f}  "
              f"({r['received']}/{r['sent']} frames)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
