"""Offline datasets: one episode-structured type every reader produces and every offline learner samples.

Layout (DESIGN.md, "Dataset"). A :class:`Dataset` holds N transitions as flat arrays, episodes
stored contiguously one after another:

* ``observations[group]`` ``[N, ...]`` (at least ``policy``), ``actions`` ``[N, A]``,
  ``rewards`` ``[N]``, ``terminals`` and ``timeouts`` ``[N]`` bool, ``infos[name]`` ``[N, ...]``
  (privileged state, randomisation draws, timestamps; ``infos[name][t]`` goes with
  ``observations[t]``);
* ``episode_starts`` / ``episode_lengths`` ``[E]``, derived from the flags.

Episode ends. An episode ends exactly at a step flagged ``terminals`` (the MDP ended: never
bootstrap) or ``timeouts`` (a time limit, or the collection, cut it: bootstrap from the true next
observation); no other step carries a flag, and the last transition always carries one. A step
flagged both is a terminal. Nothing bootstraps across a time-out, because the next stored row
belongs to a different episode.

Next observations. Inside an episode the next observation of step ``t`` is ``observations[t + 1]``;
the one after an episode's last step is ``final_observations[group][e]`` (``[E, ...]``, one per
episode, as Minari stores ``T + 1`` observations per episode). This costs E extra rows instead of
a second ``[N, ...]`` copy. A source whose next observations are *not* the following rows (noisy
or re-rendered data) keeps a full ``next_observations[group]`` ``[N, ...]`` instead, and it then
wins. Readers that cannot know the observation after a terminal step (D4RL files without
``next_observations``) store a copy of the last observation there; it is never bootstrapped from.

Images. A ``uint8`` observation group of frames ``[N, H, W, C]`` or ``[N, C, H, W]`` is an *image
group* (the ``image`` group must be one): it stays ``uint8`` (converted to float only inside a
network), and :attr:`Dataset.image_layouts` records each one's frame shape, dimension order
(``HWC``/``CHW``) and colour (:class:`ImageLayout`), which files keep. Frames may live in a file and be read on
demand (:class:`FrameSource`, ``Dataset.load(..., lazy_images=True)``), so a sampled batch reads only
its own frames.

Sampling runs on the dataset's device with a caller-owned ``torch.Generator``: uniform
transitions (:meth:`Dataset.sample`), n-step returns (:meth:`Dataset.sample_nstep`), and windows or
action chunks that never cross an episode end (:meth:`Dataset.sample_windows`). Monte-Carlo
returns-to-go (:meth:`Dataset.returns_to_go`, Cal-QL) and per-episode returns come from the same arrays.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robolearn.data.validation import (
    DatasetError,
    as_flags,
    as_tensor,
    check_array,
    check_expectations,
    check_groups,
    feature_dim,
)
from robolearn.types import IMAGE, POLICY, Batch, Obs
from robolearn.utils.version import VERSION

IMAGE_LAYOUTS: tuple[str, ...] = ("HWC", "CHW")
"""Dimension orders of an image frame: channels last (cameras, OpenCV, Minari) or first (torch
convolutions); the same words as the export manifest's ``ImageInputSpec.layout``."""

IMAGE_COLORS: dict[str, int] = {"": 0, "rgb": 3, "bgr": 3, "rgba": 4, "gray": 1}
"""Channel meanings and channels per frame (``""``: not declared); a group of ``k`` stacked frames
has ``k`` times as many channels."""


@dataclass(frozen=True)
class ImageLayout:
    """How an image observation group stores one frame: shape, dtype, dimension order, channel colours."""

    shape: tuple[int, ...]
    """One frame's shape as stored, ``(H, W, C)`` or ``(C, H, W)``."""
    layout: str = "HWC"
    """Dimension order, one of :data:`IMAGE_LAYOUTS`."""
    color: str = ""
    """What the channels hold, in storage order (a key of :data:`IMAGE_COLORS`: ``"rgb"``, ``"bgr"``,
    ``"rgba"``, ``"gray"``); ``""`` when the writer did not say."""
    dtype: str = "uint8"
    """Element type; image groups are always ``uint8``."""

    def __post_init__(self) -> None:
        """Reject an unknown layout or colour, a shape that is not three positive sizes, or a channel
        count that is not a whole number of frames of the colour.
        """
        object.__setattr__(self, "shape", tuple(int(x) for x in self.shape))
        if self.layout not in IMAGE_LAYOUTS:
            raise DatasetError(f"image layout: expected one of {list(IMAGE_LAYOUTS)}, got {self.layout!r}")
        if len(self.shape) != 3 or min(self.shape) < 1:
            raise DatasetError(
                f"image layout shape: expected 3 positive sizes ({self.layout}), got {self.shape}"
            )
        if self.color not in IMAGE_COLORS:
            raise DatasetError(
                f"image layout color: expected one of {list(IMAGE_COLORS)}, got {self.color!r}"
            )
        if self.color and self.num_channels % IMAGE_COLORS[self.color]:
            raise DatasetError(
                f"image layout color: {self.num_channels} channels are not whole {self.color!r} frames "
                f"({IMAGE_COLORS[self.color]} channels each)"
            )
        if self.dtype != "uint8":
            raise DatasetError(f"image layout dtype: image groups are uint8, got {self.dtype!r}")

    @property
    def num_channels(self) -> int:
        """C."""
        return self.shape[2] if self.layout == "HWC" else self.shape[0]

    @property
    def height(self) -> int:
        """H."""
        return self.shape[0] if self.layout == "HWC" else self.shape[1]

    @property
    def width(self) -> int:
        """W."""
        return self.shape[1] if self.layout == "HWC" else self.shape[2]

    @property
    def frames(self) -> int | None:
        """Stacked frames per observation (channels / channels per colour); None without a colour."""
        return self.num_channels // IMAGE_COLORS[self.color] if self.color else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (how files store it)."""
        return {"shape": list(self.shape), "layout": self.layout, "color": self.color, "dtype": self.dtype}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ImageLayout:
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(
                shape=tuple(raw["shape"]),
                layout=str(raw.get("layout", "HWC")),
                color=str(raw.get("color", "")),
                dtype=str(raw.get("dtype", "uint8")),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, DatasetError):
                raise
            raise DatasetError(f"image layout: cannot parse {dict(raw)!r} ({e})") from e

    @classmethod
    def infer(cls, frame_shape: tuple[int, ...], color: str = "") -> ImageLayout:
        """Guess the layout from a frame shape: the channel axis is the smaller of the first and the
        last size (``(84, 84, 3)`` -> HWC, ``(9, 84, 84)`` -> CHW); a tie is HWC. Pass a layout
        explicitly when the guess can be wrong (e.g. ``(4, 4, 4)``).
        """
        layout = "CHW" if len(frame_shape) == 3 and frame_shape[0] < frame_shape[-1] else "HWC"
        return cls(tuple(frame_shape), layout, color)


