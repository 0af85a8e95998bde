"""Dataset files: robolearn HDF5 (read and write) and D4RL HDF5 (read).

robolearn file, format version 1 (chunked and compressed through h5py)::

    /                      attrs: format="robolearn.dataset", format_version=1, metadata=<JSON>
    /observations/<group>  [N, ...]     float32 (or uint8 images)
    /final_observations/<group> [E, ...]  the observation after each episode's last step
    /next_observations/<group>  [N, ...]  only when next observations are not the following rows
    /actions [N, A] float32   /rewards [N] float32   /terminals, /timeouts [N] bool
    /episode_lengths [E] int64  (redundant with the flags; checked against them on read)
    /infos/<name>[/<name>...]   [N, ...]

Image groups (uint8 frames ``[N, H, W, C]`` or ``[N, C, H, W]``, see :class:`~robolearn.data.dataset.ImageLayout`)
are stored in chunks of :data:`IMAGE_CHUNK_FRAMES` whole frames, compressed with the file's filter, and
carry their layout as attributes of the array: ``image_layout`` (JSON of
:meth:`ImageLayout.to_dict`: frame shape, layout ``HWC``/``CHW``, colour, dtype). Older
readers ignore the attributes, so the format version stays 1. Reading is bit-exact; with
``lazy_images=True`` the frames stay in the file and a batch reads (and decompresses) only the
chunks holding its frames (:class:`HDF5Frames`).

Writes are atomic: the file is built under a staging name in the target's directory
(:mod:`robolearn.data.staging`), flushed to disk, then moved over the target with ``os.replace``,
so a crash or an exception midway leaves the target as it was (absent, or the previous file). An
exception removes the staging file at once; one left by a killed writer is removed by the next
write of the same target. New files get the user's usual permissions (``0o666`` minus the umask).

D4RL files hold flat float vectors; images are not part of that format, and :func:`read_d4rl` refuses
a file whose observations are uint8 frames. D4RL files (``observations``, ``actions``, ``rewards``, ``terminals``, ``timeouts``, optional
``next_observations``, ``infos/...``, ``metadata/...``): see :func:`read_d4rl` for how episode ends
and unknown next observations are handled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from robolearn.data.dataset import (
    Dataset,
    DatasetMetadata,
    FrameSource,
    ImageLayout,
    check_image_group,
    is_image_group,
    register_file_io,
)
from robolearn.data.staging import staging_path, sweep_stale
from robolearn.data.validation import DatasetError, as_flags, as_tensor, check_finite

FORMAT_NAME = "robolearn.dataset"
"""Value of the root ``format`` attribute of a robolearn dataset file."""
FORMAT_VERSION = 1
"""Version of the robolearn file layout written by :func:`write_robolearn`; readers accept <= this."""

COMPRESSIONS: tuple[str | None, ...] = ("gzip", "lzf", None)
"""Compression filters :func:`write_robolearn` accepts (h5py's built-in ones that need no plugin)."""

_CHUNK_BYTES = 1 << 20
"""Target chunk size: about 1 MiB keeps gzip fast and a partial read cheap."""


IMAGE_CHUNK_FRAMES = 1
"""Frames per chunk of an image group. One: a random batch decompresses exactly its own frames
(about half the read time of 4 or 16 frames per chunk), at the price of a larger file, since
deflate cannot reuse the previous frame's identical background across chunks (fixed-camera
renders: 16 frames per chunk with gzip 6 is ~3.5x smaller; BENCHMARKS.md, "Image datasets").
Archives pass ``image_chunk_frames`` to :func:`write_robolearn`."""

_IMAGE_ATTR = "image_layout"


def _chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    row = max(1, int(np.prod(shape[1:], dtype=np.int64)) * itemsize)
    return (max(1, min(shape[0], _CHUNK_BYTES // row)), *shape[1:])


def _filter_opts(compression: str | None, level: int | None, shuffle: bool) -> dict[str, Any]:
    if compression is None:
        return {}
    opts: dict[str, Any] = {"compression": compression}
    if shuffle:
        opts["shuffle"] = True
    if compression == "gzip" and level is not None:
        opts["compression_opts"] = int(level)
    return opts


def _put(f: h5py.Group, name: str, t: torch.Tensor, compression: str | None, level: int | None) -> None:
    arr = t.detach().cpu().numpy()
    # Byte shuffle groups the exponent bytes of floats together, which roughly doubles gzip's gain.
    opts = _filter_opts(compression, level, shuffle=True) if arr.size else {}
    f.create_dataset(name, data=arr, chunks=_chunks(arr.shape, arr.itemsize) if arr.size else None, **opts)


def _put_frames(
    f: h5py.Group,
    name: str,
    frames: torch.Tensor | FrameSource,
    layout: ImageLayout,
    chunk_frames: int,
    compression: str | None,
    level: int | None,
) -> None:
    """An image group: chunks of whole frames, no shuffle (one-byte elements have nothing to shuffle),
    the layout as an attribute; a :class:`FrameSource` is copied a block at a time, never whole.
    """
    n = int(frames.shape[0])
    chunk = (min(chunk_frames, n), *layout.shape)
    ds = f.create_dataset(
        name,
        shape=(n, *layout.shape),
        dtype=np.uint8,
        chunks=chunk,
        **_filter_opts(compression, level, False),
    )
    block = 256
    for lo in range(0, n, block):
        part = frames[lo : lo + block]
        ds[lo : lo + part.shape[0]] = part.detach().cpu().numpy()
    ds.attrs[_IMAGE_ATTR] = json.dumps(layout.to_dict(), sort_keys=True)


def _check_images(dataset: Dataset) -> None:
    """Image groups as the writer is about to store them, checked before a file exists (a dataset's
    tensors can be replaced after it was validated).
    """
    for key, groups in (
        ("observations", dataset.observations),
        ("final_observations", dataset.final_observations),
        ("next_observations", dataset.next_observations),
    ):
        for k, v in (groups or {}).items():
            layout = dataset.image_layouts.get(k)
            if layout is None and is_image_group(k, v):
                raise DatasetError(
                    f"{key}/{k}: holds {v.dtype} frames of shape {tuple(v.shape)} but the dataset records no "
                    f"image layout for group {k!r} (its arrays changed after construction); rebuild the Dataset"
                )
            if layout is not None:
                check_image_group(f"{key}/{k}", v, layout)


def _check_compression(compression: str | None, level: int | None) -> None:
    # Checked before anything is written: h5py would only refuse them at the first array, with its own words.
    if compression not in COMPRESSIONS:
        raise DatasetError(
            f"compression: unknown filter {compression!r}; valid choices: "
            + ", ".join(repr(c) for c in COMPRESSIONS)
        )
    if compression == "gzip" and level is not None:
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= int(level) <= 9:
            raise DatasetError(f"compression_level: gzip takes an integer 0-9 or None, got {level!r}")


def write_robolearn(
    dataset: Dataset,
    path: str | Path,
    *,
    compression: str | None = "gzip",
    compression_level: int | None = 4,
    image_chunk_frames: int | None = None,
) -> Path:
    """Write ``dataset`` to ``path`` (format version :data:`FORMAT_VERSION`) atomically; return the path.

    ``compression``: one of :data:`COMPRESSIONS`; ``compression_level``: gzip's level 0-9;
    ``image_chunk_frames``: frames per chunk of image groups (default :data:`IMAGE_CHUNK_FRAMES`;
    16 with gzip 6 makes archives of fixed-camera renders several times smaller, at about twice the
    cost of a random batch read). The
    parent directory is created if needed. The file gets the permissions of any new file (the
    umask's), and staging files that killed writers left beside ``path`` are removed first
    (:mod:`robolearn.data.staging`).
    """
    _check_compression(compression, compression_level)
    chunk_frames = IMAGE_CHUNK_FRAMES if image_chunk_frames is None else image_chunk_frames
    if isinstance(chunk_frames, bool) or not isinstance(chunk_frames, (int, np.integer)) or chunk_frames < 1:
        raise DatasetError(f"image_chunk_frames: expected an integer >= 1, got {image_chunk_frames!r}")
    _check_images(dataset)
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory; a dataset is written to a file path")
    metadata = dataset.metadata.to_json()  # raises on non-JSON extras before a file exists
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(path)
    tmp = staging_path(path)
    try:
        # "w-" creates the file exclusively, with 0o666 minus the umask (not mkstemp's 0o600).
        with h5py.File(tmp, "w-") as f:
            f.attrs["format"] = FORMAT_NAME
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["metadata"] = metadata
            for key, group in (
                ("observations", dataset.observations),
                ("final_observations", dataset.final_observations),
                ("next_observations", dataset.next_observations),
            ):
                for k, v in (group or {}).items():
                    layout = dataset.image_layouts.get(k)
                    if layout is not None:
                        _put_frames(
                            f, f"{key}/{k}", v, layout, int(chunk_frames), compression, compression_level
                        )
                    else:
                        _put(f, f"{key}/{k}", v, compression, compression_level)
            for key in ("actions", "rewards", "terminals", "timeouts", "episode_lengths"):
                _put(f, key, getattr(dataset, key), compression, compression_level)
            for k, v in dataset.infos.items():
                _put(f, f"infos/{k}", v, compression, compression_level)
        # Flush the bytes before the rename, so a power loss cannot leave a renamed but empty file.
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _read(f: h5py.Group, name: str, where: str, required: bool = True) -> np.ndarray | None:
    if name not in f:
        if required:
            raise DatasetError(f"{name}: missing from {where}")
        return None
    node = f[name]
    if not isinstance(node, h5py.Dataset):
        raise DatasetError(f"{name}: expected an array in {where}, found a group")
    return node[()]


def _read_tree(
    f: h5py.Group, name: str, where: str, skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Every array under group ``name`` keyed by its path below it (``infos/qpos`` -> ``qpos``),
    except the keys in ``skip`` (left in the file).
    """
    if name not in f:
        return {}
    node = f[name]
    if isinstance(node, h5py.Dataset):
        raise DatasetError(f"{name}: expected a group of arrays in {where}, found one array")
    out: dict[str, Any] = {}

    def visit(key: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and key not in skip:
            out[key] = obj[()]

    node.visititems(visit)
    return out


def _layout_of(node: h5py.Dataset, name: str, where: str) -> ImageLayout | None:
    raw = node.attrs.get(_IMAGE_ATTR)
    if raw is None:
        return None
    try:
        return ImageLayout.from_dict(json.loads(raw))
    except (json.JSONDecodeError, DatasetError) as e:
        raise DatasetError(f"{name}: unreadable {_IMAGE_ATTR} attribute in {where} ({e})") from e


class HDF5Frames(FrameSource):
    """Image frames of one array in a robolearn dataset file, read on demand.

    A request reads each chunk holding an asked-for frame once (a slice per chunk; h5py's list
    indexing costs milliseconds per frame), so a batch costs its own frames and never the whole
    group. The file is opened at the first read and again in a forked child (a data-loader worker),
    whose inherited handle must not be shared; :meth:`close` releases it.
    """

    def __init__(
        self,
        path: str | Path,
        name: str,
        shape: tuple[int, ...],
        chunk_frames: int,
        device: str | torch.device = "cpu",
    ) -> None:
        """``name``: the array's path in the file; ``chunk_frames``: frames per stored chunk."""
        super().__init__(shape, device)
        self.path = Path(path)
        self.name = name
        self.chunk_frames = max(1, int(chunk_frames))
        self._file: h5py.File | None = None
        self._pid = -1

    def _array(self) -> h5py.Dataset:
        if self._file is None or self._pid != os.getpid():
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as e:  # moved, deleted or replaced since the dataset was loaded
                raise DatasetError(
                    f"{self.name}: frames are read on demand from {self.path}, which cannot be opened any "
                    f"more ({e}); keep the file in place while a lazily loaded dataset is used"
                ) from e
            self._pid = os.getpid()
        node = self._file.get(self.name)
        if not isinstance(node, h5py.Dataset) or tuple(node.shape) != tuple(self.shape):
            raise DatasetError(
                f"{self.name}: {self.path} no longer holds the {tuple(self.shape)} frames it was loaded with"
            )
        return node

    def _read(self, rows: np.ndarray) -> np.ndarray:
        """The frames at sorted unique ``rows``: one slice read per chunk touched."""
        ds = self._array()
        out = np.empty((len(rows), *self.shape[1:]), np.uint8)
        k, n = self.chunk_frames, len(self)
        chunk_ids = rows // k
        starts = np.flatnonzero(np.r_[True, chunk_ids[1:] != chunk_ids[:-1]])
        for a, b in zip(starts, np.r_[starts[1:], len(rows)], strict=True):
            lo = int(chunk_ids[a]) * k
            block = ds[lo : min(lo + k, n)]
            out[a:b] = block[rows[a:b] - lo]
        return out

    def to(self, device: str | torch.device) -> HDF5Frames:
        """The same frames returned on ``device`` (a new handle; this one stays usable)."""
        if torch.device(device) == self.device:
            return self
        return HDF5Frames(self.path, self.name, tuple(self.shape), self.chunk_frames, device)

    def close(self) -> None:
        """Close the file handle (the next read reopens it)."""
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the open handle (a worker process opens its own)."""
        state = dict(self.__dict__)
        state["_file"], state["_pid"] = None, -1
        return state


def _open(path: str | Path) -> h5py.File:
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, not a dataset file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such dataset file")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DatasetError(f"{path}: not a readable HDF5 file ({e})") from e


@dataclass(frozen=True)
class DatasetFileInfo:
    """What a robolearn dataset file holds, read from its header without loading the arrays."""

    path: Path
    """The file."""
    metadata: DatasetMetadata
    """Task, collection, reference returns and extras stored in the file."""
    transitions: int
    """Number of transitions N."""
    episodes: int
    """Number of episodes E."""
    format_version: int
    """Layout version of the file."""
    image_layouts: dict[str, ImageLayout] = field(default_factory=dict)
    """Layout of each image observation group (empty without images)."""


def _what_it_holds(path: Path) -> str:
    """What a file that is not a robolearn dataset is, as "it is ..." for an error message."""
    if not h5py.is_hdf5(path):
        with open(path, "rb") as fh:
            head = fh.read(16)
        return f"not an HDF5 file (it starts with {head!r})" if head else "an empty file"
    with h5py.File(path, "r") as f:
        keys = sorted(f.keys())
    if {"observations", "actions", "rewards"} <= set(keys):
        return f"a D4RL-style HDF5 file (arrays {keys})"
    return f"an HDF5 file with top-level entries {keys[:8]}"


def inspect_robolearn(path: str | Path) -> DatasetFileInfo:
    """Read the header of a robolearn dataset file: metadata, sizes and version, no arrays.

    Raises:
        FileNotFoundError / IsADirectoryError: ``path`` is not a file.
        DatasetError: ``path`` is not a robolearn dataset ("<path> is not a robolearn dataset: it
            is <what>": not HDF5, a D4RL file, another HDF5 file), or has a newer format version.
    """
    path = Path(path)
    if path.is_file() and not h5py.is_hdf5(path):
        raise DatasetError(f"{path} is not a robolearn dataset: it is {_what_it_holds(path)}")
    with _open(path) as f:
        fmt = f.attrs.get("format")
        version = f.attrs.get("format_version")
        ok = fmt == FORMAT_NAME and version is not None
        if ok:
            if int(version) > FORMAT_VERSION:
                raise DatasetError(
                    f"format_version: {path} has version {int(version)}, this robolearn reads <= {FORMAT_VERSION}"
                )
            metadata = DatasetMetadata.from_json(str(f.attrs.get("metadata", "{}")))
            rewards, lengths = f.get("rewards"), f.get("episode_lengths")
            if not isinstance(rewards, h5py.Dataset) or not isinstance(lengths, h5py.Dataset):
                raise DatasetError(
                    f"{path}: a robolearn dataset file without its rewards/episode_lengths arrays"
                )
            sizes = (
                int(rewards.shape[0]) if rewards.shape else 0,
                int(lengths.shape[0]) if lengths.shape else 0,
            )
            layouts = _image_layouts(f, str(path))
    if not ok:
        raise DatasetError(f"{path} is not a robolearn dataset: it is {_what_it_holds(path)}")
    return DatasetFileInfo(path, metadata, sizes[0], sizes[1], int(version), layouts)


def _image_groups(f: h5py.File, layouts: Mapping[str, ImageLayout]) -> set[str]:
    """Groups to leave in the file: those with a recorded layout, and uint8 frame arrays of files
    written before layouts were recorded (the Dataset infers their layout).
    """
    out = set(layouts)
    obs = f.get("observations")
    for k, node in obs.items() if isinstance(obs, h5py.Group) else ():
        if isinstance(node, h5py.Dataset) and node.dtype == np.uint8 and node.ndim == 4:
            out.add(k)
    return out


def _image_layouts(f: h5py.File, where: str) -> dict[str, ImageLayout]:
    obs = f.get("observations")
    if not isinstance(obs, h5py.Group):
        return {}
    out = {}
    for k, node in obs.items():
        if isinstance(node, h5py.Dataset):
            layout = _layout_of(node, f"observations/{k}", where)
            if layout is not None:
                out[k] = layout
    return out


def read_robolearn(
    path: str | Path,
    *,
    device: str | torch.device = "cpu",
    expect_obs_dim: int | Mapping[str, int] | None = None,
    expect_action_dim: int | None = None,
    task_id: str | None = None,
    lazy_images: bool = False,
) -> Dataset:
    """Read a robolearn dataset file, validate it on the CPU, then move it to ``device``.

    ``lazy_images=True``: image groups' ``observations`` (and ``next_observations``) stay in the
    file as :class:`HDF5Frames`, read per request; every other array, and the ``[E]`` final
    frames, are loaded. The file must then stay in place while the dataset is used.
    """
    where = str(path)
    with _open(path) as f:
        fmt = f.attrs.get("format")
        version = f.attrs.get("format_version")
        if fmt != FORMAT_NAME or version is None:
            raise DatasetError(
                f"format: {where} is not a robolearn dataset file (root attrs format={fmt!r}, "
                f"format_version={version!r}); for D4RL files use read_d4rl"
            )
        if int(version) > FORMAT_VERSION:
            raise DatasetError(
                f"format_version: {where} has version {int(version)}, this robolearn reads <= {FORMAT_VERSION}; upgrade robolearn"
            )
        metadata = DatasetMetadata.from_json(str(f.attrs.get("metadata", "{}")))
        layouts = _image_layouts(f, where)
        lazy = _image_groups(f, layouts) if lazy_images else set()
        obs: dict[str, Any] = _read_tree(f, "observations", where, skip=lazy)
        if not obs:
            raise DatasetError(f"observations: missing from {where}")
        fin = _read_tree(f, "final_observations", where)
        if not fin:
            raise DatasetError(f"final_observations: missing from {where}")
        nxt: dict[str, Any] | None = _read_tree(f, "next_observations", where, skip=lazy) or None
        for key, tree in (("observations", obs), ("next_observations", nxt)):
            for k in lazy:
                node = f.get(f"{key}/{k}")
                if tree is not None and isinstance(node, h5py.Dataset):
                    if node.dtype != np.uint8:  # the eager path's Dataset check, before any frame is read
                        raise DatasetError(
                            f"{key}/{k}: an image group must be uint8, got {node.dtype} in {where}"
                        )
                    # An unchunked (contiguous) array reads one frame as cheaply as a chunk of one.
                    chunks = node.chunks[0] if node.chunks else 1
                    tree[k] = HDF5Frames(Path(path), f"{key}/{k}", tuple(node.shape), chunks)
        fields = {
            k: _read(f, k, where) for k in ("actions", "rewards", "terminals", "timeouts", "episode_lengths")
        }
        infos = _read_tree(f, "infos", where)
    dataset = Dataset(
        obs,
        fields["actions"],
        fields["rewards"],
        fields["terminals"],
        fields["timeouts"],
        final_observations=fin,
        next_observations=nxt,
        infos=infos,
        metadata=metadata,
        image_layouts=layouts,
    )
    stored = np.asarray(fields["episode_lengths"]).reshape(-1)
    derived = dataset.episode_lengths.numpy()
    if stored.shape != derived.shape or not np.array_equal(stored, derived):
        diff = (
            int(np.argmax(stored[: len(derived)] != derived[: len(stored)]))
            if min(len(stored), len(derived))
            else 0
        )
        raise DatasetError(
            f"episode_lengths: the stored lengths ({len(stored)} episodes) disagree with the terminals/timeouts "
            f"flags ({len(derived)} episodes), first at episode {diff}"
        )
    dataset.check(expect_obs_dim=expect_obs_dim, expect_action_dim=expect_action_dim, task_id=task_id)
    if task_id and not dataset.metadata.task_id:
        dataset.metadata.task_id = task_id
    return dataset.to(device)


def _derive_timeouts(terminals: np.ndarray, max_episode_steps: int) -> np.ndarray:
    """Time-outs of a file without them: a step is one when it is the ``max_episode_steps``-th of its episode."""
    out = np.zeros_like(terminals)
    count = 0
    for i, term in enumerate(terminals):  # files without time-outs are the small early D4RL v0 ones
        count += 1
        if term:
            count = 0
        elif count == max_episode_steps:
            out[i] = True
            count = 0
    return out


def read_d4rl(
    path: str | Path,
    *,
    device: str | torch.device = "cpu",
    expect_obs_dim: int | Mapping[str, int] | None = None,
    expect_action_dim: int | None = None,
    task_id: str | None = None,
    max_episode_steps: int | None = None,
    metadata: DatasetMetadata | None = None,
) -> Dataset:
    """Read a D4RL HDF5 file (as D4RL's ``get_dataset`` downloads them), validated, onto ``device``.

    Episodes end at ``terminals`` or ``timeouts``; a file without ``timeouts`` needs
    ``max_episode_steps`` to derive them. Next observations:

    * with ``next_observations`` in the file, each episode's final observation is taken from it;
      the full array is kept only when it differs from the following rows inside an episode. A last
      row without a flag (collection stopped) becomes a time-out, its next observation known.
    * without them, step ``t``'s next observation is ``observations[t + 1]`` inside an episode. The
      last step of a time-out episode (and an unflagged last row of the file) has no known next
      observation, so it is dropped, as D4RL's and CORL's ``qlearning_dataset`` drop it; the step
      before it becomes the episode's time-out end, bootstrapping from the dropped step's
      observation. A terminal step keeps its transition and, its next observation being unknown but
      never bootstrapped from, gets a copy of its own observation as the final observation.

    ``infos/...`` arrays become ``infos``; scalar ``metadata/...`` entries go to ``metadata.extra["d4rl"]``.
    """
    where = str(path)
    with _open(path) as f:
        if f.attrs.get("format") == FORMAT_NAME:
            raise DatasetError(
                f"format: {where} is a robolearn dataset file, not a D4RL one; read it with Dataset.load"
            )
        raw = {k: _read(f, k, where) for k in ("observations", "actions", "rewards", "terminals")}
        raw_timeouts = _read(f, "timeouts", where, required=False)
        raw_next = _read(f, "next_observations", where, required=False)
        infos = _read_tree(f, "infos", where)
        d4rl_meta: dict[str, Any] = {}
        if "metadata" in f and isinstance(f["metadata"], h5py.Group):

            def visit(key: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset) and obj.shape == ():
                    v = obj[()]
                    d4rl_meta[key] = (
                        v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v
                    )

            f["metadata"].visititems(visit)

    for name, arr in (("observations", raw["observations"]), ("next_observations", raw_next)):
        if arr is not None and arr.dtype == np.uint8 and arr.ndim >= 3:
            raise DatasetError(
                f"{name}: {where} holds uint8 frames of shape {arr.shape}; images are not part of the D4RL "
                "format (flat float observation vectors), so robolearn does not read them as D4RL. Store "
                "image datasets as robolearn files (Dataset.save / Dataset.load) or Minari (export_minari)"
            )
    rewards = np.asarray(raw["rewards"])
    if rewards.ndim == 2 and rewards.shape[1] == 1:  # some converters write [N, 1]
        rewards = rewards[:, 0]
    n = int(rewards.shape[0]) if rewards.ndim else 0
    per_step = {"observations": raw["observations"], "actions": raw["actions"], "terminals": raw["terminals"]}
    if raw_timeouts is not None:
        per_step["timeouts"] = raw_timeouts
    if raw_next is not None:
        per_step["next_observations"] = raw_next
    per_step.update({f"infos/{k}": v for k, v in infos.items()})
    for name, arr in per_step.items():
        if np.ndim(arr) == 0 or len(arr) != n:
            got = "a scalar" if np.ndim(arr) == 0 else f"{len(arr)} rows"
            raise DatasetError(
                f"{name}: expected {n} rows (one per transition, as many as 'rewards'), got {got}"
            )
    if n == 0:
        raise DatasetError(f"rewards: {where} holds no transitions")
    # Dtype and finiteness on the arrays as stored, so an error's index is the file's row even
    # when rows are dropped below.
    for name, arr in {"rewards": rewards, **per_step}.items():
        t = as_tensor(name, arr)
        if t.is_floating_point():
            check_finite(name, t)

    term = as_flags("terminals", raw["terminals"]).numpy().reshape(n)
    if raw_timeouts is not None:
        tout = as_flags("timeouts", raw_timeouts).numpy().reshape(n).copy()
    elif max_episode_steps is not None:
        tout = _derive_timeouts(term, int(max_episode_steps))
    else:
        raise DatasetError(
            f"timeouts: missing from {where} (an early D4RL v0 file?); pass max_episode_steps to derive them"
        )
    obs = np.asarray(raw["observations"])
    actions = np.asarray(raw["actions"])
    extra: dict[str, Any] = {"d4rl": d4rl_meta} if d4rl_meta else {}
    # A copy, so the caller's object is not mutated by the details added below.
    metadata = replace(metadata, extra=dict(metadata.extra)) if metadata else DatasetMetadata(source="d4rl")

    if raw_next is not None:
        nxt = np.asarray(raw_next)
        if not (term[-1] or tout[-1]):
            tout[-1] = True
        ends = np.flatnonzero(term | tout)
        inside = ~(term | tout)[:-1]
        same = nxt.shape == obs.shape and np.array_equal(nxt[:-1][inside], obs[1:][inside])
        extra["next_observations"] = "from the file's final rows" if same else "full array from the file"
        dataset = Dataset(
            obs,
            actions,
            rewards,
            term,
            tout,
            final_observations=nxt[ends] if same else None,
            next_observations=None if same else nxt,
            infos=infos,
            metadata=metadata,
        )
    else:
        unknown = tout & ~term
        unknown[-1] |= not term[-1]
        drop = np.flatnonzero(unknown)
        prev = drop - 1
        prev = prev[(prev >= 0) & ~(term | tout)[np.maximum(prev, 0)] & ~unknown[np.maximum(prev, 0)]]
        tout[prev] = True
        keep = ~unknown
        if not keep.any():
            raise DatasetError(
                f"timeouts: every transition of {where} is a one-step time-out episode; nothing is left"
            )
        ends = np.flatnonzero((term | tout) & keep)
        final = np.where(
            term[ends].reshape((-1,) + (1,) * (obs.ndim - 1)), obs[ends], obs[np.minimum(ends + 1, n - 1)]
        )
        extra["next_observations"] = (
            "derived: following rows; time-out ends without a next observation dropped"
        )
        extra["dropped_transitions"] = int(drop.size)
        dataset = Dataset(
            obs[keep],
            actions[keep],
            rewards[keep],
            term[keep],
            tout[keep],
            final_observations=final,
            infos={k: np.asarray(v)[keep] for k, v in infos.items()},
            metadata=metadata,
        )
    dataset.metadata.extra.update(extra)
    dataset.check(expect_obs_dim=expect_obs_dim, expect_action_dim=expect_action_dim, task_id=task_id)
    if task_id and not dataset.metadata.task_id:
        dataset.metadata.task_id = task_id
    return dataset.to(device)


# Dataset.load / Dataset.save delegate to these; the container never imports this module.
register_file_io(read=read_robolearn, write=write_robolearn)
