"""``robolearn data import-bag bag=<file> mapping=<yaml> [out=<file.h5>]``: robot logs as datasets.

A ROS 1 ``.bag`` or ROS 2 ``.db3``/``.mcap`` recording becomes a robolearn dataset (the one type
the offline and offline-to-online learners read): the mapping file says which topics hold the
joint states and the commands, the log is resampled onto the task's control ticks
(:func:`robolearn.data.rosbag_io.align`), commands are mapped back to the policy's actions
(``action = (command - offset) / scale``, the inverse of the task's action processing), and the
task's own observation, reward and termination terms are evaluated on the logged states
(:class:`robolearn.envs.relabel.Labeller`). The labelling is recorded in the dataset's metadata:
task, reward and termination terms with their weights, rate, the bag's name and SHA-256, the
mapping.

The mapping file (YAML; ``configs/bag_mappings/cartpole.yaml`` is an example)::

    task: Cartpole-Balance            # registered task whose terms label the log
    rate_hz: null                     # control rate; null: the task's (1 / dt)
    joint_states:
      topic: /robolearn/joint_states  # sensor_msgs/JointState
      joints: null                    # joints in the task's qpos order; null: the task's qpos joints
    commands:
      topic: /robolearn/command       # std_msgs/Float64MultiArray or trajectory_msgs/JointTrajectory
      joints: null                    # command joints in action order; null: the task's action joints
      trajectory_field: null          # a JointTrajectory's field: null: by the task's action kind (effort for torque)
    episode_gap_s: null               # a joint-state gap longer than this starts a new episode
    max_steps: null                   # keep at most this many transitions
    image:                            # optional: a camera topic into the `image` observation group
      topic: null                     # sensor_msgs/Image or sensor_msgs/CompressedImage; null: no images
      encoding: rgb8                  # rgb8, bgr8, mono8 ... (uint8): what the frames are converted to
      steps: []                       # preprocessing (robolearn.spec.image_ops), e.g. [{op: resize, width: 84, height: 84}]
      max_age_s: null                 # refuse a tick whose latest image is older (a stalled camera)

Each tick's frame is the latest image stamped at or before it (uint8 ``[T, H, W, C]``, the
``image`` group; its final observation likewise); ticks before the first image are dropped. The
frames are held in memory at their size after ``steps``: for a long high-resolution log give a
``resize`` step (640x480 RGB is 0.9 MB a frame; 84x84 is 21 kB).

Episodes end as time-outs (the recording was cut) unless a termination term fired. The task's
``qpos`` must be its 1-DoF joints (hinge, slide): a floating base is not in a JointState.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from robolearn.data import Dataset, DatasetMetadata
from robolearn.data.rosbag_io import COMPRESSED_IMAGE, BagError, align, hold_images, read_bag, read_images
from robolearn.envs.relabel import Labeller
from robolearn.spec import PolicySpec
from robolearn.types import DEPLOYABLE_GROUPS, IMAGE
from robolearn.utils.config import ConfigError, to_dataclass


@dataclass
class TopicMapping:
    """One topic of the mapping and the joints read from it."""

    topic: str = ""
    """Topic name in the bag."""
    type: str | None = None
    """Its message type (``sensor_msgs/msg/JointState`` ...; ``None``: whichever the bag says, if
    usable); checked against the bag's."""
    joints: list[str] | None = None
    """Joint names to read, in order; ``None``: the task's."""
    trajectory_field: str | None = None
    """For a JointTrajectory command: ``positions``, ``velocities`` or ``effort`` of its first point;
    ``None``: the field of the task's action kind (torque: ``effort``, joint_pos: ``positions``,
    joint_vel: ``velocities``), as the robolearn bridges send them."""


UINT8_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8", "8UC1", "8UC3")
"""Encodings an imported image may be converted to (the ``image`` group is uint8)."""


