"""Telemetry of a deployment, kept as a robolearn dataset.

Every control step records what the policy saw (its processed observation), what it chose (the raw
action, the dataset's ``actions``, so the log can train a policy of the same interface), what was
sent after the safety layer and what the robot says it applied, the safety interventions (bit
flags of :class:`robolearn.sim2real.deploy.safety.Intervention`), the joint state and the times:
reading stamp, loop tick and send time. Logs carry no reward: ``rewards`` are zero and the dataset's
metadata says so (``extra["rewards"] = "unlabelled"``); label them with the task's terms offline.
Steps in which the policy did not run (staged start, hold, e-stop) are kept and flagged, so a
learner can mask them (``infos/policy_active``).

An image policy's frames are not kept (a stack of 84x84x9 bytes at 100 Hz is 6 MB/s); each camera's
frame age at every step is (``infos/camera_age.<camera>``, ``/`` in a name written ``_``; seconds, ``inf`` before its first
frame), beside the ``STALE_CAMERA`` flags. The ``policy`` observation of a pixels-only policy is
its empty ``obs`` row.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data import Dataset, DatasetMetadata


class Telemetry:
    """Per-step records in growing NumPy lists; :meth:`to_dataset` makes the dataset."""

    FIELDS = ("stamp", "tick", "sent_at", "interventions", "policy_active")
    """Scalar columns recorded every step."""

    def __init__(self, obs_dim: int, action_dim: int, command_dim: int, joint_dim: int,
                 cameras: Sequence[str] = ()) -> None:
        """Empty records for the given widths; ``cameras``: the cameras whose frame age is recorded."""
        self.obs: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.commands: list[np.ndarray] = []
        self.sent: list[np.ndarray] = []
        self.joint_pos: list[np.ndarray] = []
        self.joint_vel: list[np.ndarray] = []
        self.scalars: dict[str, list[float]] = {k: [] for k in self.FIELDS}
        self.cameras = tuple(cameras)
        # HDF5 reads "/" in a key as a group: a ROS-style camera name is flattened.
        self._age_keys = [f"camera_age.{name.replace('/', '_')}" for name in self.cameras]
        for key in self._age_keys:
            self.scalars[key] = []
        self.widths = (obs_dim, action_dim, command_dim, joint_dim)

    def __len__(self) -> int:
        """Steps recorded."""
        return len(self.obs)

    def record(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        command: np.ndarray,
        sent: np.ndarray,
        joint_pos: np.ndarray,
        joint_vel: np.ndarray,
        *,
        stamp: float,
        tick: float,
        sent_at: float,
        interventions: int,
        policy_active: bool,
        camera_ages: Sequence[float] = (),
    ) -> None:
        """Append one step (arrays are copied); ``camera_ages``: seconds per recorded camera, in order."""
        self.obs.append(np.array(obs, dtype=np.float32).reshape(-1))
        self.actions.append(np.array(action, dtype=np.float32).reshape(-1))
        self.commands.append(np.array(command, dtype=np.float64).reshape(-1))
        self.sent.append(np.array(sent, dtype=np.float64).reshape(-1))
        self.joint_pos.append(np.array(joint_pos, dtype=np.float64).reshape(-1))
        self.joint_vel.append(np.array(joint_vel, dtype=np.float64).reshape(-1))
        s = self.scalars
        s["stamp"].append(stamp)
        s["tick"].append(tick)
        s["sent_at"].append(sent_at)
        s["interventions"].append(float(interventions))
        s["policy_active"].append(float(policy_active))
        for key, age in zip(self._age_keys, camera_ages, strict=True):
            s[key].append(float(age))

    def to_dataset(self, task_id: str = "", extra: dict[str, Any] | None = None) -> Dataset:
        """The records as one episode (cut by the stop: a time-out); ``None`` steps are not possible."""
        n = len(self)
        if n < 2:
            raise ValueError(f"telemetry: {n} step(s) recorded; a dataset needs at least 2")
        obs = np.stack(self.obs)
        # Step t's next observation is step t+1's: the last recorded step is the final observation.
        observations = obs[:-1]
        final = obs[-1:]
        timeouts = np.zeros(n - 1, dtype=bool)
        timeouts[-1] = True
        infos = {
            "command": np.stack(self.commands)[:-1],
            "sent": np.stack(self.sent)[:-1],
            "joint_pos": np.stack(self.joint_pos)[:-1],
            "joint_vel": np.stack(self.joint_vel)[:-1],
            **{k: np.asarray(v[:-1], dtype=np.float64) for k, v in self.scalars.items()},
        }
        infos["interventions"] = infos["interventions"].astype(np.int64)
        infos["policy_active"] = infos["policy_active"].astype(bool)
        meta = DatasetMetadata(
            task_id=task_id,
            collection="deploy-telemetry",
            source="robolearn-deploy",
            extra={"rewards": "unlabelled", **(extra or {})},
        )
        return Dataset(
            {"policy": observations},
            np.stack(self.actions)[:-1],
            np.zeros(n - 1, dtype=np.float32),
            np.zeros(n - 1, dtype=bool),
            timeouts,
            final_observations={"policy": final},
            infos=infos,
            metadata=meta,
        )

    def save(self, path: str | os.PathLike[str], task_id: str = "", extra: dict[str, Any] | None = None) -> Path:
        """Write :meth:`to_dataset` to ``path`` (the dataset's own format, written atomically)."""
        path = Path(path)
        self.to_dataset(task_id, extra).save(path)
        return path
