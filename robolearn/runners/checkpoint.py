"""Checkpoints: atomic writes, ``weights_only`` loads, global RNG state, a rotating manager.

A checkpoint is a plain ``dict`` of tensors and primitive containers (what ``state_dict()`` of a
module or optimiser returns, numbers, strings), because it is always read back with
``torch.load(..., weights_only=True)``: loading a checkpoint can then never run code from the
file. :func:`save_checkpoint` checks this before writing, so a state that could not be loaded is
refused at save time, with the path of the offending entry, not discovered at resume time.

Writes go to a temporary file in the target's folder, are fsynced, and are moved over the target
with ``os.replace``; a crash mid-write leaves the previous checkpoint as it was. Every checkpoint
carries a SHA-256 digest of its content (keys, types, tensor dtypes, shapes and bytes), which
:func:`load_checkpoint` recomputes: a file damaged after it was written is refused, not loaded.
:meth:`CheckpointManager.load_latest` falls back to the newest checkpoint that loads, saying so,
when the latest one is truncated or damaged.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import pickle
import random
import re
import uuid
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

log = logging.getLogger(__name__)

_LEAF_TYPES: tuple[type, ...] = (
    str, bytes, int, float, bool, complex, type(None), torch.dtype, torch.device, torch.Size,
    torch.Tensor, torch.nn.Parameter,
)
"""Leaf types that ``torch.load(weights_only=True)`` accepts (exact types: subclasses such as
``np.float64`` or an ``IntEnum`` pickle as their own class and are refused on load)."""

_CONTAINER_TYPES: tuple[type, ...] = (dict, collections.OrderedDict, list, tuple, set)

_CHECKPOINT_NAME = re.compile(r"ckpt_(\d+)\.pt")

DIGEST_KEY = "__content_sha256__"
"""Top-level key of the content digest in a saved checkpoint (removed again on load)."""


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, corrupt, truncated, or holds objects ``weights_only`` refuses."""