class FrameSource:
    """Image frames ``[N, ...]`` kept outside memory and read on demand (by a file reader).

    The :class:`Dataset` accepts one in place of an image group's tensor and indexes it like one:
    ``source[idx]`` with an int, a slice or an integer tensor of any shape returns a ``uint8``
    tensor on :attr:`device`, reading only the frames asked for. :attr:`frames_read` counts the
    frames read from storage (each distinct index of a request once), so a caller can see what a
    batch cost. Subclasses implement :meth:`_read` and :meth:`to`.
    """

    shape: torch.Size
    """``[N, *frame]``."""
    dtype: torch.dtype = torch.uint8
    """Always ``torch.uint8``."""
    device: torch.device
    """Device the returned tensors are put on."""
    frames_read: int
    """Frames read from storage so far."""

    def __init__(self, shape: tuple[int, ...], device: str | torch.device = "cpu") -> None:
        """``shape``: ``[N, *frame]`` of the stored frames; ``device``: where reads are returned."""
        self.shape = torch.Size(shape)
        self.device = torch.device(device)
        self.frames_read = 0

    def _read(self, rows: np.ndarray) -> np.ndarray:
        """The frames at ``rows`` (sorted, unique, in range) as a ``uint8`` array ``[len(rows), *frame]``."""
        raise NotImplementedError

    def to(self, device: str | torch.device) -> FrameSource:
        """The same frames, returned on ``device``."""
        raise NotImplementedError

    def dim(self) -> int:
        """Number of dims, like ``Tensor.dim``."""
        return len(self.shape)

    def is_floating_point(self) -> bool:
        """False: frames are uint8."""
        return False

    def is_complex(self) -> bool:
        """False: frames are uint8."""
        return False

    def __len__(self) -> int:
        """N."""
        return int(self.shape[0])

    def __getitem__(self, idx: int | slice | torch.Tensor) -> torch.Tensor:
        """Frames at ``idx`` (int, slice with step 1 or more, or integer tensor), read from storage."""
        n = len(self)
        if isinstance(idx, slice):
            rows = np.arange(*idx.indices(n))  # never an arange(N): N can be millions of frames
            out_shape: tuple[int, ...] = (len(rows),)
        elif isinstance(idx, (int, np.integer)):
            if not -n <= int(idx) < n:
                raise IndexError(f"FrameSource: index {int(idx)} out of range for {n} frames")
            rows = np.array([int(idx) % n])
            out_shape = ()
        else:
            t = torch.as_tensor(idx)
            if t.dtype == torch.bool or t.is_floating_point():
                raise TypeError(f"FrameSource: index with integers or a slice, got a {t.dtype} tensor")
            rows = t.reshape(-1).cpu().numpy().astype(np.int64)
            out_shape = tuple(t.shape)
            if rows.size and (rows.min() < -n or rows.max() >= n):
                raise IndexError(f"FrameSource: index out of range for {n} frames")
            rows = rows % n if rows.size else rows
        uniq, inverse = np.unique(rows, return_inverse=True)
        data = self._read(uniq) if uniq.size else np.empty((0, *self.shape[1:]), np.uint8)
        self.frames_read += int(uniq.size)
        frames = torch.from_numpy(np.ascontiguousarray(data[inverse.reshape(-1)]))
        return frames.reshape(out_shape + tuple(self.shape[1:])).to(self.device)

    def materialize(self) -> torch.Tensor:
        """Every frame as one tensor on :attr:`device` (reads the whole group)."""
        return self[:]

    def __repr__(self) -> str:
        """Shape and device, not data."""
        return f"{type(self).__name__}(shape={tuple(self.shape)}, device={self.device})"


def is_image_group(name: str, t: torch.Tensor | FrameSource) -> bool:
    """Whether observation group ``name`` holds images: the ``image`` group always, any other group
    when it is ``uint8`` frames ``[N, a, b, c]``.
    """
    return name == IMAGE or (t.dtype == torch.uint8 and t.dim() == 4)


