"""An exported policy as a ROS 1 node: the deploy runtime driving a robot behind the bridge's topics.

    python -m robolearn.sim2real.ros.ros1_policy_node --policy <export dir>
        --robot <features .json/.yaml | from-params> [--params <file>] [--namespace /robolearn]
        [--command-type float64_multi_array|joint_trajectory] [--rate HZ] [--safety JSON]
        [--lost-timeout 0.5] [--telemetry out.h5] [--summary out.json] [--duration S] [--wait 30]

The loop is :class:`~robolearn.sim2real.deploy.runtime.DeployRuntime` in the main thread
(absolute deadlines, spin before each), reading a :class:`~robolearn.sim2real.ros.ros1.Ros1Robot`
and sending through the safety layer. The robot's description comes from a file
(:meth:`RobotFeatures.from_dict <robolearn.sim2real.robots.base.RobotFeatures.from_dict>`'s
layout), from the parameter server (``from-params``: the JSON text a robot node sets as its
``~features``, ``<namespace>/robot/features`` unless ``--features-param`` says otherwise) or from
the ``robot`` entry of a parameter file written by :func:`robolearn.sim2real.ros.common.write_parameters`
(``--params``; its ``topics``, ``rate_hz``, ``safety`` and ``policy`` are defaults the flags override).

Topics (under the namespace): ``joint_states`` in, ``command`` out, ``estop`` in (``true`` latches
the runtime's e-stop: only the safe command from then on), ``policy_status`` out at about 10 Hz, a
JSON object: ``status`` (``idle``, ``ramp``, ``run``, ``hold``, ``stale``, ``lost``, ``estop``,
``exit``, ``stopped``), ``steps``, ``sent``, ``missed``, ``interventions`` (counts by kind),
``flags`` (the last step's interventions), ``stale``, ``malformed`` (joint states rejected) and
``malformed_last`` (the newest error), ``estop``.

SIGINT or SIGTERM stops the loop; the runtime damps for the safety layer's ``exit_s``, then the
telemetry is saved (``--telemetry``, a robolearn dataset) and the loop's summary written
(``--summary``). Exit status 2: the policy does not fit the robot (every mismatch logged).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig
from robolearn.sim2real.robots.base import RobotFeatures
from robolearn.sim2real.ros.common import Topics, read_parameters, status_json

log = logging.getLogger("robolearn.sim2real.ros.ros1_policy_node")

NODE = "policy"
"""The node's name under its namespace."""
STATUS_PERIOD_S = 0.1
"""Seconds between ``policy_status`` messages."""
SWITCH_INTERVAL_S = 0.0005
"""Python's thread switch interval in the node. The loop shares the interpreter with rospy's receive
and send threads; at the default 5 ms a thread holding the GIL can keep the loop waiting past its
deadline (measured at 500 Hz on 2 loaded cores: p99 period jitter 0.6-1.2 ms at 5 ms, 0.002-0.003
ms at 0.5 ms; benchmarks/ros_loop.py)."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (module doc)."""
    p = argparse.ArgumentParser(prog="python -m robolearn.sim2real.ros.ros1_policy_node",
                                description="Run an exported policy on a robot behind ROS 1 topics.")
    p.add_argument("--policy", default=None, help="exported policy folder (manifest.json + network)")
    p.add_argument("--robot", default=None,
                   help="robot features file (.json/.yaml), or 'from-params' (the robot node's ~features)")
    p.add_argument("--params", default=None, help="parameter file (common.write_parameters, node 'policy')")
    p.add_argument("--namespace", default=None, help="topic namespace (default /robolearn)")
    p.add_argument("--command-type", default=None, choices=["float64_multi_array", "joint_trajectory"])
    p.add_argument("--rate", type=float, default=None, help="control rate in Hz (default: the manifest's)")
    p.add_argument("--safety", default=None, help="SafetyConfig fields as a JSON object")
    p.add_argument("--lost-timeout", type=float, default=0.5,
                   help="reading age (s) after which the robot counts as lost and nothing is sent")
    p.add_argument("--format", default="onnx", choices=["onnx", "torchscript"])
    p.add_argument("--telemetry", default=None, help="save the telemetry dataset here on exit (.h5)")
    p.add_argument("--summary", default=None, help="write the loop's summary (JSON) here on exit")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until SIGINT/SIGTERM)")
    p.add_argument("--wait", type=float, default=30.0,
                   help="seconds to wait for the robot's features (from-params) and its first reading")
    p.add_argument("--features-param", default=None, help="parameter holding the features JSON (from-params)")
    p.add_argument("--switch-interval", type=float, default=SWITCH_INTERVAL_S,
                   help="Python's thread switch interval in seconds (sys.setswitchinterval)")
    return p