def _check_loadable(value: object, where: str) -> None:
    """Raise ``TypeError`` naming ``where`` if ``value`` holds anything weights_only loads refuse."""
    kind = type(value)
    if kind in _LEAF_TYPES:
        return
    if kind not in _CONTAINER_TYPES:
        raise TypeError(
            f"{where}: {kind.__module__}.{kind.__qualname__} cannot be loaded with weights_only=True; "
            "store tensors, numbers, strings and dict/list/tuple of them (e.g. torch.as_tensor(array), float(x))"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            _check_loadable(key, f"{where} key {key!r}")
            _check_loadable(item, f"{where}[{key!r}]")
    else:
        for index, item in enumerate(value):  # type: ignore[arg-type]
            _check_loadable(item, f"{where}[{index}]")


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # Windows: folders cannot be opened, and os.replace is durable enough there
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(file)`` on a temporary file next to ``path``, fsync it, move it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def content_digest(state: Mapping[str, Any]) -> str:
    """SHA-256 of a checkpoint's content: the structure, every key and leaf, tensor dtypes, shapes and bytes.

    It depends only on what :func:`load_checkpoint` gives back (not on the zip layout torch
    writes), so it is recomputed from the loaded state to verify it.
    """
    h = hashlib.sha256()
    _digest(state, h)
    return h.hexdigest()


def _digest(value: object, h: Any) -> None:
    """Feed ``value`` into ``h`` with a type tag and lengths, so different structures never collide."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(value, dict):
        h.update(f"D{len(value)}".encode())
        for key, item in value.items():
            _digest(key, h)
            _digest(item, h)
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__[0]}{len(value)}".encode())
        for item in value:
            _digest(item, h)
    elif isinstance(value, set):  # iteration order of a set of str changes between processes
        h.update(f"S{len(value)}".encode())
        for item in sorted(value, key=repr):
            _digest(item, h)
    else:
        text = f"{type(value).__name__}:{value!r}".encode()
        h.update(f"L{len(text)}".encode() + text)


def save_checkpoint(path: str | os.PathLike[str], state: Mapping[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically and return the path.

    Raises:
        TypeError: ``state`` holds an object that :func:`load_checkpoint` could not read back (the
            message gives its place, e.g. ``state['algo']['step']``); nothing is written then.
    """
    if type(state) not in (dict, collections.OrderedDict):
        raise TypeError(f"state: expected a dict, got {type(state).__name__}")
    _check_loadable(state, "state")
    if DIGEST_KEY in state:
        raise TypeError(f"state: the key {DIGEST_KEY!r} is reserved for the content digest")
    target = Path(path)
    stamped = {**state, DIGEST_KEY: content_digest(state)}
    _atomic_write(target, lambda f: torch.save(stamped, f))
    log.debug("saved checkpoint %s", target)
    return target


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device | None = None) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, with ``weights_only=True``.

    Args:
        path: the checkpoint file.
        map_location: where tensors go (``"cpu"`` to resume a GPU run on a CPU machine); by
            default the device they were saved from.

    Raises:
        CheckpointError: the file is missing, truncated or corrupt, holds an object that
            ``weights_only`` refuses, or is not a dict; the message names the file.
    """
    source = Path(path)
    if not source.is_file():
        raise CheckpointError(f"checkpoint {source}: no such file")
    # torch.save writes a zip whose directory is at the end: a truncated file has none, and
    # saying so is clearer than the unpickler's error on what remains.
    if not zipfile.is_zipfile(source):
        raise CheckpointError(
            f"checkpoint {source}: corrupt or truncated ({source.stat().st_size} bytes, not a complete "
            "torch.save archive)"
        )
    try:
        state = torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        # Our own words, from None: torch's message goes on to suggest weights_only=False, which
        # would run whatever code the file holds.
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        if refused:
            raise CheckpointError(
                f"checkpoint {source}: holds {refused.group(1)}, an object that robolearn does not load "
                "(a checkpoint holds only tensors, numbers, strings and containers of them; this file was "
                "not written by robolearn's save_checkpoint)"
            ) from None
        raise CheckpointError(f"checkpoint {source}: corrupt (its content cannot be decoded)") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, KeyError, ValueError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {source}: corrupt ({first[:200]})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {source}: expected a dict, got {type(state).__name__}")
    saved = state.pop(DIGEST_KEY, None)
    if saved is None:
        log.debug("checkpoint %s carries no content digest (written before digests); not verified", source)
    elif saved != content_digest(state):
        raise CheckpointError(
            f"checkpoint {source}: content digest mismatch (the file was changed or damaged after it was written)"
        )
    return state


def rng_state() -> dict[str, Any]:
    """Capture the global RNGs (torch CPU, CUDA if in use, NumPy's legacy global, ``random``).

    Everything is a tensor or a number, so the result can go into a checkpoint as it is.
    """
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": str(name),
            # uint32 words held as int64: exact, and int64 tensors work everywhere.
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "random": {
            "version": int(version),
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }
    # Only if CUDA is already initialised: querying it would otherwise create a context (memory,
    # seconds) in a run that never uses the GPU, and an unused generator has no state worth saving.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore the global RNGs from :func:`rng_state`'s output (e.g. read back from a checkpoint)."""
    torch.set_rng_state(state["torch"].cpu())
    np_state = state["numpy"]
    np.random.set_state((
        np_state["bit_generator"],
        np_state["keys"].cpu().numpy().astype(np.uint32),
        int(np_state["pos"]),
        int(np_state["has_gauss"]),
        float(np_state["cached_gaussian"]),
    ))
    py_state = state["random"]
    random.setstate((int(py_state["version"]), tuple(py_state["internal"].tolist()), py_state["gauss_next"]))
    cuda = state.get("cuda")
    if cuda is not None:
        if not torch.cuda.is_available():
            log.warning("checkpoint has CUDA RNG state but CUDA is not available here; not restored")
        elif len(cuda) != torch.cuda.device_count():
            log.warning("checkpoint has CUDA RNG state for %d devices, this machine has %d; not restored",
                        len(cuda), torch.cuda.device_count())
        else:
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


class CheckpointManager:
    """Numbered checkpoints in ``run_dir/checkpoints`` with a ``latest`` pointer and rotation.

    Each :meth:`save` writes ``ckpt_<step, 6+ digits>.pt``, then atomically rewrites the text
    file ``latest`` to name it, then deletes all but the ``keep`` highest-numbered checkpoints
    (never the one just written). Hidden temporary files left by a writer that was killed are
    removed when the manager is created.

    Args:
        run_dir: the run's folder.
        keep: how many checkpoints to keep; ``None`` keeps all.
    """

    def __init__(self, run_dir: str | os.PathLike[str], keep: int | None = 3) -> None:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep: expected a positive int or None, got {keep!r}")
        self.dir = Path(run_dir) / "checkpoints"
        self.keep = keep
        # Nothing is created here (a manager may only look); the folder appears with the first save.
        for stale in self.dir.glob(".*.tmp") if self.dir.is_dir() else ():
            log.info("removing %s, left by an interrupted checkpoint write", stale)
            stale.unlink(missing_ok=True)

    def path_for(self, step: int) -> Path:
        """The file that :meth:`save` writes for ``step``."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative int, got {step!r}")
        return self.dir / f"ckpt_{step:06d}.pt"

    def checkpoints(self) -> list[Path]:
        """Existing checkpoint files, oldest (lowest step) first."""
        if not self.dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.dir.iterdir() if (m := _CHECKPOINT_NAME.fullmatch(p.name))]
        return [p for _, p in sorted(found)]

    def save(self, state: Mapping[str, Any], step: int) -> Path:
        """Write ``state`` as the checkpoint of ``step``, point ``latest`` at it, prune old ones."""
        path = save_checkpoint(self.path_for(step), state)
        _atomic_write(self.dir / "latest", lambda f: f.write(f"{path.name}\n".encode()))
        if self.keep is not None:
            older = [p for p in self.checkpoints() if p != path]
            for stale in older[: max(0, len(older) - (self.keep - 1))]:
                stale.unlink(missing_ok=True)
                log.debug("pruned checkpoint %s", stale)
        return path

    def latest(self) -> Path | None:
        """The checkpoint ``latest`` names, else the highest-numbered one, else ``None``."""
        pointer = self.dir / "latest"
        if pointer.is_file():
            name = pointer.read_text().strip()
            if _CHECKPOINT_NAME.fullmatch(name) and (self.dir / name).is_file():
                return self.dir / name
            log.warning("%s names %r, which is not a checkpoint here; using the newest file instead", pointer, name)
        found = self.checkpoints()
        return found[-1] if found else None

    def load_latest(self, map_location: str | torch.device | None = None) -> dict[str, Any] | None:
        """The newest readable checkpoint's state (see :meth:`load_newest_readable`), or ``None`` if there is none."""
        found = self.load_newest_readable(map_location)
        return None if found is None else found[1]

    def load_newest_readable(self, map_location: str | torch.device | None = None) -> tuple[Path, dict[str, Any]] | None:
        """``(path, state)`` of :meth:`latest`, or, if that one cannot be loaded, of the newest one that can.

        Each checkpoint passed over is logged as a warning with the reason. Returns ``None`` when
        there is no checkpoint at all.

        Raises:
            CheckpointError: there are checkpoints but none loads (each is named with its reason).
        """
        latest = self.latest()
        if latest is None:
            return None
        candidates = [latest] + [p for p in reversed(self.checkpoints()) if p != latest]
        reasons = []
        for path in candidates:
            try:
                state = load_checkpoint(path, map_location=map_location)
            except CheckpointError as err:
                reasons.append(str(err))
                log.warning("%s; falling back to the next older checkpoint", err)
                continue
            if path != latest:
                log.warning("using %s, the newest checkpoint that loads (not the latest, %s)", path, latest.name)
            return path, state
        raise CheckpointError(f"no readable checkpoint in {self.dir}: " + "; ".join(reasons))