@dataclass
class ImageMapping:
    """The camera topic of the mapping (module doc)."""

    topic: str | None = None
    """``sensor_msgs/Image`` or ``sensor_msgs/CompressedImage`` topic; ``None``: no images."""
    type: str | None = None
    """Its message type; ``None``: whichever of the two the bag says."""
    encoding: str = "rgb8"
    """The frames' encoding after decoding (uint8)."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """Preprocessing steps (``robolearn.spec.image_ops.ImagePipeline.from_dict``)."""
    max_age_s: float | None = None
    """The oldest a tick's image may be; ``None``: any."""

    def __post_init__(self) -> None:
        """Refuse a non-uint8 encoding and a non-positive age."""
        if self.encoding not in UINT8_ENCODINGS:
            raise ConfigError(f"mapping.image.encoding: expected one of {list(UINT8_ENCODINGS)} (the image group is "
                              f"uint8), got {self.encoding!r}")
        if self.max_age_s is not None and not self.max_age_s > 0:
            raise ConfigError(f"mapping.image.max_age_s: expected a positive age in seconds, got {self.max_age_s!r}")


@dataclass
class BagMapping:
    """The mapping file (module doc)."""

    task: str = ""
    """Registered task whose terms label the log."""
    rate_hz: float | None = None
    """Control rate; ``None``: the task's."""
    joint_states: TopicMapping = field(default_factory=TopicMapping)
    """The ``sensor_msgs/JointState`` topic."""
    commands: TopicMapping = field(default_factory=TopicMapping)
    """The command topic."""
    episode_gap_s: float | None = None
    """A joint-state gap that ends an episode; ``None``: five control periods (at least 0.25 s)."""
    max_steps: int | None = None
    """At most this many transitions."""
    image: ImageMapping = field(default_factory=ImageMapping)
    """A camera topic for the ``image`` group (none by default)."""

    def __post_init__(self) -> None:
        """Refuse missing or out-of-range fields, naming them."""
        if not self.task:
            raise ConfigError("mapping.task: missing (the registered task whose terms label the log)")
        for name in ("joint_states", "commands"):
            if not getattr(self, name).topic:
                raise ConfigError(f"mapping.{name}.topic: missing")
        if self.commands.trajectory_field not in (None, "positions", "velocities", "effort"):
            raise ConfigError(f"mapping.commands.trajectory_field: expected positions, velocities or effort, "
                              f"got {self.commands.trajectory_field!r}")
        if self.rate_hz is not None and not self.rate_hz > 0:
            raise ConfigError(f"mapping.rate_hz: expected a positive rate, got {self.rate_hz!r}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"mapping.max_steps: expected an integer >= 1, got {self.max_steps!r}")


def read_mapping(mapping: Mapping[str, Any] | str | os.PathLike[str]) -> BagMapping:
    """The checked mapping from a mapping or a YAML file."""
    if not isinstance(mapping, Mapping):
        path = Path(mapping)
        if not path.is_file():
            raise ConfigError(f"mapping: {path} does not exist")
        try:
            mapping = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"mapping {path}: not valid YAML ({exc})") from None
    return to_dataclass(BagMapping, mapping, "mapping")


