"""Policy latency at batch 1 inside the deploy runtime (BENCHMARKS.md, "Deployment").

One runtime step on a robot that answers at once (an in-memory bench robot: readings ready, sends
free), so the figure is the runtime's own cost: observation adapter (the training processors),
the network in ONNX Runtime (one thread), the action processor and the safety layer. Each stage is
also timed alone (100 calls in a row, warm) and in sequence (one pass through the stages per
step, as the loop runs them), side by side in the same process. The networks are MLPs of the given width over
HalfCheetah's 17-D observation and 6-D action, exported with ``robolearn.export.export_policy``.

With ``--image`` it also times an **image policy** (issue 16): DrQ-v2's default actor (the 4-layer,
32-channel CNN encoder over 84x84 RGB frames stacked 3 deep, ``[1, 84, 84, 9]`` uint8, then the
50-feature trunk and the 1024x1024 head), exported with ``export_image_policy`` for
``Cartpole-Swingup-Pixels``, on a bench robot whose 84x84 ``rgb8`` camera has a new frame every
step; stages: the image adapter (frame pushed onto the stack; the pipeline is the identity), the
network in ONNX Runtime (one thread), the safety layer (camera age check included).

    python benchmarks/deploy_latency.py [--steps 20000] [--widths 256 64] [--history 1] [--image [--image-steps 2000]]

Target (issue 12): p99 <= 50 us for a 256x256 MLP.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import robolearn
from robolearn.export import export_policy
from robolearn.export.vision import export_image_policy, image_input_of
from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployRuntime
from robolearn.sim2real.deploy.safety import SafetyConfig
from robolearn.sim2real.robots.base import CameraFeature, CameraFrame, Reading, Robot, RobotFeatures


class BenchRobot(Robot):
    """A robot whose readings are ready and whose sends cost nothing (the runtime's cost alone)."""

    def __init__(self, features: RobotFeatures) -> None:
        """Fixed random joint state; the reading's stamp follows the clock so it never goes stale."""
        self.features = features
        rng = np.random.default_rng(0)
        n = len(features.joints)
        self.reading = Reading(0.0, rng.uniform(-0.1, 0.1, n), rng.uniform(-0.5, 0.5, n))

    def connect(self) -> None:
        """Nothing to open."""

    def disconnect(self) -> None:
        """Nothing to close."""

    @property
    def is_connected(self) -> bool:
        """Always."""
        return True

    def read(self) -> Reading:
        """The fixed reading, stamped now (its camera frames too: every step sees a new frame)."""
        now = time.monotonic()
        self.reading.stamp = now
        for frame in self.reading.images.values():
            frame.stamp = now
        return self.reading

    def send(self, command: np.ndarray) -> np.ndarray:
        """Accept."""
        return command


def mlp(obs_dim: int, act_dim: int, width: int) -> nn.Module:
    """A two-hidden-layer ELU MLP with a tanh head (the shape of the exported PPO/SAC actors)."""
    return nn.Sequential(nn.Linear(obs_dim, width), nn.ELU(), nn.Linear(width, width), nn.ELU(),
                         nn.Linear(width, act_dim), nn.Tanh())


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    """p50/p99/max in microseconds."""
    a = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return {"p50_us": round(float(np.percentile(a, 50)), 2), "p99_us": round(float(np.percentile(a, 99)), 2),
            "max_us": round(float(a.max()), 1)}


def bench(width: int, steps: int, history: int, folder: Path) -> dict[str, object]:
    """Time the runtime step and each stage for one width."""
    overrides = {"observations__policy__history_length": history} if history > 1 else {}
    env = robolearn.make("HalfCheetah", 1, seed=0, **overrides)
    spec = env.policy_spec()
    obs_dim = int(np.prod(spec["observations"]["policy"]["shape"]))
    torch.manual_seed(0)
    export_policy(mlp(obs_dim, spec["action_dim"], width), spec, folder, ("onnx",), parity_samples=16)
    policy = load_exported(folder)
    qj = [j for j in spec["qpos_joints"]]
    features = RobotFeatures("bench", tuple(qj), tuple(spec["joint_order"]), "torque", float(spec["control_rate_hz"]),
                             tuple((-np.inf, np.inf) for _ in spec["joint_order"]), tuple(30.0 for _ in spec["joint_order"]),
                             tuple(1.0 for _ in spec["joint_order"]), tuple(0.0 for _ in spec["joint_order"]))
    robot = BenchRobot(features)
    runtime = DeployRuntime(policy, robot, SafetyConfig(ramp_s=0.0, max_delta=0.5, smoothing=0.2), record=False)
    reading = robot.read()
    obs, action, command = runtime.act(reading)
    stages = {
        "runtime step (read+adapter+onnx+action+safety+send)": runtime.step,
        "observation adapter": lambda: runtime.adapter(reading, runtime.last_action),
        "onnx runtime": lambda: policy(obs),
        "action processor": lambda: runtime.action_processor.apply_numpy(action),
        "safety layer": lambda: runtime.safety.filter(command, reading),
    }
    for fn in stages.values():  # warm-up
        for _ in range(500):
            fn()
    samples: dict[str, list[int]] = {name: [] for name in stages}
    # Interleaved rounds: each stage sees the same machine load.
    for _ in range(steps // 100):
        for name, fn in stages.items():
            s = samples[name]
            for _ in range(100):
                t = time.perf_counter_ns()
                fn()
                s.append(time.perf_counter_ns() - t)
    # The same stages timed inside one pass, in the order a step runs them: each sees the caches the
    # previous stage left (ONNX Runtime after torch after NumPy), as in the loop.
    flow: dict[str, list[int]] = {k: [] for k in ("read", "observation adapter", "onnx runtime", "action processor",
                                                  "safety layer", "send")}
    clock = time.perf_counter_ns
    for _ in range(steps):
        t0 = clock()
        r = robot.read()
        t1 = clock()
        o = runtime.adapter(r, runtime.last_action)
        t2 = clock()
        a = policy(o).reshape(-1)
        t3 = clock()
        c = runtime.action_processor.apply_numpy(a)
        t4 = clock()
        safe, _ = runtime.safety.filter(c, r)
        t5 = clock()
        robot.send(safe)
        t6 = clock()
        for name, lo, hi in (("read", t0, t1), ("observation adapter", t1, t2), ("onnx runtime", t2, t3),
                             ("action processor", t3, t4), ("safety layer", t4, t5), ("send", t5, t6)):
            flow[name].append(hi - lo)
    return {"width": width, "obs_dim": obs_dim, "history": history,
            "stages": {name: percentiles(s) for name, s in samples.items()},
            "in_sequence": {name: percentiles(s) for name, s in flow.items()}}


def bench_image(steps: int, folder: Path) -> dict[str, object]:
    """Time the runtime step and its stages for DrQ-v2's default pixel actor (module doc)."""
    from robolearn.algos.drqv2 import DrQV2, DrQV2Config

    env = robolearn.make("Cartpole-Swingup-Pixels", 1, seed=0)
    spec = env.policy_spec()
    cfg = DrQV2Config()
    agent = DrQV2(env.obs_dims, env.action_dim, cfg, action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)
    image = image_input_of(agent.encoder)
    export_image_policy(agent.policy_module(), spec, folder, ("onnx",), images=[image], obs_groups=(), parity_samples=4)
    env.close()
    policy = load_exported(folder)
    joints = tuple(spec["qpos_joints"])
    cmd = tuple(spec["joint_order"])
    h, w, _ = image.frame_shape
    features = RobotFeatures("bench", joints, cmd, "torque", float(spec["control_rate_hz"]),
                             tuple((-np.inf, np.inf) for _ in cmd), tuple(30.0 for _ in cmd), tuple(1.0 for _ in cmd),
                             tuple(0.0 for _ in cmd), cameras={"fixed": CameraFeature(h, w, "rgb8")})
    robot = BenchRobot(features)
    rng = np.random.default_rng(1)
    robot.reading.images["fixed"] = CameraFrame(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), 0.0)
    runtime = DeployRuntime(policy, robot, SafetyConfig(ramp_s=0.0, max_delta=0.5, smoothing=0.2), record=False)
    assert runtime.images is not None
    reading = robot.read()
    obs, action, command = runtime.act(reading)
    stacks = [x.copy() for x in runtime.images(reading)]
    stages = {
        "runtime step (read+images+onnx+action+safety+send)": runtime.step,
        "image adapter (push one 84x84x3 frame)": lambda: runtime.images(reading),
        "onnx runtime": lambda: policy(obs, images=stacks),
        "action processor": lambda: runtime.action_processor.apply_numpy(action),
        "safety layer": lambda: runtime.safety.filter(command, reading),
    }
    for fn in stages.values():  # warm-up
        for _ in range(50):
            fn()
    samples: dict[str, list[int]] = {name: [] for name in stages}
    rounds = max(1, steps // 100)
    for _ in range(rounds):
        for name, fn in stages.items():
            s = samples[name]
            for _ in range(100):
                t = time.perf_counter_ns()
                fn()
                s.append(time.perf_counter_ns() - t)
    return {"policy": "drqv2 default actor, image [1, 84, 84, 9] uint8", "image_shape": list(image.shape),
            "frames": image.frames, "stages": {name: percentiles(s) for name, s in samples.items()}}


def main() -> int:
    """Run the widths and print one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 64])
    parser.add_argument("--history", type=int, default=1)
    parser.add_argument("--image", action="store_true", help="also time DrQ-v2's default 84x84x9 image actor")
    parser.add_argument("--image-steps", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import onnxruntime

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for width in args.widths:
            results.append(bench(width, args.steps, args.history, Path(tmp) / f"w{width}"))
        if args.image:
            results.append(bench_image(args.image_steps, Path(tmp) / "image"))
    print(json.dumps({"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                      "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "steps": args.steps,
                      "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