def load_features(source: str, where: str = "--robot") -> RobotFeatures:
    """Robot features from a JSON or YAML file, naming the file when it is unreadable or malformed."""
    path = Path(source)
    if not path.is_file():
        raise SystemExit(f"{where}: {path} is not a file (give a robot features .json/.yaml or 'from-params')")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SystemExit(f"{where}: {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
    return RobotFeatures.from_dict(data, f"{where}={path}")


def features_from_params(rospy: Any, name: str, wait_s: float) -> RobotFeatures:
    """The features JSON text in parameter ``name``, waiting up to ``wait_s`` for a robot to set it."""
    deadline = time.monotonic() + wait_s
    while True:
        if rospy.has_param(name):
            text = rospy.get_param(name)
            try:
                data = json.loads(text) if isinstance(text, str) else text
            except json.JSONDecodeError as exc:
                raise SystemExit(f"--robot from-params: parameter {name} is not JSON: {exc}") from None
            return RobotFeatures.from_dict(data, f"parameter {name}")
        if time.monotonic() > deadline:
            raise SystemExit(f"--robot from-params: parameter {name} was not set within {wait_s:g} s "
                             "(is the robot node running under this namespace?)")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """Run the node (module doc); return the exit status."""
    args = build_parser().parse_args(argv)
    sys.setswitchinterval(args.switch_interval)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="[%(name)s][%(levelname)s] %(asctime)s: %(message)s")
    params: dict[str, Any] = {}
    if args.params:
        params = read_parameters(args.params, NODE)
        if not {"topics", "robot", "policy"} & set(params) and len(params) == 1:
            params = dict(next(iter(params.values())))  # a file written for another node name
    topic_fields = dict(params.get("topics") or {})
    if args.namespace is not None:
        topic_fields["namespace"] = args.namespace
    if args.command_type is not None:
        topic_fields["command_type"] = args.command_type
    try:
        topics = Topics(**topic_fields)
    except TypeError as exc:
        raise SystemExit(f"--params: topics: {exc}") from None
    policy_dir = args.policy or params.get("policy")
    if not policy_dir:
        raise SystemExit("--policy: missing (give the exported policy folder, or 'policy' in --params)")
    rate = args.rate if args.rate is not None else params.get("rate_hz")
    safety_fields = dict(params.get("safety") or {})
    if args.safety:
        try:
            safety_fields.update(json.loads(args.safety))
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--safety: expected a JSON object, got {args.safety!r}: {exc}") from None
    safety = SafetyConfig.from_dict(safety_fields, "safety")

    # rospy fixes a node's namespace when first imported: set it before the bridge imports rospy.
    os.environ["ROS_NAMESPACE"] = topics.namespace
    import rospy
    from std_msgs.msg import Bool, String

    from robolearn.sim2real.ros import ros1

    ros1.init_node(NODE)
    ros1.log_to_stderr()
    if args.robot == "from-params":
        name = args.features_param or f"{topics.namespace.rstrip('/')}/robot/features"
        features = features_from_params(rospy, name, args.wait)
    elif args.robot:
        features = load_features(args.robot)
    elif params.get("robot"):
        features = RobotFeatures.from_dict(params["robot"], f"{args.params}: robot")
    else:
        raise SystemExit("--robot: missing (a features file, 'from-params', or 'robot' in --params)")
    for key, value in params.items():
        rospy.set_param(f"~{key}", value)

    policy = load_exported(policy_dir, args.format)
    robot = ros1.Ros1Robot(features, topics)
    try:
        runtime = DeployRuntime(policy, robot, safety, rate_hz=float(rate) if rate else None,
                                lost_timeout_s=args.lost_timeout)
    except DeployMismatch as exc:
        log.error("%s", exc)
        rospy.signal_shutdown("policy does not fit the robot")
        return 2

    status_pub = rospy.Publisher(topics.name(topics.policy_status), String, queue_size=10)
    last = {"flags": 0, "published": -1.0}

    def publish_status(rt: DeployRuntime) -> None:
        """The status message (module doc)."""
        counts = getattr(rt.safety, "counts", {})
        status_pub.publish(String(status_json(
            status=rt.status, steps=len(rt.stats.ticks), sent=rt.stats.sent, missed=rt.stats.missed,
            interventions={str(k): int(v) for k, v in dict(counts).items()},
            flags=_flag_names(last["flags"]), stale=rt.status in ("stale", "lost"),
            malformed=robot.rejected.count, malformed_last=robot.rejected.last_error,
            readings=robot.received, estop=rt.safety.state == "estop", monotonic=time.monotonic(),
        )))

    def on_step(rt: DeployRuntime, flags: int | None) -> None:
        """Publish the status every :data:`STATUS_PERIOD_S` (from the loop: no thread competes with it)."""
        last["flags"] = int(flags or 0)
        if stopping.is_set():  # a signal between the check before run() and run() clearing its flag
            rt.stop()
        now = time.monotonic()
        if now - last["published"] >= STATUS_PERIOD_S:
            last["published"] = now
            publish_status(rt)

    def on_estop(msg: Any) -> None:
        """Latch the runtime's e-stop on ``true``."""
        if msg.data:
            runtime.estop(f"{topics.name(topics.estop)} = true")

    stopping = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        """Stop the loop (it damps, then the telemetry is saved), or the wait before it."""
        log.info("%s: %s; stopping", NODE, signal.Signals(signum).name)
        stopping.set()
        runtime.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    robot.connect()
    estop_sub = rospy.Subscriber(topics.name(topics.estop), Bool, on_estop, queue_size=10)
    log.info("%s: %s on robot %r at %g Hz (joint states %s, commands %s as %s)", NODE, policy_dir, features.name,
             runtime.rate_hz, topics.name(topics.joint_states), topics.name(topics.command), topics.command_type)
    if not robot.wait_ready(args.wait, stopping) and not stopping.is_set():
        log.warning("%s: no reading or no command subscriber after %g s; starting anyway "
                    "(idle until readings come)", NODE, args.wait)
    try:
        if stopping.is_set():
            stats = runtime.stats
            runtime.status = "stopped"
        else:
            stats = runtime.run(duration_s=args.duration if args.duration > 0 else None, on_step=on_step)
    finally:
        publish_status(runtime)
        estop_sub.unregister()
    summary = {**stats.summary(runtime.period), "rate_hz_target": runtime.rate_hz, "final_status": runtime.status,
               "interventions": {str(k): int(v) for k, v in dict(getattr(runtime.safety, "counts", {})).items()},
               "malformed": robot.rejected.count, "readings": robot.received}
    log.info("%s: stopped: %s", NODE, json.dumps(summary))
    if args.telemetry and runtime.telemetry is not None:
        if len(runtime.telemetry) >= 2:
            runtime.telemetry.save(args.telemetry, policy.manifest.spec.task_id, {"deploy": summary})
            log.info("%s: telemetry (%d steps) in %s", NODE, len(runtime.telemetry), args.telemetry)
        else:
            log.warning("%s: %d step(s) recorded; no telemetry written", NODE, len(runtime.telemetry))
    if args.summary:
        ros1.write_text_atomic(args.summary, json.dumps(summary, indent=2))
    robot.disconnect()
    rospy.signal_shutdown("policy node finished")
    return 0


def _flag_names(flags: int) -> list[str]:
    """Names of the intervention bits set in ``flags``."""
    return [f.name for f in Intervention if f.value and flags & f.value and f.name]


if __name__ == "__main__":
    sys.exit(main())
