"""``robolearn deploy run=<dir>|policy=<exported> robot=sim|ros1|ros2 [rate=...] [key=value ...]``.

Runs an exported policy on a robot through the deploy runtime (:mod:`robolearn.sim2real.deploy`):
the fixed-rate loop, the safety layer, telemetry. ``run=<dir>`` takes the run's export
(``<run>/export``, exported first if missing); ``policy=<dir>`` an exported folder. Every setting
is checked, and the policy compared with the robot, before anything moves; a mismatch lists every
difference and exits with status 2.

Robots:

* ``sim``: the policy's own task as a simulated robot (``task=`` for another; ``overrides.<key>=<value>``
  for task-config overrides, ``robolearn.make``'s keywords such as
  ``overrides.observations__image__terms__rgb__params__width=32``; with ``run=``, the run's own
  ``task_overrides`` but its ``episode_length`` come first), real time by default
  (``realtime=false`` steps it as fast as the loop runs, for a quick check);
* ``ros1`` / ``ros2``: the ROS policy node of :mod:`robolearn.sim2real.ros` on the topics under
  ``namespace=``, for the robot described by ``features=<file.json|yaml>``. ROS 2 runs in the
  interpreter of the ROS 2 venv (``.venv-ros2``, made by ``scripts/setup.sh``) or ``ros2_python=``.

Image policies (manifest version 5): each image input reads the robot camera its image term was
rendered from (the simulated robot declares those), or the one ``camera.<input>=<camera>`` names;
``safety.camera_stale_timeout_s`` is how old a frame may be before the step holds.

What it writes: ``<policy dir>/deploy/<UTC time>/`` (a new folder every time: a deployment never
writes into another's) with ``telemetry.h5`` (a robolearn dataset: observations, actions, commands,
interventions, timestamps) and ``summary.json`` (loop rate, jitter, step cost, interventions).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from robolearn.utils.config import ConfigError, to_dataclass

log = logging.getLogger(__name__)

ROBOTS = ("sim", "ros1", "ros2")
"""Robots ``robot=`` accepts."""


@dataclass
class SafetySettings:
    """``safety.*``: the safety layer's settings (:class:`robolearn.sim2real.deploy.safety.SafetyConfig`)."""

    max_delta: float | None = None
    """Largest command change per step (command units); null: none."""
    smoothing: float = 0.0
    """Exponential smoothing weight on the previous command, in [0, 1)."""
    stale_timeout_s: float = 0.1
    """Reading age that makes the layer hold."""
    camera_stale_timeout_s: float = 0.2
    """Camera frame age that makes the layer hold (image policies)."""
    hold_mode: str = "hold"
    """``hold`` or ``damp``."""
    damping: float = 1.0
    """Damping gain of a torque hold and of the exit."""
    ramp_s: float = 0.0
    """Staged start duration (position robots ramp to the default pose; others scale the command up)."""
    exit_s: float = 0.5
    """Damping on exit."""


