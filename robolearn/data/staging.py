"""Atomic file and directory writes: a staging name beside the target, and the sweep of stale ones.

Every dataset writer builds its output under a *staging name* in the target's directory and renames
it over the target when complete, so a reader never sees half a file. The name says who made it::

    .<target name>.<host>.<pid>.<token>.tmp

A writer that fails with an exception removes its own staging file. One that dies without running
its cleanup (killed, power loss) leaves it behind; the next write of the same target removes every
staging entry of that target whose writer, on this host, no longer runs. Entries of live writers
(a concurrent write) and of other hosts (a shared filesystem) are left alone.

Staging entries are created with the permissions of any new file (``0o666`` for files, ``0o777``
for directories, minus the process umask), so the renamed result is what the user expects rather
than the ``0o600`` of :func:`tempfile.mkstemp`.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import secrets
import shutil
import socket
from pathlib import Path

log = logging.getLogger(__name__)

_SUFFIX = ".tmp"
_TOKEN = re.compile(r"[0-9a-f]{8}")


def _host() -> str:
    # Dots separate the name's fields from the right, so the host may keep its own dots; anything a
    # file name should not hold becomes "_".
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "localhost"


def staging_path(target: Path) -> Path:
    """A fresh staging name for ``target`` in its directory, owned by this process."""
    return target.with_name(f".{target.name}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}{_SUFFIX}")


def _writer_of(entry: Path, target: Path) -> tuple[str, int] | None:
    """``(host, pid)`` of a staging entry of ``target``, or None if ``entry`` is not one."""
    prefix = f".{target.name}."
    name = entry.name
    if not (name.startswith(prefix) and name.endswith(_SUFFIX)):
        return None
    fields = name[len(prefix) : -len(_SUFFIX)].rsplit(".", 2)
    if len(fields) != 3 or not fields[1].isdigit() or not _TOKEN.fullmatch(fields[2]):
        return None
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # a concurrent write of this process (another thread)
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except OverflowError:
        return False  # no such pid can exist
    return True


def sweep_stale(target: Path) -> list[Path]:
    """Remove the staging entries of ``target`` left by dead writers on this host; return them."""
    if os.name != "posix":
        return []  # os.kill(pid, 0) is a liveness check only on POSIX
    host = _host()
    removed: list[Path] = []
    for name in glob.glob(glob.escape(str(target.parent / f".{target.name}.")) + f"*{_SUFFIX}"):
        entry = Path(name)
        writer = _writer_of(entry, target)
        if writer is None or writer[0] != host or _alive(writer[1]):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            continue  # another writer swept it first
        log.info("removed %s, left by an interrupted write (process %d) of %s", entry, writer[1], target)
        removed.append(entry)
    return removed
