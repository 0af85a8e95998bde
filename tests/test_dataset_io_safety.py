"""Dataset files on disk: the user's permissions, no staging file left by an interrupted or killed
write, bad write options refused before a file exists, and the data package free of import cycles.
"""

from __future__ import annotations

import ast
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from robolearn.data import Dataset, DatasetError, DatasetMetadata, export_minari
from robolearn.data import formats as formats_mod
from robolearn.data.staging import staging_path, sweep_stale

REPO = Path(__file__).resolve().parents[1]


def small_dataset(task: str = "Hopper") -> Dataset:
    """Two episodes (3 steps ending in a terminal, 2 in a time-out) of 3-number observations."""
    return Dataset(
        np.arange(15, dtype=np.float32).reshape(5, 3),
        np.zeros((5, 2), np.float32),
        np.arange(5, dtype=np.float32),
        [False, False, True, False, False],
        [False, False, False, False, True],
        final_observations=np.full((2, 3), -1.0, np.float32),
        metadata=DatasetMetadata(task_id=task, collection="random"),
    )


def dead_pid() -> int:
    """The pid of a process that has already exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it afterwards."""
    old = os.umask(0o022)  # reading the umask means setting it; the test sets its own anyway
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_dataset_file_gets_the_umask_permissions(tmp_path, umask, mask):
    umask(mask)
    path = small_dataset().save(tmp_path / "d.h5")
    assert _mode(path) == 0o666 & ~mask  # not the 0o600 of a mkstemp file
    os.chmod(path, 0o600)  # an overwrite is a new file: the umask's mode again
    small_dataset().save(path)
    assert _mode(path) == 0o666 & ~mask


def test_minari_export_directory_gets_the_umask_permissions(tmp_path, umask):
    pytest.importorskip("minari")
    umask(0o022)
    out = export_minari(small_dataset(), "test/perm-v0", root=tmp_path)
    assert _mode(out) == 0o755  # not mkdtemp's 0o700


@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt])
def test_write_that_raises_halfway_leaves_no_staging_file(tmp_path, monkeypatch, error):
    target = tmp_path / "d.h5"
    real_put = formats_mod._put
    written = []

    def put_then_fail(f, name, *args, **kwargs):
        written.append(name)
        if len(written) == 3:
            # The staging file exists and holds arrays already: a real half-written file.
            assert any(p.name.startswith(".d.h5.") for p in tmp_path.iterdir())
            raise error("interrupted (simulated)")
        return real_put(f, name, *args, **kwargs)

    monkeypatch.setattr(formats_mod, "_put", put_then_fail)
    with pytest.raises(error):
        small_dataset().save(target)
    assert len(written) == 3
    assert list(tmp_path.iterdir()) == []


KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from test_dataset_io_safety import small_dataset
    from robolearn.data import formats

    real_put, calls = formats._put, []

    def put_then_die(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # arrays already in the staging file: die without any cleanup
            os.kill(os.getpid(), signal.SIGKILL)
        return real_put(*args, **kwargs)

    formats._put = put_then_die
    small_dataset().save({target!r})
    """
)


def test_staging_file_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "d.h5"
    script = KILLED_WRITER.format(tests=str(REPO / "tests"), target=str(target))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [p for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].name.startswith(".d.h5.") and not target.exists()
    # Entries the sweep must keep: a live writer of this host, a dead pid of another host, a
    # look-alike user file, and a staging file of another target.
    host = socket.gethostname()
    live = tmp_path / f".d.h5.{host}.{os.getppid()}.0123abcd.tmp"
    other_host = tmp_path / f".d.h5.{host}-other.{dead_pid()}.0123abcd.tmp"
    lookalike = tmp_path / ".d.h5.notes.tmp"
    other_target = tmp_path / f".e.h5.{host}.{dead_pid()}.0123abcd.tmp"
    for p in (live, other_host, lookalike, other_target):
        p.write_bytes(b"x")

    small_dataset().save(target)

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["d.h5", live.name, other_host.name, lookalike.name, other_target.name]
    )
    assert len(Dataset.load(target)) == 5


def test_sweep_removes_a_dead_exports_staging_directory(tmp_path):
    target = tmp_path / "ns" / "name-v0"
    stale = target.with_name(f".name-v0.{socket.gethostname()}.{dead_pid()}.89abcdef.tmp")
    (stale / "data").mkdir(parents=True)
    (stale / "data" / "main_data.hdf5").write_bytes(b"partial")
    mine = staging_path(target)  # this process is alive: its staging name is never swept
    mine.mkdir()
    assert sweep_stale(target) == [stale]
    assert sorted(p.name for p in target.parent.iterdir()) == [mine.name]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"compression": "zstd"}, r"compression: unknown filter 'zstd'; valid choices: 'gzip', 'lzf', None"),
        ({"compression_level": 12}, r"compression_level: gzip takes an integer 0-9 or None, got 12"),
        ({"compression_level": True}, r"compression_level: .* got True"),
    ],
)
def test_bad_write_options_are_refused_before_a_file_exists(tmp_path, kwargs, message):
    with pytest.raises(DatasetError, match=message):
        small_dataset().save(tmp_path / "d.h5", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_writing_onto_a_directory_is_refused(tmp_path):
    (tmp_path / "d.h5").mkdir()
    with pytest.raises(IsADirectoryError, match="d.h5: is a directory"):
        small_dataset().save(tmp_path / "d.h5")


# ----------------------------------------------------------------------------- import structure


def _data_imports(path: Path) -> set[str]:
    """The ``robolearn.data`` sibling modules a file imports anywhere (top level or in functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["robolearn", "data"] and len(parts) > 2:
                if (path.parent / f"{parts[2]}.py").is_file():
                    out.add(parts[2])
    return out


def test_data_modules_import_no_cycle_and_the_container_imports_no_format():
    modules = {p.stem: _data_imports(p) for p in (REPO / "robolearn" / "data").glob("*.py") if p.stem != "__init__"}
    # DESIGN.md: reading and writing live in the format modules; the container does not import them back.
    assert modules["dataset"] <= {"validation"}, modules["dataset"]
    assert "dataset" in modules["formats"] and "dataset" in modules["minari_io"]

    def visit(name: str, path: tuple[str, ...]) -> None:
        for nxt in modules.get(name, ()):
            assert nxt not in path + (name,), f"import cycle: {' -> '.join(path + (name, nxt))}"
            visit(nxt, path + (name,))

    for name in modules:
        visit(name, ())