@dataclass
class DeployConfig:
    """The settings of ``robolearn deploy`` (module doc)."""

    run: str | None = None
    """A training run directory (its export is used; made when missing)."""
    policy: str | None = None
    """An exported policy folder (``manifest.json`` + network)."""
    robot: str = "sim"
    """``sim``, ``ros1`` or ``ros2``."""
    rate: float | None = None
    """Control rate in Hz; null: the manifest's (a different one is refused)."""
    duration: float = 10.0
    """Seconds to run; 0: until Ctrl-C."""
    task: str | None = None
    """Task of the simulated robot; null: the policy's task."""
    realtime: bool = True
    """Simulated robot on the wall clock (false: one step per command, as fast as possible)."""
    seed: int = 0
    """Seed of the simulated robot's world."""
    sampler_seed: int = 0
    """Generative (chunked) policies: seed of the sampler noise the runtime draws."""
    sampler_noise: str = "normal"
    """Generative policies: ``normal`` (standard normal draws) or ``zero`` (deterministic)."""
    format: str = "onnx"
    """Network format: ``onnx`` or ``torchscript``."""
    out: str | None = None
    """Output folder; null: ``<policy dir>/deploy/<UTC time>``."""
    features: str | None = None
    """Robot description (JSON/YAML of RobotFeatures) for ``ros1``/``ros2``."""
    namespace: str = "/robolearn"
    """ROS topic namespace."""
    command_type: str = "float64_multi_array"
    """ROS command message: ``float64_multi_array`` or ``joint_trajectory``."""
    ros2_python: str | None = None
    """Interpreter of the ROS 2 venv; null: ``.venv-ros2/bin/python`` beside the package, if any."""
    camera: dict[str, str] = field(default_factory=dict)
    """Image policies: ``camera.<image input>=<robot camera>`` for an input that does not read the camera
    its image term was rendered from."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Task-config overrides of the simulated robot (``robolearn.make`` keywords)."""
    safety: SafetySettings = field(default_factory=SafetySettings)
    """The safety layer."""

    def __post_init__(self) -> None:
        """Check the choices and ranges, naming the field."""
        if (self.run is None) == (self.policy is None):
            raise ConfigError("run/policy: give exactly one of run=<run dir> or policy=<exported folder>")
        if self.robot not in ROBOTS:
            raise ConfigError(f"robot: expected one of {', '.join(ROBOTS)}, got {self.robot!r}")
        if self.rate is not None and not self.rate > 0:
            raise ConfigError(f"rate: expected a positive number of Hz, got {self.rate!r}")
        if self.duration < 0:
            raise ConfigError(f"duration: expected seconds >= 0, got {self.duration!r}")
        if self.format not in ("onnx", "torchscript"):
            raise ConfigError(f"format: expected onnx or torchscript, got {self.format!r}")
        if self.sampler_noise not in ("normal", "zero"):
            raise ConfigError(f"sampler_noise: expected normal or zero, got {self.sampler_noise!r}")
        if self.command_type not in ("float64_multi_array", "joint_trajectory"):
            raise ConfigError(f"command_type: expected float64_multi_array or joint_trajectory, got {self.command_type!r}")
        if self.robot in ("ros1", "ros2") and not self.features:
            raise ConfigError(f"features: robot={self.robot} needs features=<robot description .json/.yaml>")


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """``key=value`` arguments as a nested mapping (``safety.max_delta=0.1``); values read as YAML."""
    out: dict[str, Any] = {}
    for arg in argv:
        if "=" not in arg:
            raise ConfigError(f"{arg!r}: expected key=value (see robolearn deploy --help)")
        key, text = arg.split("=", 1)
        try:
            value = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            value = text
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{key}: {part!r} is a value, not a section")
        node[parts[-1]] = value
    return out


def read_config(argv: list[str]) -> DeployConfig:
    """The checked :class:`DeployConfig` of a command line."""
    return to_dataclass(DeployConfig, parse_overrides(argv))


def policy_folder(cfg: DeployConfig) -> Path:
    """The exported folder to deploy: ``policy=``, or the run's export (made when missing)."""
    if cfg.policy is not None:
        folder = Path(cfg.policy)
        if not (folder / "manifest.json").is_file():
            raise ConfigError(f"policy: {folder} has no manifest.json (export a run with `robolearn export run=<dir>`)")
        return folder
    run = Path(str(cfg.run))
    if not run.is_dir():
        raise ConfigError(f"run: {run} is not a directory")
    folder = run / "export"
    if not (folder / "manifest.json").is_file():
        from robolearn.cli.commands import export_command

        log.info("deploy: %s has no export yet; exporting it", run)
        status = export_command([f"run={run}"])
        if status != 0 or not (folder / "manifest.json").is_file():
            raise ConfigError(f"run: exporting {run} failed")
    return folder


def run_overrides(cfg: DeployConfig) -> dict[str, Any]:
    """The task overrides the run trained with (its ``config.json``), as ``robolearn.make`` keywords,
    for the simulated robot of ``run=`` on the run's own task: its camera size, decimation (control
    rate) and the rest are the policy's. Not its ``episode_length`` (the robot runs until stopped);
    empty for ``policy=`` or ``task=``; ``overrides.*`` win over them.
    """
    if cfg.run is None or cfg.task is not None:
        return {}
    from robolearn.cli.build import flatten_overrides

    try:
        config = json.loads((Path(cfg.run) / "config.json").read_text())
    except (OSError, ValueError):
        return {}  # the export already read the run; a run without a readable config trained on the plain task
    task_overrides = config.get("task_overrides") if isinstance(config, dict) else None
    if not isinstance(task_overrides, dict):
        return {}
    return {k: v for k, v in flatten_overrides(task_overrides).items() if k != "episode_length"}