def _image_decoder(cfg: ImageMapping) -> Any:
    """The decoder :func:`robolearn.data.rosbag_io.read_images` calls: the ROS bridge's converters
    (one implementation for live topics and bags), then the mapping's preprocessing.
    """
    from robolearn.sim2real.ros.images import compressed_to_numpy, image_to_numpy
    from robolearn.spec.image_ops import ImageOpError, ImagePipeline

    try:
        pipeline = ImagePipeline.from_dict(cfg.steps)
    except ImageOpError as exc:
        raise ConfigError(f"mapping.image.steps: {exc}") from None

    def decode(msg: object, msgtype: str, where: str) -> np.ndarray:
        if msgtype == COMPRESSED_IMAGE:
            frame = compressed_to_numpy(msg, cfg.encoding, topic=where)
        else:
            frame = image_to_numpy(msg, cfg.encoding, topic=where)
        try:
            return pipeline(frame[None])[0]
        except ImageOpError as exc:
            raise ValueError(f"{where}: mapping.image.steps: {exc}") from None

    return decode


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def import_bag(bag: str | os.PathLike[str], mapping: Mapping[str, Any] | str | os.PathLike[str],
               out: str | os.PathLike[str] | None = None) -> Dataset:
    """Convert ``bag`` with ``mapping`` into a labelled dataset; write it to ``out`` if given."""
    cfg = read_mapping(mapping)
    bag = Path(bag)
    labeller = Labeller(cfg.task)
    env = labeller.env
    spec = PolicySpec.from_dict(env.policy_spec())
    qpos_joints = [str(j) for j in spec.qpos_joints]
    if env.model.nq != len(qpos_joints) or env.model.nv != len(qpos_joints):
        raise ConfigError(f"mapping.task: {cfg.task} has a floating base or multi-DoF joints (nq {env.model.nq}, "
                          f"nv {env.model.nv}, joints {qpos_joints}); a JointState log cannot give its state")
    joints = cfg.joint_states.joints or qpos_joints
    if sorted(joints) != sorted(qpos_joints):
        raise ConfigError(f"mapping.joint_states.joints: expected the task's joints {qpos_joints} (any order), got {joints}")
    cmd_joints = cfg.commands.joints or [str(j) for j in spec.joint_order]
    if list(cmd_joints) != [str(j) for j in spec.joint_order]:
        raise ConfigError(f"mapping.commands.joints: expected the task's action joints {list(spec.joint_order)} in "
                          f"that order, got {cmd_joints}")
    rate = cfg.rate_hz or spec.control_rate_hz
    kinds = {a.kind for a in spec.actions}
    field = cfg.commands.trajectory_field or {"torque": "effort", "joint_pos": "positions", "joint_vel": "velocities"}[
        sorted(kinds)[0]]
    js, cmds = read_bag(bag, cfg.joint_states.topic, qpos_joints, cfg.commands.topic, cmd_joints, field,
                        expect={cfg.joint_states.topic: cfg.joint_states.type, cfg.commands.topic: cfg.commands.type})
    images = None
    if cfg.image.topic:
        images = read_images(bag, cfg.image.topic, _image_decoder(cfg.image), expect=cfg.image.type)
    log = align(js, cmds, rate, cfg.episode_gap_s, cfg.max_steps,
                not_before=float(images.stamps[0]) if images is not None else None)
    image_age = 0.0
    if images is not None:
        frame_of_tick, image_age = hold_images(images, log.ticks, cfg.image.max_age_s, cfg.image.topic)
        frames = torch.from_numpy(images.frames)
    scale = np.array([v for a in spec.actions for v in a.scale], dtype=np.float64)
    offset = np.array([v for a in spec.actions for v in a.offset], dtype=np.float64)
    if (scale == 0).any():
        raise ConfigError(f"mapping.task: {cfg.task} has an action scale of 0; commands cannot be mapped back")
    actions_all = (log.commands - offset) / scale
    # A command beyond what the policy's actions can express (the robot was driven by something
    # else) is kept at the nearest expressible action; how many were is recorded.
    low = np.array([v for a in spec.actions for v in (a.low or [-math.inf] * a.dim)], dtype=np.float64)
    high = np.array([v for a in spec.actions for v in (a.high or [math.inf] * a.dim)], dtype=np.float64)
    clipped = int(((actions_all < low) | (actions_all > high)).any(axis=1).sum())
    actions_all = np.clip(actions_all, low, high)
    groups = [g for g in spec.observations if g in DEPLOYABLE_GROUPS and not (images is not None and g == IMAGE)]
    obs: dict[str, list[torch.Tensor]] = {g: [] for g in [*groups, *([IMAGE] if images is not None else [])]}
    final: dict[str, list[torch.Tensor]] = {g: [] for g in obs}
    rewards, terminated, timeouts, terms, acts = [], [], [], [], []
    dropped = 0
    s = a = 0
    for n in log.episode_lengths.tolist():
        labels = labeller.label(torch.from_numpy(log.position[s : s + n + 1]), torch.from_numpy(log.velocity[s : s + n + 1]),
                                torch.from_numpy(actions_all[a : a + n]))
        episode_obs = {g: labels.observations[g] for g in groups}
        if images is not None:  # the camera's frames at the episode's n + 1 ticks
            episode_obs[IMAGE] = frames[torch.from_numpy(frame_of_tick[s : s + n + 1])]
        for g, values in episode_obs.items():
            obs[g].append(values[:n])
            final[g].append(values[n:])
        done = labels.terminated
        if bool(done.any()):  # a termination ends the episode there; the rest of the log is dropped
            stop = int(done.nonzero()[0]) + 1
            for g, values in episode_obs.items():
                obs[g][-1] = obs[g][-1][:stop]
                final[g][-1] = values[stop : stop + 1]
            n_kept = stop
            dropped += n - stop
        else:
            n_kept = n
        rewards.append(labels.rewards[:n_kept])
        terms.append(labels.reward_terms[:n_kept])
        term = torch.zeros(n_kept, dtype=torch.bool)
        tout = torch.zeros(n_kept, dtype=torch.bool)
        if n_kept < n or bool(done[n_kept - 1]):
            term[-1] = True
        else:
            tout[-1] = True
        terminated.append(term)
        timeouts.append(tout)
        acts.append(torch.from_numpy(actions_all[a : a + n_kept]))
        s += n + 1
        a += n
    actions = torch.cat(acts)
    mapping_record = asdict(cfg)
    image_record: dict[str, Any] = {}
    if images is None:
        del mapping_record["image"]  # imports without a camera record what they always did
    else:
        image_record = {"image": {
            "topic": cfg.image.topic, "encoding": cfg.image.encoding, "frame_shape": list(images.frames.shape[1:]),
            "frames_read": len(images.frames), "steps": list(cfg.image.steps), "max_age_s": image_age,
            "resampling": "zero-order hold: the latest image stamped at or before each tick",
        }}
    reward_weights = {k: float(t.weight) for k, t in labeller.env.reward_manager.terms.items()}
    metadata = DatasetMetadata(
        task_id=cfg.task,
        collection="rosbag",
        source="rosbag",
        extra={
            "labelling": {
                "by": "the task's own terms on the logged states (robolearn.envs.relabel)",
                "reward_terms": reward_weights,
                "termination_terms": labeller.termination_names,
                "timeouts": "the end of each recorded episode unless a termination fired",
                "rate_hz": rate,
                "state_resampling": "linear interpolation of joint states at control ticks",
                "command_resampling": "zero-order hold: the latest command received by the end of each step",
                "actions_clipped": clipped,
                "steps_dropped_after_terminations": dropped,
            },
            "bag": {"file": bag.name, "sha256": _sha256(bag)},
            "mapping": mapping_record,
            **image_record,
        },
    )
    dataset = Dataset(
        {g: torch.cat(v) for g, v in obs.items()},
        actions,
        torch.cat(rewards).float(),
        torch.cat(terminated),
        torch.cat(timeouts),
        final_observations={g: torch.cat(v) for g, v in final.items()},
        infos={"reward_terms": torch.cat(terms).float()},
        metadata=metadata,
    )
    if out is not None:
        dataset.save(out)
    return dataset