def check_image_group(name: str, t: torch.Tensor | FrameSource, layout: ImageLayout | None = None) -> None:
    """An image group is ``uint8`` frames ``[N, H, W, C]`` or ``[N, C, H, W]`` matching ``layout``
    (when given); raise :class:`~robolearn.data.DatasetError` naming ``name`` otherwise.
    """
    if t.dtype != torch.uint8:
        raise DatasetError(
            f"{name}: an image group must be uint8 (images stay uint8 and become float only inside a "
            f"network), got {t.dtype}; convert with (x * 255).round().clamp(0, 255).to(torch.uint8) if it holds [0, 1] floats"
        )
    if t.dim() != 4:
        raise DatasetError(
            f"{name}: an image group holds frames [N, H, W, C] or [N, C, H, W], got shape {tuple(t.shape)}"
        )
    if layout is not None and tuple(t.shape[1:]) != layout.shape:
        raise DatasetError(
            f"{name}: frames of shape {tuple(t.shape[1:])} do not match the declared image layout "
            f"{layout.shape} ({layout.layout})"
        )


@dataclass
class DatasetMetadata:
    """What a dataset is: the task, how it was collected, reference returns, who wrote it."""

    task_id: str = ""
    """Task the data was collected on (a robolearn or Gymnasium id); empty when unknown."""
    collection: str = ""
    """How it was collected: the policy or algorithm (``"sac-expert"``, ``"random"``, ``"human"``)."""
    ref_random_return: float | None = None
    """Average return of a random policy on the task, for :func:`robolearn.data.normalized_score`."""
    ref_expert_return: float | None = None
    """Average return of an expert policy on the task, for :func:`robolearn.data.normalized_score`."""
    robolearn_version: str = VERSION
    """robolearn version that wrote the dataset (the current one for data made in memory)."""
    source: str = "robolearn"
    """Where the data came from: ``robolearn`` (collected here), or ``d4rl`` / ``minari`` (read from a
    file of that format); re-saving keeps it."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form, JSON-serialisable details (seeds, collection settings, the source's own metadata)."""

    def to_json(self) -> str:
        """The metadata as one JSON string (how robolearn files and Minari exports store it)."""
        try:
            return json.dumps(asdict(self), sort_keys=True)
        except TypeError as e:
            raise DatasetError(f"metadata.extra: must be JSON-serialisable ({e})") from e

    @classmethod
    def from_json(cls, text: str) -> DatasetMetadata:
        """Parse :meth:`to_json` output; unknown keys (from a newer writer) land in ``extra``."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise DatasetError(f"metadata: not valid JSON ({e})") from e
        if not isinstance(raw, dict):
            raise DatasetError(f"metadata: expected a JSON object, got {type(raw).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        extra = dict(raw.pop("extra", {}) or {})
        extra.update({k: raw.pop(k) for k in list(raw) if k not in known})
        return cls(**raw, extra=extra)


@dataclass
class WindowBatch:
    """``B`` windows of ``H`` consecutive steps from one episode each (all tensors ``[B, H, ...]``).

    Padding: a window that reaches past its episode's last step repeats that last step's
    observation, action and next observation (edge padding, as action-chunking policies expect);
    padded steps have reward 0, both flags False and ``mask`` False.
    """

    obs: Obs
    """Observation groups, ``[B, H, ...]``."""
    actions: torch.Tensor
    """Actions (the action chunk), ``[B, H, A]``."""
    rewards: torch.Tensor
    """Rewards, 0 on padded steps, ``[B, H]``."""
    next_obs: Obs
    """Next observations of each step (the true final one at the episode's last step), ``[B, H, ...]``."""
    terminals: torch.Tensor
    """Terminal flags, False on padded steps, ``[B, H]``."""
    timeouts: torch.Tensor
    """Time-out flags (never set together with ``terminals``), False on padded steps, ``[B, H]``."""
    mask: torch.Tensor
    """True where the step is real data, False where it is padding, ``[B, H]`` bool."""
    index: torch.Tensor
    """Flat transition index of each step (padded steps point at the episode's last step), ``[B, H]``."""


DatasetReader = Callable[..., "Dataset"]
"""Reads a robolearn dataset file: ``(path, *, device, expect_obs_dim, expect_action_dim, task_id)``."""
DatasetWriter = Callable[..., Path]
"""Writes a dataset to a robolearn file: ``(dataset, path, *, compression, compression_level, image_chunk_frames)``."""

_FILE_IO: dict[str, Callable[..., Any]] = {}
"""The reader and writer behind :meth:`Dataset.load` / :meth:`Dataset.save`.

DESIGN.md: reading and writing live in the format modules and the container does not import them
back, so the dependency runs one way (formats -> dataset). :mod:`robolearn.data.formats` installs
its functions here when it is imported, and the package ``__init__`` always imports it, so
importing any ``robolearn.data`` module makes ``load``/``save`` available.
"""


def register_file_io(*, read: DatasetReader, write: DatasetWriter) -> None:
    """Install the robolearn-file reader and writer used by :meth:`Dataset.load` and :meth:`Dataset.save`."""
    _FILE_IO["read"] = read
    _FILE_IO["write"] = write


def _file_io(kind: str) -> Callable[..., Any]:
    try:
        return _FILE_IO[kind]
    except KeyError:
        # Unreachable through ``import robolearn.data`` (its __init__ imports the formats module);
        # says what to do if the container module is ever loaded on its own.
        raise RuntimeError(
            f"Dataset file I/O: no {kind}er installed; import robolearn.data (robolearn.data.formats installs it)"
        ) from None


def _groups(name: str, value: Any) -> dict[str, Any]:
    # A bare array is the policy group: what D4RL and Box-space Minari datasets hold. A FrameSource
    # passes as it is, so validating it reads no frame.
    def conv(key: str, v: Any) -> Any:
        return v if isinstance(v, FrameSource) else as_tensor(key, v)

    if isinstance(value, Mapping):
        return {str(k): conv(f"{name}/{k}", v) for k, v in value.items()}
    return {POLICY: conv(f"{name}/{POLICY}", value)}


def _layouts(
    obs: Mapping[str, Any], given: Mapping[str, str | ImageLayout | Mapping[str, Any]] | None
) -> dict[str, ImageLayout]:
    """The layout of every image group: as declared in ``given`` (a layout string, an ImageLayout or its
    dict form) or inferred; a declared group that is not uint8 frames raises.
    """
    given = dict(given or {})
    unknown = sorted(set(given) - set(obs))
    if unknown:
        raise DatasetError(f"image_layouts: groups {unknown} are not observation groups {sorted(obs)}")
    out: dict[str, ImageLayout] = {}
    for k, v in obs.items():
        if k not in given and not is_image_group(k, v):
            continue
        decl = given.get(k)
        check_image_group(f"observations/{k}", v)
        frame = tuple(int(x) for x in v.shape[1:])
        if decl is None:
            layout = ImageLayout.infer(frame)
        elif isinstance(decl, ImageLayout):
            layout = decl
        elif isinstance(decl, str):
            layout = ImageLayout(frame, decl)
        else:
            layout = ImageLayout.from_dict(decl)
        check_image_group(f"observations/{k}", v, layout)
        out[k] = layout
    return out


def _to_float32(name: str, t: torch.Tensor, kind: str) -> torch.Tensor:
    # Floating data trains in float32 whatever the file held (D4RL stores some fields as float64);
    # the dtype is checked first so integer actions raise instead of being silently converted.
    check_array(name, t, rows=None, kind=kind, finite=False)
    return t.float() if t.is_floating_point() else t


class Dataset:
    """Episodes of transitions as flat tensors on one device (see the module docstring for the layout).

    Construct it from arrays (numpy or torch) or with :meth:`from_episodes`; every constructor
    validates shapes, lengths, dtypes, finiteness and episode structure and raises
    :class:`~robolearn.data.DatasetError` naming the field and index. Floating observations,
    actions and rewards are stored as float32; uint8 observations (images) stay uint8; ``infos``
    keep their dtype. Image groups (see the module docstring) must be uint8 ``[N, H, W, C]`` or
    ``[N, C, H, W]``; an image group's ``observations`` may be a :class:`FrameSource` (frames read on
    demand) instead of a tensor. Treat a dataset as immutable: derived indices are cached.
    """

    observations: dict[str, torch.Tensor]
    """Observation groups, ``[N, ...]`` each."""
    actions: torch.Tensor
    """Actions, ``[N, A]``."""
    rewards: torch.Tensor
    """Rewards, ``[N]``."""
    terminals: torch.Tensor
    """True where the MDP ended after this step (no bootstrap), ``[N]`` bool."""
    timeouts: torch.Tensor
    """True where a time limit or the collection cut the episode after this step (bootstrap), ``[N]`` bool."""
    final_observations: dict[str, torch.Tensor]
    """The observation after each episode's last step, ``[E, ...]`` per group."""
    next_observations: dict[str, torch.Tensor] | None
    """Full next observations ``[N, ...]`` when they are not the following rows; None otherwise."""
    infos: dict[str, torch.Tensor]
    """Per-step extras ``[N, ...]`` keyed by name (``/`` nests them in files)."""
    metadata: DatasetMetadata
    """Task, collection, reference returns, versions."""
    episode_starts: torch.Tensor
    """First transition of each episode, ``[E]`` int64."""
    episode_lengths: torch.Tensor
    """Transitions per episode, ``[E]`` int64."""
    image_layouts: dict[str, ImageLayout]
    """Frame shape, layout (HWC/CHW) and colour of each image group (empty without images)."""

    def __init__(
        self,
        observations: Mapping[str, Any] | Any,
        actions: Any,
        rewards: Any,
        terminals: Any,
        timeouts: Any,
        *,
        final_observations: Mapping[str, Any] | Any | None = None,
        next_observations: Mapping[str, Any] | Any | None = None,
        infos: Mapping[str, Any] | None = None,
        metadata: DatasetMetadata | None = None,
        image_layouts: Mapping[str, str | ImageLayout | Mapping[str, Any]] | None = None,
    ) -> None:
        """Validate and store; a bare observation array is the ``policy`` group.

        ``image_layouts`` declares image groups' layouts (group -> ``"HWC"``/``"CHW"``, an
        :class:`ImageLayout` or its dict form); undeclared image groups get :meth:`ImageLayout.infer`.

        ``final_observations`` may be omitted only when ``next_observations`` is given (it is then
        read off at each episode's last step). Every tensor is moved to the device of ``rewards``.
        """
        rew = as_tensor("rewards", rewards)
        check_array("rewards", rew, rows=None, kind="float", ndim=1, finite=False)
        n = int(rew.shape[0])
        if n == 0:
            raise DatasetError("rewards: the dataset is empty (0 transitions)")
        dev = rew.device
        rew = rew.float()
        check_array("rewards", rew, rows=n, kind="float", ndim=1)

        obs = {
            k: _to_float32(f"observations/{k}", v, "obs").to(dev)
            for k, v in _groups("observations", observations).items()
        }
        check_groups("observations", obs)
        for k, v in obs.items():
            check_array(f"observations/{k}", v, rows=n, kind="obs", min_ndim=2)
        layouts = _layouts(obs, image_layouts)
        act = _to_float32("actions", as_tensor("actions", actions), "float").to(dev)
        check_array("actions", act, rows=n, kind="float", ndim=2)
        term = as_flags("terminals", terminals).to(dev)
        tout = as_flags("timeouts", timeouts).to(dev)
        check_array("terminals", term, rows=n, kind="bool", ndim=1)
        check_array("timeouts", tout, rows=n, kind="bool", ndim=1)

        done = term | tout
        if not bool(done[-1]):
            raise DatasetError(
                f"terminals/timeouts: the last transition (index {n - 1}) ends no episode; mark it a "
                "time-out if the collection stopped there (its next observation goes in final_observations)"
            )
        ends = done.nonzero().reshape(-1)
        starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
        num_episodes = int(ends.shape[0])

        nxt = None
        if next_observations is not None:
            nxt = {
                k: _to_float32(f"next_observations/{k}", v, "obs").to(dev)
                for k, v in _groups("next_observations", next_observations).items()
            }
            self._check_like("next_observations", nxt, obs, n)
        if final_observations is None:
            if nxt is None:
                raise DatasetError(
                    "final_observations: required (the observation after each episode's last step) "
                    "unless next_observations is given"
                )
            fin = {k: v[ends] for k, v in nxt.items()}
        else:
            fin = {
                k: _to_float32(f"final_observations/{k}", v, "obs").to(dev)
                for k, v in _groups("final_observations", final_observations).items()
            }
        self._check_like("final_observations", fin, obs, num_episodes)

        inf: dict[str, torch.Tensor] = {}
        for k, v in (infos or {}).items():
            name = f"infos/{k}"
            if not k or k.startswith("/") or k.endswith("/") or "//" in k:
                raise DatasetError(f"{name}: info names are non-empty, '/'-separated paths")
            t = as_tensor(name, v).to(dev)
            check_array(name, t, rows=n, kind="number")
            inf[str(k)] = t

        self.observations = obs
        self.actions = act
        self.rewards = rew
        self.terminals = term
        self.timeouts = tout
        self.final_observations = fin
        self.next_observations = nxt
        self.infos = inf
        self.metadata = metadata if metadata is not None else DatasetMetadata()
        self.episode_starts = starts
        self.episode_lengths = ends - starts + 1
        self.image_layouts = layouts
        self._cache: dict[str, Any] = {}

    @staticmethod
    def _check_like(
        name: str, groups: dict[str, torch.Tensor], obs: dict[str, torch.Tensor], rows: int
    ) -> None:
        if set(groups) != set(obs):
            raise DatasetError(
                f"{name}: groups {sorted(groups)} differ from the observation groups {sorted(obs)}"
            )
        for k, v in groups.items():
            check_array(f"{name}/{k}", v, rows=rows, kind="obs", min_ndim=2)
            if v.shape[1:] != obs[k].shape[1:] or v.dtype != obs[k].dtype:
                raise DatasetError(
                    f"{name}/{k}: expected rows of shape {tuple(obs[k].shape[1:])} and dtype {obs[k].dtype} "
                    f"like observations/{k}, got {tuple(v.shape[1:])} and {v.dtype}"
                )

    # ------------------------------------------------------------------ construction and I/O

    @classmethod
    def from_episodes(
        cls,
        episodes: Iterable[Mapping[str, Any]],
        metadata: DatasetMetadata | None = None,
        image_layouts: Mapping[str, str | ImageLayout | Mapping[str, Any]] | None = None,
    ) -> Dataset:
        """Build a dataset from per-episode arrays, as a collector or the Minari reader has them.

        Each episode maps ``observations`` (an array, or group -> array) of ``T + 1`` rows (the
        last is the observation after the final step), ``actions`` ``[T, A]``, ``rewards`` ``[T]``,
        optional ``terminals`` / ``timeouts`` ``[T]`` (default all False) and optional ``infos``
        (name -> ``[T, ...]``). A flag before the last step is an error; an episode whose last step
        has no flag was cut by the collection and becomes a time-out.
        """
        parts: dict[str, list[Any]] = {"act": [], "rew": [], "term": [], "tout": []}
        obs_parts: dict[str, list[torch.Tensor]] = {}
        fin_parts: dict[str, list[torch.Tensor]] = {}
        info_parts: dict[str, list[torch.Tensor]] = {}
        for e, ep in enumerate(episodes):
            rew = as_tensor(f"episode {e}: rewards", ep["rewards"])
            t = int(rew.shape[0]) if rew.dim() == 1 else -1
            if t < 1:
                raise DatasetError(
                    f"episode {e}: rewards: expected shape [T] with T >= 1, got {tuple(rew.shape)}"
                )
            groups = _groups(f"episode {e}: observations", ep["observations"])
            if e > 0 and set(groups) != set(obs_parts):
                raise DatasetError(
                    f"episode {e}: observation groups {sorted(groups)} differ from episode 0's {sorted(obs_parts)}"
                )
            for k, v in groups.items():
                if v.dim() < 1 or v.shape[0] != t + 1:
                    raise DatasetError(
                        f"episode {e}: observations/{k}: expected T + 1 = {t + 1} rows (the last is the "
                        f"observation after the final step), got shape {tuple(v.shape)}"
                    )
                obs_parts.setdefault(k, []).append(v[:-1])
                fin_parts.setdefault(k, []).append(v[-1:])
            flags = {}
            for key in ("terminals", "timeouts"):
                f = (
                    as_flags(f"episode {e}: {key}", ep[key])
                    if ep.get(key) is not None
                    else torch.zeros(t, dtype=torch.bool, device=rew.device)
                )
                if f.shape != (t,):
                    raise DatasetError(f"episode {e}: {key}: expected shape [{t}], got {tuple(f.shape)}")
                flags[key] = f
            early = (flags["terminals"] | flags["timeouts"])[:-1].nonzero()
            if early.numel():
                raise DatasetError(
                    f"episode {e}: terminals/timeouts: flag at step {int(early[0, 0])} before the episode's last step {t - 1}"
                )
            if not bool(flags["terminals"][-1] | flags["timeouts"][-1]):
                flags["timeouts"] = flags["timeouts"].clone()
                flags["timeouts"][-1] = True
            act = as_tensor(f"episode {e}: actions", ep["actions"])
            if act.dim() < 1 or act.shape[0] != t:
                raise DatasetError(f"episode {e}: actions: expected {t} rows, got shape {tuple(act.shape)}")
            parts["act"].append(act)
            parts["rew"].append(rew)
            parts["term"].append(flags["terminals"])
            parts["tout"].append(flags["timeouts"])
            ep_infos = dict(ep.get("infos") or {})
            if e > 0 and set(ep_infos) != set(info_parts):
                raise DatasetError(
                    f"episode {e}: infos {sorted(ep_infos)} differ from episode 0's {sorted(info_parts)}"
                )
            for k, v in ep_infos.items():
                info_parts.setdefault(k, []).append(as_tensor(f"episode {e}: infos/{k}", v))
        if not parts["rew"]:
            raise DatasetError("episodes: no episodes given")

        def cat(name: str, xs: list[torch.Tensor]) -> torch.Tensor:
            try:
                return torch.cat(xs)
            except RuntimeError as err:  # mismatched trailing shapes or dims between episodes
                raise DatasetError(f"{name}: episodes disagree in shape ({err})") from err

        return cls(
            {k: cat(f"observations/{k}", v) for k, v in obs_parts.items()},
            cat("actions", parts["act"]),
            cat("rewards", parts["rew"]),
            torch.cat(parts["term"]),
            torch.cat(parts["tout"]),
            final_observations={k: cat(f"final_observations/{k}", v) for k, v in fin_parts.items()},
            infos={k: cat(f"infos/{k}", v) for k, v in info_parts.items()},
            metadata=metadata,
            image_layouts=image_layouts,
        )

    def save(
        self,
        path: str | Path,
        *,
        compression: str | None = "gzip",
        compression_level: int | None = 4,
        image_chunk_frames: int | None = None,
    ) -> Path:
        """Write a robolearn HDF5 file atomically (see :func:`robolearn.data.formats.write_robolearn`)."""
        return _file_io("write")(
            self,
            path,
            compression=compression,
            compression_level=compression_level,
            image_chunk_frames=image_chunk_frames,
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | torch.device = "cpu",
        expect_obs_dim: int | Mapping[str, int] | None = None,
        expect_action_dim: int | None = None,
        task_id: str | None = None,
        lazy_images: bool = False,
    ) -> Dataset:
        """Read a robolearn HDF5 file onto ``device``, validated against what the caller expects
        (see :func:`robolearn.data.formats.read_robolearn`). ``lazy_images=True`` leaves image
        groups' frames in the file, read per batch (:class:`FrameSource`).
        """
        return _file_io("read")(
            path,
            device=device,
            expect_obs_dim=expect_obs_dim,
            expect_action_dim=expect_action_dim,
            task_id=task_id,
            lazy_images=lazy_images,
        )

    def check(
        self,
        *,
        expect_obs_dim: int | Mapping[str, int] | None = None,
        expect_action_dim: int | None = None,
        task_id: str | None = None,
    ) -> None:
        """Raise :class:`~robolearn.data.DatasetError` unless the dataset fits the caller's task.

        ``expect_obs_dim``: the ``policy`` group's numbers per step, or a mapping per group;
        ``expect_action_dim``: the action size; ``task_id``: must equal the dataset's task id when
        that is known, and explains a size mismatch caused by a task-version change.
        """
        check_expectations(
            self.observations,
            self.actions,
            self.metadata.task_id,
            expect_obs_dim=expect_obs_dim,
            expect_action_dim=expect_action_dim,
            task_id=task_id,
        )

    def to(self, device: str | torch.device) -> Dataset:
        """A copy on ``device`` (the same object when it is already there); no re-validation."""
        device = torch.device(device)
        if device == self.device:
            return self
        out = Dataset.__new__(Dataset)

        def move(d: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
            return None if d is None else {k: v.to(device) for k, v in d.items()}

        out.observations = move(self.observations)  # type: ignore[assignment]
        out.final_observations = move(self.final_observations)  # type: ignore[assignment]
        out.next_observations = move(self.next_observations)
        out.infos = move(self.infos)  # type: ignore[assignment]
        for name in ("actions", "rewards", "terminals", "timeouts", "episode_starts", "episode_lengths"):
            setattr(out, name, getattr(self, name).to(device))
        out.metadata = self.metadata
        out.image_layouts = dict(self.image_layouts)
        out._cache = {}
        return out

    # ------------------------------------------------------------------ shape and structure

    def __len__(self) -> int:
        """Number of transitions N."""
        return int(self.rewards.shape[0])

    def __repr__(self) -> str:
        """Sizes and task, not data."""
        return (
            f"Dataset(transitions={len(self)}, episodes={self.num_episodes}, obs={self.obs_dims}, "
            f"action_dim={self.action_dim}, task={self.metadata.task_id!r}, device={self.device})"
        )

    @property
    def num_episodes(self) -> int:
        """Number of episodes E."""
        return int(self.episode_starts.shape[0])

    @property
    def device(self) -> torch.device:
        """Device every tensor lives on."""
        return self.rewards.device

    @property
    def obs_dims(self) -> dict[str, int]:
        """Numbers per step of each observation group."""
        return {k: feature_dim(v) for k, v in self.observations.items()}

    @property
    def action_dim(self) -> int:
        """Action size A."""
        return int(self.actions.shape[1])

    @property
    def episode_index(self) -> torch.Tensor:
        """Episode of each transition, ``[N]`` int64 (cached)."""
        if "episode_index" not in self._cache:
            ids = torch.arange(self.num_episodes, device=self.device)
            self._cache["episode_index"] = torch.repeat_interleave(ids, self.episode_lengths)
        return self._cache["episode_index"]

    @property
    def episode_last(self) -> torch.Tensor:
        """Index of the last transition of each transition's episode, ``[N]`` int64 (cached)."""
        if "episode_last" not in self._cache:
            last = self.episode_starts + self.episode_lengths - 1
            self._cache["episode_last"] = last[self.episode_index]
        return self._cache["episode_last"]

    def episode(self, i: int) -> dict[str, Any]:
        """Episode ``i`` as views: ``observations`` with ``T + 1`` rows (the final one appended, so a
        copy), ``actions``, ``rewards``, ``terminals``, ``timeouts``, ``infos`` with ``T`` rows.
        """
        if not 0 <= i < self.num_episodes:
            raise IndexError(f"episode {i}: the dataset has {self.num_episodes} episodes")
        s = int(self.episode_starts[i])
        e = s + int(self.episode_lengths[i])
        return {
            "observations": {
                k: torch.cat([v[s:e], self.final_observations[k][i : i + 1]])
                for k, v in self.observations.items()
            },
            "actions": self.actions[s:e],
            "rewards": self.rewards[s:e],
            "terminals": self.terminals[s:e],
            "timeouts": self.timeouts[s:e],
            "infos": {k: v[s:e] for k, v in self.infos.items()},
        }

    # ------------------------------------------------------------------ sampling

    def next_obs(self, idx: torch.Tensor) -> Obs:
        """The observation after each transition in ``idx`` (the true final one at an episode's end)."""
        if self.next_observations is not None:
            return {k: v[idx] for k, v in self.next_observations.items()}
        is_last = idx == self.episode_last[idx]
        following = (idx + 1).clamp(max=len(self) - 1)
        ep = self.episode_index[idx]
        out = {}
        for k, v in self.observations.items():
            m = is_last.reshape(is_last.shape + (1,) * (v.dim() - 1))
            out[k] = torch.where(m, self.final_observations[k][ep], v[following])
        return out

    def gather(self, idx: torch.Tensor) -> Batch:
        """Transitions ``idx[B]`` as a :class:`~robolearn.types.Batch` (``extras["index"]`` = ``idx``).

        ``terminated`` is the terminal flag; ``truncated`` the time-out flag where the step is not
        also terminal, so a loss bootstraps with ``gamma * (~terminated) * V(next_obs)``.
        """
        term = self.terminals[idx]
        return Batch(
            obs={k: v[idx] for k, v in self.observations.items()},
            action=self.actions[idx],
            reward=self.rewards[idx],
            next_obs=self.next_obs(idx),
            terminated=term,
            truncated=self.timeouts[idx] & ~term,
            extras={"index": idx},
        )

    def _uniform(self, batch_size: int, generator: torch.Generator | None) -> torch.Tensor:
        return torch.randint(0, len(self), (int(batch_size),), generator=generator, device=self.device)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """``batch_size`` transitions drawn uniformly with replacement; ``generator`` lives on the
        dataset's device and makes the draw reproducible.
        """
        return self.gather(self._uniform(batch_size, generator))

    def gather_nstep(self, idx: torch.Tensor, n: int, gamma: float) -> Batch:
        """n-step transitions starting at ``idx[B]``; the sum stops at the episode's end.

        With ``k = min(n, steps left in the episode)``: ``reward = sum_{j<k} gamma^j r_{t+j}``,
        ``next_obs`` is the observation after step ``t+k-1`` (the true final observation when the
        episode ends inside the window), ``terminated`` / ``truncated`` say whether the window ended
        the episode by a terminal / a time-out, ``extras["discount"] = gamma^k`` and
        ``extras["steps"] = k``. Target: ``reward + discount * (~terminated) * V(next_obs)``, so a
        time-out bootstraps from the true next observation and a terminal does not.
        """
        if int(n) < 1:
            raise ValueError(f"n: expected an integer >= 1, got {n}")
        last_of_ep = self.episode_last[idx]
        k = torch.clamp(last_of_ep - idx + 1, max=int(n))
        ret = torch.zeros(idx.shape, dtype=self.rewards.dtype, device=self.device)
        for j in range(int(n)):
            r = self.rewards[(idx + j).clamp(max=len(self) - 1)]
            ret = ret + torch.where(j < k, (gamma**j) * r, torch.zeros_like(r))
        last = idx + k - 1
        ended = last == last_of_ep
        term = ended & self.terminals[last]
        trunc = ended & self.timeouts[last] & ~term
        batch = self.gather(idx)
        batch.reward = ret
        batch.next_obs = self.next_obs(last)
        batch.terminated = term
        batch.truncated = trunc
        batch.extras.update(discount=torch.pow(torch.full_like(ret, float(gamma)), k.to(ret.dtype)), steps=k)
        return batch

    def sample_nstep(
        self, batch_size: int, n: int, gamma: float, generator: torch.Generator | None = None
    ) -> Batch:
        """Uniform start indices, then :meth:`gather_nstep`."""
        return self.gather_nstep(self._uniform(batch_size, generator), n, gamma)

    def gather_windows(self, idx: torch.Tensor, horizon: int) -> WindowBatch:
        """Windows of ``horizon`` steps starting at ``idx[B]``, never crossing an episode end
        (padding rule in :class:`WindowBatch`).
        """
        if int(horizon) < 1:
            raise ValueError(f"horizon: expected an integer >= 1, got {horizon}")
        steps = idx[:, None] + torch.arange(int(horizon), device=self.device)[None, :]
        last = self.episode_last[idx][:, None]
        mask = steps <= last
        rows = torch.minimum(steps, last)
        flat = rows.reshape(-1)
        shape = tuple(rows.shape)
        nxt = self.next_obs(flat)
        return WindowBatch(
            obs={k: v[rows] for k, v in self.observations.items()},
            actions=self.actions[rows],
            rewards=torch.where(
                mask, self.rewards[rows], torch.zeros((), dtype=self.rewards.dtype, device=self.device)
            ),
            next_obs={k: v.reshape(shape + v.shape[1:]) for k, v in nxt.items()},
            terminals=self.terminals[rows] & mask,
            timeouts=self.timeouts[rows] & ~self.terminals[rows] & mask,
            mask=mask,
            index=rows,
        )

    def sample_windows(
        self, batch_size: int, horizon: int, generator: torch.Generator | None = None, *, pad: bool = True
    ) -> WindowBatch:
        """``batch_size`` windows of ``horizon`` steps. ``pad=True``: starts are uniform over all
        transitions and windows running past an episode's end are padded; ``pad=False``: starts
        only where a whole window fits in the episode (episodes shorter than ``horizon`` give none).
        """
        if pad:
            return self.gather_windows(self._uniform(batch_size, generator), horizon)
        key = f"full_starts_{int(horizon)}"
        if key not in self._cache:
            left = self.episode_last - torch.arange(len(self), device=self.device) + 1
            self._cache[key] = (left >= int(horizon)).nonzero().reshape(-1)
        starts = self._cache[key]
        if starts.numel() == 0:
            raise DatasetError(
                f"episode_lengths: no episode holds a whole window of {horizon} steps (pad=False)"
            )
        pick = torch.randint(0, starts.numel(), (int(batch_size),), generator=generator, device=self.device)
        return self.gather_windows(starts[pick], horizon)

    # ------------------------------------------------------------------ returns

    def _accum_dtype(self) -> torch.dtype:
        # float64 keeps long discounted sums exact enough; MPS has no float64.
        return torch.float32 if self.device.type == "mps" else torch.float64

    def episode_returns(self) -> torch.Tensor:
        """Undiscounted return of each episode, ``[E]`` (float64 on CPU/CUDA)."""
        out = torch.zeros(self.num_episodes, dtype=self._accum_dtype(), device=self.device)
        return out.index_add_(0, self.episode_index, self.rewards.to(out.dtype))

    def returns_to_go(self, gamma: float, timeout_value: float | torch.Tensor | None = None) -> torch.Tensor:
        """Monte-Carlo discounted return from every transition to its episode's end, ``[N]`` float32.

        ``G_t = r_t + gamma * G_{t+1}`` inside an episode. At a terminal, ``G = r``. At a time-out
        the future is unknown: ``timeout_value=None`` (default) stops the sum there as if it were
        terminal (what CORL's Cal-QL ``get_return_to_go`` does, a lower bound for positive rewards);
        a float bootstraps every time-out end with ``r + gamma * timeout_value``; a tensor ``[E]``
        gives one value per episode (e.g. a critic's ``V(final_obs)``), used where it ends in a time-out.
        """
        dt = self._accum_dtype()
        last = torch.arange(len(self), device=self.device) == self.episode_last
        b = self.rewards.to(dt).clone()
        if timeout_value is not None:
            ends = self.episode_starts + self.episode_lengths - 1
            value = torch.as_tensor(timeout_value, dtype=dt, device=self.device).expand(self.num_episodes)
            is_timeout = self.timeouts[ends] & ~self.terminals[ends]
            b[ends] += torch.where(is_timeout, gamma * value, torch.zeros_like(value))
        a = torch.where(
            last,
            torch.zeros((), dtype=dt, device=self.device),
            torch.full((), float(gamma), dtype=dt, device=self.device),
        )
        # G_t = b_t + a_t G_{t+1} with a = 0 at episode ends: a reverse affine scan (Hillis-Steele),
        # log2(longest episode) vectorised steps instead of a Python loop over N; no division by
        # gamma^t, so nothing underflows on long episodes. After the pass with shift s, (a_t, b_t)
        # composes the maps of steps t .. t+2s-1; once 2s covers the longest episode every a is 0.
        longest = int(self.episode_lengths.max())
        shift = 1
        while shift < longest:
            b_next = b.clone()
            b_next[:-shift] += a[:-shift] * b[shift:]
            a_next = a.clone()
            a_next[:-shift] *= a[shift:]
            a, b = a_next, b_next
            shift *= 2
        return b.to(torch.float32)
