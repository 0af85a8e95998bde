"""Run directories that never lose data: one writer at a time, no new run over an old one, and a
resume that checks everything before it writes anything.

A run directory holds one run. :func:`check_new_run` refuses a directory that already holds one
(its config, metrics, summary or checkpoints) unless the caller asked to overwrite it, in which
case :func:`clear_run` removes exactly those files first, so nothing of the old run mixes with the
new one. :class:`RunLock` is a lock file created with ``O_EXCL``: a second training into the same
directory is refused while the first runs; a lock left by a process that no longer exists on this
machine is taken over, with a warning. :func:`check_resume_config` compares a resumed run's new
config with the one it was started with, key by key, before anything is written.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import shutil
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from robolearn.spec.manifest import PolicySpec
from robolearn.utils.config import ConfigError, read_json_object

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
"""The lock file inside a run directory."""

RUN_FILES: tuple[str, ...] = (
    "config.json", "policy_spec.json", "metrics.csv", "summary.json", "learning_curve.png", "eval.mp4",
)
"""Files a run writes at the top of its directory."""
RANKS_FOLDER = "ranks"
"""Folder of a data-parallel run's rank shards: ``ranks/<rank>/checkpoints`` holds what rank ``rank``
(other than 0) needs to resume exactly (its env, replay buffer and RNGs)."""
RUN_FOLDERS: tuple[str, ...] = ("checkpoints", "tb", RANKS_FOLDER)
"""Folders a run writes (checkpoints, TensorBoard events, the shards of a data-parallel run's ranks)."""

FIXED_ON_RESUME: tuple[str, ...] = (
    "task", "task_overrides", "backend", "num_envs", "eval_num_envs", "algo", "dataset", "normalize_obs",
)
"""Keys of a run's config that a resume may not change: they decide the shapes of the networks,
the envs and the data the checkpoint was trained on (the length of the run and the loop settings
may change)."""


class RunDirError(RuntimeError):
    """The run directory cannot be used as asked (another run in it, locked, or a resume that does not fit)."""


def run_artifacts(run_dir: Path) -> list[Path]:
    """The files and folders of a run found in ``run_dir`` (empty for a fresh or unrelated folder)."""
    found = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    for name in RUN_FOLDERS:
        folder = run_dir / name
        if folder.is_dir() and any(folder.iterdir()):
            found.append(folder)
    return found


def check_new_run(run_dir: Path, overwrite: bool) -> None:
    """Refuse to start a new run in a directory that holds one, unless ``overwrite``; then clear it.

    Raises:
        RunDirError: ``run_dir`` holds another run (the message lists what and how to proceed).
    """
    found = run_artifacts(run_dir)
    if not found:
        return
    if not overwrite:
        names = ", ".join(p.name for p in found)
        raise RunDirError(
            f"{run_dir} already holds a run ({names}); pick another run_dir, continue it with "
            f"resume={run_dir}, or replace it with runner.overwrite=true"
        )
    log.warning("overwrite: removing the previous run's files in %s", run_dir)
    clear_run(run_dir)


def clear_run(run_dir: Path) -> None:
    """Remove the files and folders a run writes (and only those) from ``run_dir``."""
    for path in run_artifacts(run_dir):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def check_resume_config(
    run_dir: Path, new: Mapping[str, Any] | None, fixed: Iterable[str] = FIXED_ON_RESUME
) -> None:
    """Compare ``new`` with the run's saved ``config.json`` on the ``fixed`` keys.

    Raises:
        RunDirError: the saved config is missing or unreadable, or a fixed key differs (named with
            both values).
    """
    if new is None:
        return
    path = run_dir / "config.json"
    saved = read_json(path, "resume")
    for key in fixed:
        if key in saved and key in new and _plain(saved[key]) != _plain(new[key]):
            raise RunDirError(
                f"resume {run_dir}: {key} was {saved[key]!r} when the run started, now {new[key]!r}; a resumed "
                f"run must keep its {key} (start a new run instead)"
            )


def check_resume_spec(run_dir: Path, spec: Mapping[str, Any] | None) -> None:
    """Compare the env's policy spec with the run's saved ``policy_spec.json``: the task, every
    observation group the run saved (term names, order, widths, units, shapes, history), the
    action terms and joints and the control rate. A spec saved by an older robolearn (version 1)
    compares by content, not by its version number.

    Raises:
        RunDirError: the saved spec is unreadable or differs (the first differences are named).
    """
    path = run_dir / "policy_spec.json"
    if spec is None or not path.exists():
        return
    try:
        saved = PolicySpec.from_dict(read_json(path, "resume"), str(path))
        new = PolicySpec.from_dict(_plain(spec), "the env's policy spec")
    except ConfigError as exc:
        raise RunDirError(f"resume {run_dir}: {exc}") from None
    found = ([f"task_id: saved {saved.task_id!r}, now {new.task_id!r}"] if saved.task_id != new.task_id else [])
    found += saved.mismatches(new, groups=list(saved.observations))
    if found:
        raise RunDirError(f"resume {run_dir}: the env does not match the run's policy_spec.json: " + "; ".join(found[:3]))


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``; any failure is a :class:`RunDirError` naming the file."""
    try:
        return read_json_object(path, f"is {path.parent} a robolearn run directory?")
    except (FileNotFoundError, ConfigError) as exc:
        raise RunDirError(f"{what}: {exc}") from None


def _plain(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists, dataclasses and paths converted)."""
    return json.loads(json.dumps(value, default=json_default))


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON atomically (a temporary file moved into place)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=json_default))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def json_default(value: Any) -> Any:
    """JSON for what run files hold besides plain containers: tensors, dataclasses, paths, callables."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    if callable(value):
        return getattr(value, "__qualname__", repr(value))
    return repr(value)


class RunLock:
    """``run_dir/.lock`` held while a process writes the run; a context manager.

    The file holds ``<host> <pid>``. Acquiring fails while another live process holds it; a lock
    of a process that no longer exists on this host is taken over with a warning (a killed run
    leaves its lock behind). A lock of another host is never taken over: that process cannot be
    checked from here (remove the file if you know it is gone).
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_NAME
        self.held = False
        self._created: list[Path] = []  # folders made for the lock, removed again if left empty

    def acquire(self) -> None:
        """Create the lock file, or raise :class:`RunDirError` naming its holder."""
        missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._created = missing
        me = f"{socket.gethostname()} {os.getpid()}"
        for _ in range(3):  # a stale lock removed under us by another taker: try again
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_stale()  # raises unless the holder is gone (then the file is too)
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(me + "\n")
            self.held = True
            return
        raise RunDirError(f"{self.path}: could not acquire the run lock")

    def _take_over_stale(self) -> None:
        """Remove a lock whose process is gone; raise if its holder is alive (or unknowable)."""
        try:
            text = self.path.read_text().split()
        except FileNotFoundError:
            return
        host, pid = (text[0], int(text[1])) if len(text) == 2 and text[1].isdigit() else ("", -1)
        if host == socket.gethostname() and pid > 0 and not _alive(pid):
            log.warning("%s: taking over the lock of process %d, which no longer runs", self.path, pid)
            self.path.unlink(missing_ok=True)
            return
        holder = f"process {pid} on {host}" if pid > 0 else "an unknown process"
        raise RunDirError(
            f"{self.path.parent} is being written by {holder} (lock file {self.path}); wait for it to "
            "finish, or remove the lock file if that process is gone"
        )

    def release(self) -> None:
        """Remove the lock file (if this object holds it)."""
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
        for folder in self._created:  # deepest first: a run that failed before writing leaves no folders
            try:
                folder.rmdir()
            except OSError:
                break  # not empty: the run wrote something there
        self._created = []

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM  # exists, owned by another user
    return True