def import_bag_command(argv: list[str]) -> int:
    """``robolearn data import-bag bag=... mapping=... [out=...]``; print what was written."""
    args: dict[str, str] = {}
    for item in argv:
        if "=" not in item:
            raise ConfigError(f"{item!r}: expected key=value (bag=<file> mapping=<yaml> [out=<file.h5>])")
        key, value = item.split("=", 1)
        if key not in ("bag", "mapping", "out"):
            raise ConfigError(f"{key}: not a setting of data import-bag (bag, mapping, out)")
        args[key] = value
    for key in ("bag", "mapping"):
        if key not in args:
            raise ConfigError(f"{key}: missing (robolearn data import-bag bag=<file> mapping=<yaml> [out=<file.h5>])")
    bag = Path(args["bag"])
    out = Path(args.get("out") or bag.with_suffix(".h5"))
    if out.exists():
        raise ConfigError(f"out: {out} exists; the import never overwrites a dataset (give out=<new file>)")
    try:
        data = import_bag(bag, args["mapping"], out)
    except BagError as exc:
        raise ConfigError(str(exc)) from None
    lengths = data.episode_lengths.tolist()
    print(f"robolearn data import-bag: {len(data)} transitions in {len(lengths)} episode(s), "
          f"mean reward {float(data.rewards.mean()):.4f}, written to {out}")
    return 0
