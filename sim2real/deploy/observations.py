"""The observation adapter: a robot's readings to the policy's observation, as in training.

Each term of the policy's observation group is computed from a :class:`Reading` by a *term
reader* chosen by the term's ``source`` (the function that measured it in simulation) and
``params`` (which columns), both recorded in the manifest (policy spec version 3):

========================================  =====================================================
``robolearn.envs.mdp.qpos``               joint positions of ``qpos_joints[start:stop]``
``robolearn.envs.mdp.qvel``               joint velocities of the same joints (1-DoF joints)
``robolearn.envs.mdp.hinge_cos_sin``      ``[cos q, sin q]`` of ``qpos_joints[qpos_index]``
``robolearn.envs.mdp.last_action``        the policy's previous action (zeros at the start)
``robolearn.envs.mdp.command``            the robot's extra reading ``command/<name>``
anything else                             the robot's extra reading named like the term
========================================  =====================================================

The values then go through the same :class:`robolearn.spec.ObservationProcessor` the env uses
(clip, scale, cast, history stacking; no noise: a robot's sensors bring their own), so the robot's
observation is the training observation by construction; ``tests/test_deploy.py`` checks it number
for number against the env. A term no reader can compute is a mismatch, named before the robot
moves (:meth:`ObservationAdapter.mismatches`).

A policy whose input spans several groups (a history encoder reads ``policy`` then ``history``)
gets each group from its own terms through its own processor, concatenated in the manifest's order
(``ExportManifest.obs_groups``). A ``history`` group stacks ``history_length`` frames (the
processor's ``History``); after :meth:`ObservationAdapter.reset` the next frame fills every slot, as
the env fills a world's history at its episode start (``tests/test_history_export.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from robolearn.sim2real.robots.base import Reading, RobotFeatures
from robolearn.spec import ObservationProcessor, ObsTermSpec, PolicySpec

TermReader = Callable[[Reading, np.ndarray, np.ndarray], None]
"""``(reading, last_action, out)``: writes the raw term value into ``out`` ``[dim]`` (float64)."""

MDP = "robolearn.envs.mdp."


@dataclass
class _GroupInput:
    """One group's term readers, the frame they write into and the group's processor."""

    name: str
    readers: list[TermReader]
    processor: ObservationProcessor
    slices: list[np.ndarray]
    views: list[torch.Tensor]


class ObservationAdapter:
    """Readings to the observation of one group of a policy spec, or of several concatenated in
    order (module doc).
    """

    def __init__(self, spec: PolicySpec, group: str | Sequence[str], features: RobotFeatures,
                 dtype: torch.dtype = torch.float32) -> None:
        """Build one reader per term of every group; :meth:`mismatches` lists the terms no reader
        could build. ``group``: one group's name, or the names of the groups the policy's input row
        concatenates, in that order.
        """
        groups = (group,) if isinstance(group, str) else tuple(group)
        if not groups:
            raise ValueError("group: expected one or more observation group names, got none")
        for name in groups:
            if name not in spec.observations:
                raise KeyError(f"observations.{name}: the policy spec has no such group (it has {list(spec.observations)})")
        self.spec = spec
        self.groups = groups
        """The groups whose observations are concatenated, in order."""
        self.group = groups[0]
        """The first (for a single-group policy, the only) group."""
        self.features = features
        self.problems: list[str] = []
        """Why a term cannot be read from this robot (empty: every term can)."""
        self._parts = [self._group_input(name, dtype) for name in groups]
        self.processor = self._parts[0].processor
        """The first group's processor."""
        self.processors = {part.name: part.processor for part in self._parts}
        """Each group's processor, by name."""
        self.dims = [t.dim for t in spec.observations[self.group].terms]

    def _group_input(self, name: str, dtype: torch.dtype) -> _GroupInput:
        """The readers, frame and processor of group ``name`` (problems appended to :attr:`problems`)."""
        gspec = self.spec.observations[name]
        readers: list[TermReader] = []
        for term in gspec.terms:
            reader, problem = self._reader(term)
            if problem:
                self.problems.append(f"observations.{name}.{term.name}: {problem}")
            readers.append(reader)
        # One float64 frame the readers write into; the processor reads its columns as tensor views
        # of the same memory, so a step costs no allocation and no copy before the processor's own.
        frame = np.zeros((1, gspec.frame_dim), dtype=np.float64)
        frame_t = torch.from_numpy(frame)
        return _GroupInput(
            name, readers, ObservationProcessor(name, gspec, dtype=dtype),
            [frame[0, t.start : t.start + t.dim] for t in gspec.terms],
            [frame_t[:, t.start : t.start + t.dim] for t in gspec.terms],
        )

    def mismatches(self) -> list[str]:
        """Every term this robot cannot give (joint missing, extra reading missing, unknown source)."""
        return list(self.problems)

    def _joints(self, term: ObsTermSpec, key_start: str, key_stop: str) -> tuple[np.ndarray, str]:
        """Columns in the robot's joints of ``qpos_joints[start:stop]`` (or a problem)."""
        qj = self.spec.qpos_joints
        start = int(term.params.get(key_start, 0))
        stop = term.params.get(key_stop)
        stop = len(qj) if stop is None else int(stop)
        names = list(qj[start:stop])
        if len(names) != term.dim:
            return np.zeros(0, np.int64), (
                f"reads qpos columns {start}:{stop} ({len(names)} joints of {list(qj)}) but has dim {term.dim}; "
                "a floating base is not a joint reading: publish it as an extra reading named like the term"
            )
        missing = [n for n in names if n not in self.features.joints]
        if missing:
            return np.zeros(0, np.int64), f"needs joints {missing}, which robot {self.features.name!r} does not measure (it has {list(self.features.joints)})"
        return np.array([self.features.joints.index(n) for n in names], dtype=np.int64), ""

    def _reader(self, term: ObsTermSpec) -> tuple[TermReader, str]:
        """The reader of one term and, when it cannot be read, why."""
        reader, problem = self._reader_of(term)
        if problem and not term.params and term.source in (MDP + "qpos", MDP + "qvel", MDP + "hinge_cos_sin"):
            problem += ("; the manifest records no parameters for it (written before policy spec version 3): "
                        "export the run again with this robolearn")
        return reader, problem

    def _reader_of(self, term: ObsTermSpec) -> tuple[TermReader, str]:
        """:meth:`_reader` before the hint about old manifests."""
        source = term.source
        def none(r: Reading, a: np.ndarray, out: np.ndarray) -> None:
            """A placeholder for a term this robot cannot give (the runtime refuses to start)."""
            out[:] = 0.0

        if source in (MDP + "qpos", MDP + "qvel"):
            cols, problem = self._joints(term, "start", "stop")
            if problem:
                return none, problem
            if source.endswith("qpos"):
                return (lambda r, a, out: np.take(r.joint_pos, cols, out=out)), ""
            return (lambda r, a, out: np.take(r.joint_vel, cols, out=out)), ""
        if source == MDP + "hinge_cos_sin":
            index = int(term.params.get("qpos_index", -1))
            qj = self.spec.qpos_joints
            if not 0 <= index < len(qj) or qj[index] not in self.features.joints:
                return none, f"needs joint {qj[index] if 0 <= index < len(qj) else index!r}, which robot {self.features.name!r} does not measure"
            col = self.features.joints.index(qj[index])

            def cos_sin(r: Reading, a: np.ndarray, out: np.ndarray) -> None:
                q = float(r.joint_pos[col])
                out[0] = math.cos(q)
                out[1] = math.sin(q)

            return cos_sin, ""
        if source == MDP + "last_action":
            if term.dim != self.spec.action_dim:
                return none, f"a last-action term of dim {term.dim} for {self.spec.action_dim} actions"
            return (lambda r, a, out: out.__setitem__(slice(None), a)), ""
        key = f"command/{term.params.get('name')}" if source == MDP + "command" else term.name
        width = self.features.extras.get(key)
        if width is None:
            return none, (
                f"computed in simulation by {source or 'an unrecorded function'}; robot {self.features.name!r} "
                f"must offer it as the extra reading {key!r} (it offers {sorted(self.features.extras) or 'none'})"
            )
        if width != term.dim:
            return none, f"the extra reading {key!r} has width {width}, the term has dim {term.dim}"
        return (lambda r, a, out: out.__setitem__(slice(None), r.extras[key])), ""

    def raw_terms(self, reading: Reading, last_action: np.ndarray, group: str | None = None) -> list[torch.Tensor]:
        """Each term's raw value ``[1, dim]`` float64 (before clip and scale) of ``group`` (default:
        the first group).
        """
        part = self._parts[0] if group is None else self._part(group)
        return self._read(part, reading, last_action)

    def _part(self, group: str) -> _GroupInput:
        """The input of ``group`` (a ``KeyError`` naming the adapter's groups otherwise)."""
        for part in self._parts:
            if part.name == group:
                return part
        raise KeyError(f"group: {group!r} is not among this adapter's groups {list(self.groups)}")

    @staticmethod
    def _read(part: _GroupInput, reading: Reading, last_action: np.ndarray) -> list[torch.Tensor]:
        """Run ``part``'s readers into its frame; its term views."""
        for reader, out in zip(part.readers, part.slices, strict=True):
            reader(reading, last_action, out)
        return part.views

    def __call__(self, reading: Reading, last_action: np.ndarray) -> np.ndarray:
        """The processed observation ``[1, D]`` (the network's input dtype) for ``reading``: every
        group's, concatenated in order (each group's history advances by one frame).
        """
        if len(self._parts) == 1:
            part = self._parts[0]
            return part.processor(self._read(part, reading, last_action)).numpy()
        return torch.cat([p.processor(self._read(p, reading, last_action)) for p in self._parts], dim=1).numpy()

    def reset(self) -> None:
        """Start over (an episode start): the next observation refills every group's history."""
        for part in self._parts:
            part.processor.reset()

    def history_state(self) -> list[torch.Tensor | None]:
        """Every group's history window (``None``: no history, or empty), for :meth:`restore_history`.
        The windows are replaced at each step, never written in place, so no copy is needed.
        """
        return [p.processor.history.window if p.processor.history is not None else None for p in self._parts]

    def restore_history(self, state: list[torch.Tensor | None]) -> None:
        """Put back the windows :meth:`history_state` returned (an observation taken without advancing)."""
        for part, window in zip(self._parts, state, strict=True):
            if part.processor.history is not None:
                part.processor.history.window = window