def safety_config(cfg: DeployConfig) -> Any:
    """The runtime's :class:`SafetyConfig` from ``safety.*``."""
    from robolearn.sim2real.deploy.safety import SafetyConfig

    data = {k: v for k, v in asdict(cfg.safety).items() if v is not None}
    return SafetyConfig.from_dict(data, "safety")


def out_folder(cfg: DeployConfig, policy: Path) -> Path:
    """A fresh output folder (never an existing one)."""
    if cfg.out is not None:
        out = Path(cfg.out)
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"out: {out} exists and is not empty; a deployment never writes into another's folder")
        return out
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = policy / "deploy" / stamp
    out, k = base, 1
    while out.exists():
        out, k = base.with_name(f"{stamp}-{k}"), k + 1
    return out


def deploy_command(argv: list[str]) -> int:
    """Run ``robolearn deploy`` (module doc); return the exit status."""
    from robolearn.sim2real.deploy.runtime import DeployMismatch

    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        print("settings (key=value; defaults):")
        for name, value in asdict(DeployConfig(policy="-")).items():
            if isinstance(value, dict):
                for sub, v in value.items():
                    print(f"  {name}.{sub}={v}")
                if not value:  # a mapping setting (camera, overrides): empty by default
                    print(f"  {name}.<key>=<value>  (none)")
            else:
                print(f"  {name}={'null' if value is None or name == 'policy' else value}")
        return 0
    try:
        cfg = read_config(argv)
        folder = policy_folder(cfg)
        safety = safety_config(cfg)
        out = out_folder(cfg, folder)
        if cfg.robot == "sim":
            return _deploy_sim(cfg, folder, safety, out)
        return _deploy_ros(cfg, folder, out)
    except (ConfigError, DeployMismatch, ValueError) as exc:
        print(f"robolearn deploy: error: {exc}", file=sys.stderr)
        return 2


def _deploy_sim(cfg: DeployConfig, folder: Path, safety: Any, out: Path) -> int:
    """The policy on a simulated robot in this process, with a progress bar."""
    from tqdm import tqdm

    from robolearn.sim2real.deploy.policy import load_exported
    from robolearn.sim2real.deploy.runtime import DeployRuntime
    from robolearn.sim2real.robots.sim_robot import SimulatedRobot

    policy = load_exported(folder, cfg.format)
    task = cfg.task or policy.manifest.spec.task_id
    overrides = {**run_overrides(cfg), **cfg.overrides}
    robot = SimulatedRobot(task, seed=cfg.seed, realtime=cfg.realtime, overrides=overrides or None)
    # Lockstep: the runtime counts simulated seconds (ramps, timeouts), as the robot does.
    runtime = DeployRuntime(policy, robot, safety, rate_hz=cfg.rate, clock=robot.clock, seed=cfg.sampler_seed,
                            noise=cfg.sampler_noise, cameras=dict(cfg.camera) or None)
    steps = int(round(cfg.duration * runtime.rate_hz)) if cfg.duration > 0 else None
    rewards: list[float] = []
    with robot, tqdm(total=steps, unit="step", desc=f"deploy {task} ({'real time' if cfg.realtime else 'lockstep'})") as bar:
        def on_step(rt: DeployRuntime, flags: int | None) -> None:
            rewards.append(robot.last_reward)
            bar.update(1)
            if len(rewards) % 50 == 0:
                bar.set_postfix(status=rt.status, reward=f"{sum(rewards[-50:]) / 50:.3f}")

        try:
            if cfg.realtime:
                stats = runtime.run(steps=steps, on_step=on_step)
            else:
                stats = _lockstep(runtime, steps, on_step)
        except KeyboardInterrupt:
            stats = runtime.stats
    return _finish(cfg, runtime, stats, out, {"task": task, "return": float(sum(rewards)), "steps": len(rewards),
                                               "resets": robot.resets})


def _lockstep(runtime: Any, steps: int | None, on_step: Any) -> Any:
    """Step the runtime as fast as it goes (a lockstep robot advances one step per command)."""
    k = 0
    while steps is None or k < steps:
        runtime.stats.ticks.append(time.monotonic())
        on_step(runtime, runtime.step())
        k += 1
    runtime.exit()
    return runtime.stats


def _finish(cfg: DeployConfig, runtime: Any, stats: Any, out: Path, extra: dict[str, Any]) -> int:
    """Write telemetry and summary; print where they are."""
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "policy": str(cfg.policy or cfg.run),
        "robot": cfg.robot,
        "rate_hz_target": runtime.rate_hz,
        **({} if not cfg.realtime else stats.summary(runtime.period)),
        "interventions": dict(runtime.safety.counts),
        "final_status": runtime.status,
        **extra,
    }
    if runtime.telemetry is not None and len(runtime.telemetry) >= 2:
        runtime.telemetry.save(out / "telemetry.h5", runtime.spec.task_id, {"deploy": summary})
    tmp = out / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, out / "summary.json")
    print(json.dumps(summary, indent=2))
    print(f"robolearn deploy: telemetry and summary in {out}")
    return 0


def _deploy_ros(cfg: DeployConfig, folder: Path, out: Path) -> int:
    """Check the policy against the described robot, write the node's parameter file (generated from
    the manifest and the robot description) and start the ROS policy node: ROS 1 in this
    interpreter, ROS 2 in the ROS 2 venv's.
    """
    from robolearn.sim2real.deploy.policy import load_exported
    from robolearn.sim2real.deploy.runtime import DeployMismatch, check_robot
    from robolearn.sim2real.ros.common import Topics, node_parameters, write_parameters
    from robolearn.sim2real.ros.node_common import load_features

    try:
        features = load_features(str(cfg.features), "features")
    except SystemExit as exc:
        raise ConfigError(str(exc)) from None
    policy = load_exported(folder, cfg.format)
    manifest = policy.manifest
    problems = check_robot(manifest.spec, manifest.obs_groups, features, cfg.rate, images=manifest.images,
                           cameras=dict(cfg.camera) or None,
                           camera_stale_timeout_s=cfg.safety.camera_stale_timeout_s)
    if problems:
        raise DeployMismatch(problems)
    module = f"robolearn.sim2real.ros.{cfg.robot}_policy_node"
    python = sys.executable
    if cfg.robot == "ros2":
        python = cfg.ros2_python or str(Path(__file__).resolve().parents[2] / ".venv-ros2" / "bin" / "python")
        if not Path(python).exists():
            raise ConfigError(f"ros2_python: {python} does not exist; run scripts/setup.sh or give ros2_python=<python of a ROS 2 env>")
    safety = {k: v for k, v in asdict(cfg.safety).items() if v is not None}
    params = node_parameters(features, Topics(namespace=cfg.namespace, command_type=cfg.command_type),
                             policy=str(folder.resolve()), rate_hz=cfg.rate or manifest.spec.control_rate_hz, safety=safety)
    params["manifest"] = {"task_id": manifest.spec.task_id, "obs_group": manifest.obs_group,
                          "joint_order": [str(j) for j in manifest.spec.joint_order],
                          "control_rate_hz": manifest.spec.control_rate_hz, "action_dim": manifest.spec.action_dim}
    if cfg.camera:  # the node reads `cameras.<input>` as the runtime's image-input -> camera mapping
        params["cameras"] = dict(cfg.camera)
    out.mkdir(parents=True, exist_ok=True)
    param_file = write_parameters(out / "policy_params.yaml", "policy", params, 1 if cfg.robot == "ros1" else 2)
    print(f"robolearn deploy: {cfg.robot} policy node with {param_file}")
    args = [python, "-m", module, "--params", str(param_file), "--telemetry", str(out / "telemetry.h5"),
            "--summary", str(out / "summary.json"), "--duration", str(cfg.duration),
            "--sampler-seed", str(cfg.sampler_seed), "--sampler-noise", cfg.sampler_noise]
    return subprocess.call(args)
